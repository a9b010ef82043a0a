"""cir_demo.ui imports gradio without gradio's .pyi stub writer, and gradio still works.

Each fact is checked in a fresh interpreter. Importing gradio is costly per process, so the
facts of one configuration come from one process: `_facts` runs its checks one after another, each
reporting "ok" or its traceback, and the tests read their own check's report. Two configurations:
`bare_import` imports cir_demo.ui.app as any importer does (no app.py, no matplotlib backend named);
`app_py` runs app.py's settings first, as `python app.py` does before importing the UI."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Runs `code` (which calls check(name, fn) for each fact) and prints every check's report as one JSON line.
_REPORTER = """
import json, traceback
facts = {}
def check(name, fn):
    try:
        fn()
        facts[name] = "ok"
    except BaseException:
        facts[name] = traceback.format_exc()
"""


def _fresh(code: str, env_drop: tuple[str, ...] = ("MPLBACKEND",), **env_add) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in env_drop} | env_add
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def _facts(code: str) -> dict[str, str]:
    """The reports of `code`'s checks, run in a fresh process without MPLBACKEND (the process must end
    cleanly and print them last)."""
    out = _fresh(_REPORTER + textwrap.dedent(code) + "\nprint(json.dumps(facts))\n")
    assert out.returncode == 0 and out.stdout.strip(), out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def bare_import() -> dict[str, str]:
    return _facts("""
        import sys
        import cir_demo.ui.app  # imports gradio through the package's hook
        import gradio as gr

        def stub_writer_skipped():
            import gradio.blocks_events as be
            import gradio.component_meta as cm
            from cir_demo.ui import gradio_import as gi
            assert cm.create_or_modify_pyi is gi._no_stubs, cm.create_or_modify_pyi
            assert be.create_or_modify_pyi is gi._no_stubs
            assert callable(gr.Textbox.change) and callable(gr.Button.click)
            with gr.Blocks() as demo:
                box = gr.Textbox()
                box.change(lambda s: s, box, box)
            assert demo.fns, "no event registered"
            assert gi.install() is False  # too late once gradio is in

        def unnamed_backend_imports_pyplot():
            import gradio.utils
            assert "matplotlib.pyplot" not in sys.modules  # not imported by the UI itself
            with gradio.utils.MatplotlibBackendMananger():
                pass
            assert "matplotlib.pyplot" in sys.modules

        check("stub_writer_skipped", stub_writer_skipped)
        check("unnamed_backend_imports_pyplot", unnamed_backend_imports_pyplot)
    """)


@pytest.fixture(scope="module")
def app_py() -> dict[str, str]:
    return _facts("""
        import os, sys
        import app
        import cir_demo.ui.startup as startup
        from cir_demo.ui import gradio_import as gi

        returned = {}

        def recorded(name, fn):  # what app.main's calls return (it discards it)
            def call():
                returned[name] = fn()
                return returned[name]
            return call

        gi.refuse_ipython = recorded("refuse_ipython", gi.refuse_ipython)
        gi.headless_matplotlib = recorded("headless_matplotlib", gi.headless_matplotlib)
        startup.prepare = lambda argv: 0  # stop right after app.py's own settings
        assert app.main([]) == 0

        def ipython_refused():
            assert returned["refuse_ipython"] is True
            assert sum(isinstance(f, gi._RefuseIPython) for f in sys.meta_path) == 1
            try:
                import IPython.core.magic  # noqa: F401
            except ModuleNotFoundError as exc:
                assert "outside IPython" in str(exc), exc
            else:
                raise AssertionError("IPython imported")

        def agg_named():
            assert returned["headless_matplotlib"] is True
            assert os.environ["MPLBACKEND"] == "agg"

        check("ipython_refused", ipython_refused)
        check("agg_named", agg_named)
        import cir_demo.ui.app  # noqa: F401 (gradio through the package's hook)
        import gradio.utils

        def not_in_a_notebook():
            assert gradio.utils.ipython_check() is False and gradio.utils.colab_check() is False
            assert not any(m == "IPython" or m.startswith("IPython.") for m in sys.modules)

        def no_pyplot():
            with gradio.utils.MatplotlibBackendMananger():  # what gradio does around every event
                pass
            import matplotlib
            assert matplotlib.get_backend().lower() == "agg"
            assert "matplotlib.pyplot" not in sys.modules

        check("not_in_a_notebook", not_in_a_notebook)
        check("no_pyplot", no_pyplot)
    """)


def test_the_ui_imports_gradio_without_its_stub_writer_and_components_keep_their_events(bare_import):
    assert bare_import["stub_writer_skipped"] == "ok", bare_import["stub_writer_skipped"]


def test_app_py_refuses_ipython_and_gradio_still_imports_and_knows_it_is_not_in_a_notebook(app_py):
    for fact in ("ipython_refused", "not_in_a_notebook"):
        assert app_py[fact] == "ok", app_py[fact]


def test_refuse_ipython_leaves_a_process_that_has_imported_it_alone():
    code = textwrap.dedent("""
        import sys, types
        sys.modules["IPython"] = types.ModuleType("IPython")  # as in a notebook, where it is imported first
        from cir_demo.ui import gradio_import as gi
        assert gi.refuse_ipython() is False
        assert not any(isinstance(f, gi._RefuseIPython) for f in sys.meta_path)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_app_py_names_a_headless_matplotlib_backend_so_gradios_event_check_imports_no_pyplot(app_py):
    for fact in ("agg_named", "no_pyplot"):
        assert app_py[fact] == "ok", app_py[fact]


def test_a_backend_the_user_named_is_kept_and_without_one_gradio_imports_pyplot(bare_import):
    kept = _fresh(
        """
        import os
        from cir_demo.ui.gradio_import import headless_matplotlib
        assert headless_matplotlib() is False and os.environ["MPLBACKEND"] == "svg"
        print("ok")
    """,
        MPLBACKEND="svg",
    )
    assert kept.returncode == 0 and kept.stdout.strip() == "ok", kept.stderr[-2000:]
    # the cost avoided: with no backend named, gradio's check resolves one by importing pyplot
    assert bare_import["unnamed_backend_imports_pyplot"] == "ok", bare_import["unnamed_backend_imports_pyplot"]
