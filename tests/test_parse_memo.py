"""The parse memo of the code hash (cir_demo/utils/parse_memo.py): the same answers as a fresh parse for
every source file of the package, one syntax tree per file however many keys are computed, none in a later
process that finds the answers on disk, an edited file parsed again, a damaged entry or other code
computed again, and installed by both entry points before anything computes a key."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cir_demo.utils import code_hash, parse_memo

REPO = Path(__file__).resolve().parent.parent


def _fresh(name: str):
    """code_hash's function `name` as written, bypassing any memo."""
    fn = getattr(code_hash, name)
    return getattr(fn, "__wrapped__", fn)


def _module_name(path: Path) -> str:
    rel = path.relative_to(code_hash.PACKAGE_DIR.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def test_every_source_answers_as_a_fresh_parse_and_is_parsed_once(monkeypatch, tmp_path):
    assert parse_memo.installed()  # conftest.py installs it, as the entry points do
    monkeypatch.setenv(parse_memo.DISK_ENV, str(tmp_path / "parsed"))  # empty: a first process
    code_hash.code_text.cache_clear()
    files = sorted(p for p in code_hash.PACKAGE_DIR.rglob("*.py") if "__pycache__" not in p.parts)
    assert len(files) > 100
    parses = []
    real_parse = ast.parse
    monkeypatch.setattr(code_hash.ast, "parse", lambda *a, **k: (parses.append(1), real_parse(*a, **k))[1])
    oracle = {}
    for path in files:  # the oracle: code_hash's functions as written, one fresh parse each
        name = _module_name(path)
        oracle[path] = (_fresh("code_text")(path), _fresh("_imported_names")(name, path))
    fresh_parses = len(parses)
    assert fresh_parses == 2 * len(files)
    for _ in range(2):  # the memo's first answers parse once per function, its second parse nothing
        for path in files:
            name = _module_name(path)
            assert code_hash.code_text(path) == oracle[path][0], path
            got = code_hash._imported_names(name, path)
            assert got == oracle[path][1], path
            got.append("cir_demo.not_a_module")  # the caller's list: the memo's stays as it was
            assert "cir_demo.not_a_module" not in code_hash._imported_names(name, path)
    # one parse per file for each function, but a file the same as another in name and bytes (the empty
    # __init__.py of several packages) gets code_text's answer from the disk
    once = len(files) + len({(path.name, path.read_bytes()) for path in files})
    assert len(parses) - fresh_parses == once
    code_hash.code_text.cache_clear()  # as a new process: the answers come from the disk, none parsed
    for path in files:
        name = _module_name(path)
        assert code_hash.code_text(path) == oracle[path][0], path
        assert code_hash._imported_names(name, path) == oracle[path][1], path
    assert len(parses) - fresh_parses == once
    code_hash.code_text.cache_clear()


CHILD = """
import ast, json, sys
from cir_demo.utils import code_hash, parse_memo
parse_memo.install()
parses = []
real = ast.parse
ast.parse = lambda *a, **k: (parses.append(1), real(*a, **k))[1]
keys = [code_hash.code_sha256(tuple(r)) for r in json.loads(sys.argv[1])]
print(json.dumps({"keys": keys, "parses": len(parses)}))
"""
ROOTS = [["cir_demo.rerank.world_verifier"], ["cir_demo.world.render"], ["cir_demo.harness.pipeline"]]


def _child(folder: Path) -> dict:
    env = {**os.environ, parse_memo.DISK_ENV: str(folder)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(ROOTS)], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_later_process_reads_the_answers_and_parses_nothing(tmp_path, monkeypatch):
    """The oracle: the keys code_hash computes as written, in this process, without any memo."""
    _uninstalled(monkeypatch)
    code_hash.code_sha256.cache_clear()
    code_hash.code_modules.cache_clear()
    try:
        want = [code_hash.code_sha256(tuple(r)) for r in ROOTS]
    finally:
        code_hash.code_sha256.cache_clear()
        code_hash.code_modules.cache_clear()
    folder = tmp_path / "parsed"
    cold = _child(folder)
    assert cold["keys"] == want and cold["parses"] > 50  # the first process parses and writes
    warm = _child(folder)
    assert warm == {"keys": want, "parses": 0}
    entries = sorted(p for p in folder.rglob("*") if p.is_file())
    assert len(entries) == cold["parses"]  # one entry per answer, no temporary file left
    entries[0].write_bytes(entries[0].read_bytes()[:-3])  # truncated
    entries[1].write_bytes(entries[1].read_bytes()[:40] + b"x" + entries[1].read_bytes()[41:])  # a byte changed
    entries[2].write_bytes(b"")
    mended = _child(folder)
    assert mended == {"keys": want, "parses": 3}  # each damaged answer parsed again, written over
    assert _child(folder) == {"keys": want, "parses": 0}
    (tmp_path / "a-file").write_text("")
    unwritable = _child(tmp_path / "a-file")  # every answer parsed (identical files too: none kept)
    assert unwritable["keys"] == want and unwritable["parses"] >= cold["parses"]


def test_other_code_of_the_memo_or_the_hash_misses_every_entry(tmp_path, monkeypatch):
    monkeypatch.setenv(parse_memo.DISK_ENV, str(tmp_path / "parsed"))
    path = code_hash.PACKAGE_DIR / "utils" / "io.py"
    fresh = _fresh("code_text")(path)
    code_hash.code_text.cache_clear()
    assert code_hash.code_text(path) == fresh
    parses = []
    real_parse = ast.parse
    monkeypatch.setattr(code_hash.ast, "parse", lambda *a, **k: (parses.append(1), real_parse(*a, **k))[1])
    code_hash.code_text.cache_clear()
    assert code_hash.code_text(path) == fresh and parses == []  # read back
    monkeypatch.setattr(parse_memo, "_code_identity", lambda: b"\0" * 32)  # code_hash or the memo edited
    code_hash.code_text.cache_clear()
    assert code_hash.code_text(path) == fresh and len(parses) == 1
    code_hash.code_text.cache_clear()


def test_an_edited_file_is_parsed_again_and_the_keys_follow(tmp_path, monkeypatch):
    package = tmp_path / "cir_demo"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from cir_demo import b\nx = 1\n")
    (package / "b.py").write_text("y = 2\n")
    monkeypatch.setattr(code_hash, "PACKAGE_DIR", package)

    def key():
        code_hash.code_sha256.cache_clear()
        code_hash.code_modules.cache_clear()
        return code_hash.code_sha256(("cir_demo.a",)), code_hash.code_modules(("cir_demo.a",))

    try:
        first, modules = key()
        assert modules == ("cir_demo", "cir_demo.a", "cir_demo.b")
        (package / "b.py").write_text("y = 3\n")  # same size, same path: only the bytes tell
        second, _ = key()
        assert second != first
        (package / "c.py").write_text("z = 4\n")
        (package / "a.py").write_text("from cir_demo import b, c\nx = 1\n")
        third, modules = key()
        assert third not in (first, second) and modules == ("cir_demo", "cir_demo.a", "cir_demo.b", "cir_demo.c")
        (package / "a.py").write_text("from cir_demo import b\nx = 1\n")
        (package / "b.py").write_text("y = 2\n")
        assert key() == (first, ("cir_demo", "cir_demo.a", "cir_demo.b"))  # back to the first bytes
    finally:
        code_hash.code_sha256.cache_clear()
        code_hash.code_modules.cache_clear()


def _uninstalled(monkeypatch):
    for name in ("code_text", "_imported_names"):
        monkeypatch.setattr(code_hash, name, _fresh(name))
    assert not parse_memo.installed()


def test_python_m_cir_demo_installs_it_before_anything_else(monkeypatch, capsys):
    from cir_demo import cli

    _uninstalled(monkeypatch)
    seen = []
    monkeypatch.setattr(
        cli, "build_parser", lambda real=cli.build_parser: (seen.append(parse_memo.installed()), real())[1]
    )
    assert cli.main([]) == 2  # no command: the help
    assert seen == [True]


def test_app_py_installs_it_before_anything_else(monkeypatch):
    spec = importlib.util.spec_from_file_location("app_entry_under_test", REPO / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    _uninstalled(monkeypatch)
    with pytest.raises(SystemExit) as done:
        app.main(["--eval", "--help"])
    assert done.value.code == 0 and parse_memo.installed()
