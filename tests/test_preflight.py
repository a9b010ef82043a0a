"""Before a run: the doctor's table, one line per failure with its fix (no traceback, nothing
created), the dry run's plan (creates nothing), out-of-memory back-off."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cir_demo.cli import main
from pinpoint_images import write_pinpoint

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def dirs(tmp_path, monkeypatch):
    for var, sub in (("CIR_DEMO_CACHE", "cache"), ("CIR_DEMO_RUNS", "runs"), ("CIR_DEMO_INDEXES", "indexes")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    return tmp_path


def test_doctor_on_the_default_world_says_every_world_model_is_ready(dirs, capsys):
    from cir_demo.benchmarks.registry import declared_defaults

    WORLD_RETRIEVERS, WORLD_RERANKER = (
        declared_defaults("world").default_retrievers,
        declared_defaults("world").default_reranker,
    )

    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split()[1]: line.split()[2] for line in out.splitlines() if line.startswith(("retriever ", "reranker "))
    }
    assert rows == {**{n: "ready" for n in WORLD_RETRIEVERS}, WORLD_RERANKER: "ready"}
    assert "device" in out and "the requested run can start" in out


def test_doctor_lists_exactly_what_is_missing_for_real_models(dirs, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf"))  # an empty hub cache
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "empty-hf"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    parquet, corpus_file, ids = write_pinpoint(tmp_path / "pp")
    rc = main(
        [
            "doctor",
            "--benchmark",
            "pinpoint",
            "--annotations",
            str(parquet),
            "--corpus-ids",
            str(corpus_file),
            "--retrievers",
            "metaclip2-h14-fusion,gme-qwen2-vl-2b,world-clip-fusion,text-proxy-premerge",
            "--reranker",
            "qwen2.5-vl",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 1
    rows = [line for line in out.splitlines() if not line.startswith(" ")]
    status = {}
    for line in rows[2:]:
        parts = line.split()
        if len(parts) > 2:
            status.setdefault(" ".join(parts[:2]) if parts[0] in ("retriever", "reranker") else parts[0], []).append(
                parts[2] if parts[0] in ("retriever", "reranker") else parts[1]
            )
    assert status["images"] == ["missing"]
    assert status["retriever metaclip2-h14-fusion"] == ["missing"]
    assert status["retriever world-clip-fusion"] == ["ready"]
    assert sorted(status["retriever gme-qwen2-vl-2b"]) == ["blocked", "blocked", "missing"]  # opt-in, pin, weights
    assert sorted(status["retriever text-proxy-premerge"]) == ["blocked", "missing"]  # API key, text encoder
    assert status["reranker qwen2.5-vl"] == ["missing"]
    for fix in (
        "hf download timm/vit_huge_patch14_clip_224.metaclip2_worldwide",
        "--trust-remote-code",
        "transformers==4.51.3",
        "OPENAI_API_KEY",
        "hf download Qwen/Qwen2.5-VL-7B-Instruct",
        f"{len(ids)} benchmark images are missing",
        "images fetch --benchmark pinpoint",
    ):
        assert fix in out, fix


def test_eval_with_uncached_weights_fails_in_one_line_and_creates_nothing(tmp_path, monkeypatch, capsys):
    parquet, corpus_file, _ = write_pinpoint(tmp_path / "pp")
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "CIR_DEMO_RUNS": str(tmp_path / "runs"),
        "CIR_DEMO_CACHE": str(tmp_path / "cache"),
        "CIR_DEMO_INDEXES": str(tmp_path / "indexes"),
    }
    env.pop("HF_HUB_CACHE", None)
    cmd = [
        sys.executable,
        "app.py",
        "--eval",
        "--benchmark",
        "pinpoint",
        "--annotations",
        str(parquet),
        "--corpus-ids",
        str(corpus_file),
        "--retrievers",
        "metaclip2-h14-fusion",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = lines[0]
    for part in (
        "metaclip2-h14-fusion",
        "timm/vit_huge_patch14_clip_224.metaclip2_worldwide",
        "hf download timm/vit_huge_patch14_clip_224.metaclip2_worldwide",
        "HF_HOME",
        str(tmp_path / "hf"),
    ):
        assert part in line, part
    assert not (tmp_path / "runs").exists() and not (tmp_path / "indexes").exists()
    # --debug shows the traceback for those who want it; in this process (the boundary was checked
    # above), with the same empty hub cache
    import huggingface_hub.constants as c

    for var in ("HF_HOME", "CIR_DEMO_RUNS", "CIR_DEMO_CACHE", "CIR_DEMO_INDEXES"):
        monkeypatch.setenv(var, env[var])
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    spec = importlib.util.spec_from_file_location("app_entry", ROOT / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    assert app.main(cmd[2:] + ["--debug"]) != 0
    err = capsys.readouterr().err
    assert "Traceback" in err and "hf download timm/vit_huge_patch14_clip_224.metaclip2_worldwide" in err, err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "indexes").exists()


# A run that stops on missing weights, in a fresh process: its lines, and which of the heavy libraries it loaded.
STOPPED_RUN = """
import json, sys
from cir_demo.preflight.run import model_lines
lines = model_lines(sys.argv[1].split(","), None, False, None, device_when_blocked=False)
print(json.dumps({"lines": [ln.message() for ln in lines],
                  "loaded": sorted(m for m in ("open_clip", "torchvision", "torch") if m in sys.modules)}))
"""


def test_a_run_stopped_by_missing_tag_weights_loads_no_open_clip_nor_torch_and_says_what_open_clip_says(
    tmp_path, monkeypatch
):
    """The preflight of `--eval` / `index build` names missing open_clip-tag weights from the recorded copy
    of open_clip's tag table, and leaves the device's line (torch) out of a run that stops anyway: the
    same lines as open_clip's own table gives, without importing open_clip, torchvision or torch."""
    import huggingface_hub.constants as c

    from cir_demo.preflight.run import model_lines
    from cir_demo.retrievers import openclip

    names = ["metaclip2-h14-fusion", "dfn-h14-image"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    env.pop("HF_HUB_CACHE", None)
    done = subprocess.run(
        [sys.executable, "-c", STOPPED_RUN, ",".join(names)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["loaded"] == []
    assert len(got["lines"]) == 2 and all("is not in the cache" in line for line in got["lines"]), got
    # the oracle: open_clip's own table (the recorded copy bypassed), in this process, same empty hub cache
    monkeypatch.setenv("HF_HOME", env["HF_HOME"])
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setattr(openclip, "_recorded_tags", lambda: {})
    lines = model_lines(names, None, False, None, device_when_blocked=False)
    assert [ln.message() for ln in lines] == got["lines"]
    # asked for a device, or computed for a dry run's plan (the default), the device has its line first
    for kw in ({"device": "cpu", "device_when_blocked": False}, {"device": None}):
        lines = model_lines(names, None, False, **kw)
        assert lines[0].item == "device" and [ln.message() for ln in lines[1:]] == got["lines"]


def test_the_recorded_open_clip_tags_are_open_clips_entries_for_every_encoder_tag(monkeypatch):
    import open_clip

    from cir_demo.retrievers import openclip, registry

    def open_clips(model: str, tag: str) -> dict:
        cfg = open_clip.get_pretrained_cfg(model, tag) or {}
        return {k: cfg[k] for k in ("hf_hub", "url") if cfg.get(k)}

    table = json.loads((registry.CONFIG_DIR / registry.OPEN_CLIP_TAGS_FILE).read_text(encoding="utf-8"))
    assert table["open_clip"] == open_clip.__version__  # a copy of the installed (pinned) open_clip's table
    recorded = table["tags"]
    for key, entry in recorded.items():
        assert entry and entry == open_clips(*key.split("/", 1)), key
    encoders = json.loads((registry.CONFIG_DIR / registry.ENCODERS_FILE).read_text(encoding="utf-8"))
    tags = {
        f"{e['model']}/{e['pretrained']}"
        for e in encoders.values()
        if e["family"] == "open_clip" and not openclip.is_local_weights(e["pretrained"])
    }
    assert tags and tags <= set(recorded)
    # a tag no encoder names is looked up in open_clip itself
    assert (
        "ViT-B-32/openai" not in recorded
        and openclip.tag_source("ViT-B-32", "openai") == open_clips("ViT-B-32", "openai") != {}
    )
    # under another installed open_clip the copy is not used: every tag is looked up in open_clip
    openclip._recorded_tags.cache_clear()
    monkeypatch.setattr(openclip.versions, "library_versions", lambda *names, **kw: {"open_clip": "0.0.1"})
    try:
        assert openclip._recorded_tags() == {} and openclip.tag_source(*key.split("/", 1)) == entry
    finally:
        openclip._recorded_tags.cache_clear()


def _tree(*folders: Path) -> dict[str, tuple[int, float]]:
    out = {}
    for folder in folders:
        if folder.exists():
            for p in folder.rglob("*"):
                out[str(p)] = (p.stat().st_size, p.stat().st_mtime) if p.is_file() else (0, 0.0)
    return out


def test_dry_run_prints_counts_and_a_measured_estimate_and_creates_nothing(dirs, tmp_path, capsys):
    from cir_demo.harness import cli as eval_cli
    from cir_demo.retrievers import registry
    from cir_demo.testing.tiny_retrievers import build_tiny_open_clip, tiny_open_clip_config
    from cir_demo.world import load_world

    bench = load_world(size="tiny")  # generated before the snapshot: the dry run must not generate it
    weights = build_tiny_open_clip(tmp_path / "w")
    registry.register_config(tiny_open_clip_config(weights, "tiny-dry-fusion"), replace=True)
    try:
        before = _tree(dirs, ROOT / "runs", ROOT / "indexes", ROOT / "cache")
        p = argparse.ArgumentParser()
        eval_cli.add_arguments(p)
        args = p.parse_args(
            [
                "--world-size",
                "tiny",
                "--retrievers",
                "tiny-dry-fusion",
                "--rerank",
                "world-verifier",
                "--rerank-top-n",
                "5",
                "--dry-run",
                "--device",
                "cpu",
            ]
        )
        assert eval_cli.run(args) == 0
        out = capsys.readouterr().out
        assert _tree(dirs, ROOT / "runs", ROOT / "indexes", ROOT / "cache") == before
    finally:
        registry.unregister("tiny-dry-fusion")
    # A plain --eval on the world runs both test splits over one corpus.
    n_q = len(bench.queries) + len(load_world(size="tiny", split="compositional").queries)
    n_c = len(bench.corpus_ids)
    assert f"encode {n_c} corpus images" in out and f"{n_q} queries at" in out
    assert f"score {n_q * 5} pairs" in out and "pairs/s" in out
    assert "estimated time: about" in out and "could not be measured" not in out


def test_out_of_memory_halves_the_batch_then_says_what_to_do(capsys):
    import torch

    from cir_demo.errors import UserError
    from cir_demo.utils.oom import OomBackoff

    items = list(range(10))
    seen = []

    def encode(chunk, bs):
        if len(chunk) > 3:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        seen.append(len(chunk))
        return np.array([[float(i)] for i in chunk])

    backoff = OomBackoff(8, "encode test")
    assert backoff(items, encode).ravel().tolist() == [float(i) for i in items]
    assert backoff.batch_size == 2 and set(seen) == {2}
    err = capsys.readouterr().err
    assert "retrying with batch size 4" in err and "retrying with batch size 2" in err

    def never(chunk, bs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(UserError, match="even with a batch of 1.*--device cpu"):
        OomBackoff(2, "encode test")(items, never)
    with pytest.raises(ValueError):  # other errors pass through untouched
        OomBackoff(2, "x")(items, lambda c, b: (_ for _ in ()).throw(ValueError("bad")))


def test_one_mechanism_from_exception_to_line_for_cli_and_page(capsys):
    import io

    from cir_demo.errors import UserError, report_errors
    from cir_demo.ui.guard import error_message
    from cir_demo.utils.names import UnknownNameError

    def fail(exc):
        def body():
            raise exc

        return body

    err = io.StringIO()
    assert (
        report_errors(fail(UserError("weights missing; run `hf download X`\nimages missing; fetch")), stream=err) == 2
    )
    assert err.getvalue() == "error: weights missing; run `hf download X`\nerror: images missing; fetch\n"
    err = io.StringIO()
    assert report_errors(fail(UnknownNameError("retriever", "wrold-clip", ["world-clip"])), stream=err) == 2
    assert err.getvalue().count("\n") == 1 and "did you mean" in err.getvalue().lower()
    err = io.StringIO()
    assert report_errors(fail(KeyError("boom")), stream=err) == 1  # a bug: one line, and how to see more
    assert "Traceback" not in err.getvalue() and "--debug" in err.getvalue()
    err = io.StringIO()
    assert report_errors(fail(KeyError("boom")), stream=err, debug=True) == 1
    assert "Traceback" in err.getvalue()
    # the page shows the same words as the command line
    assert (
        error_message("Load", UserError("weights missing; run `hf download X`"))
        == "Load: weights missing; run `hf download X`"
    )
    assert "failed (KeyError" in error_message("Load", KeyError("boom"))
