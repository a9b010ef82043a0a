"""The world's shipped test part (cir_demo/world/shipped.py): the committed copy is byte-identical to
generating the default world's test part; a first load installs a matching copy (no generation, no
child process); a damaged or stale copy is refused with one line why and the part is generated; an
existing world is never installed over; `index prebuilt --check` says stale when the generator changed."""

from __future__ import annotations

import ast
import shutil
import json
import lzma
from pathlib import Path

import pytest

from cir_demo.cli import main as cli_main
from cir_demo.world import shipped
from cir_demo.world.disk import TEST_MANIFEST, generate_world, world_dir, world_problems
from cir_demo.world.shipped import FILES, install_shipped_world, shipped_problems

CHECK = ["index", "prebuilt", "--only", "world", "--world-size", "tiny", "--check"]


def _generated(size: str, seed: int, out: Path) -> dict[str, bytes]:
    """The oracle: the test part as generation writes it (the shipped copy never consulted)."""
    generate_world(size, seed, out, progress=False, part="test", shipped=False)
    return {name: (out / name).read_bytes() for name in FILES}


@pytest.fixture(scope="module")
def tiny_generated(tmp_path_factory) -> dict[str, bytes]:
    """`_generated` for the tiny world (seed 0), once for the module's tests that compare with it."""
    return _generated("tiny", 0, tmp_path_factory.mktemp("tiny_generated"))


def _stored(directory: Path) -> dict[str, bytes]:
    return {name: lzma.decompress((directory / f"{name}.xz").read_bytes()) for name in FILES}


def test_the_committed_world_is_byte_identical_to_generating_the_default_test_part(default_world, monkeypatch):
    """The oracle: the session's default world (conftest.py), whose test part is written as generation
    writes it on an empty folder (`write_world(build_test_part(...))`, the shipped copy never consulted):
    generating it once more here would only repeat that work."""
    monkeypatch.delenv("CIR_DEMO_PREBUILT", raising=False)
    directory = shipped.shipped_world_dir("default", 0)
    assert shipped_problems(directory, "default", 0) == []
    generated = default_world[1] / "world" / "default-seed0"
    assert _stored(directory) == {name: (generated / name).read_bytes() for name in FILES}
    manifest = json.loads((directory / "manifest.json").read_text())
    assert manifest["checksum"] == json.loads((generated / TEST_MANIFEST).read_text())["checksum"]


def test_a_first_load_installs_the_shipped_copy_and_generates_nothing(
    shipped_world_copy, tiny_generated, monkeypatch, capsys
):
    from cir_demo.world import generate as generate_module
    from cir_demo.world.loader import load_world

    oracle = tiny_generated
    from cir_demo.world import disk

    for module in (generate_module, disk):  # disk.py calls the name it imported
        monkeypatch.setattr(module, "build_test_part", lambda *a, **k: pytest.fail("generated"))
    bench = load_world(size="tiny", seed=0)
    assert "[world] installed the shipped test part of tiny seed 0" in capsys.readouterr().err
    root = world_dir("tiny", 0)
    assert {name: (root / name).read_bytes() for name in FILES} == oracle
    assert world_problems(root, "tiny", 0, part="test") == [] and len(bench.queries) > 0


def test_the_app_starts_no_child_when_the_shipped_copy_is_installed(shipped_world_copy, monkeypatch):
    """`generate_aside` (before gradio's import) installs the copy instead of starting a child; without a
    copy it starts one as before."""
    import subprocess

    from cir_demo.benchmarks.generate_aside import generate_aside

    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a) or "child")
    assert generate_aside("world", {"size": "tiny", "seed": 0}) is None and started == []
    assert world_problems(world_dir("tiny", 0), "tiny", 0, part="test") == []
    assert generate_aside("world", {"size": "tiny", "seed": 1}) == "child" and len(started) == 1  # none shipped


def _key_changed(d: Path) -> None:
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["key"]["generator_sha256"] = "0" * 64
    (d / "manifest.json").write_text(json.dumps(manifest))


def _stored_byte_flipped(d: Path) -> None:
    data = bytearray((d / "test_queries.jsonl.xz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (d / "test_queries.jsonl.xz").write_bytes(bytes(data))


def _content_differs(d: Path) -> None:
    """A stored file replaced with consistent stored records whose content is not the manifest's."""
    from cir_demo.integrity import file_record

    path = d / "test_captions.jsonl.xz"
    path.write_bytes(lzma.compress(b'{"caption_id":"x"}\n'))
    manifest = json.loads((d / "manifest.json").read_text())
    manifest["files"]["test_captions.jsonl"]["stored"] = {path.name: file_record(path)}
    (d / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "damage, why",
    [
        (_key_changed, "generator_sha256 changed"),
        (_stored_byte_flipped, "test_queries.jsonl.xz"),
        (_content_differs, "its content does not match the manifest's sha256"),
        (lambda d: (d / "manifest.json").write_text("{"), "unreadable"),
        (lambda d: (d / "test_refs.npy.xz").unlink(), "test_refs.npy.xz"),
    ],
)
def test_a_damaged_or_stale_copy_is_refused_with_one_line_and_the_world_generated(
    shipped_world_copy, tiny_generated, capsys, damage, why
):
    from cir_demo.world.loader import load_world

    oracle = tiny_generated
    damage(shipped_world_copy)
    load_world(size="tiny", seed=0, progress=False)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "shipped test part" in ln]
    assert len(lines) == 1 and "is not used (" in lines[0] and why in lines[0] and "generating it" in lines[0], lines
    root = world_dir("tiny", 0)
    assert {name: (root / name).read_bytes() for name in FILES} == oracle


@pytest.mark.parametrize("name", ["test_queries.jsonl", "manifest.json", "train_scenes.npy"])
def test_the_install_never_writes_over_an_existing_world(shipped_world_copy, name):
    root = world_dir("tiny", 0)
    root.mkdir(parents=True)
    (root / name).write_text("a user's file\n")
    assert install_shipped_world(root, "tiny", 0) is False
    assert sorted(p.name for p in root.iterdir()) == [name]
    assert (root / name).read_text() == "a user's file\n"


def test_a_whole_world_from_before_the_two_parts_is_adopted_not_installed_over(shipped_world_copy, tmp_path, capsys):
    """A folder holding a whole world without test_manifest.json: its own test part is adopted (no
    generation), the shipped copy is neither installed nor said to be refused."""
    from cir_demo.world.disk import MANIFEST

    root = world_dir("tiny", 0)
    generate_world("tiny", 0, root, progress=False, part="full", shipped=False)
    (root / TEST_MANIFEST).unlink()
    before = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file() and p.name != ".generate.lock"}
    generate_world("tiny", 0, root, progress=False, part="test")
    assert "shipped test part" not in capsys.readouterr().err
    after = {
        p.name: p.read_bytes()
        for p in root.iterdir()
        if p.is_file() and p.name not in (".generate.lock", TEST_MANIFEST)
    }
    assert after == before and (root / MANIFEST).is_file() and world_problems(root, "tiny", 0, part="test") == []


def test_check_says_stale_when_the_generator_code_changes(shipped_world_copy, monkeypatch, capsys):
    assert cli_main(CHECK) == 0
    assert capsys.readouterr().out.startswith("fresh  world test part:")
    shipped.generator_sha256.cache_clear()
    monkeypatch.setattr(shipped, "GENERATOR_SOURCES", (*shipped.GENERATOR_SOURCES[:-1], "scene.py"))
    try:
        assert cli_main(CHECK) == 1
    finally:
        shipped.generator_sha256.cache_clear()
    out = capsys.readouterr().out
    assert out.startswith("stale  world test part:") and "generator_sha256 changed" in out, out


def test_check_says_stale_when_numpy_changes(shipped_world_copy, monkeypatch, capsys):
    import numpy

    monkeypatch.setattr(numpy, "__version__", "0.0.1")
    assert cli_main(CHECK) == 1
    assert "numpy changed" in capsys.readouterr().out


def test_the_generator_sources_hold_every_module_generation_runs():
    """GENERATOR_SOURCES names every module of cir_demo/world/ that generate.py and disk.py import,
    directly or through each other (so a change to any of them makes the shipped copy stale)."""
    package = Path(shipped.__file__).parent
    seen, todo = set(), ["generate.py", "disk.py"]
    while todo:
        name = todo.pop()
        if name in seen or name == "shipped.py":  # disk.py imports it to install, never to generate
            continue
        seen.add(name)
        for node in ast.walk(ast.parse((package / name).read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                todo += [f"{node.module}.py"] if node.module else [f"{a.name}.py" for a in node.names]
    assert seen <= set(shipped.GENERATOR_SOURCES), seen - set(shipped.GENERATOR_SOURCES)
    assert "intent_templates.json" in shipped.GENERATOR_SOURCES


def test_the_generator_key_ignores_layout_and_comments_and_follows_every_source(tmp_path):
    """A copy of the generator's files: reformatted with comments added, the key stays (nothing computes
    otherwise); one number changed in any source, or the templates edited, the key changes."""
    package = Path(shipped.__file__).parent
    for name in shipped.GENERATOR_SOURCES:
        shutil.copy(package / name, tmp_path / name)
    plain = shipped.generator_sha256(tmp_path)
    assert plain == shipped.generator_sha256()
    scene = tmp_path / "scene.py"
    source = scene.read_text()
    scene.write_text("# a comment\n" + source.replace("\n\n\n", "\n\n\n# another comment\n\n"))
    shipped.generator_sha256.cache_clear()
    assert shipped.generator_sha256(tmp_path) == plain
    for name in shipped.GENERATOR_SOURCES:
        original = (tmp_path / name).read_text()
        edited = original + ("\n_EDITED = 1\n" if name.endswith(".py") else " ")
        (tmp_path / name).write_text(edited)
        shipped.generator_sha256.cache_clear()
        assert shipped.generator_sha256(tmp_path) != plain, name
        (tmp_path / name).write_text(original)
    shipped.generator_sha256.cache_clear()


def test_packing_never_replaces_a_folder_holding_files_its_manifest_does_not_record(shipped_world_copy):
    """`index prebuilt` replaces the shipped folder as a whole: a file someone else put there stops it before
    any work, and nothing is deleted; the packer's own earlier output is replaced as before."""
    from cir_demo.index.prebuilt_run import pack_run
    from cir_demo.world.pack import pack_world

    before = _stored(shipped_world_copy)
    pack_world("tiny", 0, shipped_world_copy, {"what": "tests"})  # its own output: replaced
    assert _stored(shipped_world_copy) == before
    (shipped_world_copy / "notes.txt").write_text("mine")
    (shipped_world_copy / "drafts").mkdir()
    (shipped_world_copy / "drafts" / "a.json").write_text("{}")
    for pack in (
        lambda: pack_world("tiny", 0, shipped_world_copy, {"what": "tests"}),
        lambda: pack_run(shipped_world_copy, shipped_world_copy, {}, [], {}),
    ):
        with pytest.raises(ValueError, match="drafts/a.json, notes.txt, which its manifest.json does not record"):
            pack()
    assert (shipped_world_copy / "notes.txt").read_text() == "mine" and (
        shipped_world_copy / "drafts" / "a.json"
    ).is_file()
    assert _stored(shipped_world_copy) == before
