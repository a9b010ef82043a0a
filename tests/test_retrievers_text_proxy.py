"""Text proxy against a local OpenAI-compatible server on 127.0.0.1: caching, per-query failure
handling, pre/post-merge numerics (text encoder = tiny random open_clip model)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

import torch

from PIL import Image

from cir_demo.retrievers import recipes, registry
from cir_demo.retrievers.base import ComposedQuery
from cir_demo.testing.tiny_retrievers import build_tiny_open_clip, tiny_open_clip_config
from cir_demo.retrievers.text_proxy import ChatError, parse_completion

SLOW_S = 1.0


def describe(instruction: str, length: str) -> str:
    extra = {"short": "", "medium": " on the road", "long": " on the road next to a green tree"}[length]
    return f"a photo of {instruction.lower()}{extra}"


class Handler(BaseHTTPRequestHandler):
    log = []  # (instruction, length, headers, body)
    seen = {}  # (instruction, length) -> count, for FLAKY
    lock = threading.Lock()

    def log_message(self, *args):  # keep test output quiet
        pass

    def _send(self, code, body: bytes):
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        user = body["messages"][1]["content"]
        text = next(p["text"] for p in user if p["type"] == "text")
        instruction = text.split("Instruction: ", 1)[1].split("\n", 1)[0]
        length = next(x for x in ("short", "medium", "long") if f"Write a {x}" in text)
        with self.lock:
            self.log.append((instruction, length, dict(self.headers), body))
            n = self.seen[(instruction, length)] = self.seen.get((instruction, length), 0) + 1
        ok = {
            "choices": [
                {"message": {"role": "assistant", "content": describe(instruction, length)}, "finish_reason": "stop"}
            ]
        }
        if "SLOW" in instruction:
            time.sleep(SLOW_S)
        if "FAIL500" in instruction or ("LONGFAIL" in instruction and length == "long"):
            return self._send(500, b'{"error": "boom"}')
        if "FLAKY" in instruction and n == 1:
            return self._send(503, b'{"error": "busy"}')
        if "REFUSE" in instruction:
            ok["choices"][0]["message"] = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
        if "SORRY" in instruction:
            ok["choices"][0]["message"]["content"] = "I'm sorry, but I can't help with that request."
        if "GARBAGE" in instruction:
            return self._send(200, b"<html>not json</html>")
        if "NOCHOICES" in instruction:
            return self._send(200, b'{"id": "x"}')
        return self._send(200, json.dumps(ok).encode())


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def encoder_name(tmp_path_factory):
    torch.set_num_threads(1)
    weights = build_tiny_open_clip(tmp_path_factory.mktemp("tp_clip"), seed=5)
    registry.register_config(tiny_open_clip_config(weights, "tp-tiny-text", "text_only"), replace=True)
    yield "tp-tiny-text"
    registry.unregister("tp-tiny-text")


@pytest.fixture
def make(server, encoder_name, tmp_path, monkeypatch):
    monkeypatch.setenv("CIR_TEST_KEY", "sk-test")
    Handler.log.clear()
    Handler.seen.clear()
    created = []

    def _make(merge="pre", **params):
        name = f"tp-{merge}-{len(created)}"
        registry.register_config(
            {
                "name": name,
                "family": "text_proxy",
                "model": "test-llm",
                "params": {
                    "text_encoder": encoder_name,
                    "merge": merge,
                    "base_url": server,
                    "api_key_env": "CIR_TEST_KEY",
                    "cache_dir": str(tmp_path / "cache"),
                    "timeout_s": 0.3,
                    "max_retries": 1,
                    "retry_backoff_s": 0.01,
                    "concurrency": 3,
                    **params,
                },
            },
            replace=True,
        )
        created.append(name)
        return registry.load_retriever(name, device="cpu")

    yield _make
    for name in created:
        registry.unregister(name)


@pytest.fixture(scope="module")
def imgs():
    rng = np.random.default_rng(7)
    return [Image.fromarray(rng.integers(0, 255, (36, 36, 3), dtype=np.uint8)) for _ in range(4)]


def _q(imgs, text, qid, n=1):
    return ComposedQuery(tuple(imgs[:n]), text, qid, tuple(f"img{i}" for i in range(n)))


def test_premerge_numerics_and_cache(make, imgs):
    r = make("pre")
    qs = [_q(imgs, "a red car", "q1"), _q(imgs, "a blue dog", "q2")]
    got = r.encode_queries(qs)
    assert len(Handler.log) == 6  # 2 queries x 3 lengths
    t = r.text_encoder.encode_texts([describe(q.text, L) for q in qs for L in ("short", "medium", "long")])
    expected = np.stack([recipes.l2_normalize(t[i * 3 : (i + 1) * 3].mean(axis=0)) for i in range(2)])
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert all(v["status"] == "ok" and not v["fallback"] for v in r.generation_report().values())
    # cache hit: no second request, identical output -- also from a freshly loaded retriever
    np.testing.assert_allclose(r.encode_queries(qs), got, atol=1e-6)
    np.testing.assert_allclose(make("pre").encode_queries(qs), got, atol=1e-6)
    assert len(Handler.log) == 6
    # request shape: model, bearer key, one image part per reference, instruction with markers kept
    _, _, headers, body = Handler.log[0]
    assert body["model"] == "test-llm" and headers["Authorization"] == "Bearer sk-test"
    parts = body["messages"][1]["content"]
    assert parts[0]["image_url"]["url"].startswith("data:image/png;base64,")


def test_cache_key_depends_on_images_and_model(make, imgs):
    r = make("pre", lengths=["short"])
    r.encode_queries([_q(imgs, "a red car", "q1")])
    r.encode_queries([ComposedQuery((imgs[1],), "a red car", "q1", ("other-image",))])
    assert len(Handler.log) == 2
    make("pre", lengths=["short"]).encode_queries([_q(imgs, "a red car", "q1")])
    assert len(Handler.log) == 2
    registry.register_config({**registry.get_config("tp-pre-0"), "model": "another-llm"}, replace=True)
    registry.load_retriever("tp-pre-0", device="cpu").encode_queries([_q(imgs, "a red car", "q1")])
    assert len(Handler.log) == 3


def test_two_image_query_sends_both_images_with_markers(make, imgs):
    r = make("pre", lengths=["short"])
    r.encode_queries([_q(imgs, "the dog of <img1> in <img2>", "q2img", n=2)])
    instruction, _, _, body = Handler.log[-1]
    assert instruction == "the dog of <img1> in <img2>"
    assert sum(p["type"] == "image_url" for p in body["messages"][1]["content"]) == 2


def test_failures_are_flagged_per_query_and_run_continues(make, imgs):
    r = make("pre", lengths=["short", "long"])
    texts = {
        "ok": "a red car",
        "slow": "SLOW car",
        "e500": "FAIL500 car",
        "refuse": "REFUSE car",
        "sorry": "SORRY car",
        "garbage": "GARBAGE car",
        "nochoices": "NOCHOICES car",
        "partial": "LONGFAIL car",
        "flaky": "FLAKY car",
        "markers": "FAIL500 put <img1> here",
    }
    qs = [_q(imgs, t, qid) for qid, t in texts.items()]
    start = time.time()
    with pytest.warns(RuntimeWarning, match="7 of 10 queries got no description"):
        got = r.encode_queries(qs)
    assert time.time() - start < 20
    rep = r.generation_report()
    assert rep["ok"]["status"] == "ok" and rep["flaky"]["status"] == "ok"  # 503 retried
    assert rep["partial"]["status"] == "partial" and rep["partial"]["errors"]["long"].startswith("http_500")
    kinds = {
        "slow": "timeout",
        "e500": "http_500",
        "refuse": "refusal",
        "sorry": "refusal",
        "garbage": "malformed",
        "nochoices": "malformed",
    }
    for qid, kind in kinds.items():
        assert rep[qid]["status"] == "failed" and rep[qid]["fallback"]
        assert all(e.startswith(kind) for e in rep[qid]["errors"].values()), rep[qid]
    enc = r.text_encoder.encode_texts
    # a failed query falls back to its own instruction (markers as words) ...
    np.testing.assert_allclose(got[list(texts).index("e500")], enc(["FAIL500 car"])[0], atol=1e-5)
    np.testing.assert_allclose(
        got[list(texts).index("markers")], enc(["FAIL500 put the first image here"])[0], atol=1e-5
    )
    # ... a partial one averages what came back
    np.testing.assert_allclose(
        got[list(texts).index("partial")], enc([describe("LONGFAIL car", "short")])[0], atol=1e-5
    )
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    # failures are not cached: a second run asks again for exactly those
    before = len(Handler.log)
    with pytest.warns(RuntimeWarning):
        r.encode_queries([_q(imgs, "FAIL500 car", "e500"), _q(imgs, "a red car", "ok")])
    assert len(Handler.log) - before == 2 * 2  # e500: 2 lengths x (1 try + 1 retry); ok: cached


def test_postmerge_variants_and_ranking_equal_brute_force(make, imgs):
    r = make("post")
    assert r.query_variants == 3
    qs = [_q(imgs, "a red car", "q1"), _q(imgs, "LONGFAIL car", "q2")]
    with pytest.raises(TypeError, match="encode_query_variants"):
        r.encode_queries(qs)
    var = r.encode_query_variants(qs)
    assert var.shape == (2, 3, r.dim)
    enc = r.text_encoder.encode_texts
    np.testing.assert_allclose(var[0], enc([describe("a red car", L) for L in ("short", "medium", "long")]), atol=1e-5)
    # missing 'long' variant repeats an available one (max-merge unchanged)
    np.testing.assert_allclose(var[1, 2], var[1, 0], atol=1e-6)
    corpus = r.encode_images(imgs)
    ids = [f"c{i}" for i in range(len(imgs))]
    for qi in range(2):
        per_variant = []
        for v in range(3):
            s = corpus @ var[qi, v]
            top = np.argsort(-s, kind="stable")[:2]
            per_variant.append(([ids[i] for i in top], s[top].tolist()))
        merged, _ = recipes.postmerge_max(per_variant, 2)
        brute = (corpus @ var[qi].T).max(axis=1)
        assert merged == [ids[i] for i in np.argsort(-brute, kind="stable")[:2]]


def test_premerge_spec_and_shared_corpus_space(make, imgs):
    r = make("pre")
    assert r.spec["merge"] == "pre" and r.spec["lengths"] == ["short", "medium", "long"]
    assert r.spec["text_encoder"]["family"] == "open_clip" and "sk-test" not in json.dumps(r.spec)
    np.testing.assert_allclose(r.encode_images(imgs), r.text_encoder.encode_images(imgs), atol=1e-6)


@pytest.mark.parametrize(
    "raw,kind",
    [
        (b"{", "malformed"),
        (b'{"choices": []}', "malformed"),
        (b'{"choices": [{"message": {"content": "  "}}]}', "empty"),
        (b'{"choices": [{"message": {"content": "x"}, "finish_reason": "content_filter"}]}', "refusal"),
    ],
)
def test_parse_completion_errors(raw, kind):
    with pytest.raises(ChatError) as info:
        parse_completion(raw)
    assert info.value.kind == kind


def test_parse_completion_content_parts_and_whitespace():
    raw = json.dumps({"choices": [{"message": {"content": [{"type": "text", "text": "a red\n car"}]}}]}).encode()
    assert parse_completion(raw) == "a red car"


def test_missing_api_key_is_a_load_error(make, monkeypatch):
    monkeypatch.delenv("CIR_TEST_KEY")
    with pytest.raises(RuntimeError, match="set the environment variable CIR_TEST_KEY"):
        make("pre")
