"""A complete stored `--eval` run is reused for every benchmark family: an app started on a benchmark
whose run is on disk starts no background run (before it, the same app would start one), and the
background run gets every benchmark flag, generated from the benchmark's declaration."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from PIL import Image

import app
from cir_demo.benchmarks.cli_args import LOADER_ARGS, add_benchmark_arguments, benchmark_flags, benchmark_kwargs
from cir_demo.benchmarks.registry import BENCHMARKS, load_benchmark
from cir_demo.explorer import precompute
from cir_demo.explorer.precompute import PrecomputeJob, complete_run


# --------------------------------------------------------------------------- one small benchmark per family
def _pinpoint(root: Path) -> dict:
    from pinpoint_images import write_pinpoint

    parquet, ids, _ = write_pinpoint(root)
    return {"annotations": str(parquet), "corpus_ids": str(ids)}


def _circo(root: Path) -> dict:
    entries = [
        {
            "reference_img_id": 100 + i,
            "target_img_id": 200 + i,
            "relative_caption": f"change {i}",
            "shared_concept": "thing",
            "gt_img_ids": [200 + i, 300 + i],
            "id": i,
            "semantic_aspects": ["addition"],
        }
        for i in range(4)
    ]
    (root / "annotations").mkdir(parents=True)
    (root / "annotations" / "val.json").write_text(json.dumps(entries))
    ids = sorted({x for e in entries for x in (e["reference_img_id"], *e["gt_img_ids"])} | {7, 8})
    (root / "corpus.txt").write_text("\n".join(map(str, ids)))
    return {"annotations": str(root / "annotations" / "val.json"), "corpus_ids": str(root / "corpus.txt")}


def _edir(root: Path) -> dict:
    from test_eval_families import edir_folder

    edir_folder(root)
    return {"root": str(root)}


def _cirr(root: Path) -> dict:
    from test_benchmarks_cirr import cirr_folder

    return {"root": str(cirr_folder(root)), "split": "val"}


def _fashioniq(root: Path) -> dict:
    from test_benchmarks_fashioniq import DRESS, GALLERIES, SHIRT, TOPTEE, fiq_folder

    return {"root": str(fiq_folder(root, {"dress": DRESS, "shirt": SHIRT, "toptee": TOPTEE}, GALLERIES))}


def _icir(root: Path) -> dict:
    from test_benchmarks_icir import make_icir

    make_icir(root)
    return {"root": str(root)}


def _jsonl(root: Path) -> dict:
    from cir_demo.benchmarks.jsonl import export_jsonl_benchmark
    from cir_demo.benchmarks.schema import Benchmark, Judgments, Query

    corpus = [f"img{i}" for i in range(8)]
    queries = [
        Query(f"q{g}_{p}", (f"img{g}",), f"text {g} {p}", f"g{g}", Judgments((f"img{g + 4}",), ()), {})
        for g in range(3)
        for p in range(2)
    ]
    return {
        "root": str(
            export_jsonl_benchmark(Benchmark("mine", "pinpoint", queries, corpus), root / "b", image_mode="none")
        )
    }


FAMILY_BENCHMARKS = {
    "pinpoint": _pinpoint,
    "circo": _circo,
    "edir": _edir,
    "cirr": _cirr,
    "fashioniq": _fashioniq,
    "icir": _icir,
    "jsonl": _jsonl,
}


def test_every_declared_family_is_covered_here():
    assert {s.name for s in BENCHMARKS.values() if s.generated is None} == set(FAMILY_BENCHMARKS)


@pytest.fixture
def stored_run_setup(tmp_path, monkeypatch):
    """(benchmark name, loader keywords, retriever name, runs folder) for a rankings file registered as a
    precomputed retriever; the data folders point into tmp_path."""
    from cir_demo.retrievers import registry

    for var, sub in (("CIR_DEMO_RUNS", "runs"), ("CIR_DEMO_CACHE", "cache"), ("CIR_DEMO_INDEXES", "indexes")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    registered = []

    def make(name: str):
        kwargs = FAMILY_BENCHMARKS[name](tmp_path / name)
        bench = load_benchmark(name, **kwargs)
        corpus = list(bench.corpus_ids)
        # every query ranks the corpus, rotated per query so the runs differ
        run = {
            q.query_id: {"retrieved_items": corpus[i % len(corpus) :] + corpus[: i % len(corpus)]}
            for i, q in enumerate(bench.queries)
        }
        path = tmp_path / f"{name}-rankings.json"
        path.write_text(json.dumps(run))
        retriever = f"stored-{name}"
        registry.register_config(
            {
                "name": retriever,
                "family": "precomputed",
                "model": "rankings made elsewhere",
                "params": {"path": str(path), "format": "pinpoint"},
            },
            replace=True,
        )
        registered.append(retriever)
        return name, kwargs, retriever, tmp_path / "runs"

    yield make
    for r in registered:
        registry.unregister(r)


@pytest.mark.parametrize("family", sorted(FAMILY_BENCHMARKS))
def test_an_app_on_a_benchmark_with_a_complete_stored_run_starts_no_background_run(
    stored_run_setup, family, monkeypatch, capsys
):
    from cir_demo.explorer import ServiceConfig, build_service

    name, kwargs, retriever, runs = stored_run_setup(family)
    service = build_service(
        ServiceConfig(
            benchmark=name, benchmark_kwargs=kwargs, retrievers=(retriever,), reranker="none", warm_thumbnails=False
        )
    )
    flags = benchmark_flags(name, kwargs)
    launched = []
    monkeypatch.setattr(PrecomputeJob, "_launch_or_follow", lambda self, *a, **k: launched.append(a))
    PrecomputeJob(flags, runs_root=runs).start_for(service)
    assert complete_run(service) is None and len(launched) == 1  # nothing stored yet: the app would compute it

    out = runs / f"20990101-000000-{name}"
    # these fixtures have no image files; the pre-run check and the engine open the reference images
    monkeypatch.setattr("cir_demo.preflight.run.images_for_run", lambda bench, args, stream=None: bench)
    monkeypatch.setattr(
        "cir_demo.benchmarks.images.FolderImageStore._open",
        lambda self, image_id: Image.new("RGB", (8, 8), (128, 128, 128)),
    )
    assert (
        app.main(
            [
                "--eval",
                *flags,
                "--retrievers",
                retriever,
                "--rerank",
                "none",
                "--n-boot",
                "20",
                "--no-plots",
                "--out",
                str(out),
            ]
        )
        == 0
    ), capsys.readouterr().err
    assert complete_run(service) == out
    job = PrecomputeJob(flags, runs_root=runs)
    job.start_for(service)
    assert len(launched) == 1 and job._proc is None
    assert job.status().state == "done" and out.name in job.status().text()
    service.engine.close()


# --------------------------------------------------------------------------- the background run's flags
def _flag_values(spec) -> dict:
    """A value for every loader argument of `spec` that has a command-line flag."""
    values = {"size": "tiny", "seed": 3, "split": "test1"}
    return {k: values.get(k, f"/data/{k}") for k in spec.arguments if k in LOADER_ARGS}


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_the_background_runs_flags_carry_every_declared_argument(name):
    parser = argparse.ArgumentParser()
    add_benchmark_arguments(parser)
    spec = BENCHMARKS[name]
    kwargs = _flag_values(spec)
    argv = benchmark_flags(name, kwargs, limit=4)
    parsed = parser.parse_args(argv)
    assert parsed.benchmark == name and parsed.limit == 4
    assert benchmark_kwargs(parsed) == kwargs  # the child loads exactly what the app loaded
    if name == "cirr":
        assert argv[argv.index("--split") + 1] == "test1"


def test_a_loader_argument_no_flag_sets_is_refused_by_name():
    with pytest.raises(ValueError, match="'categories' has no command-line flag"):
        benchmark_flags("fashioniq", {"root": "/x", "categories": "dress"})
    with pytest.raises(ValueError, match="does not take split"):
        benchmark_flags("edir", {"root": "/x", "split": "val"})


def test_the_app_hands_its_benchmark_flags_to_the_background_run(tmp_path, monkeypatch):
    """`python app.py --benchmark cirr --split test1 ...`: the job's eval command line has --split test1."""
    import cir_demo.ui.app as ui_app
    from test_benchmarks_cirr import cirr_folder

    root = str(cirr_folder(tmp_path / "cirr", split="test1"))
    seen = {}

    class Stop(Exception):
        pass

    def record(argv, enabled=True):
        seen["argv"] = list(argv)
        raise Stop

    monkeypatch.setattr(precompute, "PrecomputeJob", record)
    with pytest.raises(Stop):
        ui_app.main(
            [
                "--benchmark",
                "cirr",
                "--root",
                root,
                "--split",
                "test1",
                "--limit",
                "3",
                "--retrievers",
                "world-clip-text",
            ]
        )
    assert seen["argv"] == ["--benchmark", "cirr", "--root", root, "--split", "test1", "--limit", "3"]
