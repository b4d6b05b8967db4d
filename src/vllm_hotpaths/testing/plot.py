"""PNG plot of benchmark records: cost per step against the size that drives it."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path


def plot_bench(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vllm_hotpaths.testing.results import baseline_s

    panels = defaultdict(list)
    for r in records:
        panels[(r["hotpath"], r["device"], r["case"])].append(r)
    cols = min(4, len(panels))
    rows_of_panels = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows_of_panels, cols, figsize=(5.5 * cols, 4 * rows_of_panels), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, ((hotpath, device, case), rows) in zip(axes.flat, panels.items()):
        driver = next(k for k in ("L", "V", "B") if k in rows[0]["size"])
        xs = [r["size"][driver] for r in rows]
        ax.loglog(xs, [baseline_s(r) * 1e3 for r in rows], "o-", label="baseline")
        ax.loglog(xs, [r["fast_s"] * 1e3 for r in rows], "s-", label="fast")
        ax.set_xlabel(driver)
        ax.set_ylabel("ms per step (median)")
        ax.set_title(f"{hotpath} [{device}]\n{case}", fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
