"""`python -m cir_demo record`: the world's results of record, `--eval` on several fresh world seeds.

    python -m cir_demo record --seeds 7 11 13 --out runs/record     # ~4 min a seed on 2 CPU cores

Each seed's full `--eval` (both test splits, every default retriever, with and without the judge)
goes to OUT/seed-<S>/; a seed whose folder already holds a complete run is not run again, so an
interrupted record resumes. OUT/record.json and OUT/record.md hold the mean, range and per-seed
values, and whether each of the judge's effects holds on every seed.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", type=int, nargs="+", default=[7, 11, 13],
                   help="world seeds (default 7 11 13: worlds no design choice was made on; seed 0 is the "
                        "development world)")
    p.add_argument("--world-size", default="default", choices=["tiny", "default"])
    p.add_argument("--out", required=True, help="output folder (one subfolder per seed, then record.json/.md)")
    p.add_argument("--eval-arg", action="append", default=[], metavar="ARG",
                   help="an extra argument for every seed's --eval (repeatable), e.g. --eval-arg=--no-plots")


def run(args: argparse.Namespace) -> int:
    from cir_demo.harness.seed_record import aggregate, read_seed_metrics, render_markdown
    from cir_demo.utils.io import write_text_atomic
    from cir_demo.utils.owned_folder import read_manifest

    if any(s < 0 for s in args.seeds) or len(set(args.seeds)) != len(args.seeds):
        print(f"error: --seeds must be distinct non-negative integers, got {args.seeds}", file=sys.stderr)
        return 2
    out = Path(args.out)
    strangers = _strangers(out) if out.is_dir() else []
    if strangers:  # the folder is someone else's: nothing here may be overwritten or mixed in
        print(f"error: --out {out} holds files that are not a record's ({', '.join(strangers[:5])}); "
              "choose a new folder", file=sys.stderr)
        return 2
    per_seed = {}
    for seed in args.seeds:
        folder = out / f"seed-{seed}"
        if read_manifest(folder) is None:
            cmd = [sys.executable, "-m", "cir_demo", "eval", "--benchmark", "world", "--world-size", args.world_size,
                   "--world-seed", str(seed), "--out", str(folder), *args.eval_arg]
            print(f"[record] seed {seed}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
            if subprocess.run(cmd).returncode != 0:
                print(f"error: --eval failed on world seed {seed} (its output: {folder})", file=sys.stderr)
                return 1
        per_seed[seed] = read_seed_metrics(folder)
    record = aggregate(per_seed)
    record["world_size"] = args.world_size
    write_text_atomic(out / "record.json", json.dumps(record, indent=2, sort_keys=True) + "\n")
    write_text_atomic(out / "record.md", render_markdown(record) + "\n")
    print(f"wrote {out / 'record.md'}")
    return 0


RECORD_FILES = ("record.json", "record.md")


def _is_record(path: Path) -> bool:
    """`path` is a record.json this command wrote (its keys), not a file of the same name."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and {"seeds", "splits", "judge", "world_size"} <= set(data)


def _strangers(out: Path) -> list[str]:
    """What in `out` is not a record's: its record.json and record.md count only beside a record.json of
    its own, a seed-N folder only when empty or holding a run's manifest; never a name alone. Where each
    seed's --eval stages its run (.partial) is the record's too."""
    import re

    from cir_demo.utils.owned_folder import read_manifest
    from cir_demo.utils.staged_folder import PARTIAL

    record = _is_record(out / "record.json")
    strangers = []
    for p in sorted(out.iterdir()):
        if p.name == PARTIAL or (p.name in RECORD_FILES and record and p.is_file() and not p.is_symlink()):
            continue
        seed = re.fullmatch(r"seed-\d+", p.name) and p.is_dir() and not p.is_symlink()
        if seed and (read_manifest(p) is not None or not any(p.iterdir())):
            continue
        strangers.append(p.name + ("/" if p.is_dir() else ""))
    return strangers
