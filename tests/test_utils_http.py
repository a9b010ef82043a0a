"""The shared HTTP client and its retry policy, against a keep-alive server on 127.0.0.1 that answers
from a script: 429 with Retry-After, 503, then 200 over one connection; what is not retried; waits
with jitter and a cap; and that the clients of the project send through it."""

from __future__ import annotations

import ast
import email.utils
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from loopback import LoopbackServer

from cir_demo.utils import http
from cir_demo.utils.http import HttpError, RetryableBody, RetryPolicy, request, retry_after_seconds

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 2.0  # generous: a loaded machine must never time out a scripted fast answer


class ScriptedServer(LoopbackServer):
    """script[path] = answers in order, the last one repeating: (status, headers) or ("sleep", s).
    HTTP/1.1 with Content-Length, so a client may keep its connection; `ports` records the client
    port of every request (one port = one connection)."""

    def __init__(self, script: dict[str, list]):
        self.script, self.ports, self.count = script, [], {}
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 10  # an idle kept-alive connection is closed rather than held forever

            def log_message(self, *args):
                pass

            def do_GET(self):
                server.answer(self)

            do_POST = do_GET

        super().__init__(Handler)
        self.url = f"http://127.0.0.1:{self.port}"

    def answer(self, h: BaseHTTPRequestHandler):
        if "Content-Length" in h.headers:
            h.rfile.read(int(h.headers["Content-Length"]))
        with self.lock:
            n = self.count.get(h.path, 0)
            self.count[h.path] = n + 1
            self.ports.append(h.client_address[1])
        answers = self.script[h.path]
        status, headers = answers[min(n, len(answers) - 1)]
        if status == "sleep":
            time.sleep(headers)
            status, headers = 200, {}
        body = f"answer {n}".encode()
        try:
            h.send_response(status)
            for k, v in headers.items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out and left


class Sleeps(list):
    """Records the waits instead of waiting."""

    def __call__(self, seconds: float):
        self.append(seconds)


def test_429_with_retry_after_then_503_then_200_over_one_connection():
    script = {"/x": [(429, {"Retry-After": "3"}), (503, {}), (200, {})]}
    sleeps = Sleeps()
    with ScriptedServer(script) as server:
        response = request(
            "GET", server.url + "/x", timeout=TIMEOUT, policy=RetryPolicy(retries=3, backoff_s=0.5), sleep=sleeps
        )
        ports = list(server.ports)
    assert response.status_code == 200 and response.content == b"answer 2"
    assert server.count == {"/x": 3}
    assert len(ports) == 3 and len(set(ports)) == 1, f"one connection reused, got client ports {ports}"
    assert sleeps[0] == 3.0  # the server's Retry-After, not the back-off
    assert 0.5 * 1.0 <= sleeps[1] < 1.5 * 1.0  # back-off of the second try: 0.5 * 2**1, jittered


def test_retry_after_as_an_http_date_and_the_cap():
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    script = {"/date": [(429, {"Retry-After": when}), (200, {})], "/long": [(503, {"Retry-After": "86400"}), (200, {})]}
    sleeps = Sleeps()
    with ScriptedServer(script) as server:
        request("GET", server.url + "/date", timeout=TIMEOUT, policy=RetryPolicy(1, 0.01, max_wait_s=60), sleep=sleeps)
        request("GET", server.url + "/long", timeout=TIMEOUT, policy=RetryPolicy(1, 0.01, max_wait_s=5), sleep=sleeps)
    assert 25 < sleeps[0] <= 30  # a date 30 s ahead (whole seconds, minus the time the request took)
    assert sleeps[1] == 5  # a day asked for, the cap waited


@pytest.mark.parametrize("status", [400, 401, 404, 501])
def test_answers_that_will_not_change_are_not_retried(status):
    sleeps = Sleeps()
    with ScriptedServer({"/no": [(status, {"Retry-After": "1"}), (200, {})]}) as server:
        with pytest.raises(HttpError) as info:
            request("GET", server.url + "/no", timeout=TIMEOUT, policy=RetryPolicy(3, 0.01), sleep=sleeps)
        assert server.count == {"/no": 1}
    err = info.value
    assert (err.kind, err.status, err.attempts, err.retryable) == ("status", status, 1, False)
    assert err.body == b"answer 0" and str(err) == f"HTTP {status}" and sleeps == []


def test_a_failure_is_one_line_for_every_remote_client():
    """The chat reranker's flag and the text proxy's error read the same line: the status with the start of
    the answer, the URL, and the tries spent when the failure was retried."""
    with ScriptedServer({"/no": [(400, {})], "/busy": [(503, {})]}) as server:
        with pytest.raises(HttpError) as refused:
            request("POST", server.url + "/no", timeout=TIMEOUT, policy=RetryPolicy(2, 0.0), sleep=Sleeps())
        with pytest.raises(HttpError) as busy:
            request("POST", server.url + "/busy", timeout=TIMEOUT, policy=RetryPolicy(1, 0.0), sleep=Sleeps())
    assert http.failure_line(refused.value) == f"HTTP 400 Bad Request: answer 0 ({server.url}/no)"
    assert (
        http.failure_line(busy.value)
        == f"HTTP 503 Service Unavailable: answer 1 ({server.url}/busy) (after 2 attempts)"
    )
    assert (http.failure_kind(refused.value), http.failure_kind(busy.value)) == ("http_400", "http_503")


def test_retries_run_out_with_the_last_answer():
    sleeps = Sleeps()
    with ScriptedServer({"/busy": [(503, {})]}) as server:
        with pytest.raises(HttpError) as info:
            request(
                "POST", server.url + "/busy", timeout=TIMEOUT, policy=RetryPolicy(2, 0.1), content=b"{}", sleep=sleeps
            )
        assert server.count == {"/busy": 3}
    assert (info.value.kind, info.value.status, info.value.attempts, info.value.retryable) == ("status", 503, 3, True)
    assert len(sleeps) == 2 and 0.05 <= sleeps[0] < 0.15 and 0.1 <= sleeps[1] < 0.3


def test_timeouts_are_retried_and_named():
    with ScriptedServer({"/slow": [("sleep", 1.0)]}) as server:
        with pytest.raises(HttpError) as info:
            request("GET", server.url + "/slow", timeout=0.2, policy=RetryPolicy(1, 0.0), sleep=Sleeps())
        deadline = time.monotonic() + 10  # the server counts a request it may still be reading
        while server.count.get("/slow") != 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.count == {"/slow": 2}
    assert info.value.kind == "timeout" and info.value.attempts == 2 and "0.2 s" in str(info.value)


def test_a_refused_connection_is_a_network_error():
    with ScriptedServer({}) as server:
        url = server.url
    with pytest.raises(HttpError) as info:
        request("GET", url + "/gone", timeout=TIMEOUT, policy=RetryPolicy(1, 0.0), sleep=Sleeps())
    assert info.value.kind == "network" and info.value.attempts == 2 and str(info.value).startswith("connection failed")


def test_a_body_the_check_refuses_is_tried_again():
    seen = []

    def check(body: bytes):
        seen.append(body)
        if body != b"answer 1":
            raise RetryableBody(f"bad body {body!r}")

    with ScriptedServer({"/b": [(200, {})]}) as server:
        assert (
            request(
                "GET", server.url + "/b", timeout=TIMEOUT, policy=RetryPolicy(2, 0.0), check=check, sleep=Sleeps()
            ).content
            == b"answer 1"
        )
        with pytest.raises(HttpError, match="bad body b'answer 3'") as info:
            request("GET", server.url + "/b", timeout=TIMEOUT, policy=RetryPolicy(1, 0.0), check=check, sleep=Sleeps())
    assert seen == [b"answer 0", b"answer 1", b"answer 2", b"answer 3"] and info.value.kind == "body"


def test_retry_after_values():
    now = 1_700_000_000.0
    assert retry_after_seconds("120", now) == 120.0
    assert retry_after_seconds(" 0 ", now) == 0.0
    assert retry_after_seconds(email.utils.formatdate(now + 42, usegmt=True), now) == 42.0
    assert retry_after_seconds(email.utils.formatdate(now - 42, usegmt=True), now) == 0.0  # already past
    for bad in (None, "", "soon", "-5", "1.5", "Wed, 99 Foo 2026 00:00:00 GMT"):
        assert retry_after_seconds(bad, now) is None, bad


def test_backoff_doubles_with_jitter_and_stays_under_the_cap():
    policy = RetryPolicy(retries=5, backoff_s=1.0, max_wait_s=6.0)
    for attempt, base in enumerate([1.0, 2.0, 4.0]):
        waits = [policy.wait_s(attempt) for _ in range(200)]
        assert all(0.5 * base <= w < 1.5 * base for w in waits)
        assert len(set(waits)) > 100  # spread, so workers turned away together do not return together
    assert max(policy.wait_s(3) for _ in range(200)) == 6.0  # 8 s jittered, capped
    assert policy.wait_s(0, "2") == 2.0 and policy.wait_s(0, "600") == 6.0
    with pytest.raises(ValueError, match="retries"):
        RetryPolicy(retries=-1)


def test_the_client_is_shared_by_threads_and_not_by_a_forked_child(monkeypatch):
    got = []
    threads = [threading.Thread(target=lambda: got.append(http.client())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in got}) == 1 and got[0] is http.client()
    monkeypatch.setattr(http.os, "getpid", lambda: -1)  # as a forked child sees it
    assert http.client() is not got[0]
    monkeypatch.delitem(http._clients, -1)


# modules that may open connections themselves: the client, and the doctor's one reachability probe
# (a single HEAD that must answer at once, never retried)
OWN_HTTP = {"cir_demo/utils/http.py", "cir_demo/preflight/hub.py"}
LOW_LEVEL = {"urllib.request", "http.client", "requests", "httpx", "aiohttp", "urllib3"}


def test_every_other_http_client_sends_through_the_shared_one():
    found = []
    for path in sorted((ROOT / "cir_demo").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.module
                else []
            )
            found += [f"{rel}:{node.lineno} imports {n}" for n in names if n in LOW_LEVEL and rel not in OWN_HTTP]
    assert not found, found
    users = {
        "cir_demo/images/fetch.py",
        "cir_demo/rerank/openai_api.py",
        "cir_demo/retrievers/text_proxy.py",
        "cir_demo/benchmarks/images.py",
    }
    for rel in users:
        assert "cir_demo.utils.http import" in (ROOT / rel).read_text(encoding="utf-8"), rel
