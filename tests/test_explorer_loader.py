"""Defaults, the background loader and what loading leaves out (cir_demo/explorer/config.py,
loader.py); the explorer imports no torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cir_demo.explorer import (
    ServiceConfig,
    ServiceError,
    ServiceLoader,
    default_retrievers,
    resolve_reranker,
    retriever_modality,
)
from cir_demo.testing.explorer import build_tiny_service


def test_defaults_and_modality():
    assert default_retrievers("world", ["world-cir", "world-clip-text", "other"]) == ["world-cir", "world-clip-text"]
    assert default_retrievers("pinpoint", ["world-cir"]) == []
    assert resolve_reranker("world", None, ["world-verifier", "openai"])[0] == "world-verifier"
    name, note = resolve_reranker("world", None, ["openai"])
    assert name is None and "world-verifier" in note
    assert resolve_reranker("world", "none", ["world-verifier"])[0] is None
    with pytest.raises(KeyError, match="(?i)did you mean"):
        resolve_reranker("world", "open-ai", ["openai"])
    assert retriever_modality({"name": "x", "recipe": "image_only"}) == "image"
    assert retriever_modality({"name": "x-text", "recipe": None}) == "text"
    assert retriever_modality({"name": "x-text", "recipe": "early_fusion"}) == "composed"
    assert retriever_modality({"name": "A", "family": "precomputed"}) == "file"  # a results file: tagged as such


def test_loader_reports_progress_and_errors(tiny_setup):
    _, names = tiny_setup
    bad = ServiceLoader(ServiceConfig(benchmark="no-such-benchmark", warm_thumbnails=False))
    with pytest.raises(ServiceError, match="could not load"):
        bad.wait(60)
    assert "did you mean" in bad.status().text().lower() or "unknown benchmark" in bad.status().text().lower()
    ok = ServiceLoader(
        ServiceConfig(
            benchmark="world",
            benchmark_kwargs={"size": "tiny"},
            retrievers=tuple(names[:1]),
            reranker="none",
            warm_thumbnails=False,
        )
    )
    svc = ok.wait(120)
    assert ok.ready and ok.status().done and svc.retriever_names == names[:1]
    svc.engine.close()


def test_when_done_calls_back_once_loading_ends_and_at_once_afterwards():
    """A page waiting for the explorer is woken by `when_done` (not at its next poll): each callback once,
    after the outcome is set, in order, a failing one not stopping the rest; after the end, at once."""
    loader = ServiceLoader(ServiceConfig(benchmark="no-such-benchmark", warm_thumbnails=False), start=False)
    calls = []
    loader.when_done(lambda: calls.append(("first", loader.status().error is not None)))
    loader.when_done(lambda: 1 / 0)
    loader.when_done(lambda: calls.append(("second", loader.status().error is not None)))
    assert calls == []  # not started: nothing ended yet
    loader.start()
    with pytest.raises(ServiceError, match="could not load"):
        loader.wait(60)
    loader._thread.join(60)  # the callbacks run on the loader's thread right after the outcome is set
    assert calls == [("first", True), ("second", True)]
    loader.when_done(lambda: calls.append(("late", True)))
    assert calls[-1] == ("late", True)


def test_missing_retriever_weights_leave_the_rest_working(tiny_setup):
    from cir_demo.retrievers import registry
    from cir_demo.testing.tiny_retrievers import tiny_open_clip_config

    _, names = tiny_setup
    registry.register_config(tiny_open_clip_config("/nonexistent/w.safetensors", "tiny-ui-broken"), replace=True)
    try:
        svc = build_tiny_service([names[0], "tiny-ui-broken"], reranker="none")
        assert svc.retriever_names == [names[0]]
        note = next(w for w in svc.warnings if "tiny-ui-broken could not be loaded" in w)
        # the doctor's fact for it, with where it looked
        assert (
            "retriever tiny-ui-broken: open_clip cir-demo-tiny-clip weights file: not found at /nonexistent/w.safetensors"
            in note
        )
        svc.engine.close()
    finally:
        registry.unregister("tiny-ui-broken")


def test_explorer_imports_no_torch():
    """The UI's side of the app loads without torch: models load through the engine, on first use."""
    code = (
        "import sys; import cir_demo.explorer, cir_demo.explorer.loader; "
        "heavy = sorted(m for m in ('torch', 'open_clip', 'faiss', 'gradio') if m in sys.modules); print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


class ExitedChild:
    """A world child process that has already ended with `code`."""

    def __init__(self, code: int):
        self.returncode = code

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        return self.returncode


def test_a_failed_world_child_is_said_and_the_loader_generates_the_world(tmp_path, monkeypatch, caplog):
    """The loader waits for the child that generates the world aside; when it failed, the log says so
    and opening the benchmark generates the world here."""
    from cir_demo.explorer import loader

    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(loader, "preload_retrievers", lambda config, names: {})
    stages = []
    config = ServiceConfig(benchmark_kwargs={"size": "tiny", "seed": 5})
    with caplog.at_level("WARNING", logger="cir_demo.explorer.loader"):
        bench, preloaded = loader._open_benchmark(config, stages.append, world_child=ExitedChild(1))
    assert "failed (exit status 1); generating it here" in caplog.text
    assert len(bench.queries) > 0 and preloaded == {}
    assert stages[0].startswith("generating the offline world")


def test_a_world_child_that_already_finished_is_not_said_to_be_generating(tmp_path, monkeypatch):
    from cir_demo.explorer import loader

    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(loader, "preload_retrievers", lambda config, names: {})
    stages = []
    config = ServiceConfig(benchmark_kwargs={"size": "tiny", "seed": 5})
    loader._open_benchmark(config, stages.append, world_child=ExitedChild(0))
    assert stages[0] == "loading the models (the offline world was generated meanwhile)"
