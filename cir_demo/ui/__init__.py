"""The explorer UI (Gradio). Only this package imports gradio; it talks to models and data
only through `cir_demo.explorer`. Entry points: `cir_demo.ui.app.create_app`, `cir_demo.ui.app.main`."""
