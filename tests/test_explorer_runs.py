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


def test_a_report_is_read_again_only_when_its_files_change(tmp_path):
    """`RunReports.report` (the service's) keeps a Report read once (every page load shows one) under the state of the
    files it was read from (`report_key`): the same object while they stand, and after a file is replaced,
    added or removed, what a cold `load_report` reads (the oracle)."""
    from types import SimpleNamespace

    from cir_demo.explorer.run_reports import RunReports
    from cir_demo.explorer.runs import report_key

    run = tmp_path / "runs" / "20240101-000000-world"
    run.mkdir(parents=True)

    def write_metrics(value: float) -> None:  # atomically, as --eval publishes: same size, maybe same mtime
        staged = run / ".metrics.csv.tmp"
        pd.DataFrame({"model": ["m"], "mAP@10": [value]}).to_csv(staged, index=False)
        os.replace(staged, run / "metrics.csv")

    write_metrics(0.25)
    (run / "run_info.json").write_text(json.dumps({"benchmark_fingerprint": "fp"}))
    reports = RunReports(SimpleNamespace(name="world"), "fp", (), None, None, None)
    reports.runs = lambda: list_runs("world", "fp", tmp_path / "runs")  # this folder, not the data folder's
    first = reports.report()
    assert reports.report() is first  # unchanged files: read once
    assert reports.report(first.run.label) is first
    assert reports.report(None, reports.runs()) is first  # the caller's listing, not a second one
    before = report_key(reports.runs()[0])
    write_metrics(0.75)
    assert report_key(reports.runs()[0]) != before
    changed = reports.report()
    assert changed.metrics.equals(load_report(reports.runs()[0]).metrics)
    assert changed.metrics.loc[0, "mAP@10"] == "0.7500" and first.metrics.loc[0, "mAP@10"] == "0.2500"
    (run / "plots").mkdir()
    Image.new("RGB", (4, 4)).save(run / "plots" / "per_category.png")
    with_plot = reports.report()
    assert [p.name for p, _ in with_plot.plots] == ["per_category.png"] and changed.plots == []
    (run / "plots" / "per_category.png").unlink()
    assert reports.report().plots == []


def test_a_runs_match_is_read_again_when_its_records_change(tmp_path, monkeypatch):
    """`list_runs` keeps each folder's match under the state of metrics.json and run_info.json (every page
    load lists the runs): after a record is replaced (atomically, same size), written or removed, the
    listing is what a cold read gives (the oracle: the memo emptied)."""
    from cir_demo.store import folders

    runs_root = tmp_path / "runs"
    run = runs_root / "20240101-000000-world"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text("model,mAP@10\nm,0.25\n")

    def record(name: str, fp: str) -> None:
        staged = run / f".{name}.tmp"
        staged.write_text(json.dumps({"benchmark_fingerprint": fp}))
        os.replace(staged, run / name)

    def listed() -> list:
        return [(r.label, r.matches) for r in list_runs("world", "fp1", runs_root)]

    def cold() -> list:
        monkeypatch.setattr(folders, "_MATCHES", folders.LRU(8))
        return listed()

    steps = [
        lambda: None,  # no record: matched by the folder's name
        lambda: record("run_info.json", "fp1"),
        lambda: record("run_info.json", "fp2"),  # same size, maybe the same mtime: another file
        lambda: (run / "run_info.json").unlink(),
        lambda: record("metrics.json", "fp1"),
    ]
    seen = []
    for step in steps:
        step()
        warm = listed()
        assert listed() == warm == cold(), step
        seen.append(warm)
    assert seen == [
        [(run.name, "name")],
        [(run.name, "fingerprint")],
        [],
        [(run.name, "name")],
        [(run.name, "fingerprint")],
    ]
