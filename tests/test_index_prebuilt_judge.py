"""The world judge's prebuilt corpus features (indexes/prebuilt/<world>/world-judge/, int8 codes and
scales, xz): read back bit for bit equal to the features a first --eval encodes (conftest.py's
`tiny_world_seed`, the oracle), served to a fresh data folder without opening a corpus image, kept in
the embedding cache after the first read, and refused (the corpus encoded instead) when damaged, of
other weights, or edited."""

from __future__ import annotations

import io
import json
import lzma
import shutil
import time

import numpy as np
import pytest

from cir_demo.index import embedding_cache as index_build
from cir_demo.index.prebuilt import (
    CODES_FILE,
    SCALES_FILE,
    image_encoder,
    prebuilt_dir,
    prebuilt_problems,
    read_prebuilt,
    write_prebuilt,
)
from cir_demo.index.prebuilt_build import slice_problems
from cir_demo.models.world_judge import N_TOKENS, code_planes, codes_of_planes


@pytest.fixture(scope="module")
def shipped(tiny_world_seed, tmp_path_factory):
    """The tiny world (its test part only, no corpus features), the real world judge, the features a
    first --eval stored in the seed (the oracle) and a prebuilt folder written from them."""
    from cir_demo.rerank import load_reranker
    from cir_demo.world import load_world

    root = tmp_path_factory.mktemp("judge-prebuilt")
    shutil.copytree(tiny_world_seed / "world", root / "cache" / "world")
    mp = pytest.MonkeyPatch()
    mp.setenv("CIR_DEMO_CACHE", str(root / "cache"))
    bench = load_world(size="tiny", progress=False)
    judge = load_reranker("world-verifier")
    ids = list(bench.corpus_ids)
    cached = index_build.embedding_cache_path(bench, judge, ids)
    oracle = np.load(tiny_world_seed / cached.relative_to(root / "cache"))
    tower = image_encoder(judge)
    written = write_prebuilt(bench, tower, ids, oracle, ["world-verifier"], 0.0, "cpu", root=root / "prebuilt")
    yield bench, judge, ids, oracle, root, written
    mp.undo()


def test_the_folder_holds_codes_and_scales_and_reads_back_bit_for_bit(shipped):
    bench, judge, ids, oracle, root, written = shipped
    assert written == prebuilt_dir(bench, image_encoder(judge), root / "prebuilt")
    assert written.name == "world-judge" and written.parent.name == "world-tiny-s0"
    manifest = json.loads((written / "manifest.json").read_text())
    assert sorted(manifest["files"]) == [CODES_FILE, SCALES_FILE]
    assert manifest["weights_sha256"] == judge.image_spec["weights_sha256"]
    assert manifest["spec_hash"] == image_encoder(judge).spec_hash()
    planes = np.load(io.BytesIO(lzma.decompress((written / CODES_FILE).read_bytes())))
    assert planes.dtype == np.int8 and planes.shape == (2, len(ids), N_TOKENS, oracle.shape[1] // N_TOKENS // 2)
    xb, reasons = read_prebuilt(bench, judge, ids, root=root / "prebuilt")
    assert reasons == []
    assert xb.dtype == np.float32
    np.testing.assert_array_equal(xb, oracle)


def _engine_features(bench, mp, prebuilt, cache):
    """The judge's corpus features as --eval gets them (prefetch, then the reranker loaded with them),
    with this prebuilt root and an empty embedding cache; and the corpus images opened."""
    from cir_demo.engine import RetrievalEngine

    mp.setenv("CIR_DEMO_PREBUILT", str(prebuilt))
    opened = []
    real_open = bench.images.open
    mp.setattr(bench.images, "open", lambda i: opened.append(i) or real_open(i))
    mp.setattr(bench.images, "open_many", lambda *a, **k: opened.append(a) or pytest.fail("open_many called"))
    engine = RetrievalEngine(bench, [], progress=False)
    engine.prefetch_corpus_embeddings([], "world-verifier")
    judge = engine.reranker("world-verifier")
    assert not any(judge.needs_image(i) for i in bench.corpus_ids)
    feats = judge._feats.copy()
    engine.close()
    return feats, [i for i in opened if i in set(bench.corpus_ids)]


def test_a_fresh_data_folder_reads_the_shipped_rows_opens_no_corpus_image_and_keeps_them(shipped, monkeypatch):
    bench, judge, ids, oracle, root, _ = shipped
    cache = root / "cache" / "embeddings"
    shutil.rmtree(cache, ignore_errors=True)
    feats, opened = _engine_features(bench, monkeypatch, root / "prebuilt", cache)
    assert opened == []
    np.testing.assert_array_equal(feats, oracle)
    kept = index_build.embedding_cache_path(bench, judge, ids)
    np.testing.assert_array_equal(np.load(kept), oracle)  # decoded once into the data folder
    # a second run reads the cache: the compressed files are not decoded again
    decoded = []
    real = lzma.decompress
    monkeypatch.setattr(lzma, "decompress", lambda *a, **k: decoded.append(1) or real(*a, **k))
    feats, opened = _engine_features(bench, monkeypatch, root / "prebuilt", cache)
    assert decoded == [] and opened == []
    np.testing.assert_array_equal(feats, oracle)


def _copy(src, tmp_path, label, edit):
    d = tmp_path / label / src.parent.name / src.name
    shutil.copytree(src, d)
    edit(d)
    return d.parent.parent


def _edit_manifest(key, value):
    def edit(d):
        m = json.loads((d / "manifest.json").read_text())
        m[key] = value
        (d / "manifest.json").write_text(json.dumps(m))

    return edit


def _flip_byte(d):
    data = bytearray((d / CODES_FILE).read_bytes())
    data[len(data) // 2] ^= 0x40
    (d / CODES_FILE).write_bytes(bytes(data))


def test_damaged_or_other_weights_are_refused_and_the_corpus_encoded(shipped, tmp_path, monkeypatch, capsys):
    bench, judge, ids, oracle, root, written = shipped
    for label, edit, prefix in [
        ("flipped", _flip_byte, "damaged:"),
        ("no-scales", lambda d: (d / SCALES_FILE).unlink(), "damaged:"),
        ("weights", _edit_manifest("weights_sha256", "0" * 64), "weights changed"),
        ("spec", _edit_manifest("spec_hash", "0" * 64), "retriever spec changed"),
    ]:
        xb, reasons = read_prebuilt(bench, judge, ids, root=_copy(written, tmp_path, label, edit))
        assert xb is None and any(r.startswith(prefix) for r in reasons), (label, reasons)
    # through the eval path: refused, said once, and the corpus encoded instead (equal to the oracle)
    encodes = []
    real_encode = index_build.encode_corpus
    monkeypatch.setattr(index_build, "encode_corpus", lambda *a, **k: encodes.append(1) or real_encode(*a, **k))
    shutil.rmtree(root / "cache" / "embeddings", ignore_errors=True)
    monkeypatch.setenv("CIR_DEMO_PREBUILT", str(tmp_path / "flipped"))
    xb = index_build.cached_encode_corpus(bench, ids, judge, progress=False)
    assert encodes == [1]
    assert "prebuilt corpus embeddings for world-verifier not used (damaged:" in capsys.readouterr().err
    np.testing.assert_allclose(xb, oracle, atol=0.02)  # a code step apart at most (batch-dependent last bits)
    shutil.rmtree(root / "cache" / "embeddings", ignore_errors=True)


def _rewrite_codes(d, change):
    """Edit the stored codes and rewrite their record, as a hand edit that keeps the checks quiet would."""
    from cir_demo.integrity import file_record

    codes = codes_of_planes(np.load(io.BytesIO(lzma.decompress((d / CODES_FILE).read_bytes()))))
    change(codes)
    buf = io.BytesIO()
    np.save(buf, code_planes(codes))
    (d / CODES_FILE).write_bytes(lzma.compress(buf.getvalue()))
    m = json.loads((d / "manifest.json").read_text())
    m["files"][CODES_FILE] = file_record(d / CODES_FILE)
    (d / "manifest.json").write_text(json.dumps(m))


def test_check_re_encodes_a_slice_allows_a_rounding_step_and_finds_edits(shipped, tmp_path):
    bench, judge, ids, _, root, written = shipped
    tower = image_encoder(judge)

    def one_step(codes):
        codes[0, np.argmax(np.abs(codes[0]) < 100)] += 1

    def sign_flip(codes):
        codes[::7] = -codes[::7]

    start = time.perf_counter()
    assert slice_problems(bench, judge, ids, written) == []
    assert time.perf_counter() - start < 60
    for label, change, ok in [("one-step", one_step, True), ("edited", sign_flip, False)]:
        d = (
            _copy(written, tmp_path, label, lambda d, change=change: _rewrite_codes(d, change))
            / written.parent.name
            / written.name
        )
        assert prebuilt_problems(d, bench, tower, ids) == [], label  # the records agree: only the slice can tell
        found = slice_problems(bench, judge, ids, d)
        assert (found == []) == ok, (label, found)
        if not ok:
            assert found[0].startswith(f"content: {d / CODES_FILE}: codes of 16 corpus images differ")


def test_the_app_engine_adopts_the_shipped_rows_after_loading_not_while(shipped, monkeypatch):
    """The app's engine (`encode_reranker_corpus` off) loads the judge without decoding the codes (its
    start is not held up); the loader's later call hands the judge the shipped rows."""
    from cir_demo.engine import RetrievalEngine

    bench, _, ids, oracle, root, _ = shipped
    shutil.rmtree(root / "cache" / "embeddings", ignore_errors=True)
    monkeypatch.setenv("CIR_DEMO_PREBUILT", str(root / "prebuilt"))
    app = RetrievalEngine(bench, [], progress=False, encode_reranker_corpus=False)
    judge = app.reranker("world-verifier")
    assert judge.needs_image(ids[0])
    assert app.adopt_stored_features("world-verifier")
    assert not any(judge.needs_image(i) for i in ids)
    np.testing.assert_array_equal(judge._feats, oracle)
    app.close()


@pytest.mark.slow
def test_committed_judge_codes_match_the_default_world_and_the_weights(default_world_cache, monkeypatch):
    """The world judge's codes in indexes/prebuilt/ (once committed) pass every check for the default
    world and the committed judge, and a re-encoded slice gives their codes. When this fails, rebuild
    them: python -m cir_demo index prebuilt --only embeddings."""
    from cir_demo.rerank import load_reranker
    from cir_demo.world import load_world

    monkeypatch.delenv("CIR_DEMO_PREBUILT", raising=False)
    bench = load_world(progress=False)
    judge = load_reranker("world-verifier")
    tower, ids = image_encoder(judge), list(bench.corpus_ids)
    directory = prebuilt_dir(bench, tower)
    if not directory.is_dir():
        pytest.skip(f"{directory} not committed yet (python -m cir_demo index prebuilt --only embeddings)")
    assert prebuilt_problems(directory, bench, tower, ids) == []
    assert slice_problems(bench, judge, ids, directory) == []
