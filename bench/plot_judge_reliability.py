"""The world judge's reliability diagram (docs/world_models.md) from its manifest's held-out calibration table.

    python bench/plot_judge_reliability.py                      # writes docs/img/world_judge_reliability.png
    python bench/plot_judge_reliability.py --manifest assets/world-verifier/manifest.json --out reliability.png

The table (`held_out.calibration_top20`) is computed by the trainer on the world's test split: P(yes) of
every candidate in the world-CLIP fusion and world-CIR top 20 of every test query, binned by tenths,
against how many of them are relevant.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=REPO / "assets/world-verifier/manifest.json")
    parser.add_argument("--out", type=Path, default=REPO / "docs/img/world_judge_reliability.png")
    args = parser.parse_args(argv)
    table = json.loads(args.manifest.read_text(encoding="utf-8"))["held_out"]["calibration_top20"]

    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.6, 4.2), dpi=110)
    ax = fig.add_subplot()
    conf = [b["mean_p_yes"] for b in table["bins"]]
    acc = [b["observed_relevant"] for b in table["bins"]]
    ax.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1, label="perfectly calibrated")
    ax.plot(conf, acc, marker="o", color="#1f5fa8", label="world judge, test split")
    for c, a, b in zip(conf, acc, table["bins"]):
        ax.annotate(f"{b['n']:,}", (c, a), textcoords="offset points", xytext=(4, -10), fontsize=6, color="0.35")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("mean P(yes) in the bin")
    ax.set_ylabel("share of candidates that are relevant")
    ax.set_title(f"World judge reliability (ECE {table['ece']:.3f}, {table['n_pairs']:,} pairs)", fontsize=9)
    ax.legend(loc="upper left", fontsize=7, frameon=False)
    ax.grid(color="0.92")
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
