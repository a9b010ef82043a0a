"""`python -m cir_demo.testing.tiny_eval MODELS_DIR [eval flags]`: the `--eval` command line with
the tiny test models of `cir_demo.testing.explorer` registered first (they live in the test
process's registry, which a child process does not see): the background run of an app that serves them."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    from cir_demo.harness import cli as eval_cli
    from cir_demo.testing.explorer import register_tiny_models

    register_tiny_models(Path(argv[0]))
    parser = argparse.ArgumentParser(prog="tiny_eval")
    eval_cli.add_arguments(parser)
    return eval_cli.run(parser.parse_args(argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
