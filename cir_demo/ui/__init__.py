"""The explorer UI (Gradio). Only this package imports gradio; it talks to models and data
only through `cir_demo.explorer`. Entry points: `cir_demo.ui.app.create_app`, `cir_demo.ui.app.main`."""

from cir_demo.ui.gradio_import import install as _install_gradio_import

_install_gradio_import()  # before any module of this package imports gradio
