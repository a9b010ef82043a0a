"""cir_demo.ui imports gradio without gradio's .pyi stub writer, and gradio still works."""
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_ui_imports_gradio_without_its_stub_writer_and_components_keep_their_events():
    code = textwrap.dedent("""
        import sys
        import cir_demo.ui.app  # imports gradio through the package's hook
        import gradio as gr
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
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_app_py_refuses_ipython_and_gradio_still_imports_and_knows_it_is_not_in_a_notebook():
    code = textwrap.dedent("""
        import sys
        from cir_demo.ui.gradio_import import refuse_ipython
        assert refuse_ipython() is True
        try:
            import IPython.core.magic  # noqa: F401
        except ModuleNotFoundError as exc:
            assert "outside IPython" in str(exc), exc
        else:
            raise AssertionError("IPython imported")
        import cir_demo.ui.app  # noqa: F401 (gradio through the package's hook)
        import gradio.utils
        assert gradio.utils.ipython_check() is False and gradio.utils.colab_check() is False
        assert not any(m == "IPython" or m.startswith("IPython.") for m in sys.modules)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


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


def _fresh(code: str, env_drop: tuple[str, ...] = ("MPLBACKEND",), **env_add) -> subprocess.CompletedProcess:
    import os

    env = {k: v for k, v in os.environ.items() if k not in env_drop} | env_add
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_app_py_names_a_headless_matplotlib_backend_so_gradios_event_check_imports_no_pyplot():
    out = _fresh("""
        import os, sys
        import app
        import cir_demo.ui.startup as startup
        startup.prepare = lambda argv: 0  # stop right after app.py's own settings
        assert app.main([]) == 0
        assert os.environ["MPLBACKEND"] == "agg"
        import cir_demo.ui.app  # gradio
        import gradio.utils
        with gradio.utils.MatplotlibBackendMananger():  # what gradio does around every event
            pass
        import matplotlib
        assert matplotlib.get_backend().lower() == "agg"
        assert "matplotlib.pyplot" not in sys.modules
        print("ok")
    """)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_a_backend_the_user_named_is_kept_and_without_one_gradio_imports_pyplot():
    kept = _fresh("""
        import os
        from cir_demo.ui.gradio_import import headless_matplotlib
        assert headless_matplotlib() is False and os.environ["MPLBACKEND"] == "svg"
        print("ok")
    """, MPLBACKEND="svg")
    assert kept.returncode == 0 and kept.stdout.strip() == "ok", kept.stderr[-2000:]
    # the cost avoided: with no backend named, gradio's check resolves one by importing pyplot
    unnamed = _fresh("""
        import sys
        import gradio.utils
        with gradio.utils.MatplotlibBackendMananger():
            pass
        print("matplotlib.pyplot" in sys.modules)
    """)
    assert unnamed.returncode == 0 and unnamed.stdout.strip() == "True", unnamed.stderr[-2000:]
