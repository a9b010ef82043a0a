"""The repository is a Hugging Face Space as is: README front matter as Spaces reads it,
consistent with requirements.txt; the app honours the environment a Space sets (host and
port, persistent storage at /data) and writes nothing into the working tree there."""

from __future__ import annotations

import re
import sys
import urllib.request
from pathlib import Path

import pytest

from cir_demo import paths
from conftest import tree

ROOT = Path(__file__).resolve().parent.parent
# Keys and values Spaces accepts (https://huggingface.co/docs/hub/spaces-config-reference).
REQUIRED = {
    "title",
    "emoji",
    "sdk",
    "sdk_version",
    "app_file",
    "python_version",
    "license",
    "short_description",
    "suggested_hardware",
}
HARDWARE = {
    "cpu-basic",
    "cpu-upgrade",
    "t4-small",
    "t4-medium",
    "l4x1",
    "l4x4",
    "a10g-small",
    "a10g-large",
    "a10g-largex2",
    "a10g-largex4",
    "a100-large",
    "zero-a10g",
}


def front_matter(text: str) -> dict:
    import yaml

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
    assert (paths.cache_dir(), paths.indexes_dir(), paths.runs_dir()) == (
        storage / "cache",
        storage / "indexes",
        storage / "runs",
    )
    monkeypatch.setenv("CIR_DEMO_RUNS", str(tmp_path / "elsewhere"))  # one folder overridden on its own
    assert paths.runs_dir() == tmp_path / "elsewhere" and paths.cache_dir() == storage / "cache"
    monkeypatch.setenv("CIR_DEMO_DATA", str(tmp_path / "mine"))  # an explicit root wins over /data
    assert paths.indexes_dir() == tmp_path / "mine" / "indexes"


@pytest.mark.slow
def test_app_on_a_space_serves_on_the_given_port_and_writes_only_to_storage(space_app):
    """`python app.py` with a Space's environment (conftest.py's `space_app`, shared with the
    fresh-start browser test): served on GRADIO_SERVER_PORT, arguments from CIR_DEMO_ARGS, every
    file written under the storage folder and none in the working tree."""
    page = urllib.request.urlopen(space_app.url, timeout=30).read().decode()  # on GRADIO_SERVER_PORT
    assert "CIR failure explorer" in page
    log = space_app.log.read_text()
    assert "retrievers: world-clip-fusion, world-clip-image;" in log  # CIR_DEMO_ARGS were read
    written = tree(space_app.storage)
    assert any(p.startswith("cache/world/tiny-seed0/") for p in written), sorted(written)
    assert any(p.startswith("indexes/world-tiny-s0/world-clip-image/") for p in written), sorted(written)
    assert not any(p.startswith(".") or p.split("/")[0] not in ("cache", "indexes", "runs") for p in written), sorted(
        written
    )
    for name, before in space_app.repo_before.items():  # nothing new in the working tree
        assert tree(ROOT / name) == before, name
