"""`python -m cir_demo world ...`: generate the offline world, draw contact sheets, print stats, export, render.

    python -m cir_demo world generate --size default --seed 0 [--out DIR] [--force]
    python -m cir_demo world contact-sheet --size default --seed 0 --out sheet.png [--per-category 1] [--group-by kind]
    python -m cir_demo world stats --size default --seed 0
    python -m cir_demo world export --format {pinpoint,jsonl,cirr,fashioniq,circo} --out DIR [--size S --seed N]
    python -m cir_demo world render IMAGE_ID [IMAGE_ID ...] --out DIR [--size S --seed N]

export, render and generate --out write a new folder whole and put it in place by a rename; a folder
that holds anything is refused unless --overwrite (--force for generate), which moves it aside whole
(cir_demo/utils/owned_folder.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _world_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", default="default", help="world size: tiny or default (default: default)")
    p.add_argument("--seed", type=int, default=0, help="world seed (default: 0)")
    p.add_argument("--root", default=None, help="world folder (default: the cache folder of size and seed)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from cir_demo.utils.owned_folder import add_wait_argument

    sub = parser.add_subparsers(dest="world_command", metavar="SUBCOMMAND")
    g = sub.add_parser("generate", help="generate (or verify) a world and print its statistics")
    g.add_argument("--size", default="default", help="tiny or default")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--out", default=None, help="output folder (default: cache/world/SIZE-seedN)")
    g.add_argument(
        "--force", action="store_true", help="regenerate even when the manifest matches (an --out is moved aside whole)"
    )
    add_wait_argument(g)
    c = sub.add_parser("contact-sheet", help="draw sample queries per category to a PNG")
    _world_args(c)
    c.add_argument("--out", required=True, help="PNG path (an existing file is replaced only with --overwrite)")
    c.add_argument("--overwrite", action="store_true", help="replace an existing --out file (it is moved aside)")
    c.add_argument("--per-category", type=int, default=1, help="intents per group (default 1)")
    c.add_argument("--group-by", choices=("kind", "category", "subcategory"), default="kind")
    c.add_argument("--sample-seed", type=int, default=0, help="which intents to show")
    s = sub.add_parser("stats", help="print the distribution of positives, negatives and categories")
    _world_args(s)
    s.add_argument("--json", action="store_true", help="print the statistics as JSON")
    e = sub.add_parser("export", help="export the test benchmark (pinpoint parquet or our JSONL format)")
    _world_args(e)
    e.add_argument("--format", choices=("pinpoint", "jsonl", "cirr", "fashioniq", "circo"), required=True)
    e.add_argument("--out", required=True, help="output folder: new or empty, or any with --overwrite")
    e.add_argument("--overwrite", action="store_true", help="move what --out holds aside whole, then write")
    add_wait_argument(e)
    e.add_argument(
        "--images",
        choices=("render", "none"),
        default=None,
        help="render PNGs or not (default: render for jsonl, none for cirr, fashioniq and circo)",
    )
    r = sub.add_parser("render", help="render images by id to PNG files")
    _world_args(r)
    r.add_argument("image_ids", nargs="+")
    r.add_argument("--out", required=True, help="output folder: new or empty, or any with --overwrite")
    r.add_argument("--overwrite", action="store_true", help="move what --out holds aside whole, then write")
    add_wait_argument(r)
    r.add_argument("--pixels", type=int, default=None, help="image size (default 160)")


def run(args: argparse.Namespace) -> int:
    cmd = getattr(args, "world_command", None)
    if cmd is None:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        return _COMMANDS[cmd](args)
    except (ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _generate(args) -> int:
    from .disk import read_manifest

    root = _generated(args)  # prints the statistics
    m = read_manifest(root)
    print(f"world {m['size']} seed {m['seed']} at {root}")
    print("counts: " + ", ".join(f"{k} {v}" for k, v in m["counts"].items()))
    print(f"checksum {m['checksum']}")
    return 0


def _generated(args) -> Path:
    """The world's folder: the cache's (kept up to date in place), or a user's --out, left as it is when it
    holds this world and otherwise written whole and renamed in (--force moves the earlier folder aside)."""
    from .disk import generate_world, world_problems

    out = Path(args.out) if args.out else None
    if out is None or not args.force and out.is_dir() and not world_problems(out, args.size, args.seed):
        return generate_world(args.size, args.seed, out, progress=True, force=args.force)
    from cir_demo.utils.owned_folder import staged_run_dir

    with staged_run_dir(out, args.force, wait=args.wait) as tmp:
        generate_world(args.size, args.seed, tmp, progress=True, force=True)
    return out


def _contact_sheet(args) -> int:
    from cir_demo.utils.owned_folder import writing_files

    from .contact_sheet import draw_contact_sheet

    with writing_files([Path(args.out)], args.overwrite):  # an earlier file is moved aside, kept
        out = draw_contact_sheet(
            args.out,
            args.size,
            args.seed,
            args.root,
            per_group=args.per_category,
            group_by=args.group_by,
            sample_seed=args.sample_seed,
        )
    print(f"wrote {out}")
    return 0


def _stats(args) -> int:
    from .disk import format_stats
    from .loader import open_world

    m = open_world(args.root, args.size, args.seed).manifest
    print(json.dumps(m["stats"], indent=2) if args.json else format_stats(m["stats"]))
    return 0


def _export(args) -> int:
    from cir_demo.utils.owned_folder import staged_run_dir

    from .loader import load_world

    bench = load_world(args.root, args.size, args.seed)
    out = Path(args.out)
    with staged_run_dir(out, args.overwrite, wait=args.wait) as tmp:
        staged = _write_export(args.format, bench, tmp, args.images)
    paths = {k: out / Path(v).relative_to(tmp) for k, v in staged.items()}  # where they are now, not where staged
    for k, v in paths.items():
        print(f"{k}: {v}")
    if args.format == "circo":
        print(
            f"open it: python app.py --benchmark circo --annotations {paths['annotations']} "
            f"--corpus-ids {paths['corpus_ids']}"
        )
    n_two = sum(not q.is_single for q in bench.queries)
    if n_two and args.format in ("cirr", "fashioniq", "circo"):
        print(
            f"warning: {n_two} two-image queries left out ({args.format} queries have one reference image)",
            file=sys.stderr,
        )
    return 0


def _write_export(fmt: str, bench, out: Path, images: str | None) -> dict:
    """The export's files written into `out`: {what: path}."""
    if fmt == "pinpoint":
        from cir_demo.benchmarks.pinpoint import export_pinpoint

        return export_pinpoint(bench, out)
    if fmt == "jsonl":
        from cir_demo.benchmarks.jsonl import export_jsonl_benchmark

        return {"benchmark": export_jsonl_benchmark(bench, out, image_mode=images or "render")}
    from cir_demo.benchmarks.circo import export_circo
    from cir_demo.benchmarks.cirr import export_cirr
    from cir_demo.benchmarks.fashioniq import export_fashioniq

    export = {"cirr": export_cirr, "fashioniq": export_fashioniq, "circo": export_circo}[fmt]
    return export(bench, out, image_mode=images or "none", skip_two_image=True)


def _render(args) -> int:
    from cir_demo.benchmarks.jsonl import EXPORT_PNG_LEVEL
    from cir_demo.utils.owned_folder import staged_run_dir

    from .loader import open_world, render_image

    world = open_world(args.root, args.size, args.seed)
    for image_id in args.image_ids:  # every id checked before --out is created
        world.table_and_row(image_id)
    out = Path(args.out)
    with staged_run_dir(out, args.overwrite, wait=args.wait) as tmp:
        for image_id in args.image_ids:
            render_image(image_id, args.pixels, world=world).save(
                tmp / f"{image_id}.png", format="PNG", compress_level=EXPORT_PNG_LEVEL
            )
    for image_id in args.image_ids:
        print(out / f"{image_id}.png")
    return 0


_COMMANDS = {
    "generate": _generate,
    "contact-sheet": _contact_sheet,
    "stats": _stats,
    "export": _export,
    "render": _render,
}
