"""Rule: an import request needs every one of its tokens, row bytes, block size and
layers positive; an announcement whose page descriptor has no address (at or below 0) or
a negative device is refused as a ``descriptor`` refusal, each of the two on its own, and
a descriptor with a positive address on any device at or above 0 passes
(``hisparse/transport/geometry.py``).

From the guard survivors of the third guard-phase run (docs/mutation-survivors.md):
``122:bool:1`` (``or`` → ``and``: a descriptor at address 0 on device 0, or at a real
address on device -1, passed), ``33:var:9`` (``self.layers`` → ``self.num_tokens`` in
the check: a request of 0 layers accepted).

From the second round: ``95:raise:0`` (an announcement by another agent than the
configured prefiller passed), ``122:int:2`` (``addr <= 0`` → ``<= 1``: address 1
refused), ``52:raise:5`` (a page outside the request answered rows instead of
``IndexError``), ``66:var:5``, ``66:var:12`` (``valid_bytes`` multiplied by the token
count instead of the layers or the row bytes).
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hisparse.transport.errors import AnnouncementRefused
from hisparse.transport.geometry import (
    Announcement,
    ImportRequest,
    PageDescriptor,
    check_announcement,
)

REQ = ImportRequest("r", 6, 8, 4, "p")  # two pages of 32 bytes


@pytest.mark.parametrize("field", ["num_tokens", "row_bytes", "block_size", "layers"])
@pytest.mark.parametrize("value", [0, -1])
def test_an_import_request_needs_each_size_positive(field: str, value: int) -> None:
    sizes = {"num_tokens": 6, "row_bytes": 8, "block_size": 4, "layers": 2}
    ImportRequest("r", prefiller="p", **sizes)
    sizes[field] = value
    with pytest.raises(ValueError, match="needs positive tokens, row bytes, block size"):
        ImportRequest("r", prefiller="p", **sizes)


def _ann(addr: int, dev: int) -> Announcement:
    pages = (PageDescriptor(0, 4096, REQ.page_bytes),
             PageDescriptor(1, addr, REQ.page_bytes, dev))
    return Announcement("p", "r", REQ.num_tokens, REQ.row_bytes, REQ.block_size, pages)


@given(addr=st.integers(-(2**40), 2**40), dev=st.integers(-4, 4))
@example(addr=1, dev=0)  # the lowest positive address passes
@example(addr=0, dev=0)
def test_a_descriptor_needs_a_positive_address_and_a_device_of_at_least_zero(
    addr: int, dev: int
) -> None:
    if addr > 0 and dev >= 0:
        check_announcement(_ann(addr, dev), REQ)
    else:
        with pytest.raises(AnnouncementRefused, match="page 1 at address") as e:
            check_announcement(_ann(addr, dev), REQ)
        assert e.value.reason == "descriptor"


@pytest.mark.parametrize(("addr", "dev"), [(0, 0), (8192, -1)])
def test_each_half_of_the_descriptor_check_refuses_on_its_own(addr: int, dev: int) -> None:
    with pytest.raises(AnnouncementRefused) as e:
        check_announcement(_ann(addr, dev), REQ)
    assert e.value.reason == "descriptor"


def test_an_announcement_by_another_agent_is_refused_naming_both() -> None:
    ann = _ann(8192, 0)
    other = Announcement("q", ann.req_id, ann.num_tokens, ann.row_bytes, ann.block_size,
                         ann.pages)
    with pytest.raises(AnnouncementRefused,
                       match="announced by 'q', configured prefiller is 'p'") as e:
        check_announcement(other, REQ)
    assert e.value.reason == "agent"
    check_announcement(ann, REQ)


@settings(deadline=None)  # CI runs on 2 busy cores: no per-example time limit
@given(tokens=st.integers(1, 40), row_bytes=st.integers(1, 9), block=st.integers(1, 8),
       layers=st.integers(1, 4))
def test_the_pages_valid_bytes_cover_every_tokens_row_in_every_layer_once(
    tokens: int, row_bytes: int, block: int, layers: int
) -> None:
    req = ImportRequest("r", tokens, row_bytes, block, "p", layers)
    pages = range(req.num_pages)
    assert (req.num_pages - 1) * block < tokens <= req.num_pages * block
    for page in pages:
        rows = req.valid_rows(page)
        assert rows == (block if page < req.num_pages - 1 else tokens - page * block)
        segs = req.segments(page)
        assert segs == tuple((la * row_bytes * block, rows * row_bytes) for la in range(layers))
        assert req.valid_bytes(page) == sum(n for _, n in segs) == rows * row_bytes * layers
    assert sum(req.valid_bytes(p) for p in pages) == tokens * row_bytes * layers
    for outside in (-1, req.num_pages, req.num_pages + 3):
        for ask in (req.valid_rows, req.valid_bytes, req.segments):
            with pytest.raises(IndexError, match=rf"page {outside} outside 0\.\."):
                ask(outside)
