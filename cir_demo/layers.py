"""The layer order of the package, written once, and a checker that imports only run downward.

A module may import from its own package and from packages in lower layers, never from a
package in its own layer or above; every layer is checked, the bottom and the top ones too. A
package's `cli.py` holds its command's argument parsing and sits in its package's layer like any
other module of it (a command whose run needs more runs higher up: `index build` in
harness/index_run.py). The entry points (`ui`, `cli`) and the test builders (`testing`) may
import from every layer below them, never from each other; `__main__` sits above them and only
runs `cli`. Imports inside functions count as much as those at the top of a file.
`tests/test_layers.py` runs the checker over cir_demo/.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable

# lowest first; a name is a package (cir_demo/<name>/) or a top-level module (cir_demo/<name>.py)
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "paths"),  # user errors and their one line; the data folders
    ("utils",),  # small helpers (atomic writes, names with "did you mean", GPU batch back-off, the HTTP client)
    ("integrity",),  # checksums of downloaded and trained files
    ("benchmarks",),  # the common schema, adapters, the declared benchmarks and metric families
    ("metrics", "world", "results", "images"),  # scoring, the offline world, results files, image fetching
    ("models",),  # model definitions shared by serving and training
    ("retrievers",),
    ("index", "rerank"),
    ("training",),  # trains the world models in the files the serving modules read
    ("engine",),  # the one path from a query to a (reranked) ranking
    ("preflight",),  # doctor and dry run: what a run would need, checked before any work
    ("store",),  # the one path from the engine to scored runs: keys, the scoring, stored and cached runs
    ("harness", "explorer"),  # --eval and the app's service layer
    ("ui", "cli", "testing", "layers"),  # entry points and test builders
    ("notebook",),  # the Python API at the package root (`import cir_demo as cd`): draws as the app does
    ("__main__",),  # `python -m cir_demo`: runs cli
)
TOP = len(LAYERS) - 1
LAYER_OF = {name: i for i, names in enumerate(LAYERS) for name in names}

# Imports allowed although they run sideways or up: (importing module, imported package or module),
# each with the reason it is still here. Shrink it; never grow it without an issue that removes it.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def package_of(module: str) -> str | None:
    """'cir_demo.rerank.cli' -> 'rerank'; None for modules outside cir_demo or the root package."""
    parts = module.split(".")
    return parts[1] if parts[0] == "cir_demo" and len(parts) > 1 else None


def layer_of(module: str) -> int:
    """The layer of a cir_demo module: its package's (the top one for the root package)."""
    pkg = package_of(module)
    if pkg is None:
        return TOP
    if pkg not in LAYER_OF:
        raise KeyError(f"{module}: package {pkg!r} has no layer; add it to LAYERS in cir_demo/layers.py")
    return LAYER_OF[pkg]


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, imported module) for every import in `source` (relative ones resolved from `module`),
    including `from cir_demo import x` as cir_demo.x."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: -node.level]
                base = ".".join(anchor + ([base] if base else []))
            if base == "cir_demo":
                out += [(node.lineno, f"cir_demo.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, base))
    return out


def violations_in(source: str, module: str, exceptions: Iterable[tuple[str, str]] = EXCEPTIONS) -> list[str]:
    """'module:line imports X (layer ...)' for each import that does not run downward."""
    allowed = set(exceptions)
    own, level = package_of(module), layer_of(module)
    found = []
    for line, target in imported_modules(source, module):
        pkg = package_of(target)
        if pkg is None or pkg == own or (module, pkg) in allowed or (module, target) in allowed:
            continue
        target_level = layer_of(target)
        if target_level >= level:
            found.append(
                f"{module}:{line} imports {target} (layer {target_level} {LAYERS[target_level]}; "
                f"{module} is in layer {level} {LAYERS[level]})"
            )
    return found


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def check_tree(root: Path) -> list[str]:
    """Every violation under the package folder `root` (cir_demo/)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        found += violations_in(path.read_text(encoding="utf-8"), module_name(path, root))
    return found


def unused_exceptions(root: Path) -> list[tuple[str, str]]:
    """Exceptions no import needs any more (so the list only shrinks)."""
    needed = set()
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        for _, target in imported_modules(path.read_text(encoding="utf-8"), module):
            for key in ((module, package_of(target)), (module, target)):
                if key in EXCEPTIONS:
                    needed.add(key)
    return sorted(set(EXCEPTIONS) - needed)
