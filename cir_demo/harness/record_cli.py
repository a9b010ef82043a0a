"""`python -m cir_demo record`: the world's results of record, `--eval` on several fresh world seeds.

    python -m cir_demo record --seeds 61 67 71 73 79 --out runs/record     # ~3 min a seed on 2 CPU cores

Each seed's full `--eval` (both test splits, every default retriever, with and without the judge)
goes to OUT/seed-<S>/; a seed whose folder already holds a complete run made by this code, these
weights and libraries and these arguments (`made_by` in OUT/record.json, written after each seed)
is not run again, so an interrupted record resumes; a complete seed folder made otherwise is
refused. OUT/record.json and OUT/record.md hold the mean, range and per-seed values, and for each of
the judge's effects the per-world difference with its 95% paired-bootstrap interval over intents and
on how many worlds that interval excludes 0 (so `--n-boot 0` is refused: a record needs the intervals).
OUT/record.csv holds the same per world, split, retriever and measure (first stage, reranked,
difference, interval): committed under docs/results/, it is what the README's and docs' tables are
drawn from (`python -m cir_demo docs tables`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[61, 67, 71, 73, 79],
        help="world seeds (default 61 67 71 73 79: fold 0's results of record, scenes no choice was made on; "
        "seed 0 is the development world; fold 1's sealed test: 101 103 107 109 113 with --world-size "
        "default-fold1)",
    )
    p.add_argument(
        "--world-size",
        default="default",
        help="world size (default: default, fold 0); default-fold1: worlds asking fold 1's held-out edits",
    )
    p.add_argument("--out", required=True, help="output folder (one subfolder per seed, then record.json/.md)")
    from cir_demo.utils.owned_folder import add_wait_argument

    add_wait_argument(p)
    p.add_argument(
        "--eval-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="an extra argument for every seed's --eval (repeatable), e.g. --eval-arg=--no-plots",
    )


def run(args: argparse.Namespace) -> int:
    from cir_demo.utils.owned_folder import folder_lock

    if any(s < 0 for s in args.seeds) or len(set(args.seeds)) != len(args.seeds):
        print(f"error: --seeds must be distinct non-negative integers, got {args.seeds}", file=sys.stderr)
        return 2
    with folder_lock(Path(args.out), args.wait):  # one record at a time in --out
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from cir_demo.harness.seed_record import (
        SPLIT_DIRS,
        aggregate,
        paired_effects,
        read_seed_metrics,
        record_csv,
        render_markdown,
    )
    from cir_demo.utils.owned_folder import read_manifest

    out = Path(args.out)
    write_text_atomic = _own_writes()
    strangers = _strangers(out) if out.is_dir() else []
    if strangers:  # the folder is someone else's: nothing here may be overwritten or mixed in
        print(
            f"error: --out {out} holds files that are not a record's ({', '.join(strangers[:5])}); choose a new folder",
            file=sys.stderr,
        )
        return 2
    per_seed, intervals, made_by = {}, {}, _made_by(out)
    for seed in args.seeds:
        folder = out / f"seed-{seed}"
        cmd = [
            "-m",
            "cir_demo",
            "eval",
            "--benchmark",
            "world",
            "--world-size",
            args.world_size,
            "--world-seed",
            str(seed),
            "--out",
            str(folder),
            *args.eval_arg,
        ]
        if read_manifest(folder) is not None:
            problem = _other_maker(made_by.get(str(seed)), seed_key(cmd), folder)
            if problem:
                print(f"error: {problem}", file=sys.stderr)
                return 2
        else:
            print(f"[record] seed {seed}: {' '.join(cmd)}", file=sys.stderr, flush=True)
            if subprocess.run([sys.executable, *cmd]).returncode != 0:
                print(f"error: --eval failed on world seed {seed} (its output: {folder})", file=sys.stderr)
                return 1
            made_by[str(seed)] = seed_key(cmd)
            write_text_atomic(out / "record.json", json.dumps({"made_by": made_by}, indent=2, sort_keys=True) + "\n")
        per_seed[seed] = read_seed_metrics(folder)
        try:
            intervals[seed] = {split: paired_effects(folder, split) for split in SPLIT_DIRS if split in per_seed[seed]}
        except ValueError as exc:
            print(f"error: world seed {seed}: {exc}", file=sys.stderr)
            return 2
    record = aggregate(per_seed, intervals)
    record["world_size"] = args.world_size
    record["made_by"] = {str(s): made_by[str(s)] for s in args.seeds}
    write_text_atomic(out / "record.json", json.dumps(record, indent=2, sort_keys=True) + "\n")
    write_text_atomic(out / "record.md", render_markdown(record) + "\n")
    write_text_atomic(out / "record.csv", record_csv(record))
    print(f"wrote {out / 'record.md'}")
    return 0


RECORD_FILES = ("record.json", "record.md", "record.csv")


def _own_writes():
    """write(path, text): a file there that this process did not write is moved aside first, never replaced."""
    import os

    from cir_demo.utils.io import write_text_atomic
    from cir_demo.utils.owned_folder import set_aside

    written: set[Path] = set()

    def write(path: Path, text: str) -> None:
        if path not in written and os.path.lexists(path):
            set_aside(path)
        write_text_atomic(path, text)
        written.add(path)

    return write


def _is_record(path: Path) -> bool:
    """`path` is a record.json this command wrote (its keys; `made_by` alone while seeds run), not a file of
    the same name."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and (
        {"seeds", "splits", "judge", "world_size"} <= set(data) or set(data) == {"made_by"}
    )


def _strangers(out: Path) -> list[str]:
    """What in `out` is not a record's: its record.json and record.md count only beside a record.json of
    its own, a seed-N folder only when empty or holding a run's manifest; never a name alone. Where each
    seed's --eval stages its run (.partial) is the record's too."""
    import re

    from cir_demo.utils.owned_folder import read_manifest
    from cir_demo.utils.owned_folder import PARTIAL

    record = _is_record(out / "record.json")
    strangers = []
    for p in sorted(out.iterdir()):
        if p.name == PARTIAL or (p.name in RECORD_FILES and record and p.is_file() and not p.is_symlink()):
            continue
        if ".replaced-" in p.name and p.name.split(".replaced-")[0] in RECORD_FILES:  # set aside by a later record
            continue
        seed = re.fullmatch(r"seed-\d+", p.name) and p.is_dir() and not p.is_symlink()
        if seed and (read_manifest(p) is not None or not any(p.iterdir())):
            continue
        strangers.append(p.name + ("/" if p.is_dir() else ""))
    return strangers


def seed_key(cmd: list[str]) -> dict:
    """What made a seed's folder: the `--eval` arguments, the code and libraries that shape its outputs
    (cir_demo/index/prebuilt_run.py's key) and the committed weights (their manifests name their sha256)."""
    from cir_demo.index.prebuilt_run import output_code_sha256, output_libraries
    from cir_demo.paths import assets_dir
    from cir_demo.utils.io import sha256_file

    weights = {
        p.relative_to(assets_dir()).as_posix(): sha256_file(p) for p in sorted(assets_dir().glob("*/manifest.json"))
    }
    at = cmd.index("--out")
    return {
        "eval_args": cmd[3:at] + cmd[at + 2 :],
        "code_sha256": output_code_sha256(),
        "libraries": output_libraries(),
        "weights_manifests": weights,
    }


def _made_by(out: Path) -> dict:
    try:
        made = json.loads((out / "record.json").read_text(encoding="utf-8")).get("made_by")
    except (OSError, ValueError, AttributeError):
        return {}
    return made if isinstance(made, dict) else {}


def _other_maker(recorded: dict | None, now: dict, folder: Path) -> str | None:
    """Why complete seed folder `folder` must not be reused (None: it was made as this run would make it)."""
    if recorded == now:
        return None
    what = (
        "no record of what made it"
        if not isinstance(recorded, dict)
        else "made by other " + ", ".join(k for k in now if recorded.get(k) != now[k])
    )
    return (
        f"{folder} holds a run with {what} (record.json's made_by); move it away or choose a new --out, "
        "and record runs it again"
    )
