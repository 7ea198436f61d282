"""Rules of the run report's plot, the engine's shape bounds, the executor's capacity
refusal and the P/D side's close that survivors of the whole mutation run showed no test
stated (docs/mutation-run7)."""

from __future__ import annotations

import re
import sys
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

import hisparse.transport.nixlpeer as nixlpeer
from hisparse.engine.config import ROPE_DIM, EngineConfigError, EngineShape, ModelShape
from hisparse.engine.geometry import leaders
from hisparse.executor import HotCapacityError
from hisparse.models import MODELS
from hisparse.pdimport.sim import PdOptions, PdSide
from hisparse.report import ReportError, plot
from tests.test_executor_reference import fresh, make_batch, state

# --- the run plot (hisparse/report.py) -----------------------------------------------------

# a three-step run, every series the plot reads (the counts are the run's, not a model's)
DOC: dict[str, Any] = {
    "sizes": {"gpu_blocks": 8, "host_blocks": 16, "workload": "chat", "requests": 3},
    "series": {
        "gpu_blocks_used": [2, 8, 4], "host_blocks_used": [0, 4, 16],
        "resident_hits": [3, 0, 1], "hot_hits": [1, 0, 1], "misses": [0, 0, 2],
        "h2d_bytes": [0, 2048, 1024], "d2h_bytes": [512, 0, 0],
        "running": [1, 3, 2], "waiting": [2, 0, 0],
    },
}


def test_the_run_plot_names_each_panels_quantity_and_bounds_the_fractions_at_1_05(
        saved_figures: list[Any], tmp_path: Path) -> None:
    # the figure is read where it is saved: each panel's y axis says what it counts, the
    # shared x axis is the decode step, and the two fraction panels run 0..1.05 whatever
    # the data (kills report.py:176:call:4, 177:call:5, 185:call:6, 186:call:7,
    # 190:call:10, 193:call:13, 194:call:14)
    png = tmp_path / "run.png"
    plot(DOC, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    [fig] = saved_figures
    assert [a.get_ylabel() for a in fig.axes] == [
        "occupancy (fraction)", "top-K hit rate per step", "KiB per step", "requests"]
    assert fig.axes[3].get_xlabel() == "decode step"
    assert [a.get_ylim() for a in fig.axes[:2]] == [(0.0, 1.05), (0.0, 1.05)]


def test_the_run_plot_draws_with_agg_whatever_backend_was_chosen_before(
        saved_figures: list[Any], tmp_path: Path) -> None:
    # off-screen with Agg, here over PDF's backend chosen before
    # (kills report.py:168:call:1, which kept the backend chosen before)
    import matplotlib

    before = matplotlib.get_backend()
    matplotlib.use("pdf")
    try:
        plot(DOC, tmp_path / "run.png")
        assert matplotlib.get_backend().lower() == "agg"
    finally:
        matplotlib.use(before)
    assert len(saved_figures) == 1


def test_the_run_plot_itself_refuses_without_matplotlib_by_the_install_line(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # plot() asks first (a caller need not): the one-line refusal, not an ImportError,
    # and no file (kills report.py:165:call:0, which failed at `import matplotlib`)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    png = tmp_path / "run.png"
    with pytest.raises(ReportError,
                       match=r"^--plot needs matplotlib: pip install 'hisparse\[plot\]'$"):
        plot(DOC, png)
    assert not png.exists()


# --- shapes (hisparse/engine/config.py, hisparse/engine/geometry.py) ------------------------


def test_glm_5_2_takes_exactly_its_own_layer_count_and_refuses_one_more() -> None:
    # kills engine/geometry.py:37:cmp:2 (refused the whole model)
    pattern = MODELS["glm-5.2"].index_leaders
    n = len(pattern)
    assert leaders(n, "glm-5.2") == pattern
    with pytest.raises(EngineConfigError,
                       match=rf"^GLM-5\.2 has {n} layers, asked for {n + 1}$"):
        leaders(n + 1, "glm-5.2")


SIZES = ("hidden", "heads", "nope_dim", "v_dim", "mlp_dim", "vocab", "index_heads")


def _model(**change: int) -> ModelShape:
    base: dict[str, Any] = {"layers": 2, "index_leaders": (0, 0), "hidden": 8, "heads": 2,
                            "nope_dim": 4, "v_dim": 4, "mlp_dim": 16, "vocab": 10,
                            "index_heads": 2, "index_dim": 2 * ROPE_DIM}
    return ModelShape(**{**base, **change})


@pytest.mark.parametrize("name", SIZES)
def test_a_model_size_of_1_is_taken_and_0_refused_by_name(name: str) -> None:
    # kills engine/config.py:61:int:4 and 61:cmp:5 (refused a size of 1)
    assert getattr(_model(**{name: 1}), name) == 1
    with pytest.raises(EngineConfigError, match=rf"^{name} must be at least 1$"):
        _model(**{name: 0})


def test_an_index_dim_of_exactly_the_rope_dims_is_taken_and_one_pair_fewer_refused() -> None:
    # kills engine/config.py:63:cmp:6 (refused index_dim == ROPE_DIM)
    assert _model(index_dim=ROPE_DIM).index_key_bytes == 2 * ROPE_DIM
    with pytest.raises(EngineConfigError, match=re.escape(
            f"index_dim must be even and at least {ROPE_DIM} (its first {ROPE_DIM} dims carry "
            f"RoPE), got {ROPE_DIM - 2}")):
        _model(index_dim=ROPE_DIM - 2)


def test_a_block_of_one_token_is_taken_and_zero_refused() -> None:
    # kills engine/config.py:116:int:3 and 116:cmp:4 (refused block_tokens 1)
    assert EngineShape(slots=1, max_context=8, top_k=4, block_tokens=1).max_pages == 8
    with pytest.raises(EngineConfigError, match=r"^block_tokens must be >= 1, got 0$"):
        EngineShape(slots=1, max_context=8, top_k=4, block_tokens=0)


def test_a_top_k_of_one_is_taken_and_zero_refused() -> None:
    # kills engine/config.py:118:int:5 and 118:cmp:7 (refused top_k 1)
    assert EngineShape(slots=1, max_context=64, top_k=1).top_k == 1
    with pytest.raises(EngineConfigError,
                       match=r"^top_k must be in 1\.\.max_context \(64\), got 0$"):
        EngineShape(slots=1, max_context=64, top_k=0)


# --- the executor's capacity refusal (hisparse/executor/errors.py) --------------------------


def test_a_capacity_refusal_names_the_entry_its_slot_the_misses_and_the_free_hot_rows() -> None:
    # slot 1's entry (the batch's second) misses 4 positions with its 3 hot rows all free;
    # refused, nothing changed (kills executor/errors.py:49:var:3: `free` held the entry)
    ex, pools = fresh()  # 2 slots of 3 hot rows
    before = state(pools)
    with pytest.raises(HotCapacityError) as info:
        ex.resolve(pools, make_batch(1, [(0, [1, 1, 1, 1], None, None),
                                         (1, [2, 3, 4, 5], None, None)]))
    assert (info.value.entry, info.value.slot, info.value.needed, info.value.free) == (1, 1, 4, 3)
    assert str(info.value).startswith(
        "entry 1 (slot 1) misses 4 positions but only 3 hot rows are not in use by this batch")
    assert state(pools) == before


# --- the P/D side's close (hisparse/pdimport/sim.py) ----------------------------------------


def _holds_until_stopped(name: str, conn: Connection) -> None:
    """A stand-in prefiller child (no NIXL): takes the pages, answers with metadata,
    and exits 0 on ``stop``."""
    pages = conn.recv()
    conn.send((b"stand-in metadata", 0, pages.shape[1], pages.shape[0]))
    while conn.recv() != "stop":
        conn.send("put")
    conn.send("stopped")


def test_closing_a_nixl_pd_side_stops_its_prefiller_process_in_order() -> None:
    # an orderly stop (exit 0), not left running nor killed
    # (kills pdimport/sim.py:203:call:17, which left the process running)
    with pytest.MonkeyPatch.context() as mpatch:
        mpatch.setattr(nixlpeer, "_serve", _holds_until_stopped)
        side = PdSide(PdOptions(share=1.0, transport="nixl"), seed=0, layers=1,
                      block_tokens=2, row_bytes=16, capacity_pages=2)
    try:
        assert not side.prefiller.reaped
        side.close()
        assert side.prefiller.reaped and side.prefiller.process.exitcode == 0
        side.close()  # idempotent
        assert side.prefiller.process.exitcode == 0
    finally:
        if not side.prefiller.reaped:  # (only on a failure above)
            side.prefiller.kill()
