"""Rules of ``simulate``'s flags (``--model``'s refusals, a trace's pool sizes), the sizing
plot and the NIXL and protocol benches' figures that survivors of the whole mutation run
showed no test stated (docs/mutation-run7)."""

from __future__ import annotations

import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hisparse.bench.nixl as nixl_bench
from hisparse.bench import protocol as protocol_bench
from hisparse.cli import _simulate_options, build_parser, main
from hisparse.simulate import SimulateOptions, build_workload
from hisparse.sizing import cli as sizing_cli
from hisparse.sizing.replay import SizingOptions
from hisparse.sizing.table import plot
from hisparse.sizing.toy import admitting_pools
from tests.test_rule_survivors_cli import MODEL_RUN
from tests.test_rule_uncovered_transport import _stand_ins
from tests.test_sizing import TRACE

# -- hisparse simulate --model: refusals --------------------------------------------------

PREFILLED = ("hisparse: error: --model replays the trace's prompts as prefilled here: drop "
             "--pd-share, --transport and --staging-slots\n")


@pytest.mark.parametrize("flags", [["--pd-share", "0.5"], ["--transport", "nixl"],
                                   ["--staging-slots", "8"]])
def test_model_simulate_refuses_each_prefill_flag_on_its_own(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        flags: list[str]) -> None:
    # any one of the three is refused, before the replay starts (cli.py:508:bool:13
    # refused only all three together)
    ran: list[tuple[object, ...]] = []

    def replay(*a: object) -> int:
        ran.append(a)
        return 0

    monkeypatch.setattr(sizing_cli, "run_model_simulate", replay)
    assert main([*MODEL_RUN, *flags]) == 2
    assert capsys.readouterr() == ("", PREFILLED)
    assert ran == []
    # without it the replay is what runs
    assert main(MODEL_RUN) == 0
    assert len(ran) == 1 and capsys.readouterr() == ("", "")


@pytest.mark.parametrize("gpu_kv_gib", ["0.001", "3"])
def test_model_simulate_refuses_the_cuda_executor_by_name_whatever_the_budgets(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        gpu_kv_gib: str) -> None:
    # the executor is refused before the budgets are sized: even budgets that hold no GPU
    # block get the executor's line (sizing/cli.py:124:reorder:1 sized them first and
    # refused 0.001 GiB instead)
    ran: list[SizingOptions] = []
    monkeypatch.setattr(sizing_cli, "run_sizing", lambda o, **kw: ran.append(o))
    argv = ["simulate", "--model", "deepseek-v3.2", "--workload", "mooncake", str(TRACE),
            "--gpu-kv-gib", gpu_kv_gib, "--host-gib", "8", "--executor", "cuda"]
    assert main(argv) == 2
    assert capsys.readouterr() == (
        "", "hisparse: error: --model replays on the accounting or the reference executor\n")
    assert ran == []


# -- hisparse simulate over a trace: its pool sizes ---------------------------------------


def test_a_trace_run_keeps_each_pool_size_given_and_sizes_the_others_from_the_trace() -> None:
    # a size not given is the trace's admitting pool, not SimulateOptions' default; one given
    # is kept (cli.py:460:cmp:31 took the trace's host pool over --host-blocks, and the
    # default where none was given)
    base = ["simulate", "--workload", "mooncake", str(TRACE), "--requests", "4"]
    args = build_parser().parse_args(base)
    gpu, host = admitting_pools(build_workload(SimulateOptions(
        workload="mooncake", workload_path=TRACE, requests=4, block_tokens=args.block_tokens,
        max_decode=args.max_decode)))
    d = SimulateOptions()
    assert gpu != d.gpu_blocks and host != d.host_blocks  # the trace's sizes are its own
    for flags, want in [([], (gpu, host)),
                        (["--host-blocks", "9"], (gpu, 9)),
                        (["--gpu-blocks", "7"], (7, host)),
                        (["--gpu-blocks", "7", "--host-blocks", "9"], (7, 9))]:
        o = _simulate_options(build_parser().parse_args([*base, *flags]))
        assert (o.gpu_blocks, o.host_blocks) == want, flags


# -- the sizing plot ----------------------------------------------------------------------


def test_the_sizing_plot_draws_both_runs_titled_and_labelled_laid_out_and_closed(
        saved_figures: list[Any], tmp_path: Path) -> None:
    # the upper axes hold both runs' running requests under a legend naming them and a
    # title naming the replay; the figure is laid out tight before it is saved, and closed
    # after (sizing/table.py:88:call:1 and 89:call:2 drew one run only, 91:call:4 no title,
    # 93:call:5 no legend, 98:call:9 kept the default layout, 100:call:11 left it open)
    import matplotlib.pyplot as plt

    o = {"model": "tiny", "gpu_kv_gib": 1.5, "host_gib": 2.0, "requests": 1234,
         "time_compression": 2.5}
    on = {"host_blocks": 8, "series": {"running": [1, 3, 2], "host_blocks_used": [0, 4, 2]}}
    off = {"series": {"running": [1, 1, 0]}}
    open_before = plt.get_fignums()
    plot(o, on, off, tmp_path / "sizing.png")
    [fig] = saved_figures
    assert plt.get_fignums() == open_before and not plt.fignum_exists(fig.number)
    top, _ = fig.axes
    assert [np.asarray(line.get_ydata(), dtype=float).tolist() for line in top.lines] == [
        [1.0, 3.0, 2.0], [1.0, 1.0, 0.0]]
    assert [line.get_label() for line in top.lines] == ["HiSparse on",
                                                        "HiSparse off (all resident)"]
    legend = top.get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == ["HiSparse on",
                                                          "HiSparse off (all resident)"]
    assert top.get_title() == "tiny, GPU KV 1.5 GiB, host 2 GiB, Mooncake 1,234 requests (x2.5)"
    # tight already: laying it out again moves no axes
    saved_at = [ax.get_position().bounds for ax in fig.axes]
    fig.tight_layout()
    again = [ax.get_position().bounds for ax in fig.axes]
    assert [list(b) for b in again] == [pytest.approx(list(b), abs=1e-9) for b in saved_at]


# -- hisparse bench nixl: the staged import -----------------------------------------------

PAGE_KIB = 256  # a 1 MiB run is 4 pages


@pytest.mark.parametrize(("chunk_pages", "slots", "chunk", "window"), [
    (1, 4, 1, 4),  # chunks of one page, four in flight
    (2, 4, 2, 2),  # two chunks of two
    (4, 2, 2, 1),  # a chunk is never more pages than the pool has slots
])
def test_the_staged_import_reads_whole_chunks_that_fill_its_pool_then_closes(
        monkeypatch: pytest.MonkeyPatch, chunk_pages: int, slots: int, chunk: int,
        window: int) -> None:
    # the staged decoder reads chunks of min(chunk_pages, slots) pages, as many in flight
    # as whole chunks fit the pool of `slots` slots; the figure reported is the pool's
    # peak use; the decoder is closed after (no peer, no block registration)
    # (bench/nixl.py:101:var:20 read chunks of `slots`, 101:var:21 of `chunk_pages`;
    # 106:var:22 made a pool of `chunk_pages` slots; 108:arith:7 a window of slots*chunk,
    # 108:var:24 of chunk_pages//chunk; 133:var:26 reported chunk_pages as the peak;
    # 132:call:3 left the decoder open)
    _, decoders = _stand_ins(monkeypatch)
    doc = nixl_bench.run(total_mib=1, page_kib=PAGE_KIB, chunk_pages=chunk_pages, reps=1,
                         staging_slots=slots)
    first, staged = decoders
    assert (first.name, first.chunk_pages) == ("bench-decoder", chunk_pages)
    assert (staged.name, staged.chunk_pages, staged.window) == (
        "bench-staged-decoder", chunk, window)
    pool = staged.pool
    page = PAGE_KIB * 1024
    assert (pool.slots, pool.capacity_bytes, pool.page_bytes) == (slots, slots * page, page)
    assert (doc["pages"], doc["staging_slots"], doc["staging_peak"]) == (4, slots,
                                                                         chunk * window)
    for d in decoders:
        assert (d.live, d.peers, d.regions) == ({}, {}, {}), d.name


def test_each_nixl_bench_figure_is_the_median_of_its_timed_repetitions_after_the_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # `reps` + 1 repetitions of each of the NIXL READ, the staged import and the memcpy,
    # the first not counted; with a stand-in clock every figure is exact
    # (bench/nixl.py:116:var:25 ran `chunk_pages` + 1 staged imports)
    _stand_ins(monkeypatch)
    reads, imports, copies = [64.0, 1.0, 4.0, 2.0], [64.0, 8.0, 3.0, 5.0], [64.0, 0.5, 0.25, 1.0]
    ticks = [t for i, dt in enumerate(reads + imports + copies) for t in (100.0 * i,
                                                                          100.0 * i + dt)]
    clock: Iterator[float] = iter(ticks)
    monkeypatch.setattr(nixl_bench, "time", types.SimpleNamespace(perf_counter=clock.__next__))
    doc = nixl_bench.run(total_mib=1, page_kib=PAGE_KIB, chunk_pages=2, reps=3,
                         staging_slots=2)
    assert next(clock, None) is None  # every tick taken, none short
    n = 1 << 20
    want = {"bytes": n, "pages": 4, "page_bytes": PAGE_KIB * 1024, "chunk_pages": 2, "reps": 3,
            "nixl_read_s": 2.0, "nixl_GBps": n / 2.0 / 1e9,
            "memcpy_s": 0.5, "memcpy_GBps": n / 0.5 / 1e9, "nixl_vs_memcpy": 0.5 / 2.0,
            "staged_import_s": 5.0, "staged_import_GBps": n / 5.0 / 1e9, "staging_slots": 2,
            "staging_peak": 2, "staged_vs_memcpy": 0.5 / 5.0}
    assert {k: v for k, v in doc.items() if k != "environment"} == want


# -- hisparse bench protocol --------------------------------------------------------------


def test_the_protocol_bench_reports_the_clocks_intervals_as_means_in_microseconds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a stand-in clock that moves a quarter second a read: every timed action takes one
    # interval, so each per-action figure is a mean of 250000 µs whatever the lifecycles
    # and the background; each trigger figure is one interval over its 3 x 20000 triggers
    # (bench/protocol.py:51:arith:2, 73:arith:3 and 80:arith:4 added the start instead;
    # 58:var:5 divided by the background requests)
    now = [1024.0]

    def tick() -> float:
        now[0] += 0.25
        return now[0]

    monkeypatch.setattr(protocol_bench, "time", types.SimpleNamespace(perf_counter=tick))
    doc = protocol_bench.run(lifecycles=3, background=2)
    per_action = dict.fromkeys(protocol_bench.ACTIONS, 0.25 * 1e6)
    trigger = 0.25 / (3 * 20000) * 1e6
    assert doc == {"lifecycles": 3, "background_requests": 2,
                   "per_action_us_check_off": per_action, "per_action_us_check_on": per_action,
                   "lifecycle_us_check_off": 8 * 0.25 * 1e6,
                   "lifecycle_us_check_on": 8 * 0.25 * 1e6,
                   "transitions_trigger_us": trigger, "compiled_table_us": trigger}
