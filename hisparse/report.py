"""The ``hisparse simulate`` report: derived rates, the text a serving engineer reads, the plot.

Everything here works on the JSON document (``simulate.report_json``), so
``hisparse report RUN.json`` prints and plots a saved run exactly as the run did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

Doc = Mapping[str, Any]


class ReportError(ValueError):
    """A run document that cannot be reported on (not a ``simulate --json`` file)."""


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def rates(run: Any) -> dict[str, float]:
    """Rates derived from a run's counts and series (fractions are 0..1)."""
    d: Doc = asdict(run) if is_dataclass(run) and not isinstance(run, type) else run
    lookups = d["resident_hits"] + d["hot_hits"] + d["misses"]
    s, tokens, steps = d["series"], d["decoded_tokens"], d["steps"]
    return {
        "resident_hit_rate": _ratio(d["resident_hits"], lookups),
        "hot_hit_rate": _ratio(d["hot_hits"], lookups),
        "host_hit_rate": _ratio(d["misses"], lookups),
        "prefix_hit_rate": _ratio(d["prefix_hits"], d["pages_admitted"]),
        "h2d_bytes_per_token": _ratio(d["h2d_bytes"], tokens),
        "d2h_bytes_per_token": _ratio(d["d2h_bytes"], tokens),
        "spills_per_step": _ratio(d["spills"], steps),
        "tokens_per_step": _ratio(tokens, steps),
        "gpu_occupancy_mean": _ratio(_mean(s["gpu_blocks_used"]), d["gpu_blocks"]),
        "gpu_occupancy_peak": _ratio(max(s["gpu_blocks_used"], default=0), d["gpu_blocks"]),
        "host_occupancy_mean": _ratio(_mean(s["host_blocks_used"]), d["host_blocks"]),
        "host_occupancy_peak": _ratio(max(s["host_blocks_used"], default=0), d["host_blocks"]),
    }


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def lines(doc: Doc) -> list[str]:
    """The report as text, sizes first; each figure with its unit."""
    return header_lines(doc["sizes"]) + result_lines(doc)


def header_lines(z: Doc) -> list[str]:
    """What the run is: the workload and the sizes (printed before it starts)."""
    leaders = " ".join(str(x) for x in z["index_leaders"])
    return [
        f"workload     {z['workload']}: {z['requests']:,} requests, seed {z['seed']}",
        f"sizes        GPU {z['gpu_blocks']:,} blocks, host {z['host_blocks']:,} blocks "
        f"({_bytes(z['host_pool_bytes'])}), {z['block_tokens']} tokens/block, "
        f"{z['row_bytes']} B/row, {z['layers']} layers (index leaders {leaders}), "
        f"top-K {z['top_k']}, {z['hot_rows']} hot rows/request, max running "
        f"{z['max_running']}, speculative {z['speculative']}, abort rate "
        f"{z.get('abort_rate', 0)}/step, executor {z['executor']}",
        *([f"ranks        {z['tp_ranks']} tensor-parallel ranks, the same commands to each, "
           f"every rank's acks merged and rows checked; host pool "
           + ("private per rank" if z["backing"] == "private"
              else "one shared allocation (rank 0 copies, the others read after its events)")
           + "; hits and host->device bytes are rank 0's"]
          if "tp_ranks" in z else []),
    ]


def result_lines(doc: Doc) -> list[str]:
    """What the run did, each figure with its unit."""
    r = doc.get("rates") or rates(doc)
    checks = (
        f"invariants checked after each of {doc['invariant_checks']:,} protocol actions"
        if doc["sizes"].get("check", True) else "invariant checks off (--no-check)"
    )
    out = [
        f"steps        {doc['steps']:,} decode steps, {doc['decoded_tokens']:,} tokens decoded "
        f"({r['tokens_per_step']:.2f} tokens/step)",
        f"requests     {doc['requests']:,} arrived: {doc['finished']:,} finished, "
        f"{doc['aborted']:,} aborted, {doc['still_running']:,} still running at the end, "
        f"{doc['never_admitted']:,} never admitted ({doc['too_large']:,} larger than the GPU "
        f"pool" + (f", {doc['never_admitted'] - doc['too_large']:,} still waiting at the last "
                   "step" if doc['never_admitted'] > doc['too_large'] else "")
        + f"); {doc['not_arrived']:,} due after the last step",
        f"admissions   {doc['admissions_refused']:,} refused for want of GPU blocks "
        "(each started a reclaim)",
        f"top-K hits   {doc['resident_hits'] + doc['hot_hits'] + doc['misses']:,} lookups "
        f"(summed over leader layers): resident {_pct(r['resident_hit_rate'])}, "
        f"hot {_pct(r['hot_hit_rate'])}, host {_pct(r['host_hit_rate'])}",
        f"prefix hits  {_pct(r['prefix_hit_rate'])} of admitted pages served by published "
        f"host pages ({doc['prefix_hits']:,} of {doc['pages_admitted']:,})",
        f"host->device {_bytes(r['h2d_bytes_per_token'])}/token ({_bytes(doc['h2d_bytes'])})",
        f"device->host {_bytes(r['d2h_bytes_per_token'])}/token ({_bytes(doc['d2h_bytes'])})",
        f"spills       {r['spills_per_step']:.3f} pages/step ({doc['spills']:,} pages)",
        f"occupancy    GPU pool mean {_pct(r['gpu_occupancy_mean'])}, peak "
        f"{_pct(r['gpu_occupancy_peak'])}; host pool mean {_pct(r['host_occupancy_mean'])}, "
        f"peak {_pct(r['host_occupancy_peak'])}",
        f"checks       {checks}; {doc['violations']:,} violations, "
        + ("no bytes held (accounting executor): rows not compared"
           if doc["sizes"].get("executor") == "accounting" else
           f"{doc['data_mismatches']:,} data mismatches (every returned row compared)"),
    ]
    if doc.get("message_faults"):
        mf = doc["message_faults"]
        kinds = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in mf.items() if k != "gaps")
        out.append(f"channels     {kinds}; {mf.get('gaps', 0):,} gaps took the loss path")
    if doc.get("worker_restarts"):
        out.append(
            f"faults       {doc['worker_restarts']:,} worker restarts recovered "
            f"({doc.get('metas_lost', 0):,} with that step's connector metadata lost; "
            f"{doc.get('open_at_loss', 0):,} transfers open when lost)"
        )
    if doc.get("imports"):
        out.append(import_line(doc["imports"]))
    if doc.get("trace_steps") is not None:
        out.append(f"trace        {doc['trace_steps']:,} protocol steps recorded")
    out += [f"note: {n}" for n in doc["notes"]]
    return out


def import_line(m: Doc) -> str:
    """The P/D imports of a ``--pd-share`` run: by target, failures, staging."""
    why = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in m["failed_by_reason"].items())
    return (
        f"imports      {m['arrived']:,} arrived with prefill KV "
        f"({m['unaligned_final_block']:,} ending inside their final block): device "
        f"{m['device']:,}, host {m['host']:,}, failed {m['failed']:,}"
        + (f" ({why})" if why else "")
        + f"; staged {_bytes(m['staged_bytes'])}, direct {_bytes(m['direct_bytes'])}; "
        f"staging peak {m['staging_peak']:,} of {m['staging_slots']:,} slots, mean "
        f"occupancy {_pct(m['staging_occupancy_mean'])}"
    )


def check_plot_available() -> None:
    """Fail before a run, not after it, when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ReportError(
            "--plot needs matplotlib: pip install 'hisparse[plot]'"
        ) from exc


def plot(doc: Doc, path: Path) -> None:
    """A PNG of occupancy, hit rates, bytes and requests over the run's steps."""
    check_plot_available()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s, z = doc["series"], doc["sizes"]
    steps = list(range(1, len(s["running"]) + 1))
    fig, ax = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
    ax[0].plot(steps, [v / z["gpu_blocks"] for v in s["gpu_blocks_used"]], label="GPU pool")
    ax[0].plot(steps, [v / z["host_blocks"] for v in s["host_blocks_used"]], label="host pool")
    ax[0].set_ylabel("occupancy (fraction)")
    ax[0].set_ylim(0, 1.05)
    looks = [a + b + c for a, b, c in zip(s["resident_hits"], s["hot_hits"], s["misses"],
                                          strict=True)]
    for key, label in (("resident_hits", "resident"), ("hot_hits", "hot"),
                       ("misses", "host (miss)")):
        ax[1].plot(steps, [v / n if n else float("nan")  # a gap where nothing decoded
                           for v, n in zip(s[key], looks, strict=True)],
                   label=label, linewidth=0.8)
    ax[1].set_ylabel("top-K hit rate per step")
    ax[1].set_ylim(0, 1.05)
    ax[2].plot(steps, [v / 1024 for v in s["h2d_bytes"]], label="host→device", linewidth=0.8)
    ax[2].plot(steps, [v / 1024 for v in s["d2h_bytes"]], label="device→host (spills)",
               linewidth=0.8)
    ax[2].set_ylabel("KiB per step")
    ax[3].plot(steps, s["running"], label="running")
    ax[3].plot(steps, s["waiting"], label="waiting")
    ax[3].set_ylabel("requests")
    ax[3].set_xlabel("decode step")
    for a in ax:
        a.legend(loc="upper right", fontsize="small")
        a.grid(alpha=0.3)
    fig.suptitle(f"hisparse simulate: {z['workload']} ({z['requests']:,} requests)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def dumps(doc: Doc) -> str:
    """The run as JSON: indented, but each per-step series on one line (files stay small)."""
    import json

    body = json.dumps({k: v for k, v in doc.items() if k != "series"}, indent=2)
    if "series" not in doc:
        return body + "\n"
    cols = ",\n".join(f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in doc["series"].items())
    return body[:-2] + ',\n  "series": {\n' + cols + "\n  }\n}\n"


REQUIRED = ("sizes", "series", "steps", "resident_hits", "hot_hits", "misses", "notes")


def load(path: Path) -> dict[str, Any]:
    """A saved ``simulate --json`` document, checked to be one."""
    import json

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportError(f"cannot read {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path} is not JSON ({exc.msg})") from exc
    missing = [k for k in REQUIRED if not isinstance(doc, dict) or k not in doc]
    if missing:
        raise ReportError(f"{path} is not a hisparse simulate --json file (no {missing[0]})")
    try:  # every other field the report reads, read once here: a refusal, not a traceback
        lines(doc)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        what = f"no {exc.args[0]}" if isinstance(exc, KeyError) and exc.args else "a bad field"
        raise ReportError(f"{path} is not a hisparse simulate --json file ({what})") from exc
    return dict(doc)
