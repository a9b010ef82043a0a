"""The report's charts as vector files for papers (SVG and PDF, drawn with matplotlib's object API: no
pyplot, no window, no global state), and the metric-at-k curves (PNG too).

The PNGs the Report shows of bar and scatter charts are drawn by `charts` with Pillow (faster than
importing matplotlib); these functions draw the same data again as vectors, beside each PNG.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from cir_demo.harness.charts import PALETTE
from cir_demo.utils.io import atomic_path

VECTOR_FORMATS = ("svg", "pdf")


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots()


def _save(fig, png: Path, formats: Sequence[str]) -> list[Path]:
    """`png` with each format's suffix. The same plot gives the same bytes (shipped outputs are compared with
    what --eval writes): no dates in the metadata, and SVG element ids from a fixed salt, not a random one."""
    from matplotlib import rc_context

    out = []
    for fmt in formats:
        path = png.with_suffix(f".{fmt}")
        path.parent.mkdir(parents=True, exist_ok=True)
        metadata = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}.get(fmt, {})
        with atomic_path(path) as tmp, rc_context({"svg.hashsalt": "cir-demo"}):
            fig.savefig(tmp, format=fmt, metadata=metadata, dpi=150)
        out.append(path)
    return out


def _finite(v) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def bar_chart(
    png: Path,
    categories: Sequence[str],
    series: dict[str, Sequence[float]],
    title: str,
    xlabel: str,
    intervals: dict[str, Sequence[tuple[float, float]]] | None = None,
    formats: Sequence[str] = VECTOR_FORMATS,
) -> list[Path]:
    """`charts.bar_chart`'s grouped horizontal bars (one group per category, one bar per series, 95% whiskers)."""
    names = list(series)
    n_ser = max(len(names), 1)
    fig, ax = _figure(7.0, 1.2 + 0.28 * n_ser * max(len(categories), 1))
    h = 0.8 / n_ser
    for si, name in enumerate(names):
        ys = [ci + (si - (n_ser - 1) / 2) * h for ci in range(len(categories))]
        vals = [v if _finite(v) else 0.0 for v in series[name]]
        iv = (intervals or {}).get(name)
        err = None
        if iv is not None:
            err = [
                [max(v - lo, 0.0) if _finite(lo) else 0.0 for v, (lo, _) in zip(vals, iv)],
                [max(hi - v, 0.0) if _finite(hi) else 0.0 for v, (_, hi) in zip(vals, iv)],
            ]
        ax.barh(
            ys,
            vals,
            height=h * 0.9,
            color=PALETTE[si % len(PALETTE)],
            label=name,
            xerr=err,
            error_kw={"elinewidth": 0.8, "capsize": 2},
        )
    ax.set_yticks(range(len(categories)), [str(c) for c in categories])
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(axis="x", color="#dddddd")
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return _save(fig, png, formats)


def scatter_chart(
    png: Path,
    points: dict[str, tuple[float, float]],
    title: str,
    xlabel: str,
    ylabel: str,
    formats: Sequence[str] = VECTOR_FORMATS,
) -> list[Path]:
    """`charts.scatter_chart`'s labelled dots."""
    fig, ax = _figure(6.0, 4.2)
    for i, (name, (x, y)) in enumerate(points.items()):
        if _finite(x) and _finite(y):
            ax.scatter([x], [y], color=PALETTE[i % len(PALETTE)], s=30, zorder=3)
            ax.annotate(name, (x, y), xytext=(5, 3), textcoords="offset points", fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(color="#dddddd")
    return _save(fig, png, formats)


def line_chart(
    png: Path,
    ks: Sequence[int],
    series: dict[str, Sequence[float]],
    title: str,
    ylabel: str,
    bands: dict[str, Sequence[tuple[float, float]]] | None = None,
    formats: Sequence[str] = ("png", *VECTOR_FORMATS),
) -> list[Path]:
    """One line per run over the cutoffs k (log-scaled when they span a decade), its 95% interval shaded."""
    fig, ax = _figure(6.0, 4.0)
    for i, (name, values) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        ax.plot(ks, values, marker="o", markersize=3, color=colour, label=name)
        band = (bands or {}).get(name)
        if band is not None:
            ax.fill_between(ks, [lo for lo, _ in band], [hi for _, hi in band], color=colour, alpha=0.2, linewidth=0)
    if len(ks) > 1 and max(ks) / max(min(ks), 1) >= 10:
        ax.set_xscale("log")
    ax.set_xticks(list(ks), [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("k (cutoff)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(color="#dddddd")
    ax.legend(frameon=False)
    return _save(fig, png, formats)
