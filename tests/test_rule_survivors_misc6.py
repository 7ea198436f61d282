"""Rules that survivors of the whole mutation run showed (docs/mutation-run7): the shape
check names an import page key that is empty or not a str, and the simulator recovers
from a chain of lost recovery re-sends of any length in one loop, never by recursion."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import pytest
from pydantic import ValidationError

from hisparse.msgfaults import MessageFaults
from hisparse.msgshape import connector_metadata_problem
from hisparse.simulate import SimulateOptions, Simulation
from hisparse.spec.messages import ImportCommand, PageImport
from tests.test_rule_msgshape_imports import _meta

# --- the shape check of import commands: a page's key -------------------------------------


def _keyed(key: Any) -> Any:
    """A one-page device import, well shaped but for its page's key (built unvalidated)."""
    page = PageImport.model_construct(page_index=1, key=key, valid_rows=4, gpu_block=2,
                                      host_block=None)
    return ImportCommand.model_construct(import_id=0, request_id="r", target="device",
                                         num_tokens=4, block_size=4, pages=(page,))


def test_an_import_page_key_reads_as_well_shaped_when_it_is_a_non_empty_str() -> None:
    # (the control for the refusals below: only the key differs)
    assert connector_metadata_problem(_meta((_keyed("k1"),))) is None


@pytest.mark.parametrize(("key", "shown"), [("", "'' (str)"), (7, "7 (int)"),
                                            (b"k1", "b'k1' (bytes)")])
def test_an_import_page_key_empty_or_not_a_str_is_refused_by_name(key: Any,
                                                                  shown: str) -> None:
    # validation refuses the key, so the check of an unvalidated message names it: an
    # empty str and a truthy non-str alike (kills msgshape.py:175:bool:21, "or" -> "and",
    # which refused only a key both not a str and falsy: these passed as well shaped)
    with pytest.raises(ValidationError, match=r"(?s)key\n.*(at least 1 character|valid string)"):
        PageImport(page_index=1, key=key, valid_rows=4, gpu_block=2)
    assert connector_metadata_problem(_meta((_keyed(key),))) == (
        f"import page key is {shown}, not a non-empty str")


# --- the simulator: a chain of lost recovery re-sends ----------------------------------------


def _depth() -> int:
    """Frames on the stack of the caller."""
    frame: FrameType | None = sys._getframe(1)
    n = 0
    while frame is not None:
        n, frame = n + 1, frame.f_back
    return n


@dataclass
class _LoseDown(MessageFaults):
    """Channels that deliver everything but drop ``drops`` connector metadata in a row,
    after the first ``skip``; each drop notes the stack depth it was sent from."""

    skip: int = 0
    drops: int = 0
    depths: list[int] = field(default_factory=list)

    def route(self, direction: str, rank: int, raw: bytes) -> list[bytes]:
        if direction == "down" and self.skip > 0:
            self.skip -= 1
        elif direction == "down" and self.drops > 0:
            self.drops -= 1
            self.counts["down_dropped"] += 1
            self.depths.append(_depth())
            return []
        return super().route(direction, rank, raw)


def test_a_chain_of_lost_recovery_resends_longer_than_the_recursion_limit_recovers() -> None:
    # every recovery's re-sent metadata is lost in turn, as many times in a row as Python
    # allows frames: each loss restarts the worker again, from the one recovery loop (the
    # same stack depth each time), and the run still ends clean (kills
    # simulate.py:715:none:13, which took the loop's empty queue for "no recovery running"
    # and restarted by recursion, one level per loss, until RecursionError)
    chain = sys.getrecursionlimit()
    sim = Simulation(SimulateOptions(requests=8, steps=40, seed=0, gpu_blocks=20,
                                     host_blocks=40))
    lose = sim.faults = _LoseDown(rate=0.0, seed=0, ranks=1, skip=10, drops=chain)
    rep = sim.run()
    assert lose.drops == 0 and len(lose.depths) == chain
    first, *resends = lose.depths
    assert set(resends) == {resends[0]} and resends[0] > first  # one loop below the step
    assert rep.worker_restarts == chain
    assert rep.message_faults == {"down_duplicated": 0, "down_delayed": 0,
                                  "down_dropped": chain, "up_duplicated": 0,
                                  "up_delayed": 0, "up_dropped": 0, "gaps": chain}
    assert rep.violations == 0 and rep.data_mismatches == 0, rep.notes
    sim.coordinator.evict_published()
    assert sim.coordinator.state.host_used == 0 and sim.kv.num_free == sim.kv.num_blocks
