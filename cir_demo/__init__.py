"""cir_demo: a Composed Image Retrieval failure explorer."""

__version__ = "0.9.0"
