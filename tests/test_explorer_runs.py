"""Eval run folders and the report tab's table (cir_demo/explorer/runs.py)."""

from __future__ import annotations

import json
import os

import pandas as pd
from PIL import Image

from cir_demo.explorer import list_runs, load_report


def test_runs_and_report(tiny_setup, tmp_path):
    runs_root = tmp_path / "runs"
    fp = "world-abc"
    old, new, other, named = (
        runs_root / n
        for n in ("20240101-000000-world", "20240102-000000-world", "20240103-000000-world", "20230101-000000-world")
    )
    for i, d in enumerate((old, new, other, named)):
        (d / "plots").mkdir(parents=True)
        pd.DataFrame(
            {"model": ["m"], "mAP@10": [0.25 + i], "mAP@10_ci_lo": [0.2], "mAP@10_ci_hi": [0.3], "NegRecall@10": [0.1]}
        ).to_csv(d / "metrics.csv", index=False)
        Image.new("RGB", (4, 4)).save(d / "plots" / "per_category.png")
        if d is not named:
            (d / "run_info.json").write_text(json.dumps({"benchmark_fingerprint": fp if d is not other else "x"}))
        os.utime(d, (1_000_000 + i, 1_000_000 + i))
    runs = list_runs("world", fp, runs_root)
    assert [r.label for r in runs] == [new.name, old.name, named.name]  # fingerprint matches first, newest first
    assert [r.matches for r in runs] == ["fingerprint", "fingerprint", "name"]
    rep = load_report(runs[0])
    assert rep.metrics.loc[0, "mAP@10"] == "1.2500 [0.2000, 0.3000]"
    assert rep.metrics.loc[0, "NegRecall@10"] == "0.1000"
    assert rep.plots[0][0].name == "per_category.png" and "category" in rep.plots[0][1]
    assert any("fingerprint" in i for i in load_report(runs[2]).info)
