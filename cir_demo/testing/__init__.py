"""Builders used only by tests and benchmarks: tiny real models and the services built on them.
Nothing outside tests/ and bench/ imports this package."""
