"""One registration per extension point, proved from outside the package.

This module defines a retriever family (embeddings from pixels through a fixed random projection),
a reranker backend (a colour judge reading a palette file), a benchmark (coloured shapes written to
a folder) and its metric family (reciprocal rank), registers each with one table row, and runs
`doctor`, `eval --dry-run` and `eval` on them with no other edit to cir_demo. The metrics of the
run are checked against a brute-force ranking and a reciprocal rank computed here.
"""

from __future__ import annotations

import hashlib
import json
import sys
import zlib
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd
import pytest

from cir_demo.benchmarks.failure_views import FailureViews
from cir_demo.benchmarks.families import MetricFamily
from cir_demo.benchmarks.registry import BenchmarkSpec
from cir_demo.benchmarks.schema import Benchmark, Judgments, Query
from cir_demo.rerank import LogitPairReranker
from cir_demo.retrievers.base import ComposedQuery, Retriever
from cir_demo.utils.needs import LocalFile

HERE = __name__  # what the table rows name: "this module:attribute"
COLORS = {"red": (210, 40, 40), "green": (40, 170, 60), "blue": (40, 70, 210), "yellow": (225, 205, 40)}
SHAPES = ("square", "disc")
SIDE = 24  # image side in pixels
PIXELS = 8  # the retriever reads an 8 x 8 thumbnail


# --------------------------------------------------------------------------- benchmark "toy-colors"
def draw(shape: str, color: str, variant: int) -> np.ndarray:
    """A coloured shape on grey, with per-image noise and offset (so no two images tie)."""
    rng = np.random.default_rng(zlib.crc32(f"{shape}-{color}-{variant}".encode()))
    img = np.full((SIDE, SIDE, 3), 128.0) + rng.normal(0, 12, (SIDE, SIDE, 3))
    yy, xx = np.mgrid[:SIDE, :SIDE]
    cy, cx = SIDE / 2 + rng.integers(-3, 4), SIDE / 2 + rng.integers(-3, 4)
    mask = (np.abs(yy - cy) < 7) & (np.abs(xx - cx) < 7) if shape == "square" else (yy - cy) ** 2 + (xx - cx) ** 2 < 64
    img[mask] = np.array(COLORS[color]) + rng.normal(0, 10, (int(mask.sum()), 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def write_toy(root: Path) -> None:
    """Images (PNG) and queries.json: "make it <colour>" from one shape to the same shape in that colour."""
    from PIL import Image

    (root / "images").mkdir(parents=True, exist_ok=True)
    for shape in SHAPES:
        for color in COLORS:
            for v in range(3):
                Image.fromarray(draw(shape, color, v)).save(root / "images" / f"{shape}-{color}-{v}.png")
    queries = []
    for shape in SHAPES:
        for source in COLORS:
            for target in COLORS:
                if target == source:
                    continue
                group = f"{shape}-{source}-to-{target}"
                for i, wording in enumerate((f"make it {target}", f"the same {shape} but {target}")):
                    queries.append(
                        {
                            "query_id": f"{group}-{i}",
                            "reference": f"{shape}-{source}-0",
                            "instruction": wording,
                            "group": group,
                            "shape": shape,
                            "positives": [f"{shape}-{target}-{v}" for v in range(3)],
                            "negatives": [
                                f"{other}-{target}-{v}" for other in SHAPES if other != shape for v in range(3)
                            ],
                        }
                    )
    (root / "queries.json").write_text(json.dumps(queries), encoding="utf-8")


def load_toy(root: str) -> Benchmark:
    from cir_demo.benchmarks.images import FolderImageStore

    root = Path(root)
    rows = json.loads((root / "queries.json").read_text(encoding="utf-8"))
    queries = [
        Query(
            r["query_id"],
            (r["reference"],),
            r["instruction"],
            r["group"],
            Judgments(tuple(r["positives"]), tuple(r["negatives"])),
            {"shape": r["shape"]},
        )
        for r in rows
    ]
    corpus = sorted(p.stem for p in (root / "images").glob("*.png"))
    return Benchmark(
        "toy-colors",
        "toy-rr",
        queries,
        corpus,
        images=FolderImageStore(root / "images", filename_pattern="{id}.png"),
        info={"index_name": "toy-colors"},
    )


# --------------------------------------------------------------------------- metric family "toy-rr"
OFFICIAL_COLUMNS = ["model", "MRR", "Hit@1"]


def per_query(run: Mapping[str, Sequence[str]], queries: Sequence[Query], **_: Any) -> pd.DataFrame:
    rows = []
    for q in queries:
        if q.query_id not in run:
            continue
        ranking, positives = list(run[q.query_id]), set(q.positives)
        first = next((r for r, image in enumerate(ranking, start=1) if image in positives), None)
        rows.append(
            {
                "query_id": q.query_id,
                "group_id": q.group_id,
                "scored": True,
                "RR": 1.0 / first if first else 0.0,
                "hit@1": float(first == 1),
            }
        )
    return pd.DataFrame(rows)


def aggregate(per_query_df: pd.DataFrame, n_queries_total: int) -> dict:
    return {
        "MRR": float(per_query_df["RR"].mean()),
        "Hit@1": float(per_query_df["hit@1"].mean()),
        "total_queries": int(n_queries_total),
        "coverage": len(per_query_df) / n_queries_total,
    }


def rank_plot(benchmark, evaluations, out_dir: Path) -> dict[str, Path]:
    from cir_demo.harness import charts

    names = [ev.name for ev in evaluations]
    path = charts.bar_chart(
        out_dir / "toy_mrr.png",
        names,
        {"MRR": [ev.metrics["MRR"] for ev in evaluations]},
        f"MRR: {benchmark.name}",
        "MRR",
    )
    return {"toy_mrr.png": path}


def first_hits_section(benchmark, evaluations, table: pd.DataFrame) -> str:
    return "## Toy first hits\n\n" + "\n".join(
        f"- {ev.name}: {int(ev.per_query['hit@1'].sum())} queries" for ev in evaluations
    )


def missed_first(per_query: pd.DataFrame, ctx) -> tuple[pd.Series, pd.DataFrame, pd.Series]:
    """The toy family's own failure sort: queries whose first positive is not at rank 1, lowest mean RR first."""
    rr = per_query.pivot_table(index="query_id", columns="run", values="RR", aggfunc="first")[list(ctx.runs)]
    mean = rr.mean(axis=1)
    return mean < 1, pd.DataFrame({"k0": mean}), mean.map(lambda v: f"mean RR {v:.3f}")


TOY_VIEWS = FailureViews(
    sorts=(),
    filters={"shape": "Shape"},
    extra_sorts={"missed_first": ("First positive not at rank 1", f"{HERE}:missed_first")},
)
TOY_FAMILY = MetricFamily(
    name="toy-rr",
    module=HERE,
    official_columns="OFFICIAL_COLUMNS",
    headline={"RR": "MRR", "hit@1": "Hit@1"},
    primary="RR",
    shown=("RR", "hit@1"),
    results_format="run-dict",
    plots=(f"{HERE}:rank_plot",),
    report_sections=(f"{HERE}:first_hits_section",),
    failure_views=f"{HERE}:TOY_VIEWS",
)
TOY_SPEC = BenchmarkSpec(
    "toy-colors",
    "coloured shapes written by a test",
    "toy-rr",
    f"{HERE}:load_toy",
    required=("root",),
    default_retrievers=("toy-projection",),
    default_reranker="toy-palette",
)


# --------------------------------------------------------------------------- retriever family "toy_projection"
PARAMS = {"projection": None, "text_weight": 0.5}


def validate(config: dict, where: str) -> None:
    if not isinstance(config["params"].get("projection"), str):
        raise ValueError(f"{where}: key 'params.projection' (a .npy file) is required")


def weights(config: dict) -> list:
    path = config["params"]["projection"]
    return [LocalFile(path, "toy projection matrix", f"write it with write_projection({path!r})")]


def write_projection(path: Path, dim: int = 32) -> None:
    rng = np.random.default_rng(7)
    np.save(path, rng.normal(size=(PIXELS * PIXELS * 3 + 64, dim)).astype(np.float32))


def pixel_features(image) -> np.ndarray:
    arr = np.asarray(image.convert("RGB").resize((PIXELS, PIXELS)), dtype=np.float32) / 255.0
    return (arr - 0.5).reshape(-1)


def word_features(text: str) -> np.ndarray:
    """A hashed bag of words (64 buckets)."""
    out = np.zeros(64, dtype=np.float32)
    for word in text.lower().split():
        out[zlib.crc32(word.encode()) % 64] += 1.0
    return out


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


class ProjectionRetriever(Retriever):
    """Image: [pixels, 0] @ P; query: [pixels of the reference, text_weight * words] @ P; unit rows."""

    def __init__(self, name: str, projection: np.ndarray, text_weight: float, digest: str):
        self.name, self.projection, self.text_weight = name, projection, text_weight
        self.dim, self.device = projection.shape[1], "cpu"
        self.spec = {"family": "toy_projection", "projection_sha256": digest, "text_weight": text_weight}
        self.n_pixels = PIXELS * PIXELS * 3

    def encode_images(self, images, batch_size=None) -> np.ndarray:
        x = np.stack([pixel_features(im) for im in images])
        return _unit(x @ self.projection[: self.n_pixels])

    def encode_queries(self, queries: Sequence[ComposedQuery], batch_size=None) -> np.ndarray:
        x = np.stack(
            [
                np.concatenate([pixel_features(q.reference_images[0]), self.text_weight * word_features(q.text)])
                for q in queries
            ]
        )
        return _unit(x @ self.projection)


def load(config: dict, device: str, progress: bool = False, **_: Any) -> ProjectionRetriever:
    path = Path(config["params"]["projection"])
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return ProjectionRetriever(config["name"], np.load(path), config["params"].get("text_weight", 0.5), digest)


# --------------------------------------------------------------------------- reranker backend "toy-palette"
PALETTE = ""  # set by the fixture: the palette file the backend reads by default


class PaletteReranker(LogitPairReranker):
    """Yes when the candidate's most saturated pixels are near the colour the instruction names."""

    FLAGS = ()

    @classmethod
    def weights(cls, **kw) -> list:
        path = kw.get("palette") or PALETTE
        return [LocalFile(path, "toy palette", f"write it with write_palette({path!r})")]

    def __init__(self, palette: str | None = None, device: str | None = None):
        path = Path(palette or PALETTE)
        self.palette = {k: np.array(v, dtype=np.float64) for k, v in json.loads(path.read_text()).items()}
        self.spec = {"backend": "toy-palette", "palette_sha256": hashlib.sha256(path.read_bytes()).hexdigest()}

    def score_logits(self, request, candidate_images) -> np.ndarray:
        named = [w for w in request.instruction.lower().split() if w in self.palette]
        out = []
        for image in candidate_images:
            yes = -np.linalg.norm(dominant_color(image) - self.palette[named[-1]]) / 40.0 if named else 0.0
            out.append((yes, 0.0))
        return np.array(out)


def dominant_color(image) -> np.ndarray:
    arr = np.asarray(image.convert("RGB"), dtype=np.float64).reshape(-1, 3)
    saturation = arr.max(axis=1) - arr.min(axis=1)
    return arr[saturation >= np.quantile(saturation, 0.75)].mean(axis=0)


def write_palette(path: Path) -> None:
    path.write_text(json.dumps({k: list(v) for k, v in COLORS.items()}), encoding="utf-8")


# --------------------------------------------------------------------------- registration: one row per table
@pytest.fixture()
def toy(tmp_path, monkeypatch):
    from cir_demo.benchmarks import families, registry as benchmarks
    from cir_demo.rerank import BACKENDS
    from cir_demo.retrievers import registry as retrievers

    for env in ("CIR_DEMO_CACHE", "CIR_DEMO_INDEXES", "CIR_DEMO_RUNS"):
        monkeypatch.setenv(env, str(tmp_path / env.lower()))
    write_toy(tmp_path / "toy")
    write_projection(tmp_path / "projection.npy")
    write_palette(tmp_path / "palette.json")
    monkeypatch.setattr(sys.modules[HERE], "PALETTE", str(tmp_path / "palette.json"))

    monkeypatch.setitem(retrievers.FAMILIES, "toy_projection", HERE)
    monkeypatch.setitem(BACKENDS, "toy-palette", f"{HERE}:PaletteReranker")
    monkeypatch.setitem(families.FAMILIES, "toy-rr", TOY_FAMILY)
    monkeypatch.setitem(benchmarks.BENCHMARKS, "toy-colors", TOY_SPEC)
    retrievers.register_config(
        {
            "name": "toy-projection",
            "family": "toy_projection",
            "params": {"projection": str(tmp_path / "projection.npy")},
        },
        replace=True,
    )
    yield tmp_path
    retrievers.unregister("toy-projection")


def cli(argv: list[str]) -> int:
    from cir_demo.cli import main

    return main(argv)


def test_doctor_asks_the_registered_modules(toy, capsys):
    flags = ["--benchmark", "toy-colors", "--root", str(toy / "toy")]
    assert cli(["doctor", *flags]) == 0
    out = capsys.readouterr().out
    assert "benchmark toy-colors" in out and f"{len(load_toy(toy / 'toy').queries)} queries" in out
    assert "toy projection matrix: weights at" in out and "toy palette: weights at" in out

    (toy / "palette.json").unlink()  # the backend's declared weights are gone: the doctor says so, with the fix
    assert cli(["doctor", *flags]) == 1
    out = capsys.readouterr().out
    assert "reranker toy-palette" in out and "missing" in out and "write_palette(" in out


def brute_force_rankings(toy: Path, bench: Benchmark) -> dict[str, list[str]]:
    """The toy retriever's top 50 per query, by exhaustive dot products (the oracle of the index)."""
    retriever = load({"name": "toy-projection", "params": {"projection": str(toy / "projection.npy")}}, "cpu")
    corpus = bench.corpus_ids
    emb = retriever.encode_images([bench.images.open(i) for i in corpus])
    queries = [ComposedQuery((bench.images.open(q.reference_ids[0]),), q.instruction) for q in bench.queries]
    scores = retriever.encode_queries(queries) @ emb.T
    return {q.query_id: [corpus[j] for j in np.argsort(-s, kind="stable")[:50]] for q, s in zip(bench.queries, scores)}


def test_dry_run_and_eval_on_the_registered_modules(toy, capsys):
    flags = ["--benchmark", "toy-colors", "--root", str(toy / "toy")]
    assert cli(["eval", *flags, "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "toy-projection" in plan and "toy-palette" in plan
    assert not (toy / "cir_demo_runs").exists() or not any((toy / "cir_demo_runs").iterdir())

    out = toy / "run"
    assert cli(["eval", *flags, "--out", str(out), "--n-boot", "20", "--rerank-top-n", "24"]) == 0
    got = {r["metrics"]["model"]: r["metrics"] for r in json.loads((out / "metrics.json").read_text())["runs"]}
    bench = load_toy(toy / "toy")

    # oracle: brute-force ranking of the same embeddings, then the palette's order of the top 24 (the whole
    # corpus: the colour judge alone decides), scored here
    first = brute_force_rankings(toy, bench)
    palette = {k: np.array(v, dtype=np.float64) for k, v in COLORS.items()}
    reranked = {}
    for q in bench.queries:
        target = palette[q.instruction.split()[-1]]
        reranked[q.query_id] = sorted(
            first[q.query_id][:24], key=lambda i: np.linalg.norm(dominant_color(bench.images.open(i)) - target)
        )

    def mrr(run):
        ranks = [next((r for r, i in enumerate(run[q.query_id], 1) if i in q.positives), None) for q in bench.queries]
        return np.mean([1.0 / r if r else 0.0 for r in ranks]), np.mean([r == 1 for r in ranks])

    for name, run in (("toy-projection", first), ("toy-projection+rerank", reranked)):
        want_mrr, want_hit = mrr(run)
        # means of the per-query values as stored (6 decimals: store/score.py ROW_DECIMALS)
        assert got[name]["MRR"] == pytest.approx(want_mrr, abs=5e-7 + 1e-12)
        assert got[name]["Hit@1"] == pytest.approx(want_hit, abs=1e-12)
    assert got["toy-projection+rerank"]["MRR"] > got["toy-projection"]["MRR"] + 0.1  # the colour judge finds the colour

    # the family's choices: results format, its plot and report section, its official columns first
    results = json.loads((out / "results" / "toy-projection.json").read_text())
    assert isinstance(results[bench.queries[0].query_id], dict)  # run-dict: {image: score}
    assert (out / "plots" / "toy_mrr.png").is_file() and not (out / "plots" / "precision_vs_safety.png").exists()
    report = (out / "report.md").read_text()
    assert "## Toy first hits" in report and "Linguistic sensitivity" not in report
    assert "| toy-projection | " in report.split("## Reranking (top 24)")[1]  # the generic reranking section
    assert list(pd.read_csv(out / "metrics.csv").columns[:3]) == OFFICIAL_COLUMNS


def test_a_family_module_must_declare_what_it_needs(monkeypatch):
    """A family row pointing at a module without `weights` is refused when a config names it, naming
    what is missing (no family silently reports "nothing to fetch")."""
    from cir_demo.retrievers import registry as retrievers

    monkeypatch.setitem(retrievers.FAMILIES, "no_needs", "cir_demo.retrievers.recipes")
    with pytest.raises(
        retrievers.ConfigError, match=r"cir_demo.retrievers.recipes does not define PARAMS, load, weights"
    ):
        retrievers.validate_config({"name": "x", "family": "no_needs"}, "test")


def test_the_app_reports_and_explores_the_toy_family(toy):
    """The toy family in the app with two results files as columns (`--runs`): each column's metrics are the
    family's per-query ones (= --eval's per_query.csv), the Report shows the family's aggregates (MRR,
    Hit@1) for the eval run and the files, with a paired comparison of each, and the Explore tab sorts by
    the family's own sort within its metadata filter."""
    from cir_demo.explorer import ServiceConfig, build_service
    from cir_demo.ui import explore, report

    bench = load_toy(toy / "toy")
    runs = {}
    for name, flip in (("pos-first", False), ("neg-first", True)):
        run = {}
        for i, q in enumerate(bench.queries):  # the positives first on every query but every third one
            head = list(q.negatives if flip and i % 3 == 0 else q.positives)
            rest = [c for c in bench.corpus_ids if c not in head]
            run[q.query_id] = {img: float(len(bench.corpus_ids) - r) for r, img in enumerate(head + rest)}
        runs[name] = toy / f"{name}.json"
        runs[name].write_text(json.dumps(run), encoding="utf-8")
    out = toy / "files-eval"
    assert (
        cli(
            [
                "eval",
                "--benchmark",
                "toy-colors",
                "--root",
                str(toy / "toy"),
                "--results-json",
                *map(str, runs.values()),
                "--out",
                str(out),
                "--n-boot",
                "50",
            ]
        )
        == 0
    )
    service = build_service(
        ServiceConfig(
            benchmark="toy-colors",
            benchmark_kwargs={"root": str(toy / "toy")},
            reranker="none",
            runs=tuple((n, str(p)) for n, p in runs.items()),
            warm_thumbnails=False,
        )
    )
    try:
        rows = pd.read_csv(out / "per_query.csv").set_index(["run", "query_id"])
        q = bench.queries[0]
        for col in service.compare(q.query_id, list(runs)).columns:
            assert col.metrics == {
                "RR": rows.loc[(col.retriever, q.query_id), "RR"],
                "hit@1": rows.loc[(col.retriever, q.query_id), "hit@1"],
            }
        shown = report.show_report(service)
        assert list(shown["metrics"]["value"].columns)[:3] == ["Run", "MRR", "Hit@1"]
        own = shown["own_metrics"]["value"].set_index("Run")
        evaluated = pd.read_csv(out / "metrics.csv").set_index("model")
        for name in runs:  # "value [95% interval]", as the eval run's table
            assert own.loc[name, "MRR"].startswith(f"{evaluated.loc[name, 'MRR']:.4f} [")
        assert set(shown["paired"]["value"]["metric"]) == {"MRR", "Hit@1"}
        assert list(pd.read_csv(out / "paired.csv")["metric"]) == ["MRR", "Hit@1"]  # every headline aggregate
        # the pair opens Explore sorted "diff:A,B": that sort is the explorer's
        assert "diff:pos-first,neg-first" in [v for _, v in shown["pair"]["choices"]]
        # the Explore tab's sort menu offers the family's own sort, and its list honours the metadata filter:
        # disc queries missed by a run, lowest mean RR (of the two files, computed here) first
        offered = {value: label for label, value in explore.sort_choices(service)}
        assert offered["missed_first"] == "First positive not at rank 1"
        mean_rr = {}
        for q in bench.queries:
            rr = []
            for path in runs.values():
                scored = json.loads(path.read_text(encoding="utf-8"))[q.query_id]
                ranking = sorted(scored, key=lambda img: -scored[img])
                rr.append(next(1.0 / r for r, img in enumerate(ranking, 1) if img in q.positives))
            mean_rr[q.query_id] = float(np.mean(rr))
        order = [q.query_id for q in bench.queries]
        want = sorted(
            (q for q, v in mean_rr.items() if v < 1 and q.startswith("disc-")),
            key=lambda q: (mean_rr[q], order.index(q)),
        )
        listed = explore.list_queries(service, "", {"shape": "disc"}, "missed_first")
        assert listed["ids"] == want and len(want) > 2 and len({mean_rr[q] for q in want}) > 1
    finally:
        service.engine.close()


def test_the_explorer_offers_the_family_s_sort_filter_and_metrics(toy):
    """The app over the toy benchmark with the toy retriever (the test above: with results files): the
    family's own sort (declared in its FailureViews, ordered as a brute-force ranking scored here says),
    its metadata as a filter, its metrics under each column, and no PinPoint sort although the toy
    queries have negatives (the family declares none)."""
    from cir_demo.engine import RetrievalEngine
    from cir_demo.explorer import ExplorerService

    bench = load_toy(toy / "toy")
    engine = RetrievalEngine(bench, ["toy-projection"], progress=False)
    try:
        svc = ExplorerService(bench, engine, ["toy-projection"], reranker=None, thumbnails_on_disk=False)
        assert svc.filter_choices()["shape"] == ["disc", "square"]  # the filter's use: the test above
        offered = {c.name: c for c in svc.sorts()}
        assert offered["missed_first"].available and offered["missed_first"].label == "First positive not at rank 1"
        assert "negatives" not in offered and "spread" not in offered
        first = brute_force_rankings(toy, bench)
        rr = {
            q.query_id: next((1.0 / r for r, i in enumerate(first[q.query_id], 1) if i in q.positives), 0.0)
            for q in bench.queries
        }
        order = [q.query_id for q in bench.queries]
        want = sorted((k for k, v in rr.items() if v < 1), key=lambda k: (rr[k], order.index(k)))
        listed = svc.sorted_queries("missed_first", limit=1000)
        assert (
            list(listed.rows["query"]) == want and len({rr[k] for k in want}) > 2
        )  # distinct RRs: the order says something
        col = svc.compare(want[0], k=5).columns[0]
        assert col.metrics == {"RR": pytest.approx(rr[want[0]]), "hit@1": 0.0}
    finally:
        engine.close()
