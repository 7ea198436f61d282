"""Simulation rules met by the whole mutation run's seventeenth pass
(docs/mutation-survivors.md): ``--pd-share`` runs on the cuda executor as on the reference
one (``simulate.py:113:drop:3`` left cuda out of ``PD_EXECUTORS``: only the GPU tests,
skipped without a GPU, could see a P/D run refused there)."""

from __future__ import annotations

from typing import Any

import pytest

from hisparse import simulate as sim
from hisparse.executors import make_executor
from hisparse.simulate import SimulateOptions, Simulation


def test_pd_share_is_accepted_on_the_cuda_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    # the GPU is stood in for by the reference executor (the one the CUDA executor is
    # checked bit for bit against): what is tested is the option check, not the copies
    asked: list[str] = []

    def on_cpu(name: str, *a: Any) -> Any:
        asked.append(name)
        return make_executor("reference" if name == "cuda" else name, *a)

    monkeypatch.setattr(sim, "make_executor", on_cpu)
    s = Simulation(SimulateOptions(requests=4, pd_share=0.5, executor="cuda"))
    try:
        assert asked == ["cuda"] and s.pd is not None
    finally:
        s.close()
