"""The sizing flags of ``hisparse simulate`` (``--model`` and GiB budgets) and
``hisparse plan``; ``hisparse.cli`` registers them and hands the parsed arguments here."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from hisparse.cliargs import csv_of, out_path, positive_float, positive_int, probability
from hisparse.config import GIB, refusal_line
from hisparse.models import MODELS, model
from hisparse.sizing.plan import PlanRefused, machine_ram_bytes, plan, plan_lines
from hisparse.sizing.replay import (
    DEFAULT_DRIFT,
    DEFAULT_MAX_RUNNING,
    DEFAULT_STEP_MS,
    DEFAULT_STEPS,
    SizingOptions,
    run_sizing,
    sizing_config,
    summary,
)

EXIT_OK, EXIT_VIOLATION, EXIT_ERROR = 0, 1, 2
# simulate flags whose values --model sets (toy sizes); given with --model they are refused
MODEL_SETS = ("gpu_blocks", "host_blocks", "block_tokens", "row_bytes", "top_k", "layers")
RAM_FRACTION_FOR_BYTES = 0.8  # the reference executor's pools may take this much of RAM


def _err(message: str) -> int:
    print(f"hisparse: error: {message}", file=sys.stderr)
    return EXIT_ERROR


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """``--model`` and the GPU budget on ``hisparse simulate``."""
    m = p.add_argument_group("model geometry and budgets (a sizing replay)")
    m.add_argument("--model", choices=tuple(MODELS), default=None,
                   help="fill row bytes, top-K, block tokens, layers and index leaders from "
                   "the model's published config; needs --workload mooncake, --gpu-kv-gib "
                   "and --host-gib; runs the replay with HiSparse on and off, side by side "
                   f"(defaults then: --executor accounting, --max-running "
                   f"{DEFAULT_MAX_RUNNING}, --steps {DEFAULT_STEPS:,})")
    m.add_argument("--gpu-kv-gib", type=positive_float, default=None,
                   help="GPU KV budget in GiB (sparse-MLA KV; HiSparse's hot rows come out "
                   "of it); with --model")
    m.add_argument("--step-ms", type=positive_float, default=DEFAULT_STEP_MS,
                   help="engine decode step time for the PCIe GB/s figure; the default is "
                   "the H200 engine benchmark's HiSparse step at batch 128, 32k, drift 0.01 "
                   "(BENCHMARKS.md, a 2-layer model)")
    m.add_argument("--topk-drift", type=probability, default=DEFAULT_DRIFT,
                   help="with --model: fraction of a request's top-K moved to new random "
                   "positions per decode step")
    m.add_argument("--hot-rows", type=positive_int, default=None,
                   help="with --model: hot rows per request (default: 2 x top-K)")
    m.add_argument("--check-invariants", action="store_true",
                   help="with --model: check every protocol invariant after each action "
                   "(each check costs O(protocol state): off by default with --model)")


def sizing_options(args: argparse.Namespace, defaults: dict[str, object]) -> SizingOptions:
    """The replay's options from ``simulate``'s arguments (ArgumentTypeError if refused)."""
    from hisparse.simulate import DEFAULT_MOONCAKE, SimulateOptions

    if args.workload != "mooncake":
        raise argparse.ArgumentTypeError("--model replays a trace: add --workload mooncake")
    if args.gpu_kv_gib is None or args.host_gib is None:
        raise argparse.ArgumentTypeError("--model needs both budgets: --gpu-kv-gib and --host-gib")
    for name in MODEL_SETS:
        if getattr(args, name) not in (None, defaults[name]):
            flag = "--" + name.replace("_", "-")
            raise argparse.ArgumentTypeError(
                f"{flag} comes from --model {args.model} and the GiB budgets; drop it")
    if (args.tp != 1 or args.worker_restarts or args.worker_processes or args.speculative
            or args.backing != "private"):
        raise argparse.ArgumentTypeError("--model runs one in-process worker with a private "
                                         "host pool, without restarts or speculation")
    if (args.message_faults or args.indexer_offload
            or args.offload_blocks != SimulateOptions().offload_blocks
            or args.indexer_gpu_blocks is not None):
        raise argparse.ArgumentTypeError(
            "--model replays sparse-MLA KV over a faultless channel: drop --message-faults, "
            "--indexer-offload, --offload-blocks and --indexer-gpu-blocks")
    if args.abort_rate is not None or args.metrics_port is not None:
        raise argparse.ArgumentTypeError(
            "--model replays the trace as it is (no aborts) and serves no metrics: drop "
            "--abort-rate / --metrics-port")
    path = args.path if args.path is not None else Path(DEFAULT_MOONCAKE)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {path}")
    return SizingOptions(
        geometry=model(args.model), gpu_kv_gib=args.gpu_kv_gib, host_gib=args.host_gib,
        workload_path=path, requests=args.requests,
        steps=args.steps if args.steps is not None else DEFAULT_STEPS, seed=args.seed,
        time_compression=args.time_compression, max_decode=args.max_decode,
        max_running=args.max_running if args.max_running is not None else DEFAULT_MAX_RUNNING,
        hot_rows=args.hot_rows, topk_drift=args.topk_drift, step_ms=args.step_ms,
        executor=args.executor if args.executor is not None else "accounting",
        check=args.check_invariants and not args.no_check, trace=args.trace,
    )


def _available_ram() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return machine_ram_bytes()


def check_bytes_fit(o: SizingOptions) -> None:
    """The reference executor holds every byte: refuse budgets this machine cannot hold."""
    if o.executor != "reference":
        if o.executor == "cuda":
            raise argparse.ArgumentTypeError(
                "--model replays on the accounting or the reference executor")
        return
    c = sizing_config(o)
    need = (c.gpu_blocks * c.host_block_bytes + o.max_running * c.hot_bytes
            + c.host_pool_bytes)
    have = _available_ram()
    if need > RAM_FRACTION_FOR_BYTES * have:
        raise argparse.ArgumentTypeError(
            f"--executor reference would hold {need / GIB:,.1f} GiB of KV bytes (GPU and "
            f"host pools); this machine has {have / GIB:,.1f} GiB available: use "
            "--executor accounting (the default with --model) or smaller budgets")


def run_model_simulate(args: argparse.Namespace, defaults: dict[str, object]) -> int:
    """``hisparse simulate --model``: the replay with HiSparse on and off, side by side."""
    from pydantic import ValidationError

    from hisparse.report import ReportError, check_plot_available, dumps
    from hisparse.sizing.table import header_lines, plot, table_lines
    from hisparse.workload import WorkloadError

    try:
        o = sizing_options(args, defaults)
        check_bytes_fit(o)
        if args.plot is not None:
            check_plot_available()
        sizing_config(o)  # the budgets hold a block (refused here, before any work)
    except argparse.ArgumentTypeError as exc:
        return _err(str(exc))
    except ValidationError as exc:
        return _err(refusal_line(exc))
    except (ReportError, ValueError) as exc:
        return _err(str(exc))
    start, cpu = time.monotonic(), time.process_time()
    try:
        res = run_sizing(o, progress=not args.no_progress)
    except WorkloadError as exc:
        return _err(str(exc))
    wall, cpu = time.monotonic() - start, time.process_time() - cpu
    for line in header_lines(res.options):
        print(line)
    s = summary(res)
    for line in table_lines(res.options, s):
        print(line)
    print(f"ran in {wall:.1f} s wall, {cpu:.1f} s CPU (both runs)")
    if args.json is not None:
        doc = {"options": res.options, "summary": s, "wall_s": wall, "cpu_s": cpu,
               "hisparse": res.hisparse, "disabled": res.disabled}
        args.json.write_text(dumps(flat_series(doc)))
    if args.plot is not None:
        plot(res.options, res.hisparse, res.disabled, args.plot)
        print(f"plot: {args.plot}")
    return EXIT_OK if s["violations"] == 0 and s["data_mismatches"] == 0 else EXIT_VIOLATION


def flat_series(doc: dict[str, Any]) -> dict[str, Any]:
    """Both runs' per-step series under one top-level ``series`` (``hisparse.<name>``,
    ``disabled.<name>``), which ``report.dumps`` writes one line each."""
    out = {k: v for k, v in doc.items() if k not in ("hisparse", "disabled")}
    series: dict[str, Any] = {}
    for side in ("hisparse", "disabled"):
        out[side] = {k: v for k, v in doc[side].items() if k != "series"}
        series.update({f"{side}.{k}": v for k, v in doc[side]["series"].items()})
    out["series"] = series
    return out


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    """``hisparse plan``'s flags."""
    p.add_argument("--model", choices=tuple(MODELS), required=True,
                   help="the model whose published geometry sizes everything")
    p.add_argument("--gpu-kv-gib", type=positive_float, required=True,
                   help="GPU KV budget per replica, GiB")
    p.add_argument("--host-gib", type=positive_float, required=True,
                   help="host pool per replica, GiB")
    p.add_argument("--context", type=csv_of(positive_int), default=(8192, 32768, 131072),
                   metavar="TOKENS,...", help="context lengths to answer for; the longest "
                   "is the one a single request must fit")
    p.add_argument("--hot-rows", type=positive_int, default=None,
                   help="hot rows per request (default: 2 x top-K)")
    p.add_argument("--machine-ram-gib", type=positive_float, default=None,
                   help="RAM of the machine the pool lives on (default: this machine's)")
    p.add_argument("--json", type=out_path, metavar="PATH", help="write the plan as JSON")


def run_plan(args: argparse.Namespace) -> int:
    """``hisparse plan``: answer, or refuse with one line (exit 2)."""
    g = model(args.model)
    ram = None if args.machine_ram_gib is None else int(args.machine_ram_gib * GIB)
    try:
        p = plan(g, gpu_kv_gib=args.gpu_kv_gib, host_gib=args.host_gib,
                 contexts=tuple(int(c) for c in args.context), hot_rows=args.hot_rows,
                 machine_ram=ram)
    except PlanRefused as exc:
        return _err(str(exc))
    for line in plan_lines(p, g):
        print(line)
    if args.json is not None:
        args.json.write_text(json.dumps(p.to_json(), indent=2) + "\n")
    return EXIT_OK
