"""Rules of the command line and the tools around it (help text, bench arguments and the
coordinator bench, the allocation search, the metrics text, ``simulate --model``'s report
and JSON) that survivors of the whole mutation run showed no test stated
(docs/mutation-run7)."""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

import hisparse.bench.coordinator as coordinator_bench
import hisparse.sizing.table as sizing_table
from hisparse.bench.allocsearch import SearchError, largest_fit
from hisparse.bench.cli import MAX_ENTRIES, MAX_POSITIONS
from hisparse.cli import build_parser, main
from hisparse.config import HiSparseConfig
from hisparse.connector import HiSparseConnector, KVConnectorRole
from hisparse.coordinator import HiSparseCoordinator
from hisparse.metrics import HiSparseMetrics
from hisparse.report import dumps
from hisparse.sizing import cli as sizing_cli
from hisparse.sizing.replay import SizingOptions, SizingResult, run_sizing, summary
from hisparse.sizing.table import header_lines, table_lines
from hisparse.spec.messages import HiSparseConnectorMetadata, HiSparseWorkerMeta
from tests.test_cli import parsers
from tests.test_sizing import TRACE

# -- hisparse --help ----------------------------------------------------------------------


def test_help_shows_no_default_for_a_flag_that_has_none_such_as_help_itself() -> None:
    # argparse gives -h/--help the default SUPPRESS: it is no value, so no "(default: ...)"
    # (cli.py:79:drop:2 printed "(default: ==SUPPRESS==)" after every -h)
    for name, p in parsers(build_parser()):
        [help_action] = [a for a in p._actions if isinstance(a, argparse._HelpAction)]
        assert help_action.default == argparse.SUPPRESS
        shown = p._get_formatter()._get_help_string(help_action)
        assert shown == "show this help message and exit", name
        text = p.format_help()
        assert re.search(r"^  -h, --help +show this help message and exit$", text,
                         re.MULTILINE), name
        assert argparse.SUPPRESS not in text, name


# -- hisparse bench: bounded integer lists ------------------------------------------------


@pytest.mark.parametrize(("target", "flag", "most"), [
    ("engine-kernels", "--batches", MAX_ENTRIES),
    ("engine-kernels", "--scan-batches", MAX_ENTRIES),
    ("equal-hbm", "--contexts", MAX_POSITIONS),
])
def test_a_bench_list_takes_its_bound_itself_and_refuses_one_more(
        target: str, flag: str, most: int, capsys: pytest.CaptureFixture[str]) -> None:
    # the bound is inclusive (bench/cli.py:229:cmp:9 refused the bound itself)
    args = build_parser().parse_args(["bench", target, flag, f"1,{most}"])
    assert getattr(args, flag[2:].replace("-", "_")) == (1, most)
    text = f"1,{most + 1}"
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["bench", target, flag, text])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err == (f"hisparse bench {target}: error: argument {flag}: expected integers of "
                   f"at most {most}, got {text!r}\n")


# -- the allocation search ----------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(limit=st.integers(1, 10_000), over=st.integers(1, 10_000))
def test_a_guess_above_the_limit_is_refused_before_any_probe(limit: int, over: int) -> None:
    # (bench/allocsearch.py:35:var:2 compared the guess with itself and probed past the
    # limit)
    probed: list[int] = []

    def fits(b: int) -> bool:
        probed.append(b)
        return True

    guess = limit + over
    with pytest.raises(SearchError, match=f"^guess must be in 1\\.\\.{limit}, got {guess}$"):
        largest_fit(fits, guess=guess, limit=limit)
    assert probed == []
    # the limit itself is a guess it takes, and then the answer when everything fits
    got = largest_fit(fits, guess=limit, limit=limit)
    assert (got.batch, got.probes, probed) == (limit, [(limit, True)], [limit])


# -- metrics ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Counts:
    """A decode step's counters, as plain numbers."""

    resident_hits: int
    hot_hits: int
    misses: int
    h2d_bytes: int


def samples(text: str) -> dict[str, float]:
    return {s.name + "".join(f"{{{k}={v}}}" for k, v in sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) if family.type == "counter"
            for s in family.samples if s.name.endswith("_total")}


def test_the_metrics_text_includes_the_decode_steps_not_yet_read_back() -> None:
    # a scrape's text flushes first: steps held below read_every count
    # (metrics.py:188:call:9 showed only what an earlier flush had read)
    config = HiSparseConfig(host_pool_gib=0.001, block_tokens=8, row_bytes=16, top_k=4)
    metrics = HiSparseMetrics(config, read_every=4)
    metrics.on_decode(Counts(resident_hits=5, hot_hits=2, misses=3, h2d_bytes=4096))
    metrics.on_decode(Counts(resident_hits=1, hot_hits=0, misses=1, h2d_bytes=512))
    want = {"hisparse_cache_hits_total{tier=resident}": 6.0,
            "hisparse_cache_hits_total{tier=hot}": 2.0,
            "hisparse_cache_misses_total": 4.0,
            "hisparse_host_to_device_bytes_total": 4608.0,
            "hisparse_device_to_host_bytes_total": 0.0,
            "hisparse_spills_total": 0.0,
            "hisparse_prefix_hits_total": 0.0}
    assert samples(metrics.text()) == want
    assert samples(metrics.text()) == want  # read once: a second text counts nothing twice


# -- hisparse bench coordinator -----------------------------------------------------------


class RecordingConnector:
    """The scheduler-side connector the bench builds, recording each call it passes on."""

    made: ClassVar[list[RecordingConnector]] = []

    def __init__(self, role: KVConnectorRole, coordinator: HiSparseCoordinator) -> None:
        self.coordinator = coordinator
        self.real = HiSparseConnector(role, coordinator=coordinator)
        self.calls: list[str] = []
        RecordingConnector.made.append(self)

    def build_connector_meta(self) -> HiSparseConnectorMetadata | None:
        meta = self.real.build_connector_meta()
        self.calls.append("no meta" if meta is None else
                          f"spill {[t.transfer_id for t in meta.transfers]} replace "
                          f"{[(r.request_id, r.page_index) for r in meta.replacements]}")
        return meta

    def update_connector_output(self, out: HiSparseWorkerMeta | None) -> None:
        self.calls.append("no output" if out is None else
                          f"enqueued {list(out.enqueued)} completed {list(out.completed)}")
        self.real.update_connector_output(out)


def test_the_coordinator_bench_times_whole_lifecycles_then_idle_steps_at_the_asked_shape(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # each timed lifecycle is spill, metadata, enqueued ack, completed ack (the pages end
    # published, no transfer open); each idle step is one metadata build and one empty
    # worker output: 2000 of them with the checks off, 50 with them on; both modes hold
    # the asked running requests, and the figures are the clock's (a stand-in here)
    # (bench/coordinator.py:42:call:3 sent no completed ack, 47:call:4 built no metadata,
    # 48:call:5 consumed no output, 55:var:8 / 56:var:9 reported one count as the other,
    # 57:var:10 / 58:var:12 held `lifecycles` requests)
    ticks = iter([0.0, 0.006, 1.0, 1.5, 2.0, 2.03, 3.0, 3.1])
    monkeypatch.setattr(coordinator_bench, "time",
                        types.SimpleNamespace(perf_counter=ticks.__next__))
    monkeypatch.setattr(coordinator_bench, "HiSparseConnector", RecordingConnector)
    monkeypatch.setattr(RecordingConnector, "made", [])
    doc = coordinator_bench.run(running=5, lifecycles=3)
    assert doc == {
        "running_requests": 5, "lifecycles": 3,
        "check_off": {"spill_lifecycle_us": (0.006 - 0.0) / 3 * 1e6,
                      "idle_step_us": (1.5 - 1.0) / 2000 * 1e6},
        "check_on": {"spill_lifecycle_us": (2.03 - 2.0) / 3 * 1e6,
                     "idle_step_us": (3.1 - 3.0) / 50 * 1e6},
    }
    off, on = RecordingConnector.made
    for conn, check, idle in ((off, False, 2000), (on, True, 50)):
        c = conn.coordinator
        assert c.machine.check is check
        # the victims are the oldest admission's spillable pages (r0's 1..3); a published
        # page's block-table replacement goes with the next metadata (the first idle
        # step's, for the last one)
        replaced = [[], [("r0", 1)], [("r0", 2)], [("r0", 3)]]
        lifecycle = [step for t in range(3) for step in (
            f"spill [{t}] replace {replaced[t]}", f"enqueued [{t}] completed []",
            f"enqueued [] completed [{t}]")]
        assert conn.calls == (lifecycle + [f"spill [] replace {replaced[3]}", "no output"]
                              + ["no meta", "no output"] * (idle - 1))
        sizes = c.table_sizes()
        assert (sizes["req"], sizes["loc"], sizes["running"]) == (5, 20, 5)
        assert (sizes["open_spills"], sizes["transfer_dst"], sizes["prefix"]) == (0, 0, 3)
        assert c.state.host_used == 3


# -- hisparse simulate --model ------------------------------------------------------------

MODEL_RUN = ["simulate", "--model", "deepseek-v3.2", "--workload", "mooncake", str(TRACE),
             "--gpu-kv-gib", "3", "--host-gib", "8", "--max-running", "8", "--requests", "4"]


def test_a_sizing_replay_prints_its_header_table_times_and_plot_and_writes_flat_json(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    # stdout is exactly: the header, the table, the time line (wall and CPU each the
    # clock's difference over both runs: stand-in clocks make them exact) and the plot's
    # path; the JSON holds the run's fields, then each side's figures, then every series
    # under one key (sizing/cli.py:162:call:17 printed no header; 160:arith:3 added the
    # CPU clock's start; 173:call:21 did not say where the plot went; 180:drop:3 wrote
    # the disabled side before HiSparse's)
    results: list[SizingResult] = []

    def replay(o: SizingOptions, progress: bool = False) -> SizingResult:
        res = run_sizing(o, progress=progress)
        results.append(res)
        return res

    drawn: list[tuple[Any, ...]] = []
    monkeypatch.setattr(sizing_cli, "run_sizing", replay)
    monkeypatch.setattr(sizing_table, "plot", lambda *a: drawn.append(a))
    monkeypatch.setattr(sizing_cli, "time", types.SimpleNamespace(
        monotonic=iter([10.0, 12.0]).__next__, process_time=iter([100.0, 103.5]).__next__))
    out, png = tmp_path / "s.json", tmp_path / "s.png"
    assert main([*MODEL_RUN, "--no-progress", "--json", str(out), "--plot", str(png)]) == 0
    [res] = results
    assert capsys.readouterr().out.splitlines() == [
        *header_lines(res.options), *table_lines(res.options, summary(res)),
        "ran in 2.0 s wall, 3.5 s CPU (both runs)", f"plot: {png}"]
    assert len(drawn) == 1
    assert drawn[0][0] is res.options and drawn[0][1] is res.hisparse
    assert drawn[0][2] is res.disabled and drawn[0][3] == png
    doc = json.loads(out.read_text())
    assert list(doc) == ["options", "summary", "wall_s", "cpu_s", "hisparse", "disabled",
                         "series"]
    assert (doc["wall_s"], doc["cpu_s"]) == (2.0, 3.5)
    assert list(doc["hisparse"]) == [k for k in res.hisparse if k != "series"]
    assert list(doc["disabled"]) == [k for k in res.disabled if k != "series"]
    assert list(doc["series"]) == ([f"hisparse.{k}" for k in res.hisparse["series"]]
                                   + [f"disabled.{k}" for k in res.disabled["series"]])


def test_flat_series_puts_the_runs_after_the_documents_own_fields_in_one_order() -> None:
    # whatever order a document holds its runs in: its own fields, HiSparse's figures,
    # the disabled run's, then the series (sizing/cli.py:180:drop:2 kept HiSparse's
    # figures where the document had them, 180:drop:3 the disabled run's)
    doc: dict[str, Any] = {
        "disabled": {"steps": 7, "series": {"running": [1, 0]}},
        "hisparse": {"steps": 6, "finished": 2, "series": {"running": [2, 0], "hits": [3]}},
        "options": {"model": "tiny"}, "wall_s": 1.5}
    before = copy.deepcopy(doc)
    flat = sizing_cli.flat_series(doc)
    assert list(flat.items()) == [
        ("options", {"model": "tiny"}), ("wall_s", 1.5),
        ("hisparse", {"steps": 6, "finished": 2}), ("disabled", {"steps": 7}),
        ("series", {"hisparse.running": [2, 0], "hisparse.hits": [3],
                    "disabled.running": [1, 0]})]
    assert list(json.loads(dumps(flat))) == ["options", "wall_s", "hisparse", "disabled",
                                             "series"]
    assert doc == before  # the document itself is left as it was


@pytest.mark.parametrize(("flags", "progress"), [([], True), (["--no-progress"], False)])
def test_a_sizing_replay_shows_its_progress_bar_unless_told_not_to(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        flags: list[str], progress: bool) -> None:
    # (sizing/cli.py:157:not:2 showed the bar exactly when --no-progress was given)
    asked: list[bool] = []

    def replay(o: SizingOptions, progress: bool = False) -> SizingResult:
        asked.append(progress)
        return run_sizing(o, progress=progress)

    monkeypatch.setattr(sizing_cli, "run_sizing", replay)
    assert main([*MODEL_RUN, *flags]) == 0
    assert asked == [progress]
    err = capsys.readouterr().err
    assert ("simulate: " in err) is progress  # the bar (tqdm, on stderr)
    if not progress:
        assert err == ""


def test_model_simulate_refuses_a_plot_without_matplotlib_before_sizing_the_budgets(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    # the accounting executor's refusals come flags first: a --plot that cannot be drawn is
    # the one line even where the budgets hold no block either; without --plot the budgets'
    # refusal is (sizing/cli.py:148:reorder:2 sized the budgets first)
    ran: list[SizingOptions] = []
    monkeypatch.setattr(sizing_cli, "run_sizing", lambda o, **kw: ran.append(o))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    argv = ["simulate", "--model", "deepseek-v3.2", "--workload", "mooncake", str(TRACE),
            "--gpu-kv-gib", "0.001", "--host-gib", "8"]
    png = tmp_path / "p.png"
    assert main([*argv, "--plot", str(png)]) == 2
    assert capsys.readouterr().err == ("hisparse: error: --plot needs matplotlib: pip install "
                                       "'hisparse[plot]'\n")
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "hisparse: error: gpu_kv_gib=0.001 holds no whole GPU block once 256 requests' hot "
        "rows (0.15 GiB each) are reserved: raise gpu_kv_gib or lower the running requests\n")
    assert ran == [] and not png.exists()
