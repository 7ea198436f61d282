"""The ``hisparse`` command line.

Each subcommand is a ``(register, handler)`` pair in ``COMMANDS``; every flag has help
text and a shown default, and every number and path is checked while parsing
(``hisparse.cliargs``), so bad input exits 2 with one line before any work starts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from hisparse import __version__, docs
from hisparse.bench.cli import TARGETS as BENCH_TARGETS
from hisparse.bench.cli import BenchFailed
from hisparse.bugs import BUGS
from hisparse.cliargs import (
    fault_rate,
    in_file,
    nonneg_int,
    out_path,
    port,
    positive_float,
    positive_int,
    probability,
    workers,
)
from hisparse.executor.errors import ExecutorError
from hisparse.spec.trace import TraceFormatError
from hisparse.tlc import (
    MODELS,
    CheckReport,
    TlcError,
    check_model,
    ensure_tlc,
    probe_version,
)
from hisparse.tlc.acquire import ARTIFACT
from hisparse.tlc.signals import Interrupted, block_in_this_thread, held
from hisparse.tracecheck import TraceCheckResult, check_traces
from hisparse.transport.errors import TransportError

EXIT_OK, EXIT_VIOLATION, EXIT_ERROR = 0, 1, 2
_EXIT_FOR = {"ok": EXIT_OK, "violation": EXIT_VIOLATION, "error": EXIT_ERROR}

DESCRIPTION = """\
HiSparse: sparse-attention KV offload. Simulate a decode workload through the whole
system (coordinator, connector, worker, executor), model-check the protocol's TLA+ spec
with TLC, validate recorded traces against it, and benchmark its parts."""

EPILOG = """\
exit status:
  0  ok (for check --inject: the injected bug was caught by the expected check)
  1  violation: TLC, a trace check or a simulation found a protocol violation or wrong
     bytes (for check --inject: the expected check did not catch the bug)
  2  error: bad arguments or files, TLC missing, a model that does not parse, ...
  130/143  interrupted (Ctrl-C / SIGTERM); temporary folders are removed"""

Handler = Callable[[argparse.Namespace], int]
SubParsers = argparse._SubParsersAction


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Show each flag's default (unless it has none) and keep the epilog's layout."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        absent = action.default in (None, False, argparse.SUPPRESS)
        if absent or "%(default)" in text or not action.option_strings:
            return text
        default = action.default
        if isinstance(default, tuple):
            default = ",".join(str(x) for x in default)
        return f"{text} (default: {default})"


class _Parser(argparse.ArgumentParser):
    """Errors are one line on stderr (``hisparse CMD: error: ...``), exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\n")


def _sub(sub: SubParsers, name: str, help: str, **kw: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=kw.pop("description", help), epilog=EPILOG,
        formatter_class=_Formatter, **kw,
    )
    return p


def _err(message: str) -> int:
    print(f"hisparse: error: {message}", file=sys.stderr)
    return EXIT_ERROR


@contextmanager
def ticking(label: str, every: float = 10.0) -> Iterator[None]:
    """Say on stderr, every ``every`` seconds, that ``label`` is still running."""
    done = threading.Event()
    start = time.monotonic()

    def tick() -> None:
        block_in_this_thread()  # SIGINT must reach the main thread's blocking read
        while not done.wait(every):
            print(f"  {label}: still running ({time.monotonic() - start:.0f} s)",
                  file=sys.stderr, flush=True)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _progress(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


# --- setup -------------------------------------------------------------------------------


def _register_setup(sub: SubParsers) -> None:
    _sub(sub, "setup", "fetch and verify the pinned TLC jar (Maven)")


def _cmd_setup(args: argparse.Namespace) -> int:
    print(f"setup: fetching or verifying {ARTIFACT} ...", file=sys.stderr, flush=True)
    with ticking("setup"):
        install = ensure_tlc()
        version = probe_version(install)
    print(f"artifact  {ARTIFACT}")
    print(f"jar       {install.jar}")
    print(f"version   {version}")
    print(f"sha256    {install.sha256} (verified)")
    return EXIT_OK


# --- check -------------------------------------------------------------------------------


def _register_check(sub: SubParsers) -> None:
    p = _sub(sub, "check", "model-check the TLA+ spec with TLC, or validate traces")
    p.add_argument("--model", choices=MODELS, default="ci",
                   help="model size: small (seconds), ci (what CI runs), deep (long); "
                   "tp / tpshared: two tensor-parallel ranks, private / shared host pool")
    p.add_argument("--json", type=out_path, metavar="PATH", help="write the report as JSON")
    p.add_argument(
        "--inject", metavar="NAME", choices=[b.name for b in BUGS],
        help="turn on an injected bug and check that TLC catches it by the expected name "
        "(exit 0 when it does); see --list-bugs",
    )
    p.add_argument("--list-bugs", action="store_true", help="list injectable bugs and exit")
    p.add_argument("--workers", type=workers, default="auto",
                   help="TLC worker threads: auto or a positive integer")
    p.add_argument("--verbose", "-v", action="store_true", help="stream TLC output to stderr")
    p.add_argument("--keep", action="store_true", help="keep the scratch dir even on success")
    p.add_argument(
        "--trace", nargs="+", type=in_file, metavar="FILE",
        help="validate JSON Lines traces against the spec instead of exploring a model",
    )
    p.add_argument(
        "--allow-bug",
        action="store_true",
        help="with --trace: check traces whose header declares an injected bug against the "
        "spec with that bug on (refused otherwise); the verdict names the bug",
    )
    p.add_argument("--jobs", type=positive_int, default=None,
                   help="with --trace: TLC runs at once, traces and windows of a trace "
                   "(default: every core)")
    p.add_argument("--window", type=nonneg_int, default=None, metavar="STEPS",
                   help="with --trace: replay a trace without an injected bug in windows of "
                   "this many steps, each from the recorded state before it (0: whole; "
                   "default: one window per job when each gets 300 steps or more)")


def _print_report(r: CheckReport) -> None:
    def row(key: str, value: object) -> None:
        print(f"{key:<11} {value}")

    row("model", r.model + (f" (injected: {r.injected})" if r.injected else ""))
    row("result", r.result.upper() + ("" if r.result == "ok" else f"  ({r.reason})"))
    row("distinct", f"{r.distinct_states:,}")
    row("generated", f"{r.states_generated:,}")
    row("depth", r.depth)
    row("seconds", f"{r.seconds:.1f}")
    row("invariants", ", ".join(r.invariants) or "-")
    row("properties", ", ".join(r.properties) or "-")
    row("tlc", r.tlc_version or "?")
    row("violated", ", ".join(r.violated) or "-")
    if r.injected is not None:
        row("caught", "yes, as expected" if r.caught_expected
            else "NO: the expected check did not fire")
    print("runs:")
    for run in r.runs:
        name = f"{run.module}/{run.cfg}"
        figures = (
            f"{run.distinct_states:>12,} distinct {run.states_generated:>12,} generated"
            f"  depth {run.depth:<4} {run.seconds:7.1f} s"
        )
        caught = f"  violated {', '.join(run.violated)}" if run.violated else ""
        print(f"  {name:<40} {run.result:<9} {figures}{caught}")
    for run in r.runs:
        if run.counterexample:
            print(f"counterexample ({run.module}/{run.cfg}), last states:")
            for state in run.counterexample:
                print("  " + state.replace("\n", "\n  "))
    if r.workdir:
        print(f"logs: {r.workdir}")


def _write_json(path: Path | None, doc: dict[str, object]) -> None:
    if path is not None:
        path.write_text(json.dumps(doc, indent=2) + "\n")


def _print_trace_result(r: TraceCheckResult) -> None:
    """``accepted``, or one line per file that was not accepted (stdout); figures on stderr."""
    if r.accepted:
        print("accepted")
    for f in r.files:
        if f.verdict != "accepted" or f.bug:
            print(f.line())
            if f.reason:
                print(f"  reason: {f.reason}")
    print(
        f"{len(r.files)} trace(s), {r.steps} steps, longest {r.longest}; "
        f"{r.tlc_runs} TLC run(s), {r.tlc_seconds:.1f} s",
        file=sys.stderr,
    )
    if r.workdir:
        print(f"logs: {r.workdir}", file=sys.stderr)


def _cmd_check_traces(args: argparse.Namespace) -> int:
    if args.inject or args.list_bugs:
        return _err("--trace cannot be combined with --inject/--list-bugs")
    print(f"check: replaying {len(args.trace)} trace(s) through TLC ...", file=sys.stderr,
          flush=True)
    try:
        with ticking("check --trace"):
            result = check_traces(
                args.trace, keep=args.keep, allow_bug=args.allow_bug, jobs=args.jobs,
                window=args.window,
            )
    except (TlcError, TraceFormatError) as exc:
        _write_json(args.json, {"result": "error", "reason": str(exc)})
        return _err(str(exc))
    _print_trace_result(result)
    _write_json(args.json, result.to_json())
    return {"accepted": EXIT_OK, "rejected": EXIT_VIOLATION}.get(result.result, EXIT_ERROR)


def _cmd_check(args: argparse.Namespace) -> int:
    if args.trace:
        return _cmd_check_traces(args)
    if args.jobs is not None or args.window is not None:
        return _err("--jobs and --window only apply to --trace")
    if args.allow_bug:
        print("hisparse: error: --allow-bug only applies to --trace", file=sys.stderr)
        return EXIT_ERROR
    if args.list_bugs:
        width = max(len(b.name) for b in BUGS)
        cwidth = max(len(b.catches) for b in BUGS)
        for b in BUGS:
            print(f"{b.name:<{width}}  {b.catches:<{cwidth}}  {b.summary}")
        return EXIT_OK
    what = f"model {args.model}" + (f" with bug {args.inject}" if args.inject else "")
    print(f"check: {what}", file=sys.stderr, flush=True)
    try:
        with ticking("check"):
            report = check_model(
                args.model, inject=args.inject, workers=args.workers, echo=args.verbose,
                keep=args.keep, progress=_progress,
            )
    except TlcError as exc:
        # CI reads the file: an error must leave one too
        _write_json(args.json, {"result": "error", "reason": str(exc), "model": args.model,
                                "injected": args.inject})
        raise
    _print_report(report)
    _write_json(args.json, report.to_json())
    if args.inject:
        return EXIT_OK if report.caught_expected else EXIT_VIOLATION
    return _EXIT_FOR[report.result]


# --- docs --------------------------------------------------------------------------------


def _register_docs(sub: SubParsers) -> None:
    p = _sub(sub, "docs", "regenerate docs/ files derived from the code (in a checkout)")
    p.add_argument("--check", action="store_true", help="only report stale files (exit 1)")


def _cmd_docs(args: argparse.Namespace) -> int:
    root = docs.checkout_root()
    if root is None:
        return _err("hisparse docs writes into a source checkout; this hisparse is installed "
                    "from a wheel (run it from `pip install -e .` in a clone)")
    if args.check:
        stale = docs.stale(root)
        for rel in stale:
            print(f"stale: {rel}")
        return EXIT_VIOLATION if stale else EXIT_OK
    for rel in docs.write(root):
        print(f"wrote {rel}")
    return EXIT_OK


# --- simulate ----------------------------------------------------------------------------


def _register_simulate(sub: SubParsers) -> None:
    from hisparse.executors import EXECUTORS
    from hisparse.simulate import BACKINGS, DEFAULT_MOONCAKE, SimulateOptions
    from hisparse.workload import WORKLOADS

    d = SimulateOptions()
    p = _sub(sub, "simulate", "run a decode workload through the whole system",
             description="Run a decode workload (synthetic, or the Mooncake trace replayed) "
             "through coordinator, connector, worker and executor; print the sizes, then "
             "rates with units.")
    w = p.add_argument_group("workload")
    w.add_argument("--workload", choices=WORKLOADS, default=d.workload,
                   help="synthetic requests, or a Mooncake trace (PATH)")
    w.add_argument("path", nargs="?", type=in_file, metavar="PATH",
                   help=f"the Mooncake trace (JSON Lines); default {DEFAULT_MOONCAKE}")
    w.add_argument("--requests", type=positive_int, default=d.requests,
                   help="synthetic: requests to generate; mooncake: the first N of the trace")
    w.add_argument("--steps", type=positive_int, default=None,
                   help="at most this many decode steps (the run ends when all is done) "
                   f"(default: {d.steps})")
    w.add_argument("--seed", type=nonneg_int, default=d.seed,
                   help="seed of the workload, top-K draws, aborts and ack timing")
    w.add_argument("--arrival-rate", type=positive_float, default=d.arrival_rate,
                   help="synthetic: mean arrivals per step")
    w.add_argument("--time-compression", type=positive_float, default=d.time_compression,
                   help="mooncake: trace time runs this many times faster (one step is "
                   "30 ms of compressed trace time)")
    w.add_argument("--max-decode", type=positive_int, default=None,
                   help="mooncake: cap on decode steps per request (unset: as traced)")
    w.add_argument("--abort-rate", type=probability, default=None,
                   help="chance per step that a running request is aborted (default: "
                   f"{d.abort_rate} synthetic, 0 mooncake: the trace has no aborts)")
    w.add_argument("--worker-restarts", type=nonneg_int, default=d.worker_restarts,
                   metavar="K", help="lose the worker K times at seeded steps (restart, "
                   "and maybe that step's connector metadata); recovery through the "
                   "public API, invariants still checked (default: 0, none)")
    w.add_argument("--message-faults", type=fault_rate, default=d.message_faults,
                   metavar="RATE", help="chance per message of each channel fault: "
                   "duplicated, delayed (after the next) or dropped, both directions, "
                   "seeded; at most 1/3 (default: 0, none)")
    z = p.add_argument_group("sizes")
    z.add_argument("--gpu-blocks", type=positive_int, default=None,
                   help=f"GPU KV blocks in the pool (default: {d.gpu_blocks}; mooncake: "
                   "twice the longest request's pages, so the trace is admitted)")
    host = z.add_mutually_exclusive_group()
    host.add_argument("--host-blocks", type=positive_int, default=None,
                      help=f"host blocks in the pool (default: {d.host_blocks}; mooncake: "
                      "four times the GPU pool)")
    host.add_argument("--host-gib", type=positive_float, default=None,
                      help="host pool in GiB, rounded down to whole blocks (overrides "
                      "--host-blocks)")
    z.add_argument("--block-tokens", type=positive_int, default=d.block_tokens,
                   help="tokens per KV block (mooncake: must divide 512)")
    z.add_argument("--row-bytes", type=positive_int, default=d.row_bytes,
                   help="bytes per KV row per layer (multiple of 16; DeepSeek-V3.2: 656)")
    z.add_argument("--top-k", type=positive_int, default=d.top_k,
                   help="positions attended per decode step")
    z.add_argument("--layers", type=positive_int, default=d.layers,
                   help="layers (layer 1 shares layer 0's indexer)")
    z.add_argument("--max-running", type=positive_int, default=None,
                   help=f"requests decoding at once (hot-state slots) (default: {d.concurrency})")
    z.add_argument("--speculative", type=nonneg_int, default=d.num_speculative_tokens,
                   help="extra verification steps resolved per request per decode")
    x = p.add_argument_group("indexer offload")
    x.add_argument("--indexer-offload", action="store_true",
                   help="give every page indexer keys (FP8 + scales) in their own GPU "
                   "group, stored and restored by an OffloadingConnector under a "
                   "MultiConnector with HiSparse; admission applies the suffix rule")
    x.add_argument("--offload-blocks", type=positive_int, default=d.offload_blocks,
                   help="blocks in the OffloadingConnector's host store")
    x.add_argument("--indexer-gpu-blocks", type=positive_int, default=None,
                   help="GPU blocks of the indexer group (default: --gpu-blocks)")
    i = p.add_argument_group("P/D import")
    i.add_argument("--pd-share", type=probability, default=d.pd_share, metavar="F",
                   help="share of requests that arrive with prefill KV from a prefiller "
                   "(landing in GPU pages or the host tier, chosen once) (default: 0, none)")
    i.add_argument("--transport", choices=("loopback", "nixl"), default=d.transport,
                   help="how imported KV moves: in this process (loopback), or from a "
                   "prefiller process over NIXL")
    i.add_argument("--staging-slots", type=positive_int, default=d.staging_slots,
                   help="pages the worker's staging pool holds (host-target imports)")
    r = p.add_argument_group("run and output")
    r.add_argument("--executor", choices=EXECUTORS, default=None,
                   help="reference (NumPy, runs anywhere), cuda (CuPy, NVIDIA GPU) or "
                   "accounting (hot rows and LRU exactly, no bytes) (default: "
                   f"{d.executor}; accounting with --model)")
    r.add_argument("--worker-processes", action="store_true",
                   help="run each worker in its own process: connector metadata, acks and "
                   "decode results cross a pipe as bytes (same report and trace)")
    r.add_argument("--tp", type=positive_int, default=d.tp, metavar="W",
                   help="tensor-parallel ranks: W workers, each in its own process, every "
                   "rank's acks to the coordinator, every rank's rows checked (default 1)")
    r.add_argument("--backing", choices=BACKINGS, default=d.backing,
                   help="host pool per rank (private), or one shared-memory allocation "
                   "that only rank 0 copies into and the other ranks read (shared)")
    r.add_argument("--no-check", action="store_true",
                   help="skip the invariant checks after every protocol action (faster)")
    r.add_argument("--json", type=out_path, metavar="PATH",
                   help="write the figures, rates and per-step series as JSON")
    r.add_argument("--plot", type=out_path, metavar="PATH",
                   help="write a PNG of occupancy, hit rates, bytes and requests per step")
    r.add_argument("--trace", type=out_path, metavar="PATH",
                   help="record the protocol trace (for hisparse check --trace)")
    r.add_argument("--metrics-port", type=port, default=None, metavar="PORT",
                   help="serve Prometheus metrics on 127.0.0.1:PORT during the run (0: any)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    from hisparse.sizing.cli import add_model_arguments

    add_model_arguments(p)


def _simulate_options(args: argparse.Namespace) -> Any:
    from hisparse.config import blocks_in
    from hisparse.simulate import DEFAULT_MOONCAKE, SimulateOptions

    path = args.path
    if args.workload == "mooncake" and path is None:
        path = in_file(str(DEFAULT_MOONCAKE))
    elif args.workload == "synthetic" and path is not None:
        raise argparse.ArgumentTypeError("PATH is only for --workload mooncake")
    d = SimulateOptions()
    if args.gpu_kv_gib is not None:
        raise argparse.ArgumentTypeError("--gpu-kv-gib sizes a --model's pools: add --model")
    block_bytes = args.block_tokens * args.row_bytes * args.layers
    gpu_blocks, host_blocks = args.gpu_blocks, args.host_blocks
    if args.workload == "mooncake" and (gpu_blocks is None or host_blocks is None):
        from hisparse.simulate import build_workload
        from hisparse.sizing.toy import admitting_pools

        shape = SimulateOptions(workload="mooncake", workload_path=path, requests=args.requests,
                                block_tokens=args.block_tokens, max_decode=args.max_decode)
        gpu_default, host_default = admitting_pools(build_workload(shape))
        gpu_blocks = gpu_default if gpu_blocks is None else gpu_blocks
        host_blocks = host_default if host_blocks is None else host_blocks
    gpu_blocks = d.gpu_blocks if gpu_blocks is None else gpu_blocks
    host_blocks = d.host_blocks if host_blocks is None else host_blocks
    if args.host_gib is not None:
        host_blocks = blocks_in(args.host_gib, block_bytes)
        if host_blocks < 1:
            raise argparse.ArgumentTypeError(
                f"--host-gib {args.host_gib} holds no whole {block_bytes}-byte host block")
    return SimulateOptions(
        requests=args.requests, steps=args.steps if args.steps is not None else d.steps,
        seed=args.seed, workload=args.workload,
        workload_path=path, arrival_rate=args.arrival_rate,
        time_compression=args.time_compression, max_decode=args.max_decode,
        abort_rate=args.abort_rate if args.abort_rate is not None
        else d.abort_rate if args.workload == "synthetic" else 0.0,
        gpu_blocks=gpu_blocks, host_blocks=host_blocks,
        block_tokens=args.block_tokens, row_bytes=args.row_bytes, top_k=args.top_k,
        layers=args.layers, num_speculative_tokens=args.speculative,
        concurrency=args.max_running if args.max_running is not None else d.concurrency,
        executor=args.executor or d.executor, check=not args.no_check, trace=args.trace,
        worker_restarts=args.worker_restarts, message_faults=args.message_faults,
        tp=args.tp, backing=args.backing,
        worker_processes=args.worker_processes or args.tp > 1,
        indexer_offload=args.indexer_offload, offload_blocks=args.offload_blocks,
        indexer_gpu_blocks=args.indexer_gpu_blocks,
        pd_share=args.pd_share, transport=args.transport, staging_slots=args.staging_slots,
    )


def _cmd_simulate(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from hisparse.config import refusal_line
    from hisparse.indexer_sim import indexer_lines
    from hisparse.report import (
        ReportError,
        check_plot_available,
        dumps,
        header_lines,
        plot,
        result_lines,
    )
    from hisparse.simulate import SimulateOptions, make_simulation, report_json
    from hisparse.workload import WorkloadError

    if args.model is not None:  # a sizing replay: HiSparse on and off, side by side
        from hisparse.sizing.cli import run_model_simulate

        d = SimulateOptions()
        if (args.pd_share or args.transport != d.transport
                or args.staging_slots != d.staging_slots):
            return _err("--model replays the trace's prompts as prefilled here: drop "
                        "--pd-share, --transport and --staging-slots")
        return run_model_simulate(args, {
            "gpu_blocks": None, "host_blocks": None, "block_tokens": d.block_tokens,
            "row_bytes": d.row_bytes, "top_k": d.top_k, "layers": d.layers})
    metrics = None
    try:  # everything that can be refused is refused here, before the run
        opts = _simulate_options(args)
        if args.plot is not None:
            check_plot_available()
        sim = make_simulation(opts)
        if args.metrics_port is not None:
            from hisparse.metrics import HiSparseMetrics

            metrics = sim.metrics = HiSparseMetrics(sim.config)
            bound = metrics.serve(args.metrics_port)
            print(f"metrics: http://127.0.0.1:{bound}/metrics", file=sys.stderr, flush=True)
    except argparse.ArgumentTypeError as exc:
        return _err(str(exc))
    except ValidationError as exc:
        return _err(refusal_line(exc))
    except (WorkloadError, ReportError, ExecutorError, ValueError, RuntimeError) as exc:
        return _err(str(exc))  # bad trace, no matplotlib/prometheus, no CuPy or GPU
    for line in header_lines(sim.report.sizes):
        print(line, flush=True)
    start = time.monotonic()
    try:
        rep = sim.run(progress=not args.no_progress)
    finally:
        if metrics is not None:
            metrics.close()
    print(f"ran in {time.monotonic() - start:.1f} s", file=sys.stderr)
    doc = report_json(rep)
    for line in result_lines(doc) + indexer_lines(rep.indexer):
        print(line)
    if args.json is not None:
        args.json.write_text(dumps(doc))
    if args.plot is not None:
        plot(doc, args.plot)
        print(f"plot: {args.plot}")
    return EXIT_OK if rep.violations == 0 and rep.data_mismatches == 0 else EXIT_VIOLATION


# --- plan --------------------------------------------------------------------------------


def _register_plan(sub: SubParsers) -> None:
    from hisparse.sizing.cli import add_plan_arguments

    add_plan_arguments(_sub(
        sub, "plan", "size HiSparse from a model's geometry and budgets alone (instant)",
        description="From the model's published geometry, a GPU KV budget and a host pool: "
        "the steady-state concurrency bound with and without HiSparse per context length, "
        "the host pool that many requests need, and the minimum host blocks for the longest "
        "context. Refuses (exit 2) a host pool above 95% of the machine's RAM or one that "
        "cannot hold a single longest request."))


def _cmd_plan(args: argparse.Namespace) -> int:
    from hisparse.sizing.cli import run_plan

    return run_plan(args)


# --- report ------------------------------------------------------------------------------


def _register_report(sub: SubParsers) -> None:
    p = _sub(sub, "report", "print (and plot) a saved hisparse simulate --json run")
    p.add_argument("run", type=in_file, metavar="RUN.json", help="a simulate --json file")
    p.add_argument("--plot", type=out_path, metavar="PATH", help="write the run's PNG")


def _cmd_report(args: argparse.Namespace) -> int:
    from hisparse.report import ReportError, check_plot_available, lines, load, plot

    try:
        doc = load(args.run)
        if args.plot is not None:
            check_plot_available()
    except ReportError as exc:
        return _err(str(exc))
    for line in lines(doc):
        print(line)
    if args.plot is not None:
        plot(doc, args.plot)
        print(f"plot: {args.plot}")
    return EXIT_OK


# --- bench -------------------------------------------------------------------------------


def _register_bench(sub: SubParsers) -> None:
    p = _sub(sub, "bench", "run a benchmark and print its figures")
    targets = p.add_subparsers(dest="target", required=True, metavar="TARGET",
                               parser_class=_Parser,
                               help="what to measure (hisparse bench TARGET --help)")
    for name, target in BENCH_TARGETS.items():
        t = _sub(targets, name, target.help)
        target.add_arguments(t)
        t.add_argument("--json", type=out_path, metavar="PATH", help="write the figures as JSON")


def _cmd_bench(args: argparse.Namespace) -> int:
    print(f"bench {args.target}: running ...", file=sys.stderr, flush=True)
    try:
        with ticking(f"bench {args.target}"):
            doc = BENCH_TARGETS[args.target].main(args)
    except (ExecutorError, TransportError) as exc:  # no CuPy / GPU; no NIXL
        return _err(str(exc))
    except BenchFailed as exc:
        print(f"hisparse: violation: {exc}", file=sys.stderr)
        return EXIT_VIOLATION
    _write_json(args.json, doc)
    return EXIT_OK


COMMANDS: dict[str, tuple[Callable[[SubParsers], None], Handler]] = {
    "setup": (_register_setup, _cmd_setup),
    "check": (_register_check, _cmd_check),
    "simulate": (_register_simulate, _cmd_simulate),
    "plan": (_register_plan, _cmd_plan),
    "report": (_register_report, _cmd_report),
    "bench": (_register_bench, _cmd_bench),
    "docs": (_register_docs, _cmd_docs),
}


def build_parser() -> argparse.ArgumentParser:
    """The full parser; subcommands come from ``COMMANDS``."""
    parser = _Parser(prog="hisparse", description=DESCRIPTION, epilog=EPILOG,
                     formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"hisparse {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=_Parser,
                                help="what to run (hisparse COMMAND --help)")
    for register, _ in COMMANDS.values():
        register(sub)
    return parser


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextmanager
def _scratch() -> Iterator[Path]:
    """Every temporary folder of this run lives under one ``hisparse-*`` folder, which an
    interrupt removes whole; otherwise it stays only if a failed check kept its logs."""
    root = Path(tempfile.mkdtemp(prefix="hisparse-"))
    before, tempfile.tempdir = tempfile.tempdir, str(root)
    try:
        yield root
    except BaseException:  # KeyboardInterrupt, SystemExit from SIGTERM
        with held():  # a second Ctrl-C waits until the folder is gone
            shutil.rmtree(root, ignore_errors=True)
        raise
    finally:
        tempfile.tempdir = before
        if root.is_dir() and not any(root.iterdir()):
            root.rmdir()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (0 ok, 1 violation, 2 error)."""
    args = build_parser().parse_args(argv)
    # SIGTERM (CI timeouts, `timeout`) unwinds like Ctrl-C so running TLC jobs are stopped.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    try:
        with _scratch():
            return COMMANDS[args.command][1](args)
    except TlcError as exc:
        return _err(str(exc))
    except KeyboardInterrupt:
        print("hisparse: interrupted; temporary folders removed", file=sys.stderr)
        return 130
    except Interrupted as exc:  # (seen first by a helper thread)
        print("hisparse: interrupted; temporary folders removed", file=sys.stderr)
        return 128 + exc.signum
    except BrokenPipeError:  # `hisparse ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
