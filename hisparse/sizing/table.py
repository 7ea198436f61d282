"""The sizing replay's side-by-side table (HiSparse on and off) and its plot."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

Doc = Mapping[str, Any]


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def header_lines(o: Doc) -> list[str]:
    """What the replay is (printed before it runs)."""
    return [
        f"sizing       {o['model']}: {o['layers']} layers ({o['indexers']} own an indexer), "
        f"{o['row_bytes']} B rows, top-K {o['top_k']}, {o['block_tokens']}-token blocks of "
        f"{_mib(o['block_bytes'])} ({o['source']})",
        f"budgets      GPU KV {o['gpu_kv_gib']:g} GiB: HiSparse on {o['gpu_blocks_on']:,} "
        f"resident blocks + {o['max_running']} x {o['hot_rows']:,} hot rows "
        f"({_mib(o['hot_bytes'])} each), off {o['gpu_blocks_off']:,} blocks; host pool "
        f"{o['host_gib']:g} GiB = {o['host_blocks']:,} blocks",
        f"workload     Mooncake, first {o['requests']:,} requests, time compression "
        f"{o['time_compression']:g} (one step = {o['trace_ms_per_step']:g} ms of trace time), "
        f"max running {o['max_running']}, top-K drift {o['topk_drift']:.1%}/step, decode "
        f"cap {o['max_decode'] or 'none'}, seed {o['seed']}, executor {o['executor']}",
    ]


def table_lines(o: Doc, s: Doc) -> list[str]:
    """The two runs side by side, then HiSparse's tiers, PCIe and host pool."""
    on, off = s["hisparse"], s["disabled"]
    rows: list[tuple[str, str, str]] = [
        ("finished requests", f"{on['finished']:,}", f"{off['finished']:,}"),
        ("steps until all done", f"{on['steps']:,}", f"{off['steps']:,}"),
        ("running, mean", f"{on['running_mean']:,.1f}", f"{off['running_mean']:,.1f}"),
        ("running, peak", f"{on['running_peak']:,}", f"{off['running_peak']:,}"),
        ("admission wait p50, steps", f"{on['wait_p50_steps']:,.0f}",
         f"{off['wait_p50_steps']:,.0f}"),
        ("admission wait p99, steps", f"{on['wait_p99_steps']:,.0f}",
         f"{off['wait_p99_steps']:,.0f}"),
        ("admission wait p50, trace s", f"{on['wait_p50_s']:,.2f}", f"{off['wait_p50_s']:,.2f}"),
        ("admission wait p99, trace s", f"{on['wait_p99_s']:,.2f}", f"{off['wait_p99_s']:,.2f}"),
        ("never admitted (too large)", f"{on['never_admitted']:,} ({on['too_large']:,})",
         f"{off['never_admitted']:,} ({off['too_large']:,})"),
        ("cut off at the last step", f"{on['still_running']:,}", f"{off['still_running']:,}"),
    ]
    width = max(len(r[0]) for r in rows)
    out = [f"{'':<{width}}  {'HiSparse on':>14}  {'HiSparse off':>14}"]
    out += [f"{a:<{width}}  {b:>14}  {c:>14}" for a, b, c in rows]
    link = o["link_gbps"]
    out += [
        "",
        f"top-K tiers  resident {s['resident_hit_rate']:.1%}, hot {s['hot_hit_rate']:.1%}, "
        f"host {s['host_hit_rate']:.2%} of lookups (one layer simulated: every leader "
        "draws the same top-K here, so each layer's rates are these)",
        f"PCIe H2D     {_mib(s['h2d_bytes_per_step_mean'])}/step mean, "
        f"{_mib(s['h2d_bytes_per_step_p99'])}/step p99 over decode steps: "
        f"{s['h2d_gbps_mean']:.1f} GB/s mean, {s['h2d_gbps_p99']:.1f} GB/s p99 at "
        f"{o['step_ms']:g} ms/step, against the H200's measured {link:g} GB/s bulk H2D "
        f"({s['h2d_gbps_p99'] / link:.0%} of it at p99)",
        f"spills D2H   {s['spills']:,} pages, {_mib(s['d2h_bytes_per_step_mean'])}/step mean",
        f"host pool    peak {s['host_blocks_peak']:,} of {s['host_blocks']:,} blocks "
        f"({s['host_occupancy_peak']:.1%}), {s['evictions']:,} evictions",
        f"prefix hits  {s['prefix_hit_rate']:.1%} of admitted pages served by published host "
        f"pages ({s['prefix_hits']:,})",
        "checks       " + (f"invariants checked after every protocol action, "
                           f"{s['violations']:,} violations" if o["check"]
                           else "invariant checks off (the default with --model: each costs "
                           "O(protocol state); --check-invariants turns them on)")
        + ("; accounting executor: no bytes held or compared" if o["executor"] == "accounting"
           else f"; {s['data_mismatches']:,} data mismatches (every returned row compared)"),
    ]
    return out


def plot(o: Doc, on: Doc, off: Doc, path: Path) -> None:
    """Running requests per step for both runs, and HiSparse's host pool occupancy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    ax1.plot(on["series"]["running"], label="HiSparse on", lw=1)
    ax1.plot(off["series"]["running"], label="HiSparse off (all resident)", lw=1)
    ax1.set_ylabel("running requests")
    ax1.set_title(f"{o['model']}, GPU KV {o['gpu_kv_gib']:g} GiB, host {o['host_gib']:g} GiB, "
                  f"Mooncake {o['requests']:,} requests (x{o['time_compression']:g})")
    ax1.legend()
    host = on["series"]["host_blocks_used"]
    ax2.plot([100 * h / on["host_blocks"] for h in host], color="tab:green", lw=1)
    ax2.set_ylabel("host pool used, %")
    ax2.set_xlabel("decode step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
