"""What the Report's plots show a visitor: tick labels that differ where the ticks differ, and point
labels of the precision-versus-safety scatter that never overlap each other or a dot (checked box by
box against every other, for points crowded as the world's reranked runs are)."""

from __future__ import annotations

import itertools

import numpy as np
from PIL import Image, ImageDraw

from cir_demo.harness import charts


def test_tick_labels_are_distinct_for_every_step():
    for lo, hi in ((0, 0.011), (0, 0.0032), (0, 0.08), (0.3, 0.42), (0, 1), (0, 250), (-0.02, 0.05)):
        ticks = charts.nice_ticks(lo, hi)
        shown = [charts._fmt(t, charts._step(ticks)) for t in ticks]
        assert len(set(shown)) == len(shown), (lo, hi, shown)
        assert all(abs(float(s) - t) < 1e-9 for s, t in zip(shown, ticks)), shown  # each says its own value


def overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_point_labels_never_overlap_each_other_or_a_dot():
    rng = np.random.default_rng(3)
    small, _ = charts._fonts()
    draw = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    r = 5 * charts.SCALE
    bounds = (0, 0, 1200, 800)
    for _ in range(20):
        centre = rng.uniform(200, 600, size=2)
        dots = [tuple(centre + rng.normal(0, 15, size=2)) for _ in range(8)]  # a tight cluster
        names = [f"world-clip-{i}+rerank" for i in range(len(dots))]
        taken = [(x - r, y - r, x + r, y + r) for x, y in dots]
        boxes = []
        for name, (x, y) in zip(names, dots):
            lx, ly = charts._place_label(draw, name, small, x, y, r, taken, bounds)
            boxes.append((lx, ly, lx + charts._text_w(draw, name, small), ly + 16 * charts.SCALE))
        for a, b in itertools.combinations(boxes, 2):
            assert not overlaps(a, b), (a, b)
        dot_boxes = [(x - r, y - r, x + r, y + r) for x, y in dots]
        assert not any(overlaps(a, d) for a in boxes for d in dot_boxes)
        assert all(bounds[0] <= a[0] and a[2] <= bounds[2] and bounds[1] <= a[1] and a[3] <= bounds[3] for a in boxes)


def test_each_breakdown_plot_caption_names_the_metric_on_its_axis(tmp_path, monkeypatch):
    """For every metric family, each breakdown plot `--eval` draws has the Report caption naming the metric
    its axis shows (a caption saying mAP@10 over a Recall@1 axis misleads): the axis labels are read from
    the chart calls, the captions from the Report's table."""
    import dataclasses
    from types import SimpleNamespace

    import pandas as pd

    from cir_demo.benchmarks.families import FAMILIES
    from cir_demo.explorer.runs import plot_captions
    from cir_demo.harness import plots

    from cir_demo.benchmarks.families import breakdown_plot_file

    drawn = {}
    monkeypatch.setattr(
        charts,
        "bar_chart_files",
        lambda path, cats, series, title, xlabel, intervals=None: [drawn.setdefault(path.name, xlabel) and path],
    )
    for fam in FAMILIES.values():
        monkeypatch.setattr(plots, "family_of", lambda _b, fam=fam: dataclasses.replace(fam, plots=()))
        drawn.clear()
        metrics = fam.plotted_metrics()
        tab = pd.DataFrame(
            {"run": ["A", "A"], "value": ["x", "y"], "n_queries": [3, 4], **{m: [0.25, 0.5] for m in metrics}}
        )
        ev = SimpleNamespace(name="A", metrics={}, per_query=pd.DataFrame())
        written = plots.write_plots(
            SimpleNamespace(name="b", metric_family=fam.name),
            [ev],
            {field: tab for field, *_ in plots.BREAKDOWN_PLOTS},
            tmp_path,
        )
        expected = {
            breakdown_plot_file(fname, m, i == 0): fam.headline.get(m, m)
            for i, m in enumerate(metrics)
            for _, fname, _ in plots.BREAKDOWN_PLOTS
        }
        assert set(written) == set(expected) == set(drawn), fam.name
        captions = plot_captions(fam)
        for fname, axis in drawn.items():
            metric = axis.removesuffix(" with 95% interval")
            assert metric == expected[fname] and metric in captions[fname], (fam.name, fname)
