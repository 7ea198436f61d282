"""Rules of the coordinator's table sizes, its eviction limit and the simulator's series
that the fourteenth group of survivors of the whole mutation run showed
(docs/mutation-run7): each line ran, but no test asserted its effect."""

from __future__ import annotations

import pytest

from hisparse.simulate import SimulateOptions, Simulation, simulate
from tests.test_coordinator_import import make


def test_table_sizes_count_unsent_spill_commands_and_unsent_import_aborts_apart() -> None:
    """``unsent``: spill commands not handed to the workers yet; ``aborts_unsent``: import
    aborts not handed over yet. Each counts its own queue and is 0 once taken.
    (kills hisparse/coordinator.py:814:var:37 and 829:var:38, which reported each
    queue under the other's name)"""
    c, _ = make(gpu=4, host=4)
    c.add_request("a", ["a1", "a2"])
    assert c.admit("a") is not None
    assert c.spill(("a", 1)) is not None
    sizes = c.table_sizes()
    assert (sizes["unsent"], sizes["aborts_unsent"]) == (1, 0)
    c.take_commands()
    c.add_import("r", ["k1"], num_tokens=4, block_size=4)
    assert c.admit_import("r") is not None
    cmds, aborts = c.take_imports()
    assert len(cmds) == 1 and aborts == ()
    c.abort("r")  # its command was sent: the abort goes down
    sizes = c.table_sizes()
    assert (sizes["unsent"], sizes["aborts_unsent"]) == (0, 1)
    assert c.take_imports() == ((), (cmds[0].import_id,))
    assert c.table_sizes()["aborts_unsent"] == 0


def test_evict_published_stops_at_its_limit_and_zero_evicts_nothing() -> None:
    """``evict_published(limit)`` evicts at most ``limit`` published pages: 0 evicts none,
    1 one, None every one.
    (kills hisparse/coordinator.py:332:none:15, which took a limit of 0 for no limit)"""
    sim = Simulation(SimulateOptions(requests=12, steps=60, seed=1))
    sim.run()
    c = sim.coordinator
    held = c.state.host_used
    assert held > 1 and set(c.state.host_state) == {"free", "valid"}
    assert c.evict_published(0) == 0 and c.state.host_used == held
    assert c.evict_published(1) == 1 and c.state.host_used == held - 1
    assert c.evict_published() == held - 1 and c.state.host_used == 0


@pytest.mark.parametrize("pd_share", [0.0, 0.5], ids=["local", "pd-imports"])
def test_the_running_series_counts_the_requests_that_decode_each_step(pd_share: float) -> None:
    """Every running request decodes one token a step, so the ``running`` series equals
    ``decoded_tokens`` step by step; requests still importing are not running.
    (kills hisparse/simulate.py:618:var:40, which charted the importing requests as
    running)"""
    rep = simulate(SimulateOptions(requests=12, steps=60, seed=2, pd_share=pd_share))
    s = rep.series
    assert any(s["running"]) and s["running"] == s["decoded_tokens"]
