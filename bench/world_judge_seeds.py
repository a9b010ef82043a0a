"""Training-seed spread of the world judge on both test splits of a world (docs/world_models.md).

    python bench/world_judge_seeds.py assets/world-verifier seeds/judge-d1 seeds/judge-d2 [--world-seed 41]

Each folder holds a judge trained with another `--data-seed` (`python -m cir_demo train world-verifier
--data-seed N --out DIR`). For the in-distribution and the compositional split of the world, the
world-CLIP fusion and world-CIR top 20 are reranked by each judge (its own ranking key, from its manifest)
as the trainer's held-out evaluation does; prints mAP@10 / NegRecall@10 before and after per folder,
with their mean and range over the folders.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402


def judge_rows(folder: Path, clip: Path, size: str, world_seed: int, split: str) -> dict:
    import torch
    from safetensors.torch import load_file

    from cir_demo.models.world_judge import JudgeArch, encode_words, load_tokenizer
    from cir_demo.models.world_judge_net import judge_from_state
    from cir_demo.rerank.world_verifier import TOKENIZER_FILE, read_judge_manifest
    from cir_demo.retrievers.base import render_markers
    from cir_demo.training.judge_eval import held_out_judge
    from cir_demo.training.world_judge import WEIGHTS_NAME

    manifest, _ = read_judge_manifest(folder / WEIGHTS_NAME)
    arch = JudgeArch.from_json(manifest["architecture"])
    model = judge_from_state(load_file(str(folder / WEIGHTS_NAME)), arch).eval()
    tokenizer = load_tokenizer(folder / TOKENIZER_FILE)
    penalty = float(manifest.get("ranking", {}).get("near_miss_penalty", 0.0))
    rank_weight = float(manifest.get("ranking", {}).get("first_stage_rank_weight", 0.0))

    def tokenize(texts, length):
        return encode_words(tokenizer, [render_markers(t, "words") for t in texts], length)

    clip_manifest = json.loads((clip / "manifest.json").read_text())
    with torch.inference_mode():
        out = held_out_judge(
            model,
            tokenize,
            arch,
            size,
            world_seed,
            clip,
            clip_manifest,
            False,
            penalty,
            rank_weight=rank_weight,
            split=split,
            pairs=False,
        )
    rows = {
        name: {
            "before": {k: r["before"][k] for k in ("mAP@10", "NegRecall@10")},
            "after": {k: r["after"][k] for k in ("mAP@10", "NegRecall@10")},
        }
        for name, r in out["rerank"].items()
        if name.endswith("top 20")
    }
    return {"penalty": penalty, "rank_weight": rank_weight, "data_seed": manifest.get("data_seed"), "rerank": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--clip", type=Path, default=Path("assets/world-clip"))
    ap.add_argument("--world-seed", type=int, default=0)
    ap.add_argument("--world-size", default="default", choices=["tiny", "default"])
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args(argv)
    out = {}
    for split in ("test", "compositional"):
        rows = {str(f): judge_rows(f, args.clip, args.world_size, args.world_seed, split) for f in args.folders}
        out[split] = rows
        print(f"\n{split} split (world seed {args.world_seed}): mAP@10 / NegRecall@10, first stage -> reranked")
        first = next(iter(rows.values()))["rerank"]
        for run in first:
            print(f"  {run}")
            for name, r in rows.items():
                b, a = r["rerank"][run]["before"], r["rerank"][run]["after"]
                print(
                    f"    {name:36s} (penalty {r['penalty']:g}, rank weight {r['rank_weight']:g}) {b['mAP@10']:.4f} / {b['NegRecall@10']:.4f}"
                    f" -> {a['mAP@10']:.4f} / {a['NegRecall@10']:.4f}"
                )
            for key in ("mAP@10", "NegRecall@10"):
                xs = np.array([r["rerank"][run]["after"][key] for r in rows.values()])
                print(f"    reranked {key:12s} mean {xs.mean():.4f}  range [{xs.min():.4f}, {xs.max():.4f}]")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
