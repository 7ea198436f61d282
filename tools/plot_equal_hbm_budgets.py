"""One plot of ``hisparse bench equal-hbm`` runs at several budgets: decode tokens/s
against batch, both engines, one panel per context (V3.2 sharing), each point labelled
with its budget. Reads the runs' JSON; needs matplotlib (not a hisparse dependency).

    python tools/plot_equal_hbm_budgets.py OUT.png RUN.json [RUN.json ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def points(docs: list[dict[str, Any]], sharing: str = "v3.2") -> dict[int, list[dict[str, Any]]]:
    """Per context: every run inside its budget (engine, batch, tokens/s, budget)."""
    out: dict[int, list[dict[str, Any]]] = {}
    for doc in docs:
        for cfg in doc["configs"]:
            if cfg["sharing"] != sharing:
                continue
            for r in cfg["runs"]:
                if not r.get("outside_budget"):
                    out.setdefault(cfg["context"], []).append(
                        {"engine": r["engine"], "batch": r["batch"],
                         "tokens_per_s": r["tokens_per_s"], "budget": doc["budget_gib"]})
    return out


def main(argv: list[str]) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out, runs = Path(argv[0]), [json.loads(Path(p).read_text()) for p in argv[1:]]
    by_ctx = points(runs)
    fig, axes = plt.subplots(1, len(by_ctx), figsize=(5.2 * len(by_ctx), 4.0), squeeze=False)
    for ax, ctx in zip(axes[0], sorted(by_ctx, reverse=True), strict=True):
        for kind, style in (("resident", "s"), ("hisparse", "o")):
            pts = sorted((p for p in by_ctx[ctx] if p["engine"] == kind),
                         key=lambda p: p["batch"])
            ax.plot([p["batch"] for p in pts], [p["tokens_per_s"] for p in pts], style,
                    label=kind)
            for p in pts:
                ax.annotate(f"{p['budget']:g}G", (p["batch"], p["tokens_per_s"]),
                            fontsize=6, textcoords="offset points", xytext=(3, 3))
        ax.set(xlabel="batch (requests)", ylabel="decode tokens/s", xscale="log",
               title=f"V3.2 {ctx // 1024}k (the budget beside each point)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
