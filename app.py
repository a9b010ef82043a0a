"""cir_demo entry point.

    python app.py            # the explorer UI (Gradio) on the offline world
    python app.py --eval     # headless run of the full benchmark; see --eval --help
    python app.py --mcp      # the UI, its API endpoints also served as MCP tools (needs gradio[mcp])

A Hugging Face Space runs `python app.py` without arguments: the Space variable CIR_DEMO_ARGS
holds them instead (e.g. "--retrievers metaclip2-h14-fusion --reranker qwen2.5-vl").
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # before the heavy imports: the UI reports its start-up time from here

import argparse  # noqa: E402
import os  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from cir_demo.utils.gc_pause import kept_for_life
    from cir_demo.utils.parse_memo import install as parse_each_source_once

    parse_each_source_once()  # before any code key: each source file parsed once in this process
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv and os.environ.get("CIR_DEMO_ARGS"):
        argv = shlex.split(os.environ["CIR_DEMO_ARGS"])
    if "--eval" in argv:
        argv.remove("--eval")
        with kept_for_life():  # the modules imported (utils/gc_pause.py)
            from cir_demo.harness import cli as eval_cli

        parser = argparse.ArgumentParser(prog="python app.py --eval", description=eval_cli.__doc__.splitlines()[0])
        eval_cli.add_arguments(parser)
        return eval_cli.run(parser.parse_args(argv))
    with kept_for_life():  # gradio and the modules of the page imported (utils/gc_pause.py)
        from cir_demo.ui.gradio_import import headless_matplotlib, refuse_ipython
        from cir_demo.ui.startup import prepare

        refuse_ipython()  # this script is no IPython session: gradio need not import IPython to find that out
        headless_matplotlib()  # a server: gradio's per-event backend check then imports no pyplot
        startup = prepare(argv)  # before gradio's import: a first start's world is generated meanwhile
        if isinstance(startup, int):
            return startup
        try:
            from cir_demo.ui import app as ui_app
        except ImportError as exc:
            startup.stop()
            print(
                f"error: the explorer UI is not available in this build ({exc}); "
                "use `python app.py --eval` for the headless benchmark",
                file=sys.stderr,
            )
            return 2
    return ui_app.main(argv, started=STARTED, startup=startup)


if __name__ == "__main__":
    from cir_demo.utils.gc_pause import started_as_program

    started_as_program()
    sys.exit(main())
