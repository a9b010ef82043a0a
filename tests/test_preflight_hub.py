"""The doctor's hub answers (download size, gated, missing) against a real local HTTP server
standing in for the Hugging Face hub (HF_ENDPOINT on 127.0.0.1); nothing leaves the machine."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

REPOS = {"org/open": [("config.json", 1000), ("model.safetensors", 2_500_000_000), ("README.md", 5000)]}


class FakeHub(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_HEAD(self):
        self.send_response(200)
        self.end_headers()

    def do_GET(self):
        path = self.path.split("?")[0]
        repo = path.removeprefix("/api/models/").split("/revision/")[0]
        if repo in REPOS:
            body = json.dumps(
                {"id": repo, "gated": False, "siblings": [{"rfilename": f, "size": n} for f, n in REPOS[repo]]}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(401)
        self.send_header("X-Error-Code", "GatedRepo" if repo == "org/gated" else "RepoNotFound")
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture()
def hub(tmp_path, monkeypatch):
    import huggingface_hub.constants as c

    from cir_demo.preflight import hub as hub_mod

    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(c, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(c, "ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_TOKEN", "")
    hub_mod.hub_status.cache_clear()
    yield
    hub_mod.hub_status.cache_clear()
    server.shutdown()
    server.server_close()


def _register(name, model):
    from cir_demo.retrievers import registry

    registry.register_config(
        {
            "name": name,
            "family": "hf_clip",
            "model": model,
            "recipe": "early_fusion",
            "params": {"text_weight": 0.8},
            "requires": ["torch"],
        },
        replace=True,
    )


def test_hub_answers_size_gated_and_missing(hub):
    from cir_demo.preflight.checks import reranker_lines, retriever_lines
    from cir_demo.retrievers import registry

    _register("fake-open", "org/open")
    _register("fake-gated", "org/gated")
    _register("fake-none", "org/none")
    try:
        [open_line] = retriever_lines("fake-open")
        [gated] = retriever_lines("fake-gated")
        [none] = retriever_lines("fake-none")
    finally:
        for n in ("fake-open", "fake-gated", "fake-none"):
            registry.unregister(n)
    # not cached, downloadable: the run can start; the size counts the model files, not the README
    assert open_line.status == "download" and "2.5 GB" in open_line.detail and "org/open" in open_line.detail
    assert "hf download org/open" in open_line.fix
    assert gated.status == "blocked" and "org/gated is gated" in gated.detail and "hf auth login" in gated.detail
    assert none.status == "blocked" and "org/none does not exist on the hub or is private" in none.detail
    [rr] = reranker_lines("qwen2.5-vl", model="org/open")
    assert rr.status == "download" and "2.5 GB" in rr.detail
