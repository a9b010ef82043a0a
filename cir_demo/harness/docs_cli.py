"""`python -m cir_demo docs tables [--check]`: redraw the results tables of README.md and docs/*.md from
the committed record CSVs (harness/record_tables.py); `--check` changes nothing and exits 1 when a
table differs from its CSV."""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="docs_command", metavar="ACTION", required=True)
    t = sub.add_parser("tables", help="redraw the marked results tables from docs/results/*.csv")
    t.add_argument("--check", action="store_true", help="change nothing; exit 1 when a table differs from its CSV")
    t.add_argument("--root", default=None, help="repository root (default: this checkout)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cir_demo.harness.record_tables import update_tables
    from cir_demo.paths import REPO_ROOT

    root = Path(args.root) if args.root else REPO_ROOT
    try:
        stale = update_tables(root, check=args.check)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in stale:
        rel = path.relative_to(root)
        print(f"{rel}: {'differs from its record CSV' if args.check else 'tables redrawn'}")
    if args.check and stale:
        print("run: python -m cir_demo docs tables", file=sys.stderr)
        return 1
    return 0
