"""Building, checking and loading corpus indexes with a tiny real model."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from cir_demo.index import build as build_mod
from cir_demo.index.build import build_corpus_index, ensure_index
from cir_demo.index.corpus_encode import encode_corpus
from cir_demo.index.faiss_index import brute_force_search, index_kind
from cir_demo.index.manifest import (
    IDS_FILE,
    INDEX_FILE,
    MANIFEST_FILE,
    IndexManifest,
    MissingIndexError,
    StaleIndexError,
    check_index,
    corpus_checksum,
    index_dir,
    list_indexes,
    load_index,
    read_manifest,
    recover_dir,
    safe_component,
)
from cir_demo.testing.tiny_index import TinyConvRetriever, tiny_benchmark


@pytest.fixture()
def out(tmp_path, monkeypatch) -> Path:
    """An index folder in the project's indexes folder (a damaged one there is the project's to rebuild)."""
    monkeypatch.setenv("CIR_DEMO_INDEXES", str(tmp_path / "indexes"))
    return tmp_path / "indexes" / "tinybench" / "tiny-conv"


def encode_directly(bench, retriever) -> np.ndarray:
    """Reference embeddings: every corpus image encoded on its own (no batching, no index code)."""
    return np.concatenate([retriever.encode_images([bench.images.open(i)]) for i in bench.corpus_ids])


def test_build_writes_layout_and_search_equals_brute_force(out):
    bench, r = tiny_benchmark(45), TinyConvRetriever()
    t0 = time.perf_counter()
    loaded = build_corpus_index(bench, r, out_dir=out, batch_size=8, progress=False)
    took = time.perf_counter() - t0
    assert sorted(p.name for p in out.iterdir()) == sorted([INDEX_FILE, IDS_FILE, MANIFEST_FILE])
    assert json.loads((out / IDS_FILE).read_text()) == bench.corpus_ids
    m = read_manifest(out)
    assert (m.benchmark, m.retriever, m.kind, m.count, m.dim) == ("tinybench", "tiny-conv", "flat", 45, 16)
    assert m.spec_hash == r.spec_hash() and m.weights_sha256 == "seed-0"
    assert m.corpus_sha256 == corpus_checksum(bench.corpus_ids)
    assert set(m.library_versions) == {"faiss", "numpy", "torch", "cir_demo"} and m.library_versions["faiss"]
    assert 0 < m.build_seconds <= round(took, 3) + 0.001 and m.built_at.endswith("+00:00")  # the build's own time (ms)
    # The stored vectors are the model's embeddings, row i = corpus id i.
    ref = encode_directly(bench, TinyConvRetriever())
    np.testing.assert_allclose(loaded.index.reconstruct_n(0, 45), ref, atol=1e-6)
    # Search through the loaded index equals brute force over the reference embeddings.
    xq = r.encode_images([bench.images.open(i) for i in ("img0003", "img0040", "zzz-not-in-corpus")])
    _, I_bf = brute_force_search(xq, ref, 5)
    for (ids, scores), bf_row in zip(load_index(out, r, bench.corpus_ids).search(xq, 5), I_bf):
        assert ids == [bench.corpus_ids[j] for j in bf_row]
        assert np.all(np.diff(scores) <= 1e-6)
    assert load_index(out).search(xq[:1], 1)[0][0] == ["img0003"]  # an image finds itself


def test_search_strips_padding_when_k_exceeds_corpus(out):
    bench, r = tiny_benchmark(4), TinyConvRetriever()
    loaded = build_corpus_index(bench, r, out_dir=out, progress=False)
    ids, scores = loaded.search(r.encode_images([bench.images.open("img0000")]), 10)[0]
    assert sorted(ids) == sorted(bench.corpus_ids) and len(scores) == 4 and np.isfinite(scores).all()


def test_fresh_index_is_not_rebuilt_and_force_rebuilds(out):
    bench, r = tiny_benchmark(20), TinyConvRetriever()
    build_corpus_index(bench, r, out_dir=out, progress=False)
    assert r.images_encoded == 20
    first = read_manifest(out).built_at, (out / INDEX_FILE).stat().st_ino
    build_corpus_index(bench, r, out_dir=out, progress=False)
    ensure_index(bench, r, out_dir=out, progress=False)
    assert r.images_encoded == 20  # nothing re-encoded
    assert ((out / INDEX_FILE).stat().st_ino) == first[1]
    build_corpus_index(bench, r, out_dir=out, progress=False, force=True)
    assert r.images_encoded == 40


def test_staleness_reasons(out):
    bench, r = tiny_benchmark(20), TinyConvRetriever(seed=0)
    build_corpus_index(bench, r, out_dir=out, progress=False)
    assert check_index(out, r, bench.corpus_ids) == []

    other_seed = TinyConvRetriever(seed=1)
    reasons = check_index(out, other_seed, bench.corpus_ids)
    assert any(x.startswith("retriever spec changed") and "seed" in x for x in reasons)
    assert any(x.startswith("weights changed") for x in reasons)

    assert any(x.startswith("dim mismatch") for x in check_index(out, TinyConvRetriever(dim=8), bench.corpus_ids))
    renamed = TinyConvRetriever()
    renamed.name = "other"
    assert any(x.startswith("retriever changed") for x in check_index(out, renamed, bench.corpus_ids))

    reordered = bench.corpus_ids[::-1]
    assert [x for x in check_index(out, r, reordered) if x.startswith("corpus changed")]
    grown = bench.corpus_ids + ["img9999"]
    (reason,) = check_index(out, r, grown)
    assert reason.startswith("corpus changed") and "20 images" in reason and "21" in reason

    # A library major version change is stale; a minor one is not.
    m = json.loads((out / MANIFEST_FILE).read_text())
    current = m["library_versions"]["faiss"]
    m["library_versions"]["faiss"] = f"{int(current.split('.')[0]) + 1}.0.0"
    (out / MANIFEST_FILE).write_text(json.dumps(m))
    (reason,) = check_index(out, r, bench.corpus_ids)
    assert reason.startswith("library major version change: faiss")
    m["library_versions"]["faiss"] = current.split(".")[0] + ".999.0"
    (out / MANIFEST_FILE).write_text(json.dumps(m))
    assert check_index(out, r, bench.corpus_ids) == []


def test_missing_and_damaged_indexes(out, tmp_path):
    r, bench = TinyConvRetriever(), tiny_benchmark(6)
    assert check_index(tmp_path / "nothing", r)[0].startswith("missing: no index at")
    with pytest.raises(MissingIndexError):
        load_index(tmp_path / "nothing", allow_stale=True)
    build_corpus_index(bench, r, out_dir=out, progress=False)
    (out / MANIFEST_FILE).write_text("{not json")
    (reason,) = check_index(out, r, bench.corpus_ids)
    assert reason.startswith("unreadable manifest") and MANIFEST_FILE in reason
    with pytest.raises(StaleIndexError, match="unreadable manifest"):
        load_index(out, allow_stale=True)
    # A damaged index is rebuilt by ensure_index even when stale indexes are allowed.
    loaded = ensure_index(bench, r, out_dir=out, progress=False, allow_stale=True)
    assert loaded.ids == bench.corpus_ids and not loaded.is_stale
    (out / IDS_FILE).write_text(json.dumps(bench.corpus_ids[:-1]))
    with pytest.raises(StaleIndexError, match="damaged"):
        load_index(out)
    (out / INDEX_FILE).unlink()
    assert check_index(out, r) == [f"missing: {INDEX_FILE} not found in {out}"]


def test_stale_index_is_refused_unless_allowed_and_rebuilt_by_build(out):
    bench, r = tiny_benchmark(12), TinyConvRetriever(seed=0)
    build_corpus_index(bench, r, out_dir=out, progress=False)
    new_model = TinyConvRetriever(seed=5)
    with pytest.raises(StaleIndexError) as err:
        load_index(out, new_model, bench.corpus_ids)
    assert any("spec changed" in x for x in err.value.reasons) and str(out) in str(err.value)
    served = ensure_index(bench, new_model, out_dir=out, allow_stale=True, progress=False)
    assert served.is_stale and new_model.images_encoded == 0  # the app says what is stale, nothing rebuilt
    rebuilt = ensure_index(bench, new_model, out_dir=out, progress=False)
    assert not rebuilt.is_stale and new_model.images_encoded == 12
    assert read_manifest(out).spec_hash == new_model.spec_hash()
    np.testing.assert_allclose(
        rebuilt.index.reconstruct_n(0, 12), encode_directly(bench, TinyConvRetriever(seed=5)), atol=1e-6
    )


def test_interrupted_build_leaves_previous_index_intact(out):
    bench = tiny_benchmark(30)
    build_corpus_index(bench, TinyConvRetriever(seed=0), out_dir=out, batch_size=8, progress=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    failing = TinyConvRetriever(seed=7, fail_after=16)  # dies on the third batch of 8
    with pytest.raises(RuntimeError, match="simulated failure"):
        build_corpus_index(bench, failing, out_dir=out, batch_size=8, progress=False)
    assert failing.images_encoded == 16
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in out.parent.iterdir() if not p.name.endswith(".lock")) == [out.name]  # no temp dirs
    assert load_index(out, TinyConvRetriever(seed=0), bench.corpus_ids).ids == bench.corpus_ids


def test_failure_while_writing_leaves_previous_index_intact(out, monkeypatch):
    bench = tiny_benchmark(10)
    build_corpus_index(bench, TinyConvRetriever(seed=0), out_dir=out, progress=False)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken_write(tmp, index, ids, manifest):
        (tmp / INDEX_FILE).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(build_mod, "write_index_files", broken_write)
    with pytest.raises(OSError, match="disk full"):
        build_corpus_index(bench, TinyConvRetriever(seed=1), out_dir=out, progress=False)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_crash_between_the_two_renames_is_recovered(out):
    bench, r = tiny_benchmark(8), TinyConvRetriever()
    build_corpus_index(bench, r, out_dir=out, progress=False)
    # Simulate a crash after "index -> .index.old-*" and before "tmp -> index".
    parked = out.with_name(f".{out.name}.old-0123abcd")
    os.rename(out, parked)
    assert check_index(out, r, bench.corpus_ids) == []  # recovered on read
    assert out.is_dir() and not parked.exists()
    # Crash after the second rename: the parked copy is garbage and is removed.
    parked.mkdir()
    recover_dir(out)
    assert not parked.exists()


def test_kind_and_params_changes_rebuild_and_none_keeps_disk_kind(out):
    bench, r = tiny_benchmark(60), TinyConvRetriever()
    hnsw = build_corpus_index(bench, r, out_dir=out, kind="hnsw", progress=False, M=8, efSearch=64)
    assert index_kind(hnsw.index) == "hnsw" and hnsw.manifest.params == {"M": 8, "efConstruction": 80, "efSearch": 64}
    assert r.images_encoded == 60
    ensure_index(bench, r, out_dir=out, progress=False)  # kind=None: any kind on disk is fine
    assert r.images_encoded == 60
    build_corpus_index(bench, r, out_dir=out, kind="hnsw", progress=False, M=8, efSearch=32)
    assert r.images_encoded == 120 and read_manifest(out).params["efSearch"] == 32
    flat = build_corpus_index(bench, r, out_dir=out, progress=False)
    assert index_kind(flat.index) == "flat" and r.images_encoded == 180


def test_bad_requests_fail_before_encoding(out):
    bench, r = tiny_benchmark(10), TinyConvRetriever()
    with pytest.raises(ValueError, match="takes no parameter"):
        build_corpus_index(bench, r, out_dir=out, kind="flat", progress=False, nprobe=4)
    with pytest.raises(ValueError, match="unknown index kind"):
        build_corpus_index(bench, r, out_dir=out, kind="lsh", progress=False)
    assert r.images_encoded == 0
    dup = tiny_benchmark(5)
    dup.corpus_ids.append("img0001")
    with pytest.raises(ValueError, match="'img0001' appears twice \\(position 5\\)"):
        build_corpus_index(dup, r, out_dir=out, progress=False)
    no_images = tiny_benchmark(3)
    no_images.images = None
    with pytest.raises(ValueError, match="has no image store"):
        build_corpus_index(no_images, r, out_dir=out, progress=False)


def test_encoder_contract_violations_are_named():
    bench = tiny_benchmark(5)

    class Unnormalised(TinyConvRetriever):
        def encode_images(self, images, batch_size=None):
            return 2 * super().encode_images(images)

    with pytest.raises(ValueError, match="not L2-normalised"):
        encode_corpus(bench.images, bench.corpus_ids, Unnormalised(), progress=False)

    class Broken:
        def open(self, image_id):
            raise FileNotFoundError(f"/data/{image_id}.jpg")

    with pytest.raises(RuntimeError, match="cannot open corpus image 'img0000'"):
        encode_corpus(Broken(), bench.corpus_ids, TinyConvRetriever(), progress=False)


def test_encode_corpus_batches_agree_with_one_at_a_time():
    bench = tiny_benchmark(23)
    full = encode_corpus(bench.images, bench.corpus_ids, TinyConvRetriever(), batch_size=5, progress=False)
    np.testing.assert_allclose(full, encode_directly(bench, TinyConvRetriever()), atol=1e-6)
    assert encode_corpus(bench.images, [], TinyConvRetriever(), progress=False).shape == (0, 16)


def test_manifest_round_trip_and_validation():
    m = IndexManifest(
        benchmark="b",
        retriever="r",
        retriever_spec={"a": 1},
        spec_hash="h",
        weights_sha256=None,
        corpus_sha256="c",
        dim=4,
        count=2,
        kind="flat",
        params={},
        library_versions={},
        built_at="t",
        build_seconds=1.5,
    )
    assert IndexManifest.from_dict(json.loads(json.dumps(m.to_dict()))) == m
    with pytest.raises(ValueError, match="missing field\\(s\\) count"):
        IndexManifest.from_dict({k: v for k, v in m.to_dict().items() if k != "count"}, "x/manifest.json")
    with pytest.raises(ValueError, match="unknown field\\(s\\) colour"):
        IndexManifest.from_dict({**m.to_dict(), "colour": 1})
    with pytest.raises(ValueError, match="field 'dim' must be int"):
        IndexManifest.from_dict({**m.to_dict(), "dim": "4"})


def test_corpus_checksum_is_order_and_boundary_sensitive():
    assert corpus_checksum(["a", "b"]) != corpus_checksum(["b", "a"])
    assert corpus_checksum(["a,b"]) != corpus_checksum(["a", "b"])
    assert corpus_checksum(["ab"]) != corpus_checksum(["a", "b"])
    assert corpus_checksum([]) == corpus_checksum(())
    with pytest.raises(ValueError, match="position 1"):
        corpus_checksum(["a", 3])


def test_index_dir_layout_and_listing(tmp_path, monkeypatch):
    monkeypatch.setenv("CIR_DEMO_INDEXES", str(tmp_path / "idx"))
    assert index_dir("world", "clip-b32") == tmp_path / "idx" / "world" / "clip-b32"
    odd = safe_component("openai/clip ViT")
    assert "/" not in odd and " " not in odd and odd != safe_component("openai_clip_ViT")
    assert safe_component("..") != ".." and safe_component(".hidden") != ".hidden"
    bench, r = tiny_benchmark(5), TinyConvRetriever()
    build_corpus_index(bench, r, progress=False)  # default location
    assert list_indexes() == [tmp_path / "idx" / "tinybench" / "tiny-conv"]


def test_weights_checksum_forms():
    from cir_demo.index.manifest import weights_checksum

    assert weights_checksum({"weights_sha256": "abc"}) == "abc"
    assert weights_checksum({"weights": {"path": "/w.safetensors", "sha256": "def"}}) == "def"
    assert weights_checksum({"weights": {"tag": "openai"}}) is None and weights_checksum({}) is None
    shards = weights_checksum({"weights": {"sha256": {"a.bin": "1", "b.bin": "2"}}})
    assert shards == weights_checksum({"weights": {"sha256": {"b.bin": "2", "a.bin": "1"}}})  # order-free
    assert shards != weights_checksum({"weights": {"sha256": {"a.bin": "1", "b.bin": "3"}}})
    assert len(shards) == 64


def test_corpus_fingerprint_and_index_name_from_benchmark_info(tmp_path, monkeypatch):
    from cir_demo.index.build import default_index_dir

    monkeypatch.setenv("CIR_DEMO_INDEXES", str(tmp_path / "idx"))
    bench, r = tiny_benchmark(6), TinyConvRetriever()
    bench.info.update(checksum="world-v1", index_name="tinybench-small-s0")
    out = default_index_dir(bench, r)
    assert out == tmp_path / "idx" / "tinybench-small-s0" / "tiny-conv"
    build_corpus_index(bench, r, progress=False)
    assert read_manifest(out).corpus_fingerprint == "world-v1"
    # Same ids, different pixels (another world seed): stale, and rebuilt.
    bench.info["checksum"] = "world-v2"
    (reason,) = check_index(out, r, bench.corpus_ids, "world-v2")
    assert reason.startswith("corpus images changed")
    ensure_index(bench, r, progress=False)
    assert r.images_encoded == 12 and read_manifest(out).corpus_fingerprint == "world-v2"
    bench.info["corpus_fingerprint"] = "explicit"  # an explicit fingerprint wins over the checksum
    ensure_index(bench, r, progress=False)
    assert read_manifest(out).corpus_fingerprint == "explicit"


def test_rebuild_keeps_disk_kind_and_refits_parameters_to_a_shrunken_corpus(out):
    bench, r = tiny_benchmark(100), TinyConvRetriever()
    build_corpus_index(bench, r, out_dir=out, kind="ivf", nlist=50, nprobe=50, progress=False)
    assert read_manifest(out).params == {"nlist": 50, "nprobe": 50, "train_size": 100}
    small = tiny_benchmark(40)
    loaded = ensure_index(small, r, out_dir=out, progress=False)  # stale (corpus changed): rebuilt as ivf
    m = read_manifest(out)
    assert m.kind == "ivf" and m.count == 40 and m.params["nlist"] <= 40
    # An IVF index probing every list is exact: compare with brute force.
    from cir_demo.index.faiss_index import set_search_params

    set_search_params(loaded.index, nprobe=m.params["nlist"])
    ref = encode_directly(small, TinyConvRetriever())
    _, I_bf = brute_force_search(ref[:5], ref, 3)
    assert [ids for ids, _ in loaded.search(ref[:5], 3)] == [[small.corpus_ids[j] for j in row] for row in I_bf]
