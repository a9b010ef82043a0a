"""The one code hash: what every cache key holds of the code and libraries that compute its values.

A computation declares its root modules (or packages) of `cir_demo`; `code_modules` walks every
`import` statement in their source (module level and inside functions: the project imports heavy
modules lazily) to the modules of `cir_demo` they reach, transitively, with the `__init__` of each
package on the way (importing a module runs them). `code_key` hashes the path and code of each
(sorted by path) together with the installed versions of the libraries that change the values'
bits. A module's code is its syntax tree without docstrings (`code_text`): layout, comments and
docstrings do not compute a value, so a formatter's pass or a reworded comment keeps every key. A key is a dict so that a manifest or a spec can show it; a cache
whose key differs is a miss, never reused.

Found from the declaration, not from a hand list of files: a module the computation starts
importing joins its key by itself. Read once per process per declaration (a few dozen files).
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path
from typing import Sequence

PACKAGE = "cir_demo"
PACKAGE_DIR = Path(__file__).resolve().parent.parent


def module_file(name: str) -> Path | None:
    """The source file of module `name` of this package (a package's `__init__.py`), or None."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    base = PACKAGE_DIR.joinpath(*parts[1:])
    for path in (base.with_suffix(".py") if len(parts) > 1 else None, base / "__init__.py"):
        if path is not None and path.is_file():
            return path
    return None


def _package_files(name: str) -> list[str]:
    """Module names of every source file under package `name` (a declared package is all its code)."""
    root = module_file(name)
    if root is None or root.name != "__init__.py":
        return [name]
    out = []
    for path in sorted(root.parent.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(PACKAGE_DIR).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out.append(".".join((PACKAGE, *parts)))
    return out


def _imported_names(name: str, path: Path) -> list[str]:
    """Every module `import` statements in `path` may name (relative ones resolved); `from a import b`
    gives both `a` and `a.b` (b may be a submodule); the caller keeps those that are files."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_bytes(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.append(base)
            out += [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]
    return out


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


@functools.lru_cache(maxsize=None)
def code_modules(roots: tuple[str, ...]) -> tuple[str, ...]:
    """Sorted names of the modules of this package reached from `roots` (ValueError for a root that
    is not a module of this package: a declaration must not silently hash nothing)."""
    todo = []
    for root in roots:
        if module_file(root) is None:
            raise ValueError(f"code hash: {root!r} is not a module or package of {PACKAGE}")
        todo += _package_files(root)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        path = module_file(name)
        if name in seen or path is None:
            continue
        seen.add(name)
        todo += _parents(name)
        todo += [n for n in _imported_names(name, path) if n.split(".")[0] == PACKAGE]
    return tuple(sorted(seen))


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return tree


def code_text(path: Path) -> bytes:
    """What of `path`'s source computes: its syntax tree, docstrings left out, without positions (a
    data file beside the code, e.g. JSON templates: its bytes, line ends normalised)."""
    if path.suffix != ".py":
        return path.read_bytes().replace(b"\r\n", b"\n")
    tree = _without_docstrings(ast.parse(path.read_bytes(), filename=str(path)))
    return ast.dump(tree, annotate_fields=True, include_attributes=False).encode()


@functools.lru_cache(maxsize=None)
def code_sha256(roots: tuple[str, ...]) -> str:
    """sha256 over the relative path and code (`code_text`) of `code_modules(roots)`."""
    digest = hashlib.sha256()
    for name in code_modules(roots):
        path = module_file(name)
        digest.update(path.relative_to(PACKAGE_DIR.parent).as_posix().encode() + b"\0")
        digest.update(code_text(path) + b"\0")
    return digest.hexdigest()


def code_key(roots: Sequence[str], libraries: Sequence[str] = ()) -> dict:
    """{"sha256": code hash of `roots`, "libraries": {name: installed version}} for a cache key."""
    from cir_demo.utils.versions import library_versions

    roots = tuple(sorted(set(roots)))
    return {"sha256": code_sha256(roots), "libraries": library_versions(*sorted(set(libraries)))}
