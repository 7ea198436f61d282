"""``hisparse bench TARGET``: one subcommand per benchmark.

A target is a ``BenchTarget`` in ``TARGETS``: a help line, the flags it takes, and a
``main`` that runs it, prints its figures and returns the JSON document (``--json`` is
added to every target and written by the CLI). Adding a target is a module with those
two functions and one line here, e.g.::

    "churn": BenchTarget("...", churn.add_arguments, churn.main),
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hisparse.cliargs import csv_of, positive_float, positive_int


class BenchFailed(Exception):
    """A benchmark ran but found its own result wrong (exit 1: a violation)."""


@dataclass(frozen=True)
class BenchTarget:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    main: Callable[[argparse.Namespace], dict[str, Any]]


# -- protocol -------------------------------------------------------------------------


def _protocol_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lifecycles", type=positive_int, default=5000,
                   help="spill lifecycles to time")
    p.add_argument("--requests", type=positive_int, default=256,
                   help="other requests held resident while timing")


def _protocol(args: argparse.Namespace) -> dict[str, Any]:
    from hisparse.bench import protocol

    figures = protocol.run(args.lifecycles, args.requests)
    for mode in ("check_off", "check_on"):
        per = figures[f"per_action_us_{mode}"]
        print(f"per action, invariants {mode.replace('_', ' ')} (µs):")
        for name, us in per.items():
            print(f"  {name:<15} {us:9.2f}")
        print(f"  {'lifecycle':<15} {figures[f'lifecycle_us_{mode}']:9.2f}")
    print(f"transitions trigger   {figures['transitions_trigger_us']:.2f} µs")
    print(f"compiled table lookup {figures['compiled_table_us']:.3f} µs")
    return figures


# -- coordinator ----------------------------------------------------------------------


def _coordinator_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=positive_int, default=256,
                   help="running requests held resident")
    p.add_argument("--lifecycles", type=positive_int, default=200,
                   help="spill lifecycles to time")


def _coordinator(args: argparse.Namespace) -> dict[str, Any]:
    from hisparse.bench import coordinator

    doc = coordinator.run(running=args.requests, lifecycles=args.lifecycles)
    for mode in ("check_off", "check_on"):
        f = doc[mode]
        print(f"invariants {mode.replace('_', ' ')}: spill lifecycle "
              f"{f['spill_lifecycle_us']:.1f} µs, idle decode step {f['idle_step_us']:.2f} µs"
              f" ({doc['running_requests']} running requests)")
    return doc


# -- resolver (GPU) -------------------------------------------------------------------


def _placements(text: str) -> tuple[str, ...]:
    from hisparse.bench.resolver import PLACEMENTS

    names = tuple(t.strip() for t in text.split(","))
    for name in names:
        if name not in PLACEMENTS:
            raise argparse.ArgumentTypeError(f"placement must be one of {PLACEMENTS}, got {name!r}")
    return names


def _resolver_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reps", type=positive_int, default=100, help="timed repetitions")
    p.add_argument("--batches", type=csv_of(positive_int), default=(1, 10, 100, 256),
                   help="batch sizes, comma-separated")
    p.add_argument("--miss-rates", type=csv_of(positive_float), default=(0.001, 0.2),
                   help="miss rates, comma-separated")
    p.add_argument("--no-torch", action="store_true", help="skip the unfused torch baseline")
    p.add_argument("--no-flush", action="store_true",
                   help="do not flush L2 between repetitions (warm caches)")
    p.add_argument("--placements", type=_placements, default=("random",),
                   help="host-row placements, comma-separated: random, request, interleaved")
    p.add_argument("--context", type=positive_int, default=32768,
                   help="tokens of each request's context (request / interleaved placement)")


def _resolver(args: argparse.Namespace) -> dict[str, Any]:
    from hisparse.bench import resolver

    doc = resolver.run(
        batches=tuple(int(b) for b in args.batches), miss_rates=tuple(args.miss_rates),
        reps=args.reps, with_torch=not args.no_torch, flush_l2=not args.no_flush,
        placements=tuple(args.placements), context=args.context,
    )
    print(f"{doc['environment']}\nbulk H2D {doc['bulk_h2d']['GBps']:.1f} GB/s")
    for s in doc["shapes"]:
        torch = (f" torch {s['torch_us']:9.1f} µs ({s['speedup_vs_torch']:5.1f}x,"
                 f" agrees={s['torch_agrees']})" if "torch_us" in s else "")
        unsorted = (f" | unsorted {s['fused_unsorted_GBps']:5.1f} GB/s"
                    if "fused_unsorted_us" in s else "")
        print(f"B={s['batch']:<4} miss={s['miss_rate']:<6} {s['placement']:<11} fused "
              f"{s['fused_us']:8.1f} µs {s['fused_GBps']:6.1f} GB/s | gather "
              f"{s['gather_us']:8.1f} µs ({s['fraction_of_gather']:.0%} of it), in address "
              f"order {s['gather_sorted_GBps']:5.1f} GB/s{unsorted}{torch}")
        print("       phases (block 0, µs): " + ", ".join(
            f"{k} {v:.1f}" for k, v in s["phases_us"].items()))
        print(f"       floors (µs): empty launch {s['floors_us']['launch_us']:.1f}, "
              f"claim and release only {s['floors_us']['claim_us']:.1f}")
    return doc


# -- spill (GPU) ----------------------------------------------------------------------


def _spill_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reps", type=positive_int, default=100, help="timed repetitions")


def _spill(args: argparse.Namespace) -> dict[str, Any]:
    from hisparse.bench import spill

    doc = spill.run(reps=args.reps)
    print(doc["environment"])
    for s in doc["shapes"]:
        print(f"{s['blocks']:5} blocks {s['bytes'] / 1e6:7.1f} MB: spill {s['spill_GBps']:5.1f}"
              f" GB/s, bulk D2H {s['bulk_d2h_GBps']:5.1f} GB/s "
              f"({s['fraction_of_bulk']:.0%}); "
              f"per-block memcpy {s['memcpy_per_block_us']:.0f} µs; host enqueue "
              f"{s['enqueue_host_us']:.0f} µs ({s['enqueue_host_us_per_block']:.2f} µs/block)")
    return doc


# -- engine (GPU) ---------------------------------------------------------------------


def _engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget-gib", type=positive_float, default=40.0,
                   help="KV HBM budget for the largest-batch figure")


def _engine(args: argparse.Namespace) -> dict[str, Any]:
    from hisparse.bench import engine

    doc = engine.run(budget_gib=args.budget_gib)  # prints as it goes
    if args.json is not None:  # the plot goes beside the JSON
        engine.plot(doc, str(args.json.with_suffix(".png")))
    return doc


def _equal_hbm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--budget-gib", type=positive_float, default=6.0,
                   help="HBM beyond the weights each engine gets (at 6 the engine that keeps "
                        "every row on the GPU holds about 7 requests of 128k at 8 layers)")
    p.add_argument("--layers", type=positive_int, default=8, help="decoder layers")
    p.add_argument("--contexts", type=_ints_upto(MAX_POSITIONS), default=(131072, 32768),
                   help="context lengths, comma-separated")
    p.add_argument("--sharing", type=_sharings, default=("v3.2", "glm-5.2"),
                   help="index sharings, comma-separated: v3.2 (every layer owns its "
                        "indexer), glm-5.2 (followers replay a leader's plan)")
    p.add_argument("--drift", type=positive_float, default=0.008,
                   help="fraction of each top-K that moves every step")
    p.add_argument("--steps", type=positive_int, default=20, help="timed steps per run")
    p.add_argument("--attention", choices=("fused", "torch"), default="fused",
                   help="sparse MLA attention: the fused Triton kernel or the torch path")
    p.add_argument("--tiling", type=_tiling, default=None,
                   help="the fused kernel's HEADS,ROWS,WARPS,STAGES (default: "
                        "hisparse.engine.tiling.pick_tiling by the batch)")
    p.add_argument("--scan-tiles", type=positive_int, default=None,
                   help="key tiles per program of the FP8 indexer scan (default: "
                        "hisparse.engine.indexer.SCAN_TILES)")
    p.add_argument("--host-gib", type=positive_float, default=None,
                   help="pinned host memory HiSparse's pool may take (default: no bound); "
                        "its largest batch is the smaller of this bound and the HBM one")
    p.add_argument("--prefill-chunk", type=positive_int, default=None,
                   help="prompt positions per prefill launch; its temporaries count "
                        "against the budget (default: hisparse.bench.equalhbm.PREFILL_CHUNK)")
    p.add_argument("--curve", choices=("full", "largest"), default="full",
                   help="batches timed per engine: full (1, the largest and one between) "
                        "or largest (the largest alone)")
    p.add_argument("--no-same-batch", action="store_true",
                   help="skip all-resident at HiSparse's largest batch outside the budget")


def _tiling(text: str) -> Any:
    from hisparse.engine.tiling import FusedTiling

    vals = _ints(text)
    if len(vals) != 4 or any(v & (v - 1) for v in vals[:2]) or vals[0] < 16 or vals[1] < 16:
        raise argparse.ArgumentTypeError(
            f"expected HEADS,ROWS,WARPS,STAGES with HEADS and ROWS powers of 2 of at least "
            f"16, got {text!r}")
    return FusedTiling(heads=vals[0], rows=vals[1], warps=vals[2], stages=vals[3])


MAX_ENTRIES = 4096
"""Most entries one engine-kernels call times (a larger one only runs out of memory)."""
MAX_POSITIONS = 1 << 21
"""Most positions of a context (2M: beyond every model this engine has the geometry of)."""


def _ints(text: str, most: int | None = None) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers separated by commas, got "
                                         f"{text!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    if most is not None and max(out) > most:
        raise argparse.ArgumentTypeError(f"expected integers of at most {most}, got {text!r}")
    return out


def _ints_upto(most: int) -> Callable[[str], tuple[int, ...]]:
    """``_ints`` with an upper bound (the bound is in the error)."""
    return lambda text: _ints(text, most)


def _int_upto(most: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        n = positive_int(text)
        if n > most:
            raise argparse.ArgumentTypeError(f"must be at most {most}, got {n}")
        return n

    return parse


def _sharings(text: str) -> tuple[str, ...]:
    from hisparse.engine.geometry import SHARING

    out = tuple(x.strip() for x in text.split(","))
    if not out or any(x not in SHARING for x in out):
        raise argparse.ArgumentTypeError(f"expected some of {', '.join(SHARING)}, got "
                                         f"{text!r}")
    return out


def _equal_hbm(args: argparse.Namespace) -> dict[str, Any]:
    import json

    from hisparse.bench import equalhbm

    def save(doc: dict[str, Any]) -> None:  # after every config: a cut-off run keeps some
        if args.json is not None:
            args.json.write_text(json.dumps(doc, indent=1, default=str))
            equalhbm.plot(doc, str(args.json.with_suffix(".png")))

    return equalhbm.run(budget_gib=args.budget_gib, contexts=args.contexts,
                        sharings=args.sharing, layers=args.layers, drift=args.drift,
                        steps=args.steps, on_config=save, attention=args.attention,
                        tiling=args.tiling, scan_tiles=args.scan_tiles,
                        host_gib=args.host_gib,
                        prefill_chunk=args.prefill_chunk or equalhbm.PREFILL_CHUNK,
                        curve=args.curve, same_batch=not args.no_same_batch)


# -- engine-kernels (GPU) ---------------------------------------------------------------


def _engine_kernels_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batches", type=_ints_upto(MAX_ENTRIES), default=(1, 8, 32),
                   help="entries per attention call, comma-separated")
    p.add_argument("--scan-batches", type=_ints_upto(MAX_ENTRIES), default=(1, 8, 32),
                   help="entries per indexer scan, comma-separated")
    p.add_argument("--positions", type=_int_upto(MAX_POSITIONS), default=132096,
                   help="positions each scan entry reads")
    p.add_argument("--reps", type=positive_int, default=20, help="timed calls per variant")


def _engine_kernels(args: argparse.Namespace) -> dict[str, Any]:
    from hisparse.bench import kernels

    return kernels.run(batches=args.batches, scan_batches=args.scan_batches,
                       positions=args.positions, reps=args.reps)


# -- churn ----------------------------------------------------------------------------


def _churn_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--requests", type=positive_int, default=100_000,
                   help="request lifecycles to run through the connector")
    p.add_argument("--host-blocks", type=positive_int, default=8192,
                   help="host pool of the churn run, in blocks")
    p.add_argument("--acks", type=_ack_shapes, default=("pipelined", "split"),
                   help="shapes of acks, comma-separated, each its own run of --requests "
                        "(the first is the headline): pipelined (one worker meta per "
                        "lifecycle: its enqueued ack and the previous copy's completed ack) "
                        "or split (the enqueued and the completed ack in two metas)")


def _ack_shapes(text: str) -> tuple[str, ...]:
    """A comma-separated list of churn ack shapes, none repeated."""
    from hisparse.bench.churn import ACK_SHAPES

    shapes = tuple(x.strip() for x in text.split(","))
    bad = [x for x in shapes if x not in ACK_SHAPES]
    if bad or len(set(shapes)) != len(shapes):
        raise argparse.ArgumentTypeError(
            f"expected distinct shapes from {', '.join(ACK_SHAPES)}, got {text!r}"
        )
    return shapes


def _churn(args: argparse.Namespace) -> dict[str, Any]:
    from hisparse.bench import churn

    doc = churn.run(args.requests, host_blocks=args.host_blocks, acks=args.acks)
    for key, value in doc.items():
        print(f"{key:<34} {value}")
    if doc["left_after_drain"]:
        raise BenchFailed(f"state left after the drain: {doc['left_after_drain']}")
    return doc


# -- tensor-parallel ranks (GPUs) -----------------------------------------------------


def _tp_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ranks", type=positive_int, default=2, help="ranks (one GPU each)")
    p.add_argument("--transport", choices=("torch", "pipe"), default="torch",
                   help="rendezvous: torch.distributed (gloo) or multiprocessing pipes")


def _tp(args: argparse.Namespace) -> dict[str, Any]:
    from hisparse.bench import tp

    doc = tp.run(ranks=args.ranks, transport=args.transport)
    print(doc["environment"])
    for line in tp.lines(doc):
        print(line)
    bad = {name: r["mismatches"] for name, r in doc["runs"].items() if r["mismatches"]}
    if bad:
        raise BenchFailed(f"resolved rows differ from the oracle: {bad}")
    return doc


# -- nixl (CPU: host to host between two processes) -----------------------------------


def _nixl_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mib", type=positive_int, default=256, help="MiB of pages to READ")
    p.add_argument("--page-kib", type=positive_int, default=64, help="KiB per page")
    p.add_argument("--chunk-pages", type=positive_int, default=64, help="pages per NIXL READ")
    p.add_argument("--reps", type=positive_int, default=5, help="timed repetitions")
    p.add_argument("--staging-slots", type=int, default=0,
                   help="also import the pages through the import runner over a staging "
                        "pool of this many page slots (0: not measured)")


def _nixl(args: argparse.Namespace) -> dict[str, Any]:
    from hisparse.bench import nixl

    if args.staging_slots < 0:
        raise BenchFailed("--staging-slots must be 0 or more")
    doc = nixl.run(args.mib, args.page_kib, args.chunk_pages, args.reps, args.staging_slots)
    print(f"{doc['environment']}\n{doc['bytes']} bytes in {doc['pages']} pages: NIXL READ "
          f"{doc['nixl_GBps']:.2f} GB/s, memcpy {doc['memcpy_GBps']:.2f} GB/s "
          f"({doc['nixl_vs_memcpy']:.0%} of memcpy)")
    if "staged_import_GBps" in doc:
        print(f"staged import through {doc['staging_slots']} slots: "
              f"{doc['staged_import_GBps']:.2f} GB/s ({doc['staged_vs_memcpy']:.0%} of memcpy)")
    return doc


# -- pd-staging (GPU) -----------------------------------------------------------------


def _pd_staging_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pages", type=positive_int, default=128, help="pages imported per rep")
    p.add_argument("--layers", type=positive_int, default=4,
                   help="caches per page (one host block each)")
    p.add_argument("--block-tokens", type=positive_int, default=64, help="rows per block")
    p.add_argument("--row-bytes", type=csv_of(positive_int), default=(656, 8192),
                   help="bytes per row, comma-separated: one shape each (multiples of 16)")
    p.add_argument("--staging-slots", type=positive_int, default=64,
                   help="slots of the staging pool in VRAM (pages copied out per launch)")
    p.add_argument("--reps", type=positive_int, default=5, help="timed repetitions")


def _pd_staging(args: argparse.Namespace) -> dict[str, Any]:
    from hisparse.bench import pdstaging

    bad = [rb for rb in args.row_bytes if rb % 16]
    if bad:
        raise BenchFailed(f"--row-bytes must be multiples of 16, got {bad}")
    doc = pdstaging.run(pages=args.pages, layers=args.layers, block_tokens=args.block_tokens,
                        row_bytes=tuple(args.row_bytes), slots=args.staging_slots,
                        reps=args.reps)
    print(doc["environment"])
    for s in doc["shapes"]:
        print(f"{s['pages']} pages x {s['layers']} caches, blocks of "
              f"{s['block_bytes'] / 1024:.1f} KiB, {s['bytes'] / 1e6:.1f} MB, "
              f"{s['staging_slots']} slots: bulk D2H {s['bulk_d2h_GBps']:.1f} GB/s")
        for name in pdstaging.PATHS:
            f = s[name]
            print(f"  {name:<12} {f['GBps']:6.1f} GB/s device ({f['vs_bulk']:.0%} of bulk); "
                  f"host enqueue {f['enqueue_host_us_per_page']:.1f} µs/page; "
                  f"bytes equal {f['bytes_equal']}")
    if not doc["bytes_equal"]:
        raise BenchFailed("staged host blocks differ from the source pages")
    return doc


TARGETS: dict[str, BenchTarget] = {
    "protocol": BenchTarget("per-action cost of the protocol machine", _protocol_args,
                            _protocol),
    "coordinator": BenchTarget("scheduler-side cost of a spill lifecycle and an idle step",
                               _coordinator_args, _coordinator),
    "resolver": BenchTarget("CUDA resolver against same-run ceilings (NVIDIA GPU)",
                            _resolver_args, _resolver),
    "spill": BenchTarget("CUDA spill copies against bulk D2H (NVIDIA GPU)", _spill_args,
                         _spill),
    "churn": BenchTarget("request lifecycles through the connector: cost by decile, RSS",
                         _churn_args, _churn),
    "engine": BenchTarget("decode step time and KV HBM, HiSparse vs all-resident (NVIDIA GPU)",
                          _engine_args, _engine),
    "equal-hbm": BenchTarget("decode tokens/s at equal HBM by allocation, V3.2 geometry "
                             "(NVIDIA GPU)", _equal_hbm_args, _equal_hbm),
    "engine-kernels": BenchTarget("the step's attention and indexer-scan kernels, A/B "
                                  "(NVIDIA GPU)", _engine_kernels_args, _engine_kernels),
    "tp": BenchTarget("tensor-parallel ranks, private vs shared host backing (NVIDIA GPUs)",
                      _tp_args, _tp),
    "nixl": BenchTarget("NIXL host-to-host READ between two processes vs memcpy (CPU)",
                        _nixl_args, _nixl),
    "pd-staging": BenchTarget("P/D import staging in VRAM -> pinned host blocks vs bulk D2H "
                              "(NVIDIA GPU)", _pd_staging_args, _pd_staging),
}
