"""`python -m cir_demo train world-clip|world-cir|world-verifier`: train a world model on the
offline world's train split, evaluate it on the test split, write weights + manifest atomically
(the stages are in training/pipeline.py).

    python -m cir_demo train world-clip                     # ~30 min on 2 CPU cores (--threads 2)
    python -m cir_demo train world-cir                      # needs assets/world-clip
    python -m cir_demo train world-verifier                 # needs assets/world-clip
    python -m cir_demo train world-clip --world-size tiny --max-steps 3 --out /tmp/wc   # smoke test
    python -m cir_demo train world-cir --record-reference   # no training: the committed model's reference numbers
"""

from __future__ import annotations

import argparse
import json

MODELS = ("world-clip", "world-cir", "world-verifier")
DEFAULT_OUT = {
    "world-clip": "assets/world-clip",
    "world-cir": "assets/world-cir",
    "world-verifier": "assets/world-verifier",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", choices=MODELS, help="which world model to train")
    parser.add_argument("--world-size", default="default", help="world size (default, tiny, ...)")
    parser.add_argument("--seed", type=int, default=0, help="world seed (the world's test/train split)")
    parser.add_argument("--data-seed", type=int, default=0, help="training seed (init, batches)")
    parser.add_argument("--epochs", type=float, default=None, help="override the model's default epochs")
    parser.add_argument("--max-steps", type=int, default=None, help="stop after N steps (smoke tests)")
    parser.add_argument("--out", default=None, help="output folder (default assets/<model>)")
    parser.add_argument("--clip", default="assets/world-clip", help="world-CLIP folder (world-cir, world-verifier)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--no-eval", action="store_true", help="skip the held-out evaluation (smoke tests)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a field of the model's training config, e.g. --set near_miss_last_weight=1 "
        "(repeatable; the fields are in the manifest's training.config)",
    )
    parser.add_argument(
        "--from-judge",
        default=None,
        metavar="DIR",
        help="world-verifier only: keep the trained judge in DIR (stages 1-2: eyes, judge, "
        "calibration) and train stage 3 (the near-miss answer) on it",
    )
    parser.add_argument(
        "--record-reference",
        action="store_true",
        help="train nothing: write assets/<model>/reference.json, the committed model's numbers on "
        "a fixed slice of the default world (tests/test_world_reference.py compares them); "
        "run it after committing retrained weights",
    )


def run(args: argparse.Namespace) -> int:
    from cir_demo.training.pipeline import train

    if args.record_reference:
        from cir_demo.training.reference import record_reference

        if args.out is not None:
            raise SystemExit(f"--record-reference records the committed model in assets/{args.model}; drop --out")
        print(f"wrote {record_reference(args.model)}")
        return 0
    overrides = parse_overrides(args.overrides)
    manifest = train(
        args.model,
        args.out or DEFAULT_OUT[args.model],
        args.clip,
        args.threads,
        from_judge=args.from_judge,
        size=args.world_size,
        seed=args.seed,
        data_seed=args.data_seed,
        epochs=args.epochs,
        max_steps=args.max_steps,
        evaluate=not args.no_eval,
        progress=not args.quiet,
        overrides=overrides,
    )
    print(json.dumps({k: manifest[k] for k in ("model", "training", "held_out") if k in manifest}, indent=2))
    return 0


def parse_overrides(items) -> dict[str, str]:
    """`--set` items ["field=value", ...] -> {field: value} (training.pipeline converts the values)."""
    out = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"--set: expected FIELD=VALUE, got {item!r}")
        out[name.strip()] = value.strip()
    return out
