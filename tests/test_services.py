"""The explorer's service layer (cir_demo/services.py), checked against independent oracles:
brute-force retrieval over the index vectors, hand-computed metrics, loops over rankings
for the failure sorts, and hand-built upload files for validation.

Also holds the tiny real models the UI tests share (`register_tiny_models`,
`TinyVerifier`): a randomly initialised open_clip model registered under four recipes,
and a small randomly initialised torch verifier registered as a reranker backend.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("open_clip")

from PIL import Image  # noqa: E402

from cir_demo import services  # noqa: E402
from cir_demo.benchmarks.schema import Judgments, Query  # noqa: E402
from cir_demo.rerank import LogitPairReranker  # noqa: E402
from cir_demo.services import (ServiceConfig, ServiceError, UploadError, failure_scores, filter_queries,  # noqa: E402
                               query_metrics, sort_queries, validate_upload)

TINY_RECIPES = {"fusion": "early_fusion", "image": "image_only", "text": "text_only", "slerp": "slerp"}
VERIFIER = "tiny-test-verifier"


# =========================================================================== shared fixtures
class TinyVerifier(LogitPairReranker):
    """A real (tiny, randomly initialised) torch model judging (references, instruction, candidate):
    a small CNN over the stacked 32 px images plus a hashed bag of instruction words."""

    def __init__(self, seed: int = 0):
        import torch

        torch.manual_seed(seed)
        self.torch = torch
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(9, 8, 3, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
            torch.nn.Linear(8, 2)).eval()
        self.words = torch.nn.EmbeddingBag(64, 2, mode="mean").eval()
        digest = hashlib.sha256()
        for name, tensor in sorted({**self.net.state_dict(), **self.words.state_dict()}.items()):
            digest.update(name.encode())
            digest.update(tensor.numpy().tobytes())
        self.spec = {"backend": VERIFIER, "seed": seed, "weights_sha256": digest.hexdigest()}

    def _pixels(self, image):
        arr = np.asarray(image.convert("RGB").resize((32, 32)), dtype=np.float32) / 255.0
        return self.torch.from_numpy(arr).permute(2, 0, 1)

    def score_logits(self, request, candidate_images):
        torch = self.torch
        refs = [self._pixels(r) for r in request.reference_images]
        ref = torch.cat([refs[0], refs[-1]])
        x = torch.stack([torch.cat([ref, self._pixels(c)]) for c in candidate_images])
        ids = [int(hashlib.md5(w.encode()).hexdigest(), 16) % 64 for w in request.instruction.lower().split()] or [0]
        with torch.inference_mode():
            text = self.words(torch.tensor([ids]))
            return (self.net(x) + text).double().numpy()


def register_tiny_models(folder: Path) -> list[str]:
    """Register the tiny open_clip model under four recipes and the tiny verifier; returns retriever names."""
    from cir_demo.rerank import register_backend
    from cir_demo.retrievers import registry
    from cir_demo.retrievers.testing import build_tiny_open_clip, tiny_open_clip_config

    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / "cir-demo-tiny-clip-seed0.safetensors"
    if not weights.is_file():
        weights = build_tiny_open_clip(folder, seed=0)
    names = []
    for suffix, recipe in TINY_RECIPES.items():
        cfg = tiny_open_clip_config(weights, f"tiny-ui-{suffix}", recipe)
        registry.register_config(cfg, replace=True)
        names.append(cfg["name"])
    register_backend(VERIFIER, f"{TinyVerifier.__module__}:TinyVerifier")
    return names


def unregister_tiny_models(names) -> None:
    from cir_demo.rerank import BACKENDS
    from cir_demo.retrievers import registry

    for n in names:
        registry.unregister(n)
    BACKENDS.pop(VERIFIER, None)


@pytest.fixture(scope="module")
def tiny_setup(tmp_path_factory):
    """Environment (cache, indexes, runs under one shared temp folder) and tiny models."""
    import torch

    threads = torch.get_num_threads()  # the service sets 1 while serving; give the next module its setting back
    root = tmp_path_factory.getbasetemp() / "ui_shared"
    mp = pytest.MonkeyPatch()
    mp.setenv("CIR_DEMO_CACHE", str(root / "cache"))
    mp.setenv("CIR_DEMO_INDEXES", str(root / "indexes"))
    mp.setenv("CIR_DEMO_RUNS", str(root / "runs"))
    names = register_tiny_models(root / "models")
    yield root, names
    unregister_tiny_models(names)
    mp.undo()
    torch.set_num_threads(threads)


def build_tiny_service(names, reranker=VERIFIER, limit_groups=20):
    return services.build_service(ServiceConfig(benchmark="world", benchmark_kwargs={"size": "tiny"},
                                                retrievers=tuple(names), reranker=reranker, warm_thumbnails=False,
                                                limit_groups=limit_groups))


@pytest.fixture(scope="module")
def service(tiny_setup):
    _, names = tiny_setup
    svc = build_tiny_service(names)
    yield svc
    svc.engine.close()


# =========================================================================== upload validation
def save(img, path, **kw):
    img.save(path, **kw)
    return path


def test_upload_plain_jpeg_is_accepted_unchanged_in_size(tmp_path):
    img = Image.new("RGB", (64, 48), (10, 200, 30))
    v = validate_upload(save(img, tmp_path / "a.jpg", quality=95))
    assert v.image.mode == "RGB" and v.image.size == (64, 48)
    assert v.notes == [] and v.name == "a.jpg" and v.content_id.startswith("upload-")
    assert np.abs(np.asarray(v.image, dtype=int) - [10, 200, 30]).max() <= 3


def test_upload_alpha_is_composited_on_white(tmp_path):
    arr = np.zeros((20, 20, 4), np.uint8)
    arr[:, :10] = (255, 0, 0, 255)  # left half opaque red, right half fully transparent
    v = validate_upload(save(Image.fromarray(arr, "RGBA"), tmp_path / "a.png"))
    out = np.asarray(v.image)
    assert tuple(out[5, 2]) == (255, 0, 0) and tuple(out[5, 15]) == (255, 255, 255)
    assert any("white background" in n for n in v.notes)


def test_upload_palette_with_transparency(tmp_path):
    img = Image.new("P", (16, 16), 0)
    img.putpalette([0, 0, 255] + [0, 0, 0] * 255)
    img.info["transparency"] = 0
    v = validate_upload(save(img, tmp_path / "p.png", transparency=0))
    assert tuple(np.asarray(v.image)[0, 0]) == (255, 255, 255)


def test_upload_cmyk_converted(tmp_path):
    img = Image.new("CMYK", (32, 32), (0, 255, 255, 0))  # pure red in CMYK
    v = validate_upload(save(img, tmp_path / "c.jpg", quality=95))
    px = np.asarray(v.image, dtype=int)[10, 10]
    assert px[0] > 200 and px[1] < 60 and px[2] < 60
    assert any("CMYK" in n for n in v.notes)


def test_upload_16bit_grayscale_scaled_to_8bit(tmp_path):
    values = np.array([[0, 257 * 100], [65535, 257 * 17]], dtype=np.uint16).repeat(8, 0).repeat(8, 1)
    img = Image.fromarray(values)
    path = tmp_path / "g16.png"
    img.save(path)
    assert Image.open(path).mode.startswith("I")
    v = validate_upload(path)
    out = np.asarray(v.image)[:, :, 0]
    expected = np.rint(values / 65535.0 * 255).astype(np.uint8)  # oracle: linear rescale
    assert np.array_equal(out, expected)
    assert any("16-bit" in n for n in v.notes)


def test_upload_exif_orientation_applied(tmp_path):
    arr = np.zeros((20, 40, 3), np.uint8)
    arr[:, :20] = (255, 0, 0)  # left red, right blue
    arr[:, 20:] = (0, 0, 255)
    img = Image.fromarray(arr)
    exif = img.getexif()
    exif[0x0112] = 6  # the camera was turned: display rotated 90° clockwise
    v = validate_upload(save(img, tmp_path / "rot.jpg", exif=exif.tobytes(), quality=95))
    assert v.image.size == (20, 40)
    out = np.asarray(v.image, dtype=int)
    assert out[2, 10, 0] > 200 and out[37, 10, 2] > 200  # red on top, blue at the bottom
    assert any("EXIF" in n for n in v.notes)


def test_upload_animated_gif_uses_first_frame(tmp_path):
    frames = [Image.new("RGB", (16, 16), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0)
    v = validate_upload(path)
    px = np.asarray(v.image, dtype=int)[8, 8]
    assert px[0] > 200 and px[1] < 50
    assert any("3 frames" in n for n in v.notes)


def test_upload_large_image_is_shrunk(tmp_path):
    v = validate_upload(save(Image.new("RGB", (2048, 1024), "white"), tmp_path / "big.png"))
    assert v.image.size == (1024, 512) and any("shrunk" in n for n in v.notes)


@pytest.mark.parametrize("kind, expected", [
    ("empty", "empty"), ("text", "not an image"), ("truncated_png", "truncat"), ("truncated_jpeg", "truncat"),
    ("ppm", "not supported"), ("tiny", "too small"), ("bytes", "limit is"), ("pixels", "megapixels"),
    ("bomb_header", "megapixels"), ("garbage_png", "corrupt"),
])
def test_upload_refusals_name_the_file_and_problem(tmp_path, kind, expected):
    path = tmp_path / f"{kind}.bin"
    kw = {}
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "text":
        path.write_text("hello, not an image")
    elif kind in ("truncated_png", "truncated_jpeg"):
        buf = io.BytesIO()
        noise = Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8))
        noise.save(buf, format="PNG" if kind == "truncated_png" else "JPEG")
        path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    elif kind == "ppm":
        Image.new("RGB", (16, 16)).save(path, format="PPM")
    elif kind == "tiny":
        Image.new("RGB", (4, 4)).save(path, format="PNG")
    elif kind == "bytes":
        Image.new("RGB", (64, 64)).save(path, format="PNG")
        kw["max_bytes"] = 50
    elif kind == "pixels":
        Image.new("RGB", (100, 100)).save(path, format="PNG")
        kw["max_pixels"] = 5000
    elif kind == "bomb_header":  # a PNG whose header claims 60000 x 60000 pixels: must be refused unread
        path.write_bytes(png_with_claimed_size(60000, 60000))
    elif kind == "garbage_png":
        good = io.BytesIO()
        Image.new("RGB", (32, 32), "red").save(good, format="PNG")
        data = bytearray(good.getvalue())
        data[60:90] = b"\x00" * 30  # corrupt the compressed stream, keep the length
        path.write_bytes(bytes(data))
    with pytest.raises(UploadError) as err:
        validate_upload(path, name="photo-1.png", **kw)
    assert str(err.value).startswith("photo-1.png: ")
    assert expected in str(err.value).lower()


def png_with_claimed_size(width: int, height: int) -> bytes:
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 10)) + chunk(b"IEND", b"")


def test_upload_content_id_depends_on_pixels_only(tmp_path):
    a = validate_upload(save(Image.new("RGB", (20, 20), "red"), tmp_path / "a.png"))
    b = validate_upload(save(Image.new("RGB", (20, 20), "red"), tmp_path / "b.bmp"))
    c = validate_upload(save(Image.new("RGB", (20, 20), "blue"), tmp_path / "c.png"))
    assert a.content_id == b.content_id != c.content_id


# =========================================================================== pure functions
def make_query(qid, positives, negatives, refs=("r1",), group="g1", **meta):
    return Query(qid, tuple(refs), f"instruction {qid}", group, Judgments(tuple(positives), tuple(negatives)), meta)


def test_query_metrics_match_hand_computation():
    q = make_query("q1", positives=["a", "b", "c"], negatives=["n1", "n2"])
    ranking = ["a", "n1", "x", "b", "y", "z", "w", "v", "u", "t", "c"]  # c is 11th: outside the top 10
    m = query_metrics(ranking, q)
    # AP@10 = (1/1 + 2/4) / min(3, 10) ; P@10 = 2/10 ; NegRecall@10 = 1 / min(2, 10)
    assert m["AP@10"] == pytest.approx((1.0 + 0.5) / 3)
    assert m["precision@10"] == pytest.approx(0.2)
    assert m["NegRecall@10"] == pytest.approx(0.5)
    assert all(np.isnan(v) for v in query_metrics([], q).values())  # an empty ranking is not scored


def long_frame(rows):
    return pd.DataFrame(rows, columns=["run", "query_id", "group_id", "AP@10", "precision@10", "NegRecall@10", "n_neg"])


def test_failure_scores_against_loops():
    rng = np.random.default_rng(3)
    runs = {"m-fusion": "composed", "m-image": "image", "m-text": "text", "m-cir": "composed"}
    qids = [f"q{i}" for i in range(12)]
    groups = {q: f"g{i // 3}" for i, q in enumerate(qids)}
    n_neg = {q: int(rng.integers(0, 15)) for q in qids}
    rows, ap, negr = [], {}, {}
    for run in [*runs, "m-fusion+rerank", "m-cir+rerank"]:
        for q in qids:
            a = float(rng.choice([0.0, 0.25, 0.5, 1.0]))  # coarse values: ties on purpose
            denom = min(n_neg[q], 10)
            nr = (int(rng.integers(0, denom + 1)) / denom) if denom else 0.0
            ap[run, q], negr[run, q] = a, nr
            rows.append((run, q, groups[q], a, 0.0, nr, n_neg[q]))
    got = failure_scores(long_frame(rows), runs)
    for q in qids:
        negs = {r: round(negr[r, q] * min(n_neg[q], 10)) for r in runs}
        assert got.loc[q, "neg_top10"] == max(negs.values())
        assert negs[got.loc[q, "neg_who"]] == max(negs.values())
        members = [p for p in qids if groups[p] == groups[q]]
        spread = max(max(ap[r, p] for p in members) - min(ap[r, p] for p in members) for r in runs)
        assert got.loc[q, "spread"] == pytest.approx(spread)
        best_uni = max(ap["m-image", q], ap["m-text", q])
        best_comp = max(ap["m-fusion", q], ap["m-cir", q])
        assert got.loc[q, "shortcut"] == pytest.approx(best_uni - best_comp)
        deltas = [ap[f"{r}+rerank", q] - ap[r, q] for r in ("m-fusion", "m-cir")]
        assert got.loc[q, "rerank_gain"] == pytest.approx(max(deltas))
        assert got.loc[q, "rerank_loss"] == pytest.approx(min(deltas))
        assert got.loc[q, "mean_ap"] == pytest.approx(np.mean([ap[r, q] for r in runs]))


def test_failure_scores_without_unimodal_or_reranked_runs():
    rows = [("a", "q1", "g", 0.5, 0.1, 0.0, 3), ("b", "q1", "g", 0.2, 0.1, 0.0, 3)]
    got = failure_scores(long_frame(rows), {"a": "composed", "b": "composed"})
    assert "shortcut" not in got and "rerank_gain" not in got
    with pytest.raises(ServiceError, match="no per-query results"):
        failure_scores(long_frame(rows), {"zzz": "composed"})


def test_sort_queries_orders_and_keeps_failures_only():
    table = pd.DataFrame({"query_id": ["q1", "q2", "q3", "q4"], "instruction": ["a", "b", "c", "d"],
                          "n_refs": [1, 2, 2, 1], "group_id": ["g1", "g1", "g2", "g2"]})
    scores = pd.DataFrame({"neg_top10": [0, 3, 3, 5], "neg_who": ["m"] * 4, "spread": [0.5, 0.5, 0.0, 0.0],
                           "spread_who": ["m"] * 4, "mean_ap": [0.1, 0.4, 0.2, 0.0],
                           "shortcut": [-0.1, 0.2, 0.0, 0.3], "shortcut_who": ["i"] * 4, "shortcut_vs": ["c"] * 4,
                           "rerank_gain": [0.1, 0.0, -0.2, 0.3], "rerank_gain_who": ["m"] * 4,
                           "rerank_loss": [-0.4, 0.0, -0.2, 0.1], "rerank_loss_who": ["m"] * 4},
                          index=pd.Index(["q1", "q2", "q3", "q4"], name="query_id"))
    order = lambda key: list(sort_queries(table, scores, key)[0]["query_id"])  # noqa: E731
    assert order("order") == ["q1", "q2", "q3", "q4"]
    assert order("negatives") == ["q4", "q2", "q3"]  # ties (q2, q3) keep benchmark order; q1 has none
    assert order("spread") == ["q1", "q2"]
    assert order("two_image") == ["q3", "q2"]  # lowest mean AP@10 first
    assert order("shortcut") == ["q4", "q2"]
    assert order("rerank_helped") == ["q4", "q1"]
    assert order("rerank_hurt") == ["q1", "q3"]
    rows, _ = sort_queries(table, scores, "negatives")
    assert rows["why"].iloc[0] == "5 explicit negatives in the top 10 (m)"
    with pytest.raises(KeyError, match="(?i)did you mean"):
        sort_queries(table, scores, "negative")
    with pytest.raises(ServiceError, match="reranked results"):
        sort_queries(table, scores.drop(columns=["rerank_gain", "rerank_gain_who"]), "rerank_helped")


def test_filter_queries_against_brute_force(service):
    table = service.table
    rng = np.random.default_rng(0)
    choices = service.filter_choices()
    for _ in range(25):
        filters = {k: (rng.choice(v) if rng.random() < 0.5 else None) for k, v in choices.items()}
        word = rng.choice(["", "bag", "THE", "w0001", "not pink"])
        got = list(filter_queries(table, word, filters)["query_id"])
        expected = []
        for q in service.benchmark.queries:
            if any(v is not None and services.filter_value(k, q.meta.get(k)) != v for k, v in filters.items()):
                continue
            hay = f"{q.instruction} {q.query_id} {q.group_id}".lower()
            if all(w in hay for w in word.lower().split()):
                expected.append(q.query_id)
        assert got == expected
    assert set(choices["is_single"]) == {"single image", "two images"}
    assert choices["skin_tone_bucket"][-1] == services.NO_VALUE
    with pytest.raises(ServiceError, match="unknown filter"):
        filter_queries(table, "", {"colour": "red"})


def test_defaults_and_modality():
    assert services.default_retrievers("world", ["world-cir", "world-clip-text", "other"]) == ["world-cir", "world-clip-text"]
    assert services.default_retrievers("pinpoint", ["world-cir"]) == []
    assert services.resolve_reranker("world", None, ["world-verifier", "openai"])[0] == "world-verifier"
    name, note = services.resolve_reranker("world", None, ["openai"])
    assert name is None and "world-verifier" in note
    assert services.resolve_reranker("world", "none", ["world-verifier"])[0] is None
    with pytest.raises(KeyError, match="(?i)did you mean"):
        services.resolve_reranker("world", "open-ai", ["openai"])
    assert services.retriever_modality({"name": "x", "recipe": "image_only"}) == "image"
    assert services.retriever_modality({"name": "x-text", "recipe": None}) == "text"
    assert services.retriever_modality({"name": "x-text", "recipe": "early_fusion"}) == "composed"


# =========================================================================== the service on the tiny world
def brute_force_top(service, name, cq, k):
    """Oracle: the query vector against every corpus vector stored in the index, exact scores."""
    index = service.engine.index(name)
    xb = index.index.reconstruct_n(0, index.index.ntotal)
    q = service.engine.retriever(name).encode_queries([cq])[0]
    scores = xb @ q
    order = np.argsort(-scores, kind="stable")[:k]
    return [index.ids[i] for i in order], scores[order]


def test_compare_matches_brute_force_and_judgments(service):
    names = service.retriever_names
    query = next(q for q in service.benchmark.queries if len(q.reference_ids) == 2)
    cmp = service.compare(query.query_id, names, k=10)
    assert [c.retriever for c in cmp.columns] == names and cmp.judged
    assert [c.modality for c in cmp.columns] == ["composed", "image", "text", "composed"]
    cq = service.engine.composed(query)
    for col in cmp.columns:
        assert col.error is None and len(col.tiles) == 10
        ids, scores = brute_force_top(service, col.retriever, cq, 10)
        assert [t.image_id for t in col.tiles] == ids
        assert [t.score for t in col.tiles] == pytest.approx(list(scores), abs=1e-5)
        assert [t.rank for t in col.tiles] == list(range(1, 11))
        for t in col.tiles:
            expected = ("positive" if t.image_id in query.positives else
                        "negative" if t.image_id in query.negatives else None)
            assert t.judgment == expected and t.thumb.startswith("data:image/jpeg;base64,")
        full = service.engine.search(col.retriever, [cq], k=50)[0].ids
        assert col.metrics == pytest.approx(query_metrics(full, query))
    assert cmp.n_positives == len(query.positives) and len(cmp.reference_thumbs) == 2


def test_compare_k_and_input_checks(service):
    q = service.benchmark.queries[0].query_id
    assert all(len(c.tiles) == 5 for c in service.compare(q, service.retriever_names[:2], k=5).columns)
    with pytest.raises(ServiceError, match="no query"):
        service.compare("nope", None)
    with pytest.raises(ServiceError, match="unknown retriever"):
        service.compare(q, ["world-cir-typo"])
    with pytest.raises(ServiceError, match="at most 4"):
        service.compare(q, service.retriever_names + service.retriever_names[:1])
    with pytest.raises(ServiceError, match="results per column"):
        service.compare(q, None, k=0)
    with pytest.raises(ServiceError, match="top n"):
        service.compare(q, None, rerank=True, top_n=0)


def test_compare_with_reranker_matches_rerank_and_reports_movement(service):
    from cir_demo.rerank import RerankRequest, rerank

    name = service.retriever_names[0]
    query = service.benchmark.queries[7]
    cmp = service.compare(query.query_id, [name], k=10, rerank=True, top_n=15)
    col = cmp.columns[0]
    cq = service.engine.composed(query)
    first = service.engine.search(name, [cq], k=50)[0]
    reranker = service.engine.reranker(VERIFIER)
    oracle = rerank(RerankRequest(cq.reference_images, cq.reference_ids, cq.text), first.ids, first.scores,
                    service.engine.open_image, reranker, top_n=15)  # no cache: scores recomputed
    assert [t.image_id for t in col.tiles] == [it.candidate_id for it in oracle[:10]]
    for t, it in zip(col.tiles, oracle):
        assert t.first_stage_rank == it.first_stage_rank + 1
        assert t.moved == it.rank_change
        assert t.p_yes == pytest.approx(it.p_yes)
    assert set(first.ids[:15]) >= {t.image_id for t in col.tiles}  # only the top 15 can reach the top 10
    assert col.first_stage_metrics == pytest.approx(query_metrics(first.ids, query))
    assert col.metrics == pytest.approx(query_metrics([it.candidate_id for it in oracle], query))
    assert cmp.reranker == VERIFIER and cmp.top_n == 15


def test_paraphrase_table_matches_per_paraphrase_compare(service):
    names = service.retriever_names[:2]
    qid = service.benchmark.queries[12].query_id
    table = service.paraphrase_table(qid, names)
    group = service.benchmark.paraphrases(qid)
    assert len(table) == len(group) + 1 and list(table.columns) == ["paraphrase", *names, "instruction"]
    for i, p in enumerate(group):
        cmp = service.compare(p.query_id, names, k=10)
        for col in cmp.columns:
            assert table.loc[i, col.retriever] == pytest.approx(col.metrics["AP@10"])
    for n in names:
        assert table.iloc[-1][n] == pytest.approx(table[n].iloc[:-1].max() - table[n].iloc[:-1].min())


def test_uploaded_world_image_ranks_like_the_benchmark_query(service, tmp_path):
    query = service.benchmark.queries[3]
    path = tmp_path / "ref.png"
    service.engine.open_image(query.reference_ids[0]).save(path)  # PNG: the same pixels
    upload = validate_upload(path)
    got = service.search_uploads([upload], query.instruction, service.retriever_names, k=10)
    expected = service.compare(query.query_id, service.retriever_names, k=10)
    for a, b in zip(got.columns, expected.columns):
        assert [t.image_id for t in a.tiles] == [t.image_id for t in b.tiles]
        assert all(t.judgment is None for t in a.tiles) and a.metrics == {}
    assert not got.judged and services.WORLD_UPLOAD_NOTE in got.notes
    reranked = service.search_uploads([upload], query.instruction, service.retriever_names[:1], k=10, rerank=True, top_n=10)
    assert all(t.p_yes is not None for t in reranked.columns[0].tiles)
    with pytest.raises(ServiceError, match="instruction"):
        service.search_uploads([upload], "  ", None)
    with pytest.raises(ServiceError, match="<img2>"):
        service.search_uploads([upload], "<img1> in the colour of <img2>", None)


def test_failure_stats_computed_match_rankings(service):
    stats = service.failure_stats()
    assert "computed here" in service.failure_source
    queries = service.benchmark.queries[:30]
    runs = {n: service.engine.run_benchmark(n, queries=queries, k=50)[0] for n in service.retriever_names}
    for q in queries:
        negs = {n: sum(i in set(q.negatives) for i in runs[n][q.query_id][:10]) for n in runs}
        assert stats.loc[q.query_id, "neg_top10"] == max(negs.values())
        aps = {n: query_metrics(runs[n][q.query_id], q)["AP@10"] for n in runs}
        uni = max(aps["tiny-ui-image"], aps["tiny-ui-text"])
        assert stats.loc[q.query_id, "shortcut"] == pytest.approx(uni - max(aps["tiny-ui-fusion"], aps["tiny-ui-slerp"]))
    listed = service.find_queries("", {}, sort="negatives")
    assert listed.total == int((stats["neg_top10"] > 0).sum())
    firsts = list(listed.rows["query"][:5])
    assert list(stats.loc[firsts, "neg_top10"]) == sorted(stats.loc[firsts, "neg_top10"], reverse=True)


def test_failure_stats_reuse_a_matching_eval_run(tiny_setup, tmp_path):
    """An eval run with the same benchmark content and retriever specs supplies the per-query
    results (its numbers are used as written); one with another spec is ignored."""
    from cir_demo.utils.io import write_json_atomic

    root, names = tiny_setup
    svc = build_tiny_service(names[:2], reranker="none")
    runs_root = root / "runs"
    good, stale = runs_root / "20990101-000000-world", runs_root / "20990101-000001-world"
    table = svc.table
    for folder, spec_tweak in ((good, {}), (stale, {"recipe": "changed"})):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "metrics.csv").write_text("model,mAP@10\nx,0.1\n")
        specs = {n: {**svc.engine.retriever(n).spec, **spec_tweak} for n in names[:2]}
        write_json_atomic(folder / "run_info.json", {"benchmark": "world", "benchmark_fingerprint": svc.fingerprint,
                                                     "retrievers": specs, "reranker": None})
        rows = []
        for n in names[:2]:
            for i, (q, g) in enumerate(zip(table["query_id"], table["group_id"])):
                neg = 1.0 if (folder == good and n == names[0] and i == 5) else 0.0
                rows.append((n, q, g, 0.0, 0.0, neg, 10))
        long_frame(rows).to_csv(folder / "per_query.csv", index=False)
    os.utime(stale, None)  # the stale run is the newest: it must still be skipped
    try:
        stats = svc.failure_stats()
        assert svc.failure_source == good.name
        assert stats["neg_top10"].sum() == 10 and stats.loc[table["query_id"][5], "neg_top10"] == 10
        assert svc.find_queries("", {}, "negatives").rows["query"].tolist() == [table["query_id"][5]]
    finally:
        svc.engine.close()
        for folder in (good, stale):
            for f in folder.iterdir():
                f.unlink()
            folder.rmdir()


def test_reranker_unavailable_is_explained(tiny_setup):
    _, names = tiny_setup
    svc = build_tiny_service(names[:1], reranker="none")
    try:
        with pytest.raises(ServiceError, match="disabled"):
            svc.compare(svc.benchmark.queries[0].query_id, None, rerank=True)
        assert "disabled" in svc.reranker_prompt("x", 1)
    finally:
        svc.engine.close()


def test_query_view_and_listing(service):
    q = next(q for q in service.benchmark.queries if len(q.reference_ids) == 2)
    view = service.query_view(q.query_id)
    assert [p.query_id for p in view.paraphrases] == [p.query_id for p in service.benchmark.paraphrases(q.query_id)]
    assert view.paraphrases[view.paraphrase_index].query_id == q.query_id
    assert len(view.reference_thumbs) == 2 and all(t.startswith("data:image/jpeg") for t in view.reference_thumbs)
    assert ("Reference images", "two images") in view.facts
    listed = service.find_queries("", {"is_single": "two images"}, "two_image")
    assert set(listed.rows["refs"]) == {2}
    assert listed.total == sum(len(x.reference_ids) == 2 for x in service.benchmark.queries)


def test_thumbnail_store_caches_in_memory_and_on_disk(tmp_path):
    calls = []

    def open_image(image_id):
        calls.append(image_id)
        if image_id == "missing":
            raise FileNotFoundError(image_id)
        return Image.new("RGB", (300, 200), "green")

    db = tmp_path / "thumbs.sqlite"
    store = services.ThumbnailStore(open_image, db, 64)
    got = store.get_many(["a", "b", "missing", "a"])
    assert got["missing"] is None and calls == ["a", "b", "missing"]
    img = Image.open(io.BytesIO(__import__("base64").b64decode(got["a"].split(",", 1)[1])))
    assert img.size == (64, 43)
    assert store.get("a") == got["a"] and len(calls) == 3  # memory hit
    fresh = services.ThumbnailStore(open_image, db, 64)  # a restart: read from the file
    assert fresh.get_many(["a", "b"]) == {"a": got["a"], "b": got["b"]} and len(calls) == 3
    assert services.warm_thumbnails(type("B", (), {"images": type("S", (), {"open": staticmethod(open_image)})()})(),
                                    db, 64, image_ids=["a", "c"]) == 1  # only the missing one is rendered


def test_runs_and_report(tiny_setup, tmp_path):
    runs_root = tmp_path / "runs"
    fp = "world-abc"
    old, new, other, named = (runs_root / n for n in ("20240101-000000-world", "20240102-000000-world",
                                                        "20240103-000000-world", "20230101-000000-world"))
    for i, d in enumerate((old, new, other, named)):
        (d / "plots").mkdir(parents=True)
        pd.DataFrame({"model": ["m"], "mAP@10": [0.25 + i], "mAP@10_ci_lo": [0.2], "mAP@10_ci_hi": [0.3],
                      "NegRecall@10": [0.1]}).to_csv(d / "metrics.csv", index=False)
        Image.new("RGB", (4, 4)).save(d / "plots" / "per_category.png")
        if d is not named:
            (d / "run_info.json").write_text(json.dumps({"benchmark_fingerprint": fp if d is not other else "x"}))
        os.utime(d, (1_000_000 + i, 1_000_000 + i))
    runs = services.list_runs("world", fp, runs_root)
    assert [r.label for r in runs] == [new.name, old.name, named.name]  # fingerprint matches first, newest first
    assert [r.matches for r in runs] == ["fingerprint", "fingerprint", "name"]
    rep = services.load_report(runs[0])
    assert rep.metrics.loc[0, "mAP@10"] == "1.2500 [0.2000, 0.3000]"
    assert rep.metrics.loc[0, "NegRecall@10"] == "0.1000"
    assert rep.plots[0][0].name == "per_category.png" and "category" in rep.plots[0][1]
    assert any("fingerprint" in i for i in services.load_report(runs[2]).info)


def test_loader_reports_progress_and_errors(tiny_setup):
    _, names = tiny_setup
    bad = services.ServiceLoader(ServiceConfig(benchmark="no-such-benchmark", warm_thumbnails=False))
    with pytest.raises(ServiceError, match="could not load"):
        bad.wait(60)
    assert "did you mean" in bad.status().text().lower() or "unknown benchmark" in bad.status().text().lower()
    ok = services.ServiceLoader(ServiceConfig(benchmark="world", benchmark_kwargs={"size": "tiny"},
                                              retrievers=tuple(names[:1]), reranker="none", warm_thumbnails=False))
    svc = ok.wait(120)
    assert ok.ready and ok.status().done and svc.retriever_names == names[:1]
    svc.engine.close()


def test_missing_retriever_weights_leave_the_rest_working(tiny_setup):
    from cir_demo.retrievers import registry
    from cir_demo.retrievers.testing import tiny_open_clip_config

    _, names = tiny_setup
    registry.register_config(tiny_open_clip_config("/nonexistent/w.safetensors", "tiny-ui-broken"), replace=True)
    try:
        svc = build_tiny_service([names[0], "tiny-ui-broken"], reranker="none")
        assert svc.retriever_names == [names[0]]
        assert any("tiny-ui-broken could not be loaded" in w for w in svc.warnings)
        svc.engine.close()
    finally:
        registry.unregister("tiny-ui-broken")


def test_image_warmer_fills_reference_tile_and_pixel_files(tiny_setup, tmp_path):
    """The warmer's entry point (run in-process here) opens each image once and stores references at
    their size, corpus tiles at theirs and lossless pixels of both; the pixel cache then serves
    exactly the rendered pixels."""
    import sqlite3

    from cir_demo.benchmarks.registry import load_benchmark

    refs_db, tiles_db, pixels_db = (str(tmp_path / f"{n}.sqlite") for n in ("refs", "tiles", "pixels"))
    png = {"db_path": pixels_db, "kind": "png"}
    payload = {"benchmark": "world", "kwargs": {"size": "tiny"}, "limit_groups": 3, "limit": 30000, "nice": False,
               "jobs": [{"what": "references", "targets": [
                   {"db_path": refs_db, "kind": "jpeg", "size": 40, "quality": 80}, png]},
                        {"what": "corpus", "targets": [
                            {"db_path": tiles_db, "kind": "jpeg", "size": 24, "quality": 80}, png]}]}
    services._warm_main(json.dumps(payload))
    bench = load_benchmark("world", size="tiny").limit(3)
    refs = {r for q in bench.queries for r in q.reference_ids}

    def stored(path):
        with sqlite3.connect(path) as db:
            return {i: Image.open(io.BytesIO(b)).size for i, b in db.execute("SELECT image_id, data FROM blobs")}

    assert set(stored(refs_db)) == refs
    tiles = stored(tiles_db)
    assert set(tiles) == set(bench.corpus_ids) and set(tiles.values()) == {(24, 24)}
    assert set(stored(pixels_db)) == refs | set(bench.corpus_ids)
    cached = services.PixelCachedStore(bench.images, pixels_db)
    for image_id in [bench.corpus_ids[0], bench.corpus_ids[-1], sorted(refs)[0]]:
        assert np.array_equal(np.asarray(cached.open(image_id)), np.asarray(bench.images.open(image_id)))
    assert cached.counts == {"cached": 3, "opened": 0}
