"""Rules that survivors of the whole mutation run showed (docs/mutation-run7): the shape
check of an import command names its first bad field without reading further, an import
names each GPU block once (a host block may share its number), and the import invariants
check every import whatever the imports before it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from pydantic import ValidationError

from hisparse.msgshape import connector_metadata_problem
from hisparse.spec.invariants import ImportTargetStable, MirrorBeforeRead
from hisparse.spec.messages import (
    HiSparseConnectorMetadata,
    ImportCommand,
    PageImport,
    import_command_problem,
)
from hisparse.spec.state import GARBAGE, LIVE_IMPORT, Imp, ImportTarget, ProtocolState
from tests.test_rule_msgshape_imports import _meta
from tests.test_rule_survivors_spec5 import walked_states


def _page(i: int = 1, *, key: Any = "k1", rows: Any = 4, host: Any = None,
          gpu: Any = 2) -> Any:
    return PageImport.model_construct(page_index=i, key=key, valid_rows=rows,
                                      host_block=host, gpu_block=gpu)


def _command(pages: Any, **fields: Any) -> Any:
    """A device import of ``pages`` (built unvalidated): four tokens, blocks of four."""
    base: dict[str, Any] = dict(import_id=0, request_id="r", target="device",
                                num_tokens=4, block_size=4, pages=pages)
    return ImportCommand.model_construct(**{**base, **fields})


# --- the shape check names the first bad field, the rest unread ---------------------------


class Unreadable:
    """An entry of an import's pages whose every field read raises (not a PageImport)."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"read {name}")

    def __repr__(self) -> str:
        return "<unreadable>"


class KeyUnreadable(PageImport):
    """A page whose key cannot be read (a broken object, though a PageImport)."""

    def __getattribute__(self, name: str) -> Any:
        if name == "key":
            raise RuntimeError("read key")
        return super().__getattribute__(name)


class RequestIdUnreadable(ImportCommand):
    """A command whose request ID cannot be read (a broken object, though a command)."""

    def __getattribute__(self, name: str) -> Any:
        if name == "request_id":
            raise RuntimeError("read request_id")
        return super().__getattribute__(name)


def test_a_page_entry_that_is_not_a_page_import_is_named_before_its_fields_are_read(
) -> None:
    # kills msgshape.py:170:reorder:9, which read the entry's page_index and valid_rows
    # before asking whether it is a PageImport: the read's own error escaped
    good = _page(1)
    cmd = _command((good, Unreadable()), num_tokens=8)
    assert connector_metadata_problem(_meta((cmd,))) == (
        "import pages holds <unreadable> (Unreadable), not a PageImport")


@pytest.mark.parametrize(("fields", "why"), [
    ({"page_index": -1}, "import page page_index is -1 (int), not a non-negative int"),
    ({"valid_rows": "4"}, "import page valid_rows is '4' (str), not a non-negative int"),
    ({"gpu_block": 2.0}, "import page gpu_block is 2.0 (float), not a non-negative int"),
    ({"host_block": True}, "import page host_block is True (bool), not a non-negative int"),
])
def test_a_page_with_a_bad_number_is_named_by_it_before_its_key_is_read(
        fields: dict[str, Any], why: str) -> None:
    # kills msgshape.py:174:reorder:10, which read the page's key before returning the
    # bad number it had found: the key read's own error escaped
    page = KeyUnreadable.model_construct(**{**dict(_page(1)), **fields})
    assert connector_metadata_problem(_meta((_command((page,)),))) == why


@pytest.mark.parametrize(("fields", "why"), [
    ({"import_id": -1}, "import import_id is -1 (int), not a non-negative int"),
    ({"num_tokens": True}, "import num_tokens is True (bool), not a non-negative int"),
    ({"block_size": 4.0}, "import block_size is 4.0 (float), not a non-negative int"),
])
def test_a_command_with_a_bad_number_is_named_by_it_before_its_request_id_is_read(
        fields: dict[str, Any], why: str) -> None:
    # kills msgshape.py:157:reorder:3, which read the request ID before returning the bad
    # number it had found: the request ID read's own error escaped
    cmd = RequestIdUnreadable.model_construct(**{**dict(_command((_page(1),))), **fields})
    assert connector_metadata_problem(_meta((cmd,))) == why


@pytest.mark.parametrize(("pages", "shown"), [
    ((), "() (tuple)"),
    ([], "[] (list)"),
    (None, "None (NoneType)"),
    (7, "7 (int)"),
    ("ab", "'ab' (str)"),
    (frozenset({_page(1)}), "frozenset({PageImport(page_index=1, key=... (frozenset)"),
    ({1: _page(1)}, "{1: PageImport(page_index=1, key='k1', h... (dict)"),
])
def test_import_pages_that_are_empty_or_not_a_sequence_are_refused_by_name(
        pages: Any, shown: str) -> None:
    # an empty tuple or list, and anything but a tuple or list however many pages it holds
    # (kills msgshape.py:165:bool:13, "or" -> "and", which passed an empty tuple and read
    # an int; :165:var:33, which asked whether the metadata's imports were empty: an empty
    # tuple passed; :165:var:35, which asked whether the imports were a sequence: a set of
    # pages passed as well shaped, a str or dict was read page by page)
    assert connector_metadata_problem(_meta((_command(pages),))) == (
        f"import pages is {shown}, not a non-empty tuple")
    with pytest.raises(ValidationError):  # validation refuses them all as well
        ImportCommand.model_validate(dict(_command(pages)))


@pytest.mark.parametrize("num_tokens", [1, 3])
def test_a_command_of_one_token_blocks_is_well_shaped(num_tokens: int) -> None:
    # a block of one token is positive: validation accepts it and so does the shape check
    # (kills msgshape.py:162:int:4, "< 1" -> "< 2", and :162:cmp:29, "< 1" -> "<= 1",
    # which refused it: "import num_tokens and block_size must be positive")
    pages = tuple(_page(i, rows=1, gpu=i) for i in range(1, num_tokens + 1))
    cmd = ImportCommand.model_validate(dict(_command(pages, num_tokens=num_tokens,
                                                     block_size=1)))
    assert connector_metadata_problem(_meta((cmd,))) is None
    meta = HiSparseConnectorMetadata(imports=(cmd,))
    assert connector_metadata_problem(meta) is None


def test_an_empty_key_on_a_later_page_of_a_later_command_is_refused_by_name() -> None:
    # every page of every command has its key checked (kills msgshape.py:175:var:36, which
    # asked whether the metadata's imports were empty instead of the key: an empty key
    # passed as well shaped)
    first = _command((_page(1, gpu=0),))
    second = _command((_page(1, key="k1", gpu=1), _page(2, key="", gpu=2)), import_id=1,
                      num_tokens=8)
    assert connector_metadata_problem(_meta((first, second))) == (
        "import page key is '' (str), not a non-empty str")
    fixed = _command((_page(1, key="k1", gpu=1), _page(2, key="k2", gpu=2)), import_id=1,
                     num_tokens=8)
    assert connector_metadata_problem(_meta((first, fixed))) is None


# --- an import names each GPU block once; a host block may share a GPU block's number ----


@pytest.mark.parametrize(("target", "pages", "block"), [
    ("device", ((None, 5), (None, 5)), 5),
    ("device", ((None, 0), (None, 1), (None, 0)), 0),
    ("host", ((0, 3), (1, None), (2, 3)), 3),
])
def test_an_import_naming_one_gpu_block_for_two_pages_is_refused_by_name(
        target: str, pages: tuple[tuple[int | None, int | None], ...], block: int) -> None:
    # kills spec/messages.py:120:var:3 (the GPU block added to the host blocks seen) and
    # :120:call:5 (never added): a GPU block named twice passed validation
    n = len(pages)
    fields: dict[str, Any] = dict(import_id=0, request_id="r", target=target,
                                  num_tokens=4 * n, block_size=4)
    plain: list[dict[str, Any]] = [
        dict(page_index=i, key=f"k{i}", valid_rows=4, host_block=h, gpu_block=g)
        for i, (h, g) in enumerate(pages, start=1)]
    with pytest.raises(ValidationError) as err:
        ImportCommand(**fields, pages=tuple(PageImport(**p) for p in plain))
    assert [e["msg"] for e in err.value.errors()] == [
        f"Value error, GPU block {block} named twice"]
    cmd = ImportCommand.model_construct(
        **fields, pages=tuple(PageImport.model_construct(**p) for p in plain))
    assert import_command_problem(cmd) == f"GPU block {block} named twice"
    assert connector_metadata_problem(_meta((cmd,))) == f"GPU block {block} named twice"


def test_a_host_import_may_name_a_gpu_block_with_a_later_pages_host_block_number() -> None:
    # GPU and host blocks are two pools: page 1 mirrored into GPU block 1 and page 2 from
    # host block 1 do not collide (kills spec/messages.py:120:var:3, which counted GPU
    # blocks among the host blocks: "host block 1 named twice")
    pages = (PageImport(page_index=1, key="k1", valid_rows=4, host_block=0, gpu_block=1),
             PageImport(page_index=2, key="k2", valid_rows=4, host_block=1),
             PageImport(page_index=3, key="k3", valid_rows=2, host_block=2, gpu_block=0))
    cmd = ImportCommand(import_id=0, request_id="r", target="host", num_tokens=10,
                        block_size=4, pages=pages)
    assert import_command_problem(cmd) is None
    assert [(p.host_block, p.gpu_block) for p in cmd.pages] == [(0, 1), (1, None), (2, 0)]


# --- the import invariants: every import checked, whatever comes before it ---------------


def _mirror_pending(s: ProtocolState, r: str, x: Imp) -> bool:
    """The spec's MirrorPending: a host import reported done, its request not yet decoding."""
    return x.target == "host" and x.phase == "landed" and s.req.get(r) == "importing"


def _last(s: ProtocolState, r: str) -> ProtocolState:
    """A clone of ``s`` with ``r`` last among the imports (the spec's imp is a function:
    its order means nothing)."""
    t = s.clone()
    t.imp[r] = t.imp.pop(r)
    return t


def test_a_pending_mirror_that_does_not_hold_its_bytes_is_reported_after_any_other_import(
) -> None:
    """MirrorBeforeRead is a \\A over the imports: in every walked state, each import whose
    mirror is pending, its mirrored page's resident GPU block overwritten with garbage, is
    reported exactly, in the imports' order as walked and with it moved last (behind
    imports that are not pending). (spec/invariants.py:134:loop:1, continue -> break,
    stopped at the first import not pending: a later one was never checked.)"""
    met: Counter[str] = Counter()
    for m in walked_states():
        s = m.state
        assert MirrorBeforeRead(s) == []
        for r, x in s.imp.items():
            if not _mirror_pending(s, r, x):
                continue
            p = (r, len(s.page_keys[r]))
            g = s.imp_gpu[p]
            for t in (s.clone(), _last(s, r)):
                t.gpu_data[g] = GARBAGE
                ahead = list(t.imp)[:list(t.imp).index(r)]
                if any(not _mirror_pending(t, q, t.imp[q]) for q in ahead):
                    met["after one not pending"] += 1
                assert MirrorBeforeRead(t) == [
                    f"mirrored page {p}'s resident GPU block {g} holds 'garbage'"]
    assert met["after one not pending"], met


def test_a_retargeted_live_import_is_reported_after_any_other_import() -> None:
    """ImportTargetStable is a \\A over the live imports: in every walked state, each live
    import whose target is flipped (host <-> device) while its pages stay where they are
    is reported exactly, in the imports' order as walked and with it moved last (behind
    imports that are not live). (spec/invariants.py:148:loop:2, continue -> break, stopped
    at the first import not live: a later one was never checked.)"""
    met: Counter[str] = Counter()
    for m in walked_states():
        s = m.state
        assert ImportTargetStable(s) == []
        for r, x in s.imp.items():
            if x.phase not in LIVE_IMPORT:
                continue
            flipped: ImportTarget = "device" if x.target == "host" else "host"
            lands = "in host blocks" if x.target == "host" else "elsewhere"
            for t in (s.clone(), _last(s, r)):
                t.imp[r] = x._replace(target=flipped)
                ahead = list(t.imp)[:list(t.imp).index(r)]
                if any(t.imp[q].phase not in LIVE_IMPORT for q in ahead):
                    met[f"{x.target} after one not live"] += 1
                assert ImportTargetStable(t) == [
                    f"request {r}'s import chose {flipped} but lands {lands}"]
    assert met["host after one not live"] and met["device after one not live"], met
