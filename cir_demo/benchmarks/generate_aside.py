"""A first start's generated data (the offline world) made in a child process, so that it runs on
another core while the parent imports gradio and torch and builds the page."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def generate_aside(name: str, kwargs: dict[str, Any]) -> subprocess.Popen | None:
    """A child process that loads benchmark `name` with `kwargs` (generating its data, ~3 s of pure
    Python holding the GIL for the world's test part); None when the data is on disk, the benchmark
    reads its files, or a shipped copy that matches the code was installed (a few milliseconds: the
    second core stays free for the page). Whoever loads the benchmark waits for the child first:
    generation takes a file lock, so a failed or slow child costs a wait or a generation in the
    parent, never a second writer."""
    from cir_demo.benchmarks.registry import install_shipped, pending_generation
    from cir_demo.paths import REPO_ROOT

    try:
        if pending_generation(name, kwargs) is None or install_shipped(name, kwargs):
            return None
        return subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import json, sys; from cir_demo.benchmarks.registry import "
                "load_benchmark; load_benchmark(sys.argv[1], **json.loads(sys.argv[2]))",
                name,
                json.dumps(kwargs, default=str),
            ],
            cwd=str(REPO_ROOT),
            stdin=subprocess.DEVNULL,
        )
    except Exception:  # e.g. a bad size: the loader reports it when it opens the benchmark
        return None


def stop(child: subprocess.Popen | None) -> None:
    """End a child that `generate_aside` started (a start that stops before loading; its writes are atomic)."""
    if child is not None and child.poll() is None:
        child.terminate()
        child.wait()
