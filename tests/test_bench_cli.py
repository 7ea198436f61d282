"""``hisparse bench protocol`` runs and reports every action (figures are not asserted)."""

from __future__ import annotations

import json
from pathlib import Path

from hisparse.bench.protocol import ACTIONS
from hisparse.cli import main


def test_bench_protocol_writes_every_action(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    assert main(["bench", "protocol", "--lifecycles", "20", "--requests", "4",
                 "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    for mode in ("check_off", "check_on"):
        assert set(figures[f"per_action_us_{mode}"]) == set(ACTIONS)
        assert all(v > 0 for v in figures[f"per_action_us_{mode}"].values())


def test_bench_coordinator_runs(tmp_path: Path) -> None:
    out = tmp_path / "coord.json"
    assert main(["bench", "coordinator", "--requests", "8", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["check_off"]["spill_lifecycle_us"] > 0 and doc["check_on"]["idle_step_us"] > 0
