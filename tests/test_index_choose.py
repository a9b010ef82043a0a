"""The index kind chosen by corpus size, dimension and memory budget; every kind's search against
brute-force NumPy; manifests written before kinds were chosen."""

from __future__ import annotations

import json
import math

import faiss
import numpy as np
import pytest

from cir_demo.index import build as build_mod
from cir_demo.index import choose as choose_mod
from cir_demo.index.build import build_corpus_index, ensure_index
from cir_demo.index.choose import FLAT_MAX_WORK, FLAT_MIN_VECTORS, choose_index, flat_limit
from cir_demo.index.faiss_index import brute_force_search, build_index, index_kind, recall_at_k, search
from cir_demo.index.kinds import INDEX_KINDS, bytes_per_vector, factory_string, resolve_params
from cir_demo.index.manifest import MANIFEST_FILE, StaleIndexError, check_index, load_index, read_manifest
from cir_demo.testing.tiny_index import TinyConvRetriever, tiny_benchmark

GIB = 2**30


@pytest.fixture(autouse=True)
def one_faiss_thread():
    """faiss on one thread: on a loaded machine its OpenMP threads spin-wait for each other (training
    the small ivfpq indexes here took 18 s on two threads, 0.6 s on one); results are the same."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def test_flat_up_to_the_limit_then_ivfpq():
    for d in (128, 512, 768, 1024, 3584):
        limit = flat_limit(d)
        assert limit == max(FLAT_MIN_VECTORS, FLAT_MAX_WORK // d)
        assert choose_index(limit, d).kind == "flat"
        above = choose_index(limit + 1, d)
        assert above.kind == "ivfpq" and above.factory.startswith("IVF") and above.factory.endswith(",RFlat")
    assert flat_limit(768) == 349_525 and flat_limit(3584) == FLAT_MIN_VECTORS
    # the offline world (5-20k images, 128-d) and PinPoint (109,600 images, up to 3,584-d) stay exact
    for n, d in ((5_000, 128), (6_809, 128), (20_000, 512), (109_600, 768), (109_600, 3584)):
        c = choose_index(n, d)
        assert (c.kind, c.params, c.factory) == ("flat", {}, "Flat") and c.reason.startswith("exact")


def test_parameters_grow_with_the_corpus():
    c = choose_index(1_000_000, 768)
    assert c.params == {
        "nlist": 4096,
        "nprobe": 256,
        "train_size": 40 * 4096,
        "M": 32,
        "quantizer_efSearch": 512,
        "pq_m": 192,
        "k_factor": 16,
        "refine_bits": 32,
    }
    assert c.factory == "IVF4096_HNSW32,PQ192x4fs,RFlat" and c.memory_bytes == 1_000_000 * (4 * 768 + 96 + 8)
    for n in (400_000, 1_000_000, 3_000_000, 10_000_000):
        p = choose_index(n, 768).params
        assert p["nlist"] == 2 ** round(math.log2(4 * math.sqrt(n)))  # the power of two nearest 4 sqrt(n)
        assert p["nprobe"] == p["nlist"] // 16 and p["train_size"] == 40 * p["nlist"]
        assert p["quantizer_efSearch"] == max(32, 2 * p["nprobe"])
    assert choose_index(10_000_000, 768).factory == "IVF16384_HNSW32,PQ192x4fs,RFlat"


def test_memory_budget_picks_compressed_codes_or_says_it_cannot():
    full = 1_000_000 * (4 * 768 + 96 + 8)
    assert choose_index(1_000_000, 768, memory_budget=full).params["refine_bits"] == 32
    small = choose_index(1_000_000, 768, memory_budget=full - 1)
    assert small.kind == "ivfpq" and small.params["refine_bits"] == 8 and small.params["pq_m"] == 192
    assert small.factory == "IVF4096_HNSW32,PQ192x4fs,Refine(SQ8)"
    assert small.memory_bytes == 1_000_000 * (768 + 96 + 8) and "memory budget" in small.reason
    with pytest.raises(ValueError, match=r"1,000,000 x 768 vectors needs at least 832 MiB .* memory budget of 512 MiB"):
        choose_index(1_000_000, 768, memory_budget=GIB // 2)
    # a small corpus whose float32 rows exceed the budget is compressed too, never refused silently
    assert choose_index(20_000, 768, memory_budget=20_000 * 900).kind == "ivfpq"


@pytest.mark.parametrize("bad", [(-1, 768, None), (10, 0, None), (10, 768, 0), (1.5, 768, None), (True, 768, None)])
def test_bad_arguments_are_named(bad):
    with pytest.raises(ValueError, match="choose_index: (corpus size|dimension|memory budget)"):
        choose_index(*bad)


def test_choice_follows_the_documented_rule_and_resolves_like_the_kind():
    # docs/indexes.md's rule, by hand: flat while n <= max(250,000, 2**28 / d) (524,288 at 512-d); above
    # it ivfpq with nlist the power of two nearest 4*sqrt(n) (4*sqrt(2M) = 5,657 -> 4,096), nprobe
    # nlist/16, k_factor 16
    big = choose_index(2_000_000, 512)
    assert (big.kind, big.factory) == ("ivfpq", "IVF4096_HNSW32,PQ128x4fs,RFlat")
    assert {k: big.params[k] for k in ("nlist", "nprobe", "k_factor", "pq_m")} == {
        "nlist": 4096,
        "nprobe": 256,
        "k_factor": 16,
        "pq_m": 128,
    }
    assert choose_index(524_288, 512).kind == "flat" and choose_index(524_289, 512).kind == "ivfpq"
    for n, d, budget in ((10, 4, None), (400_000, 768, None), (1_000_000, 768, GIB)):
        c = choose_index(n, d, budget)
        assert c.params == resolve_params(c.kind, n, d, **c.params) and c.factory == factory_string(c.kind, c.params)
        assert c.memory_bytes == int(n * bytes_per_vector(c.kind, c.params, d))


def clustered(n: int, d: int, seed: int, centres: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = centres[rng.integers(0, len(centres), n)] + 1.0 * rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    centres = np.random.default_rng(0).standard_normal((40, 32))
    return clustered(4000, 32, 1, centres), clustered(60, 32, 2, centres)


# (kind, parameters, least recall@10 against brute force): the defaults, and settings that visit every list
CASES = [
    ("flat", {}, 1.0),
    ("ivf", {}, 0.9),
    ("hnsw", {}, 0.95),
    ("ivf_hnsw", {"nprobe": 16}, 0.9),
    ("ivf_hnsw", {"nlist": 64, "nprobe": 64, "quantizer_efSearch": 64}, 1.0),
    ("ivfpq", {"nprobe": 16, "k_factor": 8}, 0.9),
    ("ivfpq", {"nlist": 64, "nprobe": 64, "quantizer_efSearch": 64, "k_factor": 16}, 0.97),
    ("ivfpq", {"nlist": 64, "nprobe": 64, "quantizer_efSearch": 64, "k_factor": 16, "refine_bits": 8}, 0.95),
]


@pytest.mark.parametrize("kind,params,least", CASES)
def test_every_kind_against_brute_force(data, kind, params, least):
    xb, xq = data
    index = build_index(xb, kind, **params)
    assert index_kind(index) == kind
    D, I = search(index, xq, 10)
    D_bf, I_bf = brute_force_search(xq, xb, 10)
    recall = recall_at_k(I, I_bf, 10)
    assert recall >= least, f"{kind} {params}: recall@10 {recall:.3f} < {least}"
    if kind == "flat":  # exact: the same ids in the same order (random data has no ties), the same scores
        np.testing.assert_array_equal(I, I_bf)
        np.testing.assert_allclose(D, D_bf, atol=1e-5)
    if least == 1.0 or kind == "ivfpq" and params.get("refine_bits", 32) == 32:
        # exact re-ranking (or exhaustive flat lists): every returned score is the true inner product
        found = I >= 0
        true = np.einsum("qd,qkd->qk", xq.astype(np.float64), xb[np.where(found, I, 0)].astype(np.float64))
        np.testing.assert_allclose(D[found], true[found], atol=1e-4)


def test_flat_is_the_index_it_always_was(data):
    """The world's indexes (flat) are built from the factory string "Flat" now: the same file, bit for bit,
    as the IndexFlatIP built before, so rankings and --eval outputs do not change."""
    xb, xq = data
    before = faiss.IndexFlatIP(xb.shape[1])
    before.add(xb)
    now = build_index(xb, "flat")
    assert bytes(faiss.serialize_index(now)) == bytes(faiss.serialize_index(before))
    for a, b in zip(search(now, xq, 20), search(before, xq, 20)):
        np.testing.assert_array_equal(a, b)


def test_fewer_probes_lose_neighbours(data):
    xb, xq = data
    _, I_bf = brute_force_search(xq, xb, 10)
    recalls = []
    for nprobe in (1, 4, 64):
        index = build_index(xb, "ivf_hnsw", nlist=64, nprobe=nprobe, quantizer_efSearch=64)
        recalls.append(recall_at_k(search(index, xq, 10)[1], I_bf, 10))
    assert recalls[0] < recalls[1] < recalls[2] == 1.0


def test_kind_parameters_are_checked():
    assert set(INDEX_KINDS) == {"flat", "ivf", "hnsw", "ivf_hnsw", "ivfpq"}
    with pytest.raises(ValueError, match="pq_m=5 must divide the dimension 32"):
        resolve_params("ivfpq", 1000, 32, pq_m=5)
    with pytest.raises(ValueError, match="refine_bits must be 32 .* or 8"):
        resolve_params("ivfpq", 1000, 32, refine_bits=16)
    with pytest.raises(ValueError, match="'ivf_hnsw' takes no parameter\\(s\\) efSearch"):
        resolve_params("ivf_hnsw", 1000, 32, efSearch=5)
    assert resolve_params("ivfpq", 1000, 30)["pq_m"] == 15  # d/4 does not divide 30: d/2


def tiny(monkeypatch, n: int):
    """A tiny benchmark and retriever; a flat limit below `n` so that `auto` builds an ivfpq index."""
    monkeypatch.setattr(choose_mod, "FLAT_MIN_VECTORS", n - 1)
    monkeypatch.setattr(choose_mod, "FLAT_MAX_WORK", 1)
    return tiny_benchmark(n), TinyConvRetriever()


def test_auto_records_the_choice_and_keeps_it(tmp_path, monkeypatch):
    out = tmp_path / "idx"
    bench, r = tiny_benchmark(30), TinyConvRetriever()
    m = build_corpus_index(bench, r, out_dir=out, progress=False).manifest
    assert (m.kind, m.factory) == ("flat", "Flat") and m.choice.startswith("auto: exact: 30 x 16")
    bench, r = tiny(monkeypatch, 80)
    loaded = build_corpus_index(bench, r, out_dir=out, progress=False)  # kind "auto": the limit moved
    m = read_manifest(out)
    assert m.kind == "ivfpq" and m.factory == f"IVF{m.params['nlist']}_HNSW32,PQ4x4fs,RFlat"
    assert index_kind(loaded.index) == m.kind
    assert "above the flat limit" in m.choice and r.images_encoded == 80
    ensure_index(bench, r, out_dir=out, progress=False)  # kind=None and kind="auto": fresh, kept
    build_corpus_index(bench, r, out_dir=out, kind="auto", progress=False)
    assert r.images_encoded == 80
    again = load_index(out, r, bench.corpus_ids)
    # query-time parameters come from the manifest
    assert faiss.extract_index_ivf(again.index).nprobe == m.params["nprobe"] and again.index.k_factor == 16
    ids, _ = again.search(r.encode_images([bench.images.open(bench.corpus_ids[3])]), 5)[0]
    assert ids[0] == bench.corpus_ids[3]


def test_a_requested_kind_is_kept_and_auto_replaces_it(tmp_path, monkeypatch):
    out = tmp_path / "idx"
    bench, r = tiny(monkeypatch, 60)
    build_corpus_index(bench, r, out_dir=out, kind="hnsw", progress=False, M=8)
    assert read_manifest(out).choice == "requested"
    kind, _, choice = build_mod.plan_rebuild(out, None, 60, 16, {})
    assert (kind, choice) == ("hnsw", "requested")  # kind=None keeps a kind that was asked for
    build_corpus_index(bench, r, out_dir=out, kind="auto", progress=False)
    assert read_manifest(out).kind == "ivfpq" and r.images_encoded == 120


def strip_new_fields(out, **changes) -> None:
    """The manifest as code before kinds were chosen wrote it (no factory, no choice), plus `changes`."""
    data = json.loads((out / MANIFEST_FILE).read_text())
    data.pop("factory"), data.pop("choice")
    data.update(changes)
    (out / MANIFEST_FILE).write_text(json.dumps(data))


def test_manifests_from_before_load_or_are_stale_with_a_reason(tmp_path):
    out = tmp_path / "idx"
    bench, r = tiny_benchmark(40), TinyConvRetriever()
    build_corpus_index(bench, r, out_dir=out, progress=False)
    strip_new_fields(out)
    assert check_index(out, r, bench.corpus_ids) == []
    assert load_index(out, r, bench.corpus_ids).manifest.choice is None
    assert build_mod.plan_rebuild(out, None, 40, 16, {})[0] == "flat"  # an old flat index: auto (flat was the default)
    ensure_index(bench, r, out_dir=out, progress=False)
    assert r.images_encoded == 40  # served, not rebuilt
    # an old ivf index keeps its kind and parameters
    build_corpus_index(bench, r, out_dir=out, kind="ivf", nlist=2, progress=False)
    strip_new_fields(out)
    assert load_index(out, r, bench.corpus_ids).manifest.params["nlist"] == 2
    assert build_mod.plan_rebuild(out, None, 40, 16, {})[:2] == ("ivf", {"nlist": 2, "nprobe": 1, "train_size": 40})


@pytest.mark.parametrize(
    "changes,reason,rebuilt_kind",
    [
        ({"kind": "annoy"}, "index kind unknown: 'annoy' is none of flat, ivf, hnsw, ivf_hnsw, ivfpq", "flat"),
        ({"kind": "ivf", "params": {"nlist": 0}}, "index parameters invalid: index kind 'ivf': parameter nlist", "ivf"),
        (
            {"kind": "hnsw", "params": {}},
            "damaged: index.faiss holds a 'flat' index, the manifest records 'hnsw'",
            "hnsw",
        ),
    ],
)
def test_unknown_kinds_are_stale_never_a_crash(tmp_path, changes, reason, rebuilt_kind):
    out = tmp_path / "idx"
    bench, r = tiny_benchmark(20), TinyConvRetriever()
    build_corpus_index(bench, r, out_dir=out, progress=False)
    strip_new_fields(out, **changes)
    with pytest.raises(StaleIndexError) as err:
        load_index(out, r, bench.corpus_ids)
    assert any(x.startswith(reason) for x in err.value.reasons), err.value.reasons
    if not reason.startswith("damaged"):  # the manifest alone says so: status reports it without loading
        assert any(x.startswith(reason) for x in check_index(out, r, bench.corpus_ids))
    # rebuilt: an unknown kind with the automatic choice, a known one as it was asked for
    rebuilt = ensure_index(bench, r, out_dir=out, progress=False)
    assert rebuilt.manifest.kind == rebuilt_kind and r.images_encoded == 40
