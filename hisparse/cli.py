"""The ``hisparse`` command line.

Each subcommand is a ``(register, handler)`` pair in ``COMMANDS`` so later ones
(``simulate``, ``bench``) slot in without touching the others.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from hisparse import docs
from hisparse.bugs import BUGS
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
from hisparse.tracecheck import TraceCheckResult, check_traces

EXIT_OK, EXIT_VIOLATION, EXIT_ERROR = 0, 1, 2
_EXIT_FOR = {"ok": EXIT_OK, "violation": EXIT_VIOLATION, "error": EXIT_ERROR}

Handler = Callable[[argparse.Namespace], int]


# --- setup -------------------------------------------------------------------------------


def _register_setup(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser("setup", help="fetch and verify the pinned TLC jar (Maven)")


def _cmd_setup(args: argparse.Namespace) -> int:
    install = ensure_tlc()
    print(f"artifact  {ARTIFACT}")
    print(f"jar       {install.jar}")
    print(f"version   {probe_version(install)}")
    print(f"sha256    {install.sha256} (verified)")
    return EXIT_OK


# --- check -------------------------------------------------------------------------------


def _register_check(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("check", help="model-check the TLA+ spec with TLC")
    p.add_argument("--model", choices=MODELS, default="ci", help="model size (default: ci)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write the report as JSON")
    p.add_argument(
        "--inject",
        metavar="NAME",
        choices=[b.name for b in BUGS],
        help="turn on an injected bug and check that TLC catches it",
    )
    p.add_argument("--list-bugs", action="store_true", help="list injectable bugs and exit")
    p.add_argument("--workers", default="auto", help="TLC worker threads (default: auto)")
    p.add_argument("--verbose", "-v", action="store_true", help="stream TLC output to stderr")
    p.add_argument("--keep", action="store_true", help="keep the scratch dir even on success")
    p.add_argument(
        "--trace",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="validate JSON Lines traces against the spec instead of exploring a model",
    )


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
        row("caught", "yes" if r.caught_expected else "NO: the expected check did not fire")
    print("runs:")
    for run in r.runs:
        name = f"{run.module}/{run.cfg}"
        figures = (
            f"{run.distinct_states:>12,} distinct {run.states_generated:>12,} generated"
            f"  depth {run.depth:<4} {run.seconds:7.1f} s"
        )
        caught = f"  violated {', '.join(run.violated)}" if run.violated else ""
        print(f"  {name:<40} {run.result:<9} {figures}{caught}")
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
        if f.verdict != "accepted":
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
        print(
            "hisparse: error: --trace cannot be combined with --inject/--list-bugs", file=sys.stderr
        )
        return EXIT_ERROR
    try:
        result = check_traces(args.trace, keep=args.keep)
    except (TlcError, TraceFormatError) as exc:
        _write_json(args.json, {"result": "error", "reason": str(exc)})
        print(f"hisparse: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    _print_trace_result(result)
    _write_json(args.json, result.to_json())
    return EXIT_OK if result.accepted else EXIT_VIOLATION


def _cmd_check(args: argparse.Namespace) -> int:
    if args.trace:
        return _cmd_check_traces(args)
    if args.list_bugs:
        width = max(len(b.name) for b in BUGS)
        cwidth = max(len(b.catches) for b in BUGS)
        for b in BUGS:
            print(f"{b.name:<{width}}  {b.catches:<{cwidth}}  {b.summary}")
        return EXIT_OK
    workers: int | str = int(args.workers) if str(args.workers).isdigit() else args.workers
    try:
        report = check_model(
            args.model, inject=args.inject, workers=workers, echo=args.verbose, keep=args.keep
        )
    except TlcError as exc:
        if args.json is not None:  # CI reads the file: an error must leave one too
            doc = {
                "result": "error",
                "reason": str(exc),
                "model": args.model,
                "injected": args.inject,
            }
            args.json.write_text(json.dumps(doc, indent=2) + "\n")
        raise
    _print_report(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return _EXIT_FOR[report.result]


# --- docs --------------------------------------------------------------------------------


def _register_docs(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("docs", help="regenerate docs/ files derived from the code")
    p.add_argument("--check", action="store_true", help="only report stale files (exit 1)")


def _cmd_docs(args: argparse.Namespace) -> int:
    if args.check:
        stale = docs.stale()
        for rel in stale:
            print(f"stale: {rel}")
        return EXIT_VIOLATION if stale else EXIT_OK
    for rel in docs.write():
        print(f"wrote {rel}")
    return EXIT_OK


# --- simulate ----------------------------------------------------------------------------


def _register_simulate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from hisparse.simulate import SimulateOptions

    d = SimulateOptions()
    p = sub.add_parser("simulate", help="run the synthetic decode workload end to end")
    p.add_argument("--executor", choices=["reference", "cuda"], default="reference",
                   help="reference (NumPy, runs anywhere) or cuda (CuPy, NVIDIA GPU)")
    p.add_argument("--requests", type=int, default=d.requests)
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--speculative", type=int, default=d.speculative,
                   help="extra verification steps resolved per request per decode")
    p.add_argument("--json", type=Path, metavar="PATH", help="write the figures as JSON")
    p.add_argument("--trace", type=Path, metavar="PATH",
                   help="record the protocol trace (for hisparse check --trace)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _cmd_simulate(args: argparse.Namespace) -> int:
    from hisparse.simulate import SimulateOptions, report_json, simulate

    opts = SimulateOptions(
        requests=args.requests, steps=args.steps, seed=args.seed,
        speculative=args.speculative, trace=args.trace, executor=args.executor,
    )
    try:
        rep = simulate(opts, progress=not args.no_progress)
    except ExecutorError as exc:  # CudaUnavailable: no CuPy / GPU; config errors
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    doc = report_json(rep)
    for key, value in doc.items():
        if key != "notes":
            print(f"{key:<17} {value:,}" if isinstance(value, int) else f"{key:<17} {value}")
    for note in rep.notes:
        print(f"note: {note}")
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return EXIT_OK if rep.violations == 0 and rep.data_mismatches == 0 else EXIT_VIOLATION


# --- bench -------------------------------------------------------------------------------


def _register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bench", help="run a benchmark and print its figures")
    p.add_argument("target", choices=["protocol", "coordinator", "resolver", "spill", "churn"],
                   help="what to measure (resolver and spill need an NVIDIA GPU)")
    p.add_argument("--lifecycles", type=int, default=5000, help="spill lifecycles to time")
    p.add_argument(
        "--requests", type=int, default=256,
        help="running requests held resident (churn: request lifecycles)",
    )
    p.add_argument("--json", type=Path, metavar="PATH", help="write the figures as JSON")
    p.add_argument("--reps", type=int, default=100, help="timed repetitions (GPU targets)")
    p.add_argument("--batches", default="1,10,100,256", help="resolver batch sizes")
    p.add_argument("--miss-rates", default="0.001,0.2", help="resolver miss rates")
    p.add_argument("--no-torch", action="store_true", help="skip the unfused torch baseline")
    p.add_argument("--no-flush", action="store_true",
                   help="do not flush L2 between repetitions (warm caches)")


def _cmd_bench_gpu(args: argparse.Namespace) -> int:
    if args.target == "resolver":
        from hisparse.bench import resolver

        doc = resolver.run(
            batches=tuple(int(b) for b in args.batches.split(",")),
            miss_rates=tuple(float(m) for m in args.miss_rates.split(",")),
            reps=args.reps, with_torch=not args.no_torch, flush_l2=not args.no_flush,
        )
        print(f"{doc['environment']}\nbulk H2D {doc['bulk_h2d']['GBps']:.1f} GB/s")
        for s in doc["shapes"]:
            torch = (f" torch {s['torch_us']:9.1f} µs ({s['speedup_vs_torch']:5.1f}x,"
                     f" agrees={s['torch_agrees']})" if "torch_us" in s else "")
            print(f"B={s['batch']:<4} miss={s['miss_rate']:<6} fused {s['fused_us']:8.1f} µs "
                  f"{s['fused_GBps']:6.1f} GB/s | gather {s['gather_us']:8.1f} µs "
                  f"({s['fraction_of_gather']:.0%} of it){torch}")
            print("       phases (block 0, µs): " + ", ".join(
                f"{k} {v:.1f}" for k, v in s["phases_us"].items()))
    else:
        from hisparse.bench import spill

        doc = spill.run(reps=args.reps)
        print(doc["environment"])
        for s in doc["shapes"]:
            print(f"{s['blocks']:5} blocks {s['bytes'] / 1e6:7.1f} MB: spill {s['spill_GBps']:5.1f}"
                  f" GB/s, bulk D2H {s['bulk_d2h_GBps']:5.1f} GB/s "
                  f"({s['fraction_of_bulk']:.0%}); "
                  f"per-block memcpy {s['memcpy_per_block_us']:.0f} µs")
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return EXIT_OK


def _cmd_bench(args: argparse.Namespace) -> int:
    from hisparse.bench import coordinator, protocol

    if args.target in ("resolver", "spill"):
        try:
            return _cmd_bench_gpu(args)
        except ExecutorError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_ERROR
    if args.target == "churn":
        from hisparse.bench import churn

        doc = churn.run(args.requests)
        for key, value in doc.items():
            print(f"{key:<34} {value}")
        if args.json is not None:
            args.json.write_text(json.dumps(doc, indent=2) + "\n")
        return EXIT_OK if not doc["left_after_drain"] else EXIT_VIOLATION
    if args.target == "coordinator":
        doc = coordinator.run(running=args.requests)
        for mode in ("check_off", "check_on"):
            f = doc[mode]
            print(f"invariants {mode.replace('_', ' ')}: spill lifecycle "
                  f"{f['spill_lifecycle_us']:.1f} µs, idle decode step {f['idle_step_us']:.2f} µs"
                  f" ({doc['running_requests']} running requests)")
        if args.json is not None:
            args.json.write_text(json.dumps(doc, indent=2) + "\n")
        return EXIT_OK

    figures = protocol.run(args.lifecycles, args.requests)
    for mode in ("check_off", "check_on"):
        per = figures[f"per_action_us_{mode}"]
        print(f"per action, invariants {mode.replace('_', ' ')} (µs):")
        for name, us in per.items():
            print(f"  {name:<15} {us:9.2f}")
        print(f"  {'lifecycle':<15} {figures[f'lifecycle_us_{mode}']:9.2f}")
    print(f"transitions trigger   {figures['transitions_trigger_us']:.2f} µs")
    print(f"compiled table lookup {figures['compiled_table_us']:.3f} µs")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return EXIT_OK


COMMANDS: dict[str, tuple[Callable[..., None], Handler]] = {
    "setup": (_register_setup, _cmd_setup),
    "check": (_register_check, _cmd_check),
    "docs": (_register_docs, _cmd_docs),
    "bench": (_register_bench, _cmd_bench),
    "simulate": (_register_simulate, _cmd_simulate),
}


def build_parser() -> argparse.ArgumentParser:
    """The full parser; subcommands come from ``COMMANDS``."""
    parser = argparse.ArgumentParser(prog="hisparse", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register, _ in COMMANDS.values():
        register(sub)
    return parser


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (0 ok, 1 violation, 2 error)."""
    args = build_parser().parse_args(argv)
    # SIGTERM (CI timeouts, `timeout`) unwinds like Ctrl-C so running TLC jobs are stopped.
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return COMMANDS[args.command][1](args)
    except TlcError as exc:
        print(f"hisparse: error: {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
