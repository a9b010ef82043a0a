"""Imports run one way (the layer order in cir_demo/layers.py), and the checker catches the
opposite: an inverted import in a synthetic module is reported."""

from __future__ import annotations

from pathlib import Path

from cir_demo import layers

ROOT = Path(__file__).resolve().parent.parent / "cir_demo"


def test_every_package_has_a_layer_and_imports_run_downward():
    found = layers.check_tree(ROOT)
    assert found == [], "\n".join(found)


def test_exception_list_only_shrinks():
    assert layers.unused_exceptions(ROOT) == []


def test_an_inverted_import_is_reported():
    # the metrics layer importing the engine (above it), at the top and inside a function
    source = "import numpy\nfrom cir_demo.benchmarks.schema import Query\n\n\ndef f():\n    from cir_demo.engine import RetrievalEngine\n"
    found = layers.violations_in(source, "cir_demo.metrics.fake")
    assert len(found) == 1 and found[0].startswith("cir_demo.metrics.fake:6 imports cir_demo.engine")
    # sideways (same layer) counts too; `from cir_demo import x` and relative imports are resolved
    assert layers.violations_in("from cir_demo import rerank\n", "cir_demo.index.fake")
    assert layers.violations_in("from ..engine import RetrievalEngine\n", "cir_demo.retrievers.fake")
    assert layers.violations_in("from .base import x\n", "cir_demo.retrievers.fake") == []
    # a package's cli.py sits in its package's layer: it may not import upward; the entry point may
    assert layers.violations_in("from cir_demo.preflight.commands import report\n", "cir_demo.index.cli")
    assert layers.violations_in("from cir_demo.preflight.commands import report\n", "cir_demo.cli") == []
    assert layers.violations_in("from cir_demo.index.cli import add_arguments\n", "cir_demo.harness.index_run") == []


def test_bottom_and_top_layers_are_checked_too():
    # the bottom layer: nothing sideways or up
    assert layers.violations_in("from cir_demo.paths import cache_dir\n", "cir_demo.errors")
    assert layers.violations_in("from cir_demo.utils.names import lookup\n", "cir_demo.errors")
    assert layers.violations_in("from cir_demo.errors import UserError\n", "cir_demo.utils.oom") == []
    # the top layer: entry points and test builders import every layer below, never each other
    assert layers.violations_in("from cir_demo.testing.explorer import register_tiny_models\n", "cir_demo.ui.app")
    assert layers.violations_in("from cir_demo.ui import app\n", "cir_demo.cli")
    assert layers.violations_in("from cir_demo.harness import cli\n", "cir_demo.testing.explorer") == []
    assert layers.violations_in("from cir_demo.explorer import build_service\n", "cir_demo.ui.app") == []
    assert layers.violations_in("from cir_demo.cli import main\n", "cir_demo.__main__") == []
    assert layers.violations_in("from cir_demo.__main__ import main\n", "cir_demo.cli")


def test_serving_never_imports_training():
    for path in list((ROOT / "retrievers").rglob("*.py")) + list((ROOT / "rerank").rglob("*.py")):
        module = layers.module_name(path, ROOT)
        targets = {t for _, t in layers.imported_modules(path.read_text(encoding="utf-8"), module)}
        bad = {t for t in targets if layers.package_of(t) == "training"} - {
            t for (m, pkg) in layers.EXCEPTIONS if m == module and pkg == "training" for t in targets
        }
        assert not bad, f"{module} imports {bad}"


def test_harness_modules_import_no_circle():
    graph = {}
    for path in (ROOT / "harness").glob("*.py"):
        module = layers.module_name(path, ROOT)
        graph[module] = {
            t
            for _, t in layers.imported_modules(path.read_text(encoding="utf-8"), module)
            if t.startswith("cir_demo.harness.")
        }

    def reaches(a, b, seen=()):
        return any(n == b or (n not in seen and reaches(n, b, (*seen, n))) for n in graph.get(a, ()))

    circles = [m for m in graph if reaches(m, m)]
    assert circles == [], circles
