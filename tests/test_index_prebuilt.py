"""Prebuilt corpus embeddings (indexes/prebuilt/): rankings served from them equal freshly built
ones for all five world retrievers, damaged or stale files are refused (and the corpus encoded
instead), and the files committed for the default world match that world and the weights."""

from __future__ import annotations

import json
import shutil
import time

import numpy as np
import pytest

from cir_demo.index import build as index_build, embedding_cache
from cir_demo.index.prebuilt import EMBEDDINGS_FILE, image_encoder, prebuilt_dir, prebuilt_problems, read_prebuilt

WORLD_RETRIEVERS = ("world-clip-image", "world-clip-text", "world-clip-fusion", "world-clip-slerp", "world-cir")
K = 50


@pytest.fixture(scope="module")
def tiny_world(tmp_path_factory, tiny_world_seed):
    """The tiny world's test split (conftest.py's `tiny_world_seed`'s, not generated again; none of its
    corpus features), the five world retrievers (real committed weights), and a prebuilt folder built
    for them by `build_prebuilt` (what `index prebuilt` runs)."""
    from cir_demo.index.prebuilt_build import build_prebuilt
    from cir_demo.retrievers.registry import load_retriever
    from cir_demo.world import load_world

    root = tmp_path_factory.mktemp("prebuilt")
    shutil.copytree(tiny_world_seed / "world", root / "cache" / "world")
    mp = pytest.MonkeyPatch()
    mp.setenv("CIR_DEMO_CACHE", str(root / "cache"))
    bench = load_world(size="tiny", progress=False)
    retrievers = {n: load_retriever(n, device="cpu") for n in WORLD_RETRIEVERS}
    # the corpus rendered in this process, not in worker processes (`open_many`), so that the oracle's
    # encode (`fresh_and_served`, in this process too) finds the same pixels in the renderer's cache: the
    # corpus is rendered once for both encodes, not twice
    in_process = pytest.MonkeyPatch()
    in_process.setattr(bench.images, "open_many", None)
    written = build_prebuilt(bench, list(retrievers.values()), progress=False, root=root / "prebuilt")
    in_process.undo()
    yield bench, retrievers, root, written
    mp.undo()


def _rankings(bench, retrievers, mp, indexes, prebuilt, embeddings_cache):
    """{name: (top-50 ids and scores of every test query)} through `ensure_index`, as the app and --eval
    rank, with the given index, prebuilt and embedding-cache folders; and the corpus images opened."""
    from cir_demo.engine import RetrievalEngine

    mp.setenv("CIR_DEMO_INDEXES", str(indexes))
    mp.setenv("CIR_DEMO_PREBUILT", str(prebuilt))
    shutil.rmtree(embeddings_cache, ignore_errors=True)
    opened = []
    real_open = bench.images.open
    mp.setattr(bench.images, "open", lambda i: opened.append(i) or real_open(i))
    # every image through `open`, in this process: batches rendered in forked workers (`open_many`)
    # would open them where this list cannot see
    mp.setattr(bench.images, "open_many", None)
    engine = RetrievalEngine(bench, list(retrievers), progress=False)
    engine._retrievers.update(retrievers)  # the ones already loaded (same specs)
    out = {name: engine.run_benchmark(name, k=K) for name in retrievers}
    mp.undo()
    corpus = set(bench.corpus_ids)
    return out, [i for i in opened if i in corpus]


@pytest.fixture(scope="module")
def fresh_and_served(tiny_world, tmp_path_factory):
    """Rankings of the five retrievers with no prebuilt files (the oracle: indexes built by encoding
    the corpus) and served from the prebuilt folder, each into empty index folders."""
    bench, retrievers, root, _ = tiny_world
    tmp = tmp_path_factory.mktemp("rankings")
    cache = root / "cache" / "embeddings"
    mp = pytest.MonkeyPatch()
    fresh = _rankings(bench, retrievers, mp, tmp / "fresh", tmp / "none", cache)
    served = _rankings(bench, retrievers, mp, tmp / "served", root / "prebuilt", cache)
    return fresh, served


def test_the_prebuilt_run_opens_no_corpus_image(tiny_world, fresh_and_served):
    bench = tiny_world[0]
    (_, fresh_opened), (_, served_opened) = fresh_and_served
    assert sorted(set(fresh_opened)) == sorted(bench.corpus_ids)  # the oracle did encode the corpus
    assert served_opened == []


@pytest.mark.parametrize("name", WORLD_RETRIEVERS)
def test_rankings_from_prebuilt_equal_freshly_built(tiny_world, fresh_and_served, name):
    """Every test query's top 50, ids and scores, identical to the freshly built index's."""
    bench = tiny_world[0]
    (fresh, _), (served, _) = fresh_and_served
    run, scores = served[name]
    assert len(run) == len(bench.queries) and all(len(r) == K for r in run.values())
    assert run == fresh[name][0]
    assert scores == fresh[name][1]


def _damaged_copies(src, tmp_path):
    """(label, folder, expected reason prefix) for each way a prebuilt folder can be wrong."""

    def variant(label, edit):
        d = tmp_path / label / src.parent.name / src.name
        shutil.copytree(src, d)
        edit(d)
        return d

    def manifest_edit(**changes):
        def edit(d):
            m = json.loads((d / "manifest.json").read_text())
            for key, value in changes.items():
                *path, last = key.split(".")
                target = m
                for p in path:
                    target = target[p]
                target[last] = value
            (d / "manifest.json").write_text(json.dumps(m))

        return edit

    def flip_byte(d):
        data = bytearray((d / EMBEDDINGS_FILE).read_bytes())
        data[-3] ^= 0x40
        (d / EMBEDDINGS_FILE).write_bytes(bytes(data))

    def truncate(d):
        data = (d / EMBEDDINGS_FILE).read_bytes()
        (d / EMBEDDINGS_FILE).write_bytes(data[: len(data) // 2])

    return [
        ("flipped", variant("flipped", flip_byte), "damaged:"),
        ("truncated", variant("truncated", truncate), "damaged:"),
        ("no-json", variant("no-json", lambda d: (d / "manifest.json").write_text("{not json")), "unreadable manifest"),
        ("weights", variant("weights", manifest_edit(weights_sha256="0" * 64)), "weights changed"),
        ("spec", variant("spec", manifest_edit(spec_hash="0" * 64)), "retriever spec changed"),
        ("world", variant("world", manifest_edit(corpus_fingerprint="f" * 64)), "corpus images changed"),
        ("corpus", variant("corpus", manifest_edit(corpus_sha256="c" * 64)), "corpus changed"),
        (
            "generator",
            variant("generator", manifest_edit(**{"provenance.benchmark_info.generator_version": "world-0"})),
            "world generator changed",
        ),
        ("missing", variant("missing", lambda d: (d / EMBEDDINGS_FILE).unlink()), "damaged:"),
    ]


def test_damaged_or_stale_prebuilt_files_are_refused_and_the_corpus_encoded(tiny_world, tmp_path, monkeypatch, capsys):
    bench, retrievers, root, written = tiny_world
    retriever = retrievers["world-clip-image"]
    ids = list(bench.corpus_ids)
    good, reasons = read_prebuilt(bench, retriever, ids, root=root / "prebuilt")
    assert reasons == [] and good is not None
    for label, folder, prefix in _damaged_copies(written[0], tmp_path):
        xb, reasons = read_prebuilt(bench, retriever, ids, root=folder.parent.parent)
        assert xb is None, label
        assert any(r.startswith(prefix) for r in reasons), (label, reasons)
    # served through the index build: the flipped file is refused, said once, and the corpus encoded
    flipped = tmp_path / "flipped"
    encodes = []
    real_encode = embedding_cache.encode_corpus
    monkeypatch.setattr(embedding_cache, "encode_corpus", lambda *a, **k: encodes.append(1) or real_encode(*a, **k))
    monkeypatch.setenv("CIR_DEMO_PREBUILT", str(flipped))
    monkeypatch.setenv("CIR_DEMO_INDEXES", str(tmp_path / "indexes"))
    shutil.rmtree(root / "cache" / "embeddings", ignore_errors=True)
    loaded = index_build.ensure_index(bench, retriever, progress=False)
    assert encodes == [1]
    assert "prebuilt corpus embeddings for world-clip-image not used (damaged:" in capsys.readouterr().err
    np.testing.assert_array_equal(loaded.index.reconstruct_n(0, len(ids)), good)  # the encode equals the intact file


def test_another_world_does_not_read_the_default_worlds_files(tiny_world):
    """The prebuilt folder is per world variant (size, seed): the tiny world finds no default-world file."""
    bench, retrievers, _, _ = tiny_world
    tower = image_encoder(retrievers["world-cir"])
    assert prebuilt_dir(bench, tower).parent.name == "world-tiny-s0"
    assert read_prebuilt(bench, retrievers["world-cir"], list(bench.corpus_ids)) == (None, [])


@pytest.mark.slow
def test_committed_prebuilt_files_match_the_default_world_and_the_weights(default_world_cache, monkeypatch):
    """The files in indexes/prebuilt/ pass every check for the default world and the committed weights,
    and their rows are what the current renderer and model give (two whole encode batches, re-encoded).
    When this fails, rebuild them: python -m cir_demo index prebuilt."""
    from cir_demo.retrievers.registry import load_retriever
    from cir_demo.world import load_world

    monkeypatch.delenv("CIR_DEMO_PREBUILT", raising=False)
    bench = load_world(progress=False)  # the default world, size "default", seed 0 (built once: conftest.py)
    ids = list(bench.corpus_ids)
    towers = {}
    for name in WORLD_RETRIEVERS:
        retriever = load_retriever(name, device="cpu")
        tower = image_encoder(retriever)
        assert prebuilt_problems(prebuilt_dir(bench, tower), bench, tower, ids) == [], name
        towers.setdefault(tower.name, retriever)
    assert list(towers) == ["world-clip"]
    retriever = towers["world-clip"]
    xb, reasons = read_prebuilt(bench, retriever, ids)
    assert reasons == []
    for start in (0, 64 * (len(ids) // 128)):  # whole batches of 64, as the build encodes them
        block = ids[start : start + 64]
        fresh = retriever.encode_images([bench.images.open(i) for i in block], batch_size=64)
        np.testing.assert_allclose(xb[start : start + 64], fresh, atol=1e-6)


def test_the_app_reranks_from_pixels_until_the_corpus_features_are_stored_then_adopts_them(
    tiny_world_seed, tmp_path, monkeypatch
):
    """The app's engine does not encode the world verifier's corpus features while loading; a view's
    candidates are scored from their pixels, and once an --eval run stored the features the loader's
    thread hands them over. Oracle: the scores of an engine that has the features up front (those a
    first --eval encoded and stored: conftest.py's `tiny_world_seed`, the real encode once per suite)."""
    from cir_demo.engine import Ranking, RetrievalEngine
    from cir_demo.explorer import loader
    from cir_demo.world import load_world

    cache = tmp_path / "cache"
    shutil.copytree(tiny_world_seed / "world", cache / "world")  # the world, no corpus features yet
    monkeypatch.setenv("CIR_DEMO_CACHE", str(cache))
    bench = load_world(size="tiny", progress=False).limit(3)
    app = RetrievalEngine(bench, [], progress=False, encode_reranker_corpus=False)
    monkeypatch.setattr(loader, "FEATURES_POLL_S", 0.05)
    loader.adopt_reranker_features(app, "world-verifier", {})
    judge = app.reranker("world-verifier")
    ids = list(bench.corpus_ids)
    assert judge.needs_image(ids[0])  # nothing encoded while loading
    query = app.composed(bench.queries[0])
    ranking = Ranking(ids[:20], [1.0 - i / 100 for i in range(20)])
    app.use_score_cache(tmp_path / "a.sqlite")
    from_pixels = [(it.candidate_id, it.p_yes) for it in app.rerank("world-verifier", query, ranking)]
    # the features stored as an --eval run stores them (whole, at once: the loader's thread is polling)
    shutil.copytree(tiny_world_seed / "embeddings", tmp_path / "stored")
    (tmp_path / "stored").rename(cache / "embeddings")
    full = RetrievalEngine(bench, [], progress=False)  # as --eval: reads the stored corpus features
    full.use_score_cache(tmp_path / "b.sqlite")
    oracle = [
        (it.candidate_id, it.p_yes) for it in full.rerank("world-verifier", full.composed(bench.queries[0]), ranking)
    ]
    assert from_pixels == oracle
    for _ in range(200):  # the loader's thread adopts the stored features
        if not judge.needs_image(ids[0]):
            break
        time.sleep(0.05)
    assert not any(judge.needs_image(i) for i in ids)
    app.use_score_cache(tmp_path / "c.sqlite")
    assert [(it.candidate_id, it.p_yes) for it in app.rerank("world-verifier", query, ranking)] == oracle


def test_only_a_generated_benchmark_gets_prebuilt_files(tmp_path):
    from types import SimpleNamespace

    from cir_demo.index.prebuilt_build import build_prebuilt

    with pytest.raises(ValueError, match="only a benchmark this project generates"):
        build_prebuilt(SimpleNamespace(name="pinpoint"), [], root=tmp_path)
    assert not any(tmp_path.iterdir())
