"""Training-seed spread of world-CIR on both test splits (docs/world_models.md).

    python bench/world_cir_seeds.py assets/world-cir seeds/world-cir-d1 seeds/world-cir-d2 [--world-seed 0]

Each folder holds world-CIR weights trained with another `--data-seed` on the same world-CLIP
(`python -m cir_demo train world-cir --data-seed N --out DIR`). Ranks the whole test corpus by exact
dot products (as the trainer's held-out evaluation does) for the in-distribution and the compositional
split and prints mAP@10 / NegRecall@10 per folder with their mean and range.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import argparse
import json
from pathlib import Path

import numpy as np


def cir_metrics(folder: Path, clip_model, tokenizer, clip_sha: str, test) -> dict:
    from safetensors.torch import load_file

    from cir_demo.models.world_cir import combine_numpy, combiner_from_state
    from cir_demo.training import evaluate as ev
    from cir_demo.training.world_cir import reference_pairs

    model = combiner_from_state(load_file(str(folder / "world_cir.safetensors")))
    emb = ev.clip_embeddings(clip_model, tokenizer, test, progress=False, cache_key=clip_sha)
    queries = test.bench.queries
    r1, r2 = reference_pairs(emb["refs"], test.ref_row, queries)
    idx, _ = ev.top_k(combine_numpy(model, r1, r2, emb["texts"]), emb["corpus"], 10)
    return ev.run_metrics(ev.run_from_topk(queries, test.bench.corpus_ids, idx), queries)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--clip", type=Path, default=Path("assets/world-clip"))
    ap.add_argument("--world-seed", type=int, default=0)
    ap.add_argument("--world-size", default="default", choices=["tiny", "default"])
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args(argv)
    from cir_demo.training import evaluate as ev
    from cir_demo.training.pipeline import manifest_clip_sha
    from cir_demo.training.world_clip import load_world_clip

    clip_model, tokenizer, _ = load_world_clip(args.clip)
    clip_sha = manifest_clip_sha(json.loads((args.clip / "manifest.json").read_text()))
    out = {}
    for split in ("test", "compositional"):
        test = ev.load_test_data(args.world_size, args.world_seed, progress=False, split=split)
        rows = {str(f): cir_metrics(f, clip_model, tokenizer, clip_sha, test) for f in args.folders}
        out[split] = rows
        print(f"\n{split} split (world seed {args.world_seed}): mAP@10 / NegRecall@10 per training seed")
        for name, m in rows.items():
            print(f"  {name:40s} {m['mAP@10']:.4f} / {m['NegRecall@10']:.4f}")
        for key in ("mAP@10", "NegRecall@10"):
            xs = np.array([m[key] for m in rows.values()])
            print(f"  {key:12s} mean {xs.mean():.4f}  range [{xs.min():.4f}, {xs.max():.4f}]")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
