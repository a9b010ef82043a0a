"""Public API of the world: load_world / load_train / render_image / render_batch / captions / CLI."""

import json
import subprocess
import sys

import numpy as np
import pytest

from cir_demo.world.captions import caption_matches, describe, sample_caption
from cir_demo.world.scene import satisfies


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    from cir_demo.world import generate_world

    return generate_world("tiny", 0, tmp_path_factory.mktemp("api") / "tiny", progress=False)


@pytest.fixture(scope="module")
def bench(root):
    from cir_demo.world import load_world

    return load_world(root)


def test_import_is_light():
    code = (
        "import sys, cir_demo.world, cir_demo.world.cli; "
        "bad = [m for m in ('torch', 'transformers', 'open_clip', 'faiss', 'gradio') if m in sys.modules]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_benchmark_structure(bench, root):
    from cir_demo.benchmarks.schema import Benchmark

    assert isinstance(bench, Benchmark)
    assert bench.name == "world" and bench.metric_family == "pinpoint"
    assert bench.info["size"] == "tiny" and bench.info["seed"] == 0
    groups = bench.groups()
    assert len(bench.queries) == 6 * len(groups)
    for gid, qs in groups.items():
        assert len(qs) == 6
        assert all(q.judgments is qs[0].judgments for q in qs)  # paraphrases share one judgment object
        assert len({q.instruction for q in qs}) == 6
    ids = [q.query_id for q in bench.queries]
    assert ids[0] == "w00001" and len(set(ids)) == len(ids)
    for q in bench.queries:
        assert set(q.positives) <= bench.corpus_set and set(q.negatives) <= bench.corpus_set
        assert not set(q.positives) & set(q.negatives)
        assert all(r not in bench.corpus_set for r in q.reference_ids)  # references are not retrievable


def test_images_resolve_for_corpus_references_and_train(bench):
    from cir_demo.world import render_batch, render_image, scene_of

    q = bench.queries[0]
    ids = [q.reference_ids[0], q.positives[0], q.negatives[0], "w-tr-000000"]
    for i in ids:
        img = bench.images.open(i)
        assert img.size == (160, 160) and img.mode == "RGB"
        assert img.tobytes() == render_image(i).tobytes()
    assert bench.images.source(ids[0]).kind == "generated"
    batch = render_batch(ids)
    assert batch.shape == (4, 160, 160, 3) and batch.dtype == np.uint8
    for k, i in enumerate(ids):
        assert np.array_equal(batch[k], np.asarray(render_image(i)))
    assert scene_of(q.positives[0]).type == scene_of(q.positives[-1]).type
    # a cached image handed out twice is two copies
    a = render_image(ids[1])
    a.paste((0, 0, 0), (0, 0, 20, 20))
    assert render_image(ids[1]).getpixel((5, 5)) != (0, 0, 0)


def test_unknown_image_ids_are_named(bench):
    from cir_demo.world import render_image

    with pytest.raises(KeyError, match="not a world image id"):
        render_image("query_00001")
    with pytest.raises(KeyError, match="no image"):
        render_image("w-te-999999")


def test_positive_scenes_satisfy_the_stored_constraints(root, bench):
    from cir_demo.world import intent_constraints, load_intents, scene_of

    for it in load_intents(root)[:20]:
        cons = intent_constraints(it)
        assert all(satisfies(scene_of(p), cons) for p in it["positives"])
        assert all(not satisfies(scene_of(n), cons) for n in it["negatives"])


def test_train_split(root):
    from cir_demo.world import load_train

    tr = load_train(root)
    assert len(tr.image_ids) >= 600 and tr.image_ids[0] == "w-tr-000000"
    assert len(tr.captions) == len(tr.image_ids)
    assert tr.triplets and {"reference_ids", "instruction", "target_id", "intent_category"} <= set(tr.triplets[0])
    arr = tr.render(tr.image_ids[:3], size=96)
    assert arr.shape == (3, 96, 96, 3)


def test_train_split_as_benchmark(root):
    from cir_demo.world import load_world

    b = load_world(root, split="train")
    assert b.corpus_ids[0].startswith("w-tr-") and b.queries
    assert all(set(q.positives) <= b.corpus_set for q in b.queries)
    with pytest.raises(ValueError, match="split"):
        load_world(root, split="val")


def test_test_captions_match_their_source(root):
    from cir_demo.world import caption_hits, load_test_captions, scene_of

    caps = load_test_captions(root)
    assert caps
    for c in caps[:30]:
        src = scene_of(c.source_id)
        assert caption_matches(src, c.constraints)
        hits = caption_hits(c)
        assert c.source_id in hits
        # brute force over the corpus
        from cir_demo.world.loader import current_world

        n = len(current_world().test_corpus)
        assert hits == [f"w-te-{i:06d}" for i in range(n) if caption_matches(scene_of(f"w-te-{i:06d}"), c.constraints)]


def test_caption_text_and_constraints_agree():
    import random
    from cir_demo.world.scene import sample_scene

    rng = random.Random(5)
    checked = {"place": 0, "count": 0}
    for _ in range(200):
        s = sample_scene(rng)
        text, cons = sample_caption(s, rng)
        assert caption_matches(s, cons)
        assert s.color in text
        for c in cons:
            if c.attr == "place":
                assert {"room": "room", "beach": "beach", "city": "city", "garden": "garden"}[s.place] in text
            if c.attr == "count":
                assert {1: "single", 2: "two", 3: "three"}[s.count] in text.lower()
            checked[c.attr] = checked.get(c.attr, 0) + 1
    assert checked["place"] and checked["count"], checked  # both word checks above ran
    s = sample_scene(random.Random(2), domain="home").replace(count=2)
    assert describe(s, {"color"}).startswith("Two ")


def test_cli_generate_stats_sheet_render(tmp_path, root):
    from cir_demo.cli import main

    assert main(["world", "generate", "--size", "tiny", "--seed", "0", "--out", str(tmp_path / "g")]) == 0
    assert (tmp_path / "g" / "manifest.json").read_bytes() == (root / "manifest.json").read_bytes()
    assert main(["world", "stats", "--root", str(root)]) == 0
    png = tmp_path / "sheet.png"
    assert main(["world", "contact-sheet", "--root", str(root), "--out", str(png), "--group-by", "category"]) == 0
    from PIL import Image

    assert Image.open(png).size[1] > 6 * 160
    assert (
        main(["world", "render", "w-te-000001", "w-te-r00000", "--root", str(root), "--out", str(tmp_path / "r")]) == 0
    )
    assert (tmp_path / "r" / "w-te-000001.png").exists()
    assert main(["world", "generate", "--size", "nope", "--out", str(tmp_path / "x")]) == 2


def test_export_pinpoint_and_jsonl(tmp_path, root):
    from cir_demo.cli import main
    import cir_demo.benchmarks.jsonl  # noqa: F401  (both exporters are the project's own: a broken import fails)
    import cir_demo.benchmarks.pinpoint  # noqa: F401

    assert main(["world", "export", "--format", "pinpoint", "--root", str(root), "--out", str(tmp_path / "pp")]) == 0
    import pyarrow.parquet as pq

    files = list((tmp_path / "pp").glob("*.parquet"))
    assert len(files) == 1
    t = pq.read_table(files[0]).to_pylist()
    manifest = json.loads((root / "manifest.json").read_text())
    assert len(t) == manifest["counts"]["test_queries"]
    assert (
        main(
            [
                "world",
                "export",
                "--format",
                "jsonl",
                "--images",
                "none",
                "--root",
                str(root),
                "--out",
                str(tmp_path / "jl"),
            ]
        )
        == 0
    )
    from cir_demo.benchmarks.jsonl import load_jsonl_benchmark

    back = load_jsonl_benchmark(tmp_path / "jl")
    assert len(back.queries) == manifest["counts"]["test_queries"]
