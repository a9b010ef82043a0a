"""OpenAI-compatible backend against a chat-completions server started here on 127.0.0.1.

The server reads the candidate (the last image of the request) by its pixel
colour and answers from a behaviour table: logprobs, a missing token, a
delay past the client timeout, HTTP errors. It records every request and the
largest number of requests in flight at once.
"""

from __future__ import annotations

import base64
import io
import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest
from loopback import LoopbackServer
from PIL import Image

from cir_demo.rerank import FLAG_TOKENS_MISSING, RerankRequest, load_reranker, rerank

TIMEOUT = 1.0  # generous: a loaded CI machine must never time out a fast answer


def solid(i: int) -> Image.Image:
    return Image.new("RGB", (8, 8), (i, 255 - i, 7))


def colour_of(data_url: str) -> int:
    raw = base64.b64decode(data_url.split(",", 1)[1])
    return Image.open(io.BytesIO(raw)).convert("RGB").getpixel((0, 0))[0]


class FakeServer(LoopbackServer):
    """behaviour[candidate colour] = list of per-attempt actions; the last one repeats.
    Actions: ("ok", lp_yes, lp_no), ("missing_no", lp_yes), ("sleep", seconds, then_action),
    ("http", status), ("no_logprobs",)."""

    def __init__(self, behaviour, hold: float = 0.0):
        self.behaviour = behaviour
        self.hold = hold  # seconds every request stays in flight (concurrency test)
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.attempts: dict[int, int] = {}
        self.arrivals: list[int] = []  # candidate colours in the order their requests arrived
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                try:
                    server.handle(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

        super().__init__(Handler)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def handle(self, h: BaseHTTPRequestHandler):
        assert h.path == "/v1/chat/completions"
        body = json.loads(h.rfile.read(int(h.headers["Content-Length"])))
        images = [p["image_url"]["url"] for p in body["messages"][1]["content"] if p["type"] == "image_url"]
        cand = colour_of(images[-1])
        with self.lock:
            self.requests.append(body)
            self.headers.append(dict(h.headers))
            attempt = self.attempts.get(cand, 0)
            self.attempts[cand] = attempt + 1
            self.arrivals.append(cand)
        # In flight: from arrival until the answer is about to be written. Counting until after it was
        # written would count a request the client already has its answer to (and may follow with the
        # next one) as still in flight.
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.hold:
                time.sleep(self.hold)
        finally:
            with self.lock:
                self.in_flight -= 1
        actions = self.behaviour[cand]
        action = actions[min(attempt, len(actions) - 1)]
        if action[0] == "sleep":
            time.sleep(action[1])
            action = action[2]
        if action[0] == "http":
            h.send_response(action[1])
            h.end_headers()
            h.wfile.write(b'{"error": "scripted"}')
            return
        if action[0] == "no_logprobs":
            payload = {"choices": [{"message": {"content": "yes"}}]}
        else:
            top = [{"token": "maybe", "logprob": -3.0}]
            if action[0] == "ok":
                top += [{"token": "no", "logprob": action[2]}, {"token": "yes", "logprob": action[1]}]
            elif action[0] == "missing_no":
                top += [{"token": "yes", "logprob": action[1]}, {"token": "Yes", "logprob": -0.5}]
            first = max(top, key=lambda e: e["logprob"])
            payload = {"choices": [{"logprobs": {"content": [{**first, "top_logprobs": top}]}}]}
        data = json.dumps(payload).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)


def sig(x):
    return 1 / (1 + math.exp(-x))


def make(server, **kw):
    kw = {"timeout": TIMEOUT, "retries": 1, "backoff": 0.01, "concurrency": 4, **kw}
    return load_reranker("openai", base_url=server.base_url, model="test-model", **kw)


def request(n_refs=1):
    refs = [solid(200), solid(201)][:n_refs]
    return RerankRequest(refs, [f"r{i}" for i in range(n_refs)], "like <img2>" if n_refs == 2 else "make it red")


def test_logprobs_give_p_yes_and_request_is_well_formed():
    behaviour = {1: [("ok", -0.1, -2.5)], 2: [("ok", -3.0, -0.05)], 3: [("ok", -0.7, -0.7)]}
    with FakeServer(behaviour) as server:
        rr = make(server)
        scores = rr.score(request(2), ["c1", "c2", "c3"], [solid(1), solid(2), solid(3)])
    assert [s.candidate_id for s in scores] == ["c1", "c2", "c3"]
    assert [s.flag for s in scores] == [None, None, None]
    for s, (ly, ln) in zip(scores, [(-0.1, -2.5), (-3.0, -0.05), (-0.7, -0.7)]):
        assert s.p_yes == pytest.approx(sig(ly - ln), abs=1e-12) and (s.logit_yes, s.logit_no) == (ly, ln)
    body = server.requests[0]
    assert body["model"] == "test-model" and body["max_tokens"] == 1 and body["temperature"] == 0
    assert body["logprobs"] is True and body["top_logprobs"] == 20
    assert body["messages"][0]["role"] == "system"
    content = body["messages"][1]["content"]
    images = [colour_of(p["image_url"]["url"]) for p in content if p["type"] == "image_url"]
    assert images[:2] == [200, 201]  # both references, in order, before the candidate
    text = "".join(p.get("text", "") for p in content)
    assert "Instruction: like reference image 2" in text and "'yes' or 'no'" in text
    assert "Authorization" not in server.headers[0]


def test_missing_token_is_flagged_and_keeps_first_stage_slot():
    behaviour = {1: [("ok", -2.0, -0.2)], 2: [("missing_no", -0.01)], 3: [("ok", -0.1, -3.0)]}
    with FakeServer(behaviour) as server:
        rr = make(server)
        items = rerank(request(), ["c1", "c2", "c3"], [3.0, 2.0, 1.0], lambda c: solid(int(c[1:])), rr, top_n=3)
    assert [it.candidate_id for it in items] == ["c3", "c2", "c1"]
    missing = items[1]
    # "Yes" (another token) is not taken for "yes" or "no"; the found logprob is kept.
    assert missing.flag == FLAG_TOKENS_MISSING and missing.p_yes is None
    assert missing.logit_yes == -0.01 and missing.logit_no is None
    assert missing.first_stage_rank == missing.new_rank == 1


def test_timeout_is_retried_then_flagged():
    behaviour = {
        1: [("sleep", 2 * TIMEOUT, ("ok", -0.1, -1.0)), ("ok", -0.1, -1.0)],  # slow once, then fine
        2: [("sleep", 2 * TIMEOUT, ("ok", -0.1, -1.0))],  # always too slow
        3: [("ok", -0.5, -0.4)],
    }
    with FakeServer(behaviour) as server:
        rr = make(server, retries=1)
        items = rerank(request(), ["c1", "c2", "c3"], None, lambda c: solid(int(c[1:])), rr, top_n=3)
    by_id = {it.candidate_id: it for it in items}
    assert by_id["c1"].flag is None and by_id["c1"].p_yes == pytest.approx(sig(0.9))
    assert by_id["c2"].flag.startswith("error: timeout") and "after 2 attempts" in by_id["c2"].flag
    assert server.attempts == {1: 2, 2: 2, 3: 1}
    assert [it.candidate_id for it in items] == ["c1", "c2", "c3"]  # c2 keeps slot 1
    # the requests ran concurrently: every candidate's first attempt came before any retry (one after the
    # other, c1's retry comes second; the wall-time bound this replaces passed that way too, in 3 timeouts)
    assert sorted(server.arrivals[:3]) == [1, 2, 3], server.arrivals


def test_http_errors_retry_only_when_retryable():
    behaviour = {1: [("http", 503), ("ok", -0.2, -0.3)], 2: [("http", 400)], 3: [("no_logprobs",)]}
    with FakeServer(behaviour) as server:
        rr = make(server, retries=2)
        s1, s2, s3 = rr.score(request(), ["c1", "c2", "c3"], [solid(1), solid(2), solid(3)])
    assert s1.flag is None and s1.p_yes == pytest.approx(sig(0.1))
    assert s2.flag.startswith("error: HTTP 400") and server.attempts[2] == 1
    assert s3.flag.startswith("error: response has no logprobs") and server.attempts[3] == 1
    assert server.attempts[1] == 2


def test_connection_refused_is_flagged():
    with FakeServer({}) as server:
        url = server.base_url
    rr = load_reranker("openai", base_url=url, model="m", timeout=TIMEOUT, retries=1, backoff=0.01)
    (s,) = rr.score(request(), ["c1"], [solid(1)])
    assert s.flag.startswith("error: connection failed") and s.p_yes is None


def test_concurrency_bound_is_respected():
    n = 12
    behaviour = {i: [("ok", -0.1, -1.0)] for i in range(n)}
    with FakeServer(behaviour, hold=0.15) as server:
        rr = make(server, concurrency=3)
        scores = rr.score(request(), [f"c{i}" for i in range(n)], [solid(i) for i in range(n)])
    assert all(s.flag is None for s in scores)
    assert len(server.requests) == n
    assert server.max_in_flight == 3


def test_api_key_comes_from_named_env_var(monkeypatch):
    monkeypatch.setenv("CIR_TEST_KEY", "sekrit")
    with FakeServer({1: [("ok", -1.0, -1.0)]}) as server:
        rr = make(server, api_key_env="CIR_TEST_KEY")
        rr.score(request(), ["c1"], [solid(1)])
    assert server.headers[0]["Authorization"] == "Bearer sekrit"
    assert "sekrit" not in json.dumps(rr.spec)
    monkeypatch.delenv("CIR_TEST_KEY")
    with pytest.raises(ValueError, match="CIR_TEST_KEY"):
        load_reranker("openai", api_key_env="CIR_TEST_KEY")


def test_bad_settings_are_rejected():
    for kw, msg in [
        ({"base_url": "localhost:8000"}, "http://"),
        ({"concurrency": 0}, "concurrency"),
        ({"timeout": 0}, "timeout"),
        ({"top_logprobs": 50}, "top_logprobs"),
        ({"yes_token": "yes", "no_token": "yes"}, "different"),
        ({"image_format": "gif"}, "image_format"),
    ]:
        with pytest.raises(ValueError, match=msg):
            load_reranker("openai", **kw)
