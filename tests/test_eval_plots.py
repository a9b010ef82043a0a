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
