"""`python app.py --eval --results-json` end to end for every metric family, on fixtures carrying every
metadata field the family reads: no traceback, report.md, breakdowns, plots; `model` first in metrics.csv.

EDIR runs are also scored by pytrec_eval (the official EDIR code's scorer) as the oracle.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import pytrec_eval

import app
from cir_demo.benchmarks.schema import BREAKDOWN_FIELDS, Benchmark, Judgments, Query
from cir_demo.results import write_results


def write_jsonl(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def run_eval(argv, out: Path, capsys) -> tuple[pd.DataFrame, str]:
    rc = app.main(["--eval", *argv, "--out", str(out), "--n-boot", "30"])
    err = capsys.readouterr().err
    assert rc == 0, err
    metrics = pd.read_csv(out / "metrics.csv")
    assert metrics.columns[0] == "model"
    assert (out / "report.md").stat().st_size > 0 and (out / "per_query.csv").exists()
    return metrics, err


def breakdown_fields(out: Path) -> set[str]:
    return set(pd.read_csv(out / "breakdowns.csv")["field"])


def plots(out: Path) -> set[str]:
    return {p.name for p in (out / "plots").glob("*.png") if p.stat().st_size > 1000}


# --------------------------------------------------------------------------- PinPoint
from pinpoint_images import SCHEMA as PINPOINT_SCHEMA, sig  # noqa: E402  (the official parquet schema)


def test_pinpoint_family_end_to_end(tmp_path, capsys):
    rows = []
    tones = ["LIGHTEST", "SECOND_LIGHTEST", "SECOND_DARKEST", "DARKEST", "UNKNOWN"]
    for g in range(6):
        pos, neg = [sig(100 + 3 * g), sig(101 + 3 * g)], [sig(200 + g), None]
        two = g % 3 == 0
        for p in range(3):
            text = ["make it blue", "a blue one?", "Blue, please, with more detail than before"][p]
            rows.append(
                {
                    "query_id": f"query_{len(rows) + 1:05d}",
                    "query_image_signature": sig(g + 1),
                    "query_image_signature2": sig(50 + g) if two else "None",
                    "instruction": text,
                    "positive_candidates": pos,
                    "negative_candidates": neg,
                    "token_count": len(text.split()),
                    "length_category": ["short", "medium", "long"][p],
                    "is_question": text.endswith("?"),
                    "is_imperative": p == 0,
                    "is_single": not two,
                    "query_category": ["Swap", "Add"][g % 2],
                    "skin_tone_bucket": tones[g % 5],
                    "l1_interest": ["Art", "Home Decor", "Food"][g % 3],
                }
            )
    parquet = tmp_path / "pinpoint_licensed.parquet"
    pq.write_table(
        pa.table({f.name: [r[f.name] for r in rows] for f in PINPOINT_SCHEMA}, schema=PINPOINT_SCHEMA), parquet
    )
    corpus = [sig(i) for i in range(1, 260)]
    (tmp_path / "index_signatures.txt").write_text("\n".join(corpus))
    run_a = {
        r["query_id"][6:]: {"retrieved_items": [r["positive_candidates"][0], sig(220), sig(200 + i % 6)]}
        for i, r in enumerate(rows)
    }
    (tmp_path / "model_a.json").write_text(json.dumps(run_a))
    # the same kind of ranking as a TREC run file
    lines = [
        f"{r['query_id'][6:]} Q0 {d} {k + 1} {10 - k} b"
        for i, r in enumerate(rows)
        for k, d in enumerate([sig(230), r["positive_candidates"][1], r["positive_candidates"][0]])
    ]
    (tmp_path / "model_b.trec").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    metrics, _ = run_eval(
        [
            "--benchmark",
            "pinpoint",
            "--annotations",
            str(parquet),
            "--corpus-ids",
            str(tmp_path / "index_signatures.txt"),
            "--results-json",
            str(tmp_path / "model_a.json"),
            str(tmp_path / "model_b.trec"),
        ],
        out,
        capsys,
    )
    assert set(metrics["model"]) == {"model_a", "model_b"}
    b = metrics.set_index("model").loc["model_b"]
    assert b["precision@1"] == 0 and b["mAP@10"] == pytest.approx((1 / 2 + 2 / 3) / 2, abs=1e-4)
    assert {
        "is_single",
        "intent_category",
        "domain",
        "skin_tone_bucket",
        "is_question",
        "is_imperative",
        "length_category",
    } <= breakdown_fields(out)
    assert {
        "precision_vs_safety.png",
        "paraphrase_sensitivity.png",
        "single_vs_two_image.png",
        "per_category.png",
    } <= plots(out)
    assert (out / "paired.csv").exists()


# --------------------------------------------------------------------------- CIRCO
def test_circo_family_end_to_end(tmp_path, capsys):
    aspects = ["cardinality", "addition", "negation", "direct_addressing"]
    entries = [
        {
            "reference_img_id": 1000 + i,
            "target_img_id": 2000 + i,
            "relative_caption": f"change {i}",
            "shared_concept": f"concept {i}",
            "gt_img_ids": [2000 + i, 3000 + i],
            "id": i,
            "semantic_aspects": [aspects[i % 4], aspects[(i + 1) % 4]],
        }
        for i in range(8)
    ]
    ann = tmp_path / "annotations" / "val.json"
    ann.parent.mkdir()
    ann.write_text(json.dumps(entries))
    ids = sorted({x for e in entries for x in (e["reference_img_id"], *e["gt_img_ids"])} | {9, 10, 11})
    (tmp_path / "corpus.txt").write_text("\n".join(map(str, ids)))
    (tmp_path / "circo_a.json").write_text(json.dumps({str(i): [str(3000 + i), "9", str(2000 + i)] for i in range(8)}))
    (tmp_path / "circo_b.json").write_text(json.dumps({str(i): {"10": 0.9, str(2000 + i): 0.5} for i in range(8)}))
    out = tmp_path / "out"
    metrics, _ = run_eval(
        [
            "--benchmark",
            "circo",
            "--annotations",
            str(ann),
            "--corpus-ids",
            str(tmp_path / "corpus.txt"),
            "--results-json",
            str(tmp_path / "circo_a.json"),
            str(tmp_path / "circo_b.json"),
        ],
        out,
        capsys,
    )
    m = metrics.set_index("model")
    assert m.loc["circo_a", "mAP@5"] == pytest.approx((1 + 2 / 3) / 2, abs=1e-4)
    assert m.loc["circo_b", "Recall@5"] == 1.0
    assert {"semantic_aspects", "is_single"} <= breakdown_fields(out)
    assert "single_vs_two_image.png" not in plots(out)  # every CIRCO query has one reference: no "versus" plot
    # paired comparisons for every headline metric of the family, the primary first; diff = mean b - mean a
    paired = pd.read_csv(out / "paired.csv")
    # (named as metrics.csv names them; a p-value below 1/n_boot written as that bound)
    assert list(paired["metric"]) == ["mAP@10", "mAP@5", "mAP@25", "mAP@50", "Recall@10"]
    per_query = pd.read_csv(out / "per_query.csv").pivot(index="query_id", columns="run")
    column = {"mAP@10": "AP@10", "mAP@5": "AP@5", "mAP@25": "AP@25", "mAP@50": "AP@50", "Recall@10": "Recall@10"}
    for row in paired.itertuples():
        oracle = (per_query[(column[row.metric], "circo_b")] - per_query[(column[row.metric], "circo_a")]).mean()
        assert row.a == "circo_a" and row.b == "circo_b" and row.diff == pytest.approx(oracle, abs=1e-5)
        p = str(row.p_value)
        assert row.lo <= row.diff <= row.hi and (p.startswith("< ") or 0 < float(p) <= 1)
    assert "| circo_a | circo_b | Recall@10 |" in (out / "report.md").read_text()


# --------------------------------------------------------------------------- EDIR
SUBCATEGORIES = ["color", "count", "remove", "material"]


def edir_folder(root: Path) -> None:
    corpus = [{"id": f"c{i}.png", "image": f"c{i}.png"} for i in range(20)]
    queries, instances = [], []
    for i in range(10):
        queries.append(
            {
                "id": f"q{i}",
                "image": f"src{i}.png",
                "text": f"edit number {i}",
                "metadata": {"subcategory": SUBCATEGORIES[i % 4], "category": "attribute" if i % 2 else "object"},
            }
        )
        pos = [] if i == 9 else [f"c{i}.png"]  # one query without positives
        instances.append({"qid": f"q{i}", "pos": pos, "neg": [f"c{10 + i}.png"]})
    write_jsonl(root / "corpus.jsonl", corpus)
    write_jsonl(root / "queries.jsonl", queries)
    write_jsonl(root / "instances.jsonl", instances)


def pytrec_recall(root: Path, predictions: dict) -> dict[str, float]:
    """What EDIR's official main.py computes: qrels from instances.jsonl, pytrec_eval recall_1/3; mean per query."""
    qrels = {}
    for line in (root / "instances.jsonl").read_text().splitlines():
        item = json.loads(line)
        qrels[item["qid"]] = {p: 1 for p in item["pos"]}
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"recall_1", "recall_3"}).evaluate(predictions)
    return {m: sum(v[m] for v in per_query.values()) / len(per_query) for m in ("recall_1", "recall_3")} | {
        "n": len(per_query)
    }


def test_edir_family_end_to_end_official_predictions_and_pinpoint_format(tmp_path, capsys):
    root = tmp_path / "edir"
    edir_folder(root)
    # official shape: {qid: {corpus id: score}}, ties included (q1: the positive ties with a negative)
    predictions = {f"q{i}": {f"c{j}.png": float((j * 7 + i) % 5) for j in range(20)} for i in range(10)}
    (tmp_path / "predictions.json").write_text(json.dumps(predictions))
    # the crash case: PinPoint-format rankings on a folder with metadata.subcategory
    bench_run = {f"q{i}": [f"c{(i + s) % 20}.png" for s in range(3)] for i in range(10)}
    (tmp_path / "as_pinpoint.json").write_text(json.dumps({k: {"retrieved_items": v} for k, v in bench_run.items()}))
    out = tmp_path / "out"
    metrics, err = run_eval(
        [
            "--benchmark",
            "edir",
            "--root",
            str(root),
            "--results-json",
            str(tmp_path / "predictions.json"),
            str(tmp_path / "as_pinpoint.json"),
        ],
        out,
        capsys,
    )
    m = metrics.set_index("model")
    oracle = pytrec_recall(root, predictions)
    assert m.loc["predictions", "Recall@1"] == pytest.approx(oracle["recall_1"], abs=1e-4)
    assert m.loc["predictions", "Recall@3"] == pytest.approx(oracle["recall_3"], abs=1e-4)
    assert m.loc["predictions", "n_scored"] == oracle["n"] == 9
    assert m.loc["as_pinpoint", "Recall@1"] == pytest.approx(1.0)
    assert (m["n_queries_without_positives"] == 1).all()
    assert "1 queries have no positives" in (out / "report.md").read_text()
    assert {"edit_subcategory", "edit_category", "is_single"} <= breakdown_fields(out)
    assert "per_subcategory.png" in plots(out)
    assert "single_vs_two_image.png" not in plots(out)  # every query has one reference: no "versus" plot


def test_edir_repository_sample_folder(tmp_path, capsys):
    """The layout of the EDIR repository's dataset/test: three queries, two with "pos": [], no metadata."""
    root = tmp_path / "test"
    write_jsonl(
        root / "queries.jsonl",
        [{"id": f"query_{i}", "image": f"00000000{i}.jpg", "text": f"find {i}", "modality": "image"} for i in range(3)],
    )
    write_jsonl(
        root / "corpus.jsonl",
        [{"id": f"corpus_{i}", "image": f"0000001{i}.jpg", "modality": "image"} for i in range(5)],
    )
    write_jsonl(
        root / "instances.jsonl",
        [
            {"qid": "query_0", "pos": ["corpus_0"], "neg": []},
            {"qid": "query_1", "pos": [], "neg": []},
            {"qid": "query_2", "pos": [], "neg": []},
        ],
    )
    predictions = {f"query_{q}": {f"corpus_{c}": 1.0 - 0.1 * ((c + q) % 5) for c in range(5)} for q in range(3)}
    (tmp_path / "test_predictions.json").write_text(json.dumps(predictions))
    out = tmp_path / "out"
    metrics, err = run_eval(
        ["--benchmark", "edir", "--root", str(root), "--results-json", str(tmp_path / "test_predictions.json")],
        out,
        capsys,
    )
    row = metrics.iloc[0]
    oracle = pytrec_recall(root, predictions)
    assert oracle["n"] == 1 and row["n_scored"] == 1 and row["n_queries_without_positives"] == 2
    assert row["Recall@1"] == oracle["recall_1"] == 1.0
    assert "2 queries have no positives" in err


# --------------------------------------------------------------------------- our JSONL format
def test_jsonl_family_end_to_end(tmp_path, capsys):
    from cir_demo.benchmarks.jsonl import export_jsonl_benchmark

    corpus = [f"img{i}" for i in range(30)]
    queries = []
    for g in range(6):
        j = Judgments((f"img{g}", f"img{g + 10}"), (f"img{g + 20}",))
        for p in range(2):
            meta = {
                "intent_category": ["Swap", "Add"][g % 2],
                "edit_subcategory": SUBCATEGORIES[g % 4],
                "edit_category": ["attribute", "object"][g % 2],
                "domain": ["Art", "Food"][p],
                "skin_tone_bucket": ["DARKEST", "LIGHTEST", None][g % 3],
                "is_question": p == 1,
                "is_imperative": p == 0,
                "length_category": ["short", "long"][p],
                "semantic_aspects": ["addition", "negation"][: 1 + g % 2],
                "category": ["dress", "shirt"][g % 2],
                "img_set_size": 6,
                "sole_target": g % 2 == 0,
            }
            refs = ("ref", f"ref{g}") if g % 3 == 0 else (f"ref{g}",)
            queries.append(Query(f"q{g}_{p}", refs, f"text {g} {p}", f"g{g}", j, meta))
    assert set(BREAKDOWN_FIELDS) <= set(queries[0].meta) | {"is_single"}
    bench = Benchmark("mine", "pinpoint", queries, corpus)
    root = export_jsonl_benchmark(bench, tmp_path / "bench", image_mode="none")
    run = {q.query_id: [q.positives[0], q.negatives[0], "img29"] for q in queries}
    write_results(tmp_path / "mine.json", bench, run)
    out = tmp_path / "out"
    metrics, _ = run_eval(
        ["--benchmark", "jsonl", "--root", str(root), "--results-json", str(tmp_path / "mine.json")], out, capsys
    )
    assert metrics.loc[0, "precision@1"] == 1.0
    assert set(BREAKDOWN_FIELDS) <= breakdown_fields(out)
    assert {"precision_vs_safety.png", "per_category.png", "single_vs_two_image.png"} <= plots(out)
