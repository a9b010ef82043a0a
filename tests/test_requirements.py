"""What an install promises: requirements.txt declares every third-party package cir_demo imports,
and pyproject's requires-python is a Python every pinned requirement and the code itself run on."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, metadata, packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "cir_demo").rglob("*.py")) + [ROOT / "app.py"]
PYTHONS = [(3, minor) for minor in range(8, 16)]

# stdlib names newer than some Python: (module, attribute or None) -> first version with it
NEWER_STDLIB = {
    ("hashlib", "file_digest"): (3, 11),
    ("tomllib", None): (3, 11),
    ("enum", "StrEnum"): (3, 11),
    ("typing", "Self"): (3, 11),
    ("typing", "LiteralString"): (3, 11),
    ("typing", "assert_never"): (3, 11),
    ("datetime", "UTC"): (3, 11),
    ("asyncio", "TaskGroup"): (3, 11),
    ("asyncio", "timeout"): (3, 11),
    ("contextlib", "chdir"): (3, 11),
    ("itertools", "batched"): (3, 12),
    ("typing", "override"): (3, 12),
    ("warnings", "deprecated"): (3, 13),
    ("copy", "replace"): (3, 13),
}
NEWER_BUILTINS = {"ExceptionGroup": (3, 11), "BaseExceptionGroup": (3, 11)}


def requirement_lines(name: str) -> list[Requirement]:
    lines = (ROOT / name).read_text(encoding="utf-8").splitlines()
    return [Requirement(ln.split("#")[0]) for ln in lines if ln.split("#")[0].strip() and not ln.startswith("-")]


def floor(spec: str) -> tuple[int, int]:
    """The oldest Python (major, minor) that a Requires-Python specifier allows."""
    allowed = [v for v in PYTHONS if SpecifierSet(spec).contains(f"{v[0]}.{v[1]}")]
    assert allowed, f"no Python in {PYTHONS} satisfies {spec!r}"
    return allowed[0]


def declared_floor() -> tuple[int, int]:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return floor(tomllib.load(fh)["project"]["requires-python"])


def optional(tree: ast.AST) -> set[int]:
    """Ids of import nodes inside `try: ... except ImportError` (optional packages, e.g. `spaces`)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            caught = {ast.unparse(h.type) for h in node.handlers if h.type is not None}
            if caught & {"ImportError", "ModuleNotFoundError", "(ImportError, ModuleNotFoundError)"}:
                out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def third_party_imports(path: Path) -> dict[str, int]:
    """Top-level module -> first line, for each non-optional third-party import in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip, found = optional(tree), {}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        for top in (n.split(".")[0] for n in names):
            if top not in sys.stdlib_module_names and top != "cir_demo":
                found.setdefault(top, node.lineno)
    return found


def test_every_third_party_import_is_declared_in_requirements():
    declared = {canonicalize_name(r.name) for r in requirement_lines("requirements.txt")}
    owners = packages_distributions()
    undeclared = []
    for path in SOURCES:
        for module, line in third_party_imports(path).items():
            dists = {canonicalize_name(d) for d in owners.get(module, [])}
            if not dists & declared:
                where = f"{path.relative_to(ROOT)}:{line}"
                undeclared.append(f"{where} imports {module} ({', '.join(sorted(dists)) or 'not installed'})")
    assert not undeclared, "not in requirements.txt:\n" + "\n".join(undeclared)


def test_the_import_check_sees_direct_imports_and_skips_optional_ones(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "import os\nfrom packaging.version import Version\ntry:\n    import spaces\nexcept ImportError:\n"
        "    spaces = None\n\ndef f():\n    import huggingface_hub.errors\n",
        encoding="utf-8",
    )
    assert third_party_imports(src) == {"packaging": 2, "huggingface_hub": 9}


def test_requires_python_is_one_every_pinned_requirement_installs_on():
    ours = declared_floor()
    too_new = []
    for req in requirement_lines("requirements.txt") + requirement_lines("requirements-dev.txt"):
        pins = [s.version for s in req.specifier if s.operator == "=="]
        try:
            meta = metadata(req.name)
        except PackageNotFoundError:
            continue  # not installed here (a GPU-only package): nothing to compare
        if pins != [meta["Version"]]:
            continue  # a range (another version in it may run on an older Python) or not the pinned one
        needs = meta.get("Requires-Python")
        if needs and floor(needs) > ours:
            too_new.append(f"{req.name}=={pins[0]} needs Python {needs}")
    assert not too_new, f"pyproject.toml says Python >= {ours[0]}.{ours[1]}, but " + "; ".join(too_new)


def newer_stdlib_uses(source: str, oldest: tuple[int, int]) -> list[str]:
    """'line: name (3.x)' for each stdlib name or syntax in `source` that Python `oldest` lacks."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            names = [(f"{node.value.id}.{node.attr}", NEWER_STDLIB.get((node.value.id, node.attr)))]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [(f"{node.module}.{a.name}", NEWER_STDLIB.get((node.module, a.name))) for a in node.names]
        elif isinstance(node, ast.Import):
            names = [(a.name, NEWER_STDLIB.get((a.name, None))) for a in node.names]
        elif isinstance(node, ast.Name):
            names = [(node.id, NEWER_BUILTINS.get(node.id))]
        elif isinstance(node, ast.TryStar):
            names = [("except*", (3, 11))]
        else:
            continue
        found += [f"{node.lineno}: {name} ({since[0]}.{since[1]})" for name, since in names if since and since > oldest]
    return found


@pytest.mark.parametrize(
    "source,oldest,expected",
    [
        ("import hashlib\nhashlib.file_digest(fh, 'sha256')", (3, 10), ["2: hashlib.file_digest (3.11)"]),
        ("import hashlib\nhashlib.file_digest(fh, 'sha256')", (3, 11), []),
        ("import tomllib", (3, 10), ["1: tomllib (3.11)"]),
        ("from itertools import batched", (3, 11), ["1: itertools.batched (3.12)"]),
        ("try:\n    pass\nexcept* ValueError:\n    pass", (3, 10), ["1: except* (3.11)"]),
        ("raise ExceptionGroup('x', [])", (3, 10), ["1: ExceptionGroup (3.11)"]),
    ],
)
def test_the_stdlib_check_finds_what_an_older_python_lacks(source, oldest, expected):
    assert newer_stdlib_uses(source, oldest) == expected


def test_the_code_runs_on_the_oldest_python_pyproject_allows():
    oldest = declared_floor()
    found = [
        f"{p.relative_to(ROOT)}:{hit}"
        for p in SOURCES
        for hit in newer_stdlib_uses(p.read_text(encoding="utf-8"), oldest)
    ]
    assert not found, f"pyproject.toml allows Python {oldest[0]}.{oldest[1]}, which lacks: {found}"
