"""`--eval`'s plots/ for CIRR, FashionIQ and CIRCO (the tiny world exported to each, two runs of one's own):
every plot as PNG, SVG and PDF, each file read back by its own format's reader; the k-curves and the
family's breakdowns among them."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from PIL import Image

import app
from own_runs_support import write_two_runs


def _export(kind: str, root):
    from cir_demo.world import load_world

    world = load_world(size="tiny", progress=False).limit(20)
    if kind == "cirr":
        from cir_demo.benchmarks.cirr import export_cirr, load_cirr

        export_cirr(world, root, splits=("val",), skip_two_image=True)
        return load_cirr(root), ["--root", str(root)]
    if kind == "fashioniq":
        from cir_demo.benchmarks.fashioniq import export_fashioniq, load_fashioniq

        export_fashioniq(world, root, skip_two_image=True)
        return load_fashioniq(root), ["--root", str(root)]
    from cir_demo.benchmarks.circo import export_circo, load_circo

    export_circo(world, root, skip_two_image=True)
    args = {
        "annotations": str(root / "annotations" / "val.json"),
        "corpus_ids": str(root / "image_info_unlabeled2017.json"),
    }
    return load_circo(**args), ["--annotations", args["annotations"], "--corpus-ids", args["corpus_ids"]]


EXPECTED = {  # plots each family must have (besides others)
    "cirr": {"recall_at_k", "recall_subset_at_k", "per_caption_length", "per_caption_length_recall_at_5"},
    "fashioniq": {"recall_at_k", "per_garment_category", "per_garment_category_recall_at_50"},
    "circo": {"map_at_k", "per_semantic_aspect"},
}


@pytest.mark.parametrize("kind", ["cirr", "fashioniq", "circo"])
def test_eval_plots_are_png_svg_and_pdf(kind, tmp_path):
    bench, args = _export(kind, tmp_path / kind)
    pa, pb = write_two_runs(bench, tmp_path)
    out = tmp_path / "out"
    assert (
        app.main(
            [
                "--eval",
                "--benchmark",
                kind,
                *args,
                "--results-json",
                str(pa),
                str(pb),
                "--out",
                str(out),
                "--n-boot",
                "50",
            ]
        )
        == 0
    )
    files = sorted((out / "plots").iterdir())
    stems = {f.stem for f in files}
    assert EXPECTED[kind] <= stems, stems
    for stem in stems:
        for ext in ("png", "svg", "pdf"):
            assert (out / "plots" / f"{stem}.{ext}").is_file(), (stem, ext)
        with Image.open(out / "plots" / f"{stem}.png") as im:
            im.verify()
        assert ET.parse(out / "plots" / f"{stem}.svg").getroot().tag.endswith("svg")
        pdf = (out / "plots" / f"{stem}.pdf").read_bytes()
        assert pdf.startswith(b"%PDF-") and pdf.rstrip().endswith(b"%%EOF")
    report = (out / "report.md").read_text()
    assert "![recall_at_k](plots/recall_at_k.png)" in report or "![map_at_k](plots/map_at_k.png)" in report


def test_the_vector_files_draw_what_the_png_shows(tmp_path):
    """One drawing, three files: every bar the SVG draws is painted in its series' colour at the same place
    in the PNG, its length in proportion to its value (NaN: no bar); the PDF's cross-reference table points
    at each of its objects and its page sets every label; a second drawing gives the same bytes."""
    import re
    import zlib

    from cir_demo.harness import charts

    cats, values = ["alpha", "beta (n=3)", "gamma"], {"A": [0.2, 0.5, 0.8], "B": [0.4, float("nan"), 0.1]}
    png, svg, pdf = charts.bar_chart_files(tmp_path / "b.png", cats, values, "Title", "value")
    assert [p.suffix for p in (png, svg, pdf)] == [".png", ".svg", ".pdf"]
    root = ET.parse(svg).getroot()
    im = Image.open(png).convert("RGB")
    scale = float(root.get("viewBox").split()[2]) / im.width
    for colour, (name, vals) in zip(charts.PALETTE, values.items()):
        rects = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("fill") == colour]
        legend = max(rects, key=lambda r: float(r.get("x")))  # the legend's square, right of the plot
        bars = [r for r in rects if r is not legend]
        shown = [v for v in vals if v == v]
        assert len(bars) == len(shown), name
        widths = [float(r.get("width")) for r in sorted(bars, key=lambda r: float(r.get("y")))]
        assert widths == pytest.approx([w * widths[0] / shown[0] for w in shown], rel=0.02), name
        for r in bars:
            cx = (float(r.get("x")) + float(r.get("width")) / 2) / scale
            cy = (float(r.get("y")) + float(r.get("height")) / 2) / scale
            assert "#%02x%02x%02x" % im.getpixel((int(cx), int(cy))) == colour, (name, cx, cy)
    data = pdf.read_bytes()
    xref = int(data.rsplit(b"startxref", 1)[1].split()[0])
    offsets = [int(line[:10]) for line in data[xref:].splitlines()[3:8]]
    assert [data[o : o + 8] for o in offsets] == [f"{i} 0 obj\n".encode() for i in range(1, 6)]
    page = zlib.decompress(re.search(rb"stream\n(.*)\nendstream", data, re.S).group(1))
    for label in (b"(alpha)", rb"(beta \(n=3\))", b"(gamma)", b"(Title)", b"(value)", b"(A)", b"(B)"):
        assert label + b" Tj" in page, label
    again = charts.bar_chart_files(tmp_path / "c.png", cats, values, "Title", "value")
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in (png, svg, pdf)]
