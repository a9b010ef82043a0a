"""The per-process parse memo of the code hash (cir_demo/utils/parse_memo.py): the same answers as a fresh
parse for every source file of the package, one syntax tree per file however many keys are computed, an
edited file parsed again, and installed by both entry points before anything computes a key."""

from __future__ import annotations

import ast
import importlib.util
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


def test_every_source_answers_as_a_fresh_parse_and_is_parsed_once(monkeypatch):
    assert parse_memo.installed()  # conftest.py installs it, as the entry points do
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
    assert len(parses) - fresh_parses == 2 * len(files)


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
