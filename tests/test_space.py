"""The repository is a Hugging Face Space as is: README front matter as Spaces reads it,
consistent with requirements.txt; the app honours the environment a Space sets (host and
port, persistent storage at /data) and writes nothing into the working tree there."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from cir_demo import paths

ROOT = Path(__file__).resolve().parent.parent
# Keys and values Spaces accepts (https://huggingface.co/docs/hub/spaces-config-reference).
REQUIRED = {"title", "emoji", "sdk", "sdk_version", "app_file", "python_version", "license", "short_description",
            "suggested_hardware"}
HARDWARE = {"cpu-basic", "cpu-upgrade", "t4-small", "t4-medium", "l4x1", "l4x4", "a10g-small", "a10g-large",
            "a10g-largex2", "a10g-largex4", "a100-large", "zero-a10g"}


def front_matter(text: str) -> dict:
    yaml = pytest.importorskip("yaml")
    m = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert m, "README.md must start with a '---' YAML block (Spaces configuration)"
    return yaml.safe_load(m.group(1))


def pinned(requirement: str) -> str:
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        m = re.fullmatch(rf"{requirement}==([\w.]+)", line.split("#")[0].strip())
        if m:
            return m.group(1)
    raise AssertionError(f"{requirement} is not pinned with == in requirements.txt")


def test_readme_front_matter_is_a_valid_space_config():
    meta = front_matter((ROOT / "README.md").read_text(encoding="utf-8"))
    assert REQUIRED <= set(meta), sorted(REQUIRED - set(meta))
    assert meta["sdk"] == "gradio"
    assert str(meta["sdk_version"]) == pinned("gradio")  # Spaces installs this gradio, tests ran with the pin
    assert (ROOT / meta["app_file"]).is_file()
    assert isinstance(meta["python_version"], str)  # unquoted 3.10 would parse as the float 3.1
    assert meta["python_version"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert meta["suggested_hardware"] in HARDWARE
    assert len(meta["short_description"]) <= 60
    assert len(meta["emoji"]) == 1
    assert meta.get("suggested_storage", "small") in {"small", "medium", "large"}


def test_front_matter_parser_rejects_a_bad_block():
    with pytest.raises(AssertionError):
        front_matter("# no front matter\n")


def test_data_root_follows_the_space_storage(tmp_path, monkeypatch):
    for var in ("CIR_DEMO_DATA", "CIR_DEMO_CACHE", "CIR_DEMO_INDEXES", "CIR_DEMO_RUNS", "SPACE_ID"):
        monkeypatch.delenv(var, raising=False)
    storage = tmp_path / "data"
    monkeypatch.setenv("CIR_DEMO_SPACE_STORAGE", str(storage))
    assert paths.data_root() == paths.REPO_ROOT  # not on a Space
    monkeypatch.setenv("SPACE_ID", "someone/cir-demo")
    assert paths.data_root() == paths.REPO_ROOT  # a Space without persistent storage
    storage.mkdir()
    assert (paths.cache_dir(), paths.indexes_dir(), paths.runs_dir()) == \
        (storage / "cache", storage / "indexes", storage / "runs")
    monkeypatch.setenv("CIR_DEMO_RUNS", str(tmp_path / "elsewhere"))  # one folder overridden on its own
    assert paths.runs_dir() == tmp_path / "elsewhere" and paths.cache_dir() == storage / "cache"
    monkeypatch.setenv("CIR_DEMO_DATA", str(tmp_path / "mine"))  # an explicit root wins over /data
    assert paths.indexes_dir() == tmp_path / "mine" / "indexes"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


@pytest.mark.slow
def test_app_on_a_space_serves_on_the_given_port_and_writes_only_to_storage(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("gradio")
    storage = tmp_path / "data"
    storage.mkdir()
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("CIR_DEMO_DATA", "CIR_DEMO_CACHE", "CIR_DEMO_INDEXES", "CIR_DEMO_RUNS")}
    env.update({"SPACE_ID": "someone/cir-demo", "SYSTEM": "spaces", "CIR_DEMO_SPACE_STORAGE": str(storage),
                "GRADIO_SERVER_NAME": "127.0.0.1", "GRADIO_SERVER_PORT": str(port), "HF_HUB_OFFLINE": "1",
                "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1",
                # a Space runs `python app.py` without arguments; its variables carry them
                "CIR_DEMO_ARGS": "--world-size tiny --limit 2 --retrievers world-clip-image --reranker none"})
    repo_data = {name: tree(ROOT / name) for name in ("cache", "indexes", "runs")}
    log = tmp_path / "app.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while "explorer ready" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.5)
        assert "explorer ready" in log.read_text(), log.read_text()
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30).read().decode()
        assert "CIR failure explorer" in page
        assert "retrievers: world-clip-image;" in log.read_text()  # CIR_DEMO_ARGS were read
    finally:
        proc.terminate()
        proc.wait(30)
    written = tree(storage)
    assert any(p.startswith("cache/world/tiny-seed0/") for p in written), sorted(written)
    assert any(p.startswith("indexes/world-tiny-s0/world-clip-image/") for p in written), sorted(written)
    assert not any(p.startswith(".") or p.split("/")[0] not in ("cache", "indexes", "runs") for p in written), \
        sorted(written)
    for name, before in repo_data.items():  # nothing new in the working tree
        assert tree(ROOT / name) == before, name
