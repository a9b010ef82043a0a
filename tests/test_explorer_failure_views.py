"""The failure sorts of every family (cir_demo/explorer/failures.py, declared in
cir_demo/benchmarks/failure_views.py) and `python -m cir_demo failures`, against naive loops:
CIRR's target rank after deleting the reference (CLIP4Cir's protocol) on the world exported to
CIRR, FashionIQ's after cutting to the category's gallery, CIRCO's missed ground truths, EDIR's hard
negatives, i-CIR's instances; the A-vs-B order with hand-built ties; tiles scoped by the protocol."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cir_demo.benchmarks.families import metric_family
from cir_demo.benchmarks.schema import Judgments, Query
from cir_demo.cli import main
from cir_demo.explorer import ServiceError, SortContext, query_table, sort_choices, sort_rows
from cir_demo.explorer.views import REFERENCE_MARK, protocol_scope

from test_explorer_metric_oracle import world_export


def write_ranked(path: Path, rankings: dict[str, list[str]]) -> Path:
    """A run dict whose scores fall strictly down each ranking (so the file's order is the ranking)."""
    path.write_text(json.dumps({q: {x: float(len(r) - i) for i, x in enumerate(r)} for q, r in rankings.items()}))
    return path


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def shuffled_rankings(bench, seed: int) -> dict[str, list[str]]:
    rng = np.random.default_rng(seed)
    out = {}
    for i, q in enumerate(bench.queries):
        r = list(rng.permutation(bench.corpus_ids))
        if i % 3 == seed % 3:  # the reference first for some, so its deletion matters
            r.remove(q.reference_ids[0])
            r.insert(0, q.reference_ids[0])
        if i % 4 == 0:  # the target near the top for some, so Recall@1 varies
            r.remove(q.target_id)
            r.insert(int(rng.integers(0, 3)), q.target_id)
        out[q.query_id] = r
    return out


# --------------------------------------------------------------------------- CIRR on the exported world
@pytest.fixture(scope="module")
def world_cirr(tmp_path_factory):
    return world_export(tmp_path_factory, "cirr", groups=30)


def test_cirr_diff_sort_ranks_targets_as_clip4cir_and_a_s_wins_first(world_cirr, tmp_path):
    root, bench = world_cirr
    a, b = shuffled_rankings(bench, 0), shuffled_rankings(bench, 1)
    fa, fb = write_ranked(tmp_path / "A.json", a), write_ranked(tmp_path / "B.json", b)
    out = tmp_path / "f.csv"
    assert (
        main(
            [
                "failures",
                "--benchmark",
                "cirr",
                "--root",
                str(root),
                "--results-json",
                str(fa),
                str(fb),
                "--sort",
                "diff:A,B",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = read_rows(out)

    def naive_rank(ranking, q):  # CLIP4Cir: the reference is deleted, then the target's place is its rank
        kept = [x for x in ranking if x != q.reference_ids[0]]
        return kept.index(q.target_id) + 1

    order = [q.query_id for q in bench.queries]
    ranks = {n: {q.query_id: naive_rank(r[q.query_id], q) for q in bench.queries} for n, r in (("A", a), ("B", b))}
    r1 = {n: {k: float(v == 1) for k, v in ranks[n].items()} for n in ranks}
    expected = sorted(
        order, key=lambda k: (-(r1["A"][k] - r1["B"][k]), -(ranks["B"][k] - ranks["A"][k]), order.index(k))
    )
    assert [r["query_id"] for r in rows] == expected
    for r in rows:
        for n in ("A", "B"):
            assert int(r[f"{n}/target_rank"]) == ranks[n][r["query_id"]]
            assert float(r[f"{n}/Recall@1"]) == r1[n][r["query_id"]]
    assert list(rows[0])[:2] == ["query_id", "why"] and "A/Recall_subset@1" in rows[0]
    assert float(rows[0]["A/Recall@1"]) == 1.0 and float(rows[0]["B/Recall@1"]) == 0.0  # the data has such queries

    assert (
        main(
            [
                "failures",
                "--benchmark",
                "cirr",
                "--root",
                str(root),
                "--results-json",
                str(fa),
                str(fb),
                "--sort",
                "reference_first",
                "--top",
                "3",
                "--out",
                str(out),
                "--overwrite",
            ]
        )
        == 0
    )
    first = {
        q.query_id
        for q in bench.queries
        if a[q.query_id][0] == q.reference_ids[0] or b[q.query_id][0] == q.reference_ids[0]
    }
    got = [r["query_id"] for r in read_rows(out)]
    assert len(got) == min(3, len(first)) and set(got) <= first


def test_unknown_sort_lists_what_the_benchmark_offers(world_cirr, tmp_path, capsys):
    root, bench = world_cirr
    fa = write_ranked(tmp_path / "A.json", shuffled_rankings(bench, 0))
    fb = write_ranked(tmp_path / "B.json", shuffled_rankings(bench, 1))
    assert (
        main(
            [
                "failures",
                "--benchmark",
                "cirr",
                "--root",
                str(root),
                "--results-json",
                str(fa),
                str(fb),
                "--sort",
                "negatives",
                "--out",
                str(tmp_path / "f.csv"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown sort 'negatives'" in err
    for name in ("benchmark", "worst", "diff:A,B", "target_rank", "reference_first", "subset_rank"):
        assert name in err
    assert not (tmp_path / "f.csv").exists()
    assert (
        main(
            [
                "failures",
                "--benchmark",
                "cirr",
                "--root",
                str(root),
                "--results-json",
                str(fa),
                "--sort",
                "diff:A,B",
                "--out",
                str(tmp_path / "f.csv"),
            ]
        )
        == 2
    )  # one run: no pair
    assert "two different runs of A" in capsys.readouterr().err
    assert (
        main(
            ["failures", "--benchmark", "cirr", "--root", str(root), "--results-json", str(fa), "--out", str(tmp_path)]
        )
        == 2
    )  # a folder: refused, nothing written or removed
    assert "is a folder" in capsys.readouterr().err and fa.is_file()
    assert main(["failures", "--benchmark", "circo", "--results-json", str(fa), "--out", str(tmp_path / "f.csv")]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: benchmark 'circo' needs annotations (--annotations); "
        "it takes annotations (optional: image_dir, corpus_ids, split)"
    )
    with pytest.raises(SystemExit) as done:
        main(["failures", "--help"])
    assert done.value.code == 0
    assert "cirr: target_rank, reference_first, subset_rank" in " ".join(capsys.readouterr().out.split())


def test_cirr_tiles_leave_the_reference_out_and_mark_the_img_set(world_cirr):
    _, bench = world_cirr
    q = bench.queries[0]
    others = [x for x in bench.corpus_ids if x not in (q.reference_ids[0], q.target_id)]
    ids = [others[0], q.reference_ids[0], q.target_id, *others[1:5]]
    kept, marks, note = protocol_scope("reference_deleted", q, ids)
    shown = [ids[i] for i in kept]
    assert q.reference_ids[0] not in shown and shown.index(q.target_id) + 1 == 2  # the official rank
    assert "ranked 2" in note and "deletes" in note
    members = set(q.judgments.subset) - {q.reference_ids[0]}
    assert {x for x in shown if marks.get(x) == ("img_set",)} == members & set(shown)


# --------------------------------------------------------------------------- FashionIQ
@pytest.fixture(scope="module")
def world_fiq(tmp_path_factory):
    return world_export(tmp_path_factory, "fashioniq", groups=30)


def test_fashioniq_target_rank_is_the_rank_within_the_category_gallery(world_fiq, tmp_path):
    root, bench = world_fiq
    a = shuffled_rankings(bench, 2)
    fa = write_ranked(tmp_path / "A.json", a)
    out = tmp_path / "f.csv"
    assert (
        main(
            [
                "failures",
                "--benchmark",
                "fashioniq",
                "--root",
                str(root),
                "--results-json",
                str(fa),
                "--sort",
                "target_rank",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = {r["query_id"]: r for r in read_rows(out)}
    naive = {}
    for q in bench.queries:
        cut = [x for x in a[q.query_id] if x in q.judgments.gallery]
        naive[q.query_id] = cut.index(q.target_id) + 1  # the official rank at any depth
    assert any(v > 50 for v in naive.values())  # ranks beyond the largest cutoff are ranks too
    assert set(rows) == {k for k, v in naive.items() if v != 1}  # the sort keeps the targets not first
    assert any(v is not None and v < len(bench.corpus_ids) // 3 for v in naive.values())
    for k, r in rows.items():
        assert r["A/target_rank"] == str(naive[k]) and "not in the ranking" not in r["why"]
        assert float(r["A/Recall@10"]) == float(naive[k] <= 10)
        assert float(r["A/Recall@50"]) == float(naive[k] <= 50)
    worst = [naive[k] for k in rows]
    assert worst == sorted(worst, reverse=True)  # lowest target first
    q = bench.queries[0]
    kept, _, note = protocol_scope("gallery", q, a[q.query_id][:50])
    shown = [a[q.query_id][i] for i in kept]
    assert set(shown) <= q.judgments.gallery and "outside the query's gallery" in note
    assert (q.target_id in shown) == (naive[q.query_id] <= len(shown))  # ranked within the top 50 or not
    if q.target_id in shown:
        assert shown.index(q.target_id) + 1 == naive[q.query_id]


def test_a_ranked_reference_is_marked_where_the_protocol_keeps_it(world_fiq):
    _, bench = world_fiq
    q = next(q for q in bench.queries if q.reference_ids[0] in q.judgments.gallery)  # FashionIQ ranks it
    outside = next(x for x in bench.corpus_ids if x not in q.judgments.gallery)
    others = [x for x in q.judgments.gallery if x not in (q.reference_ids[0], q.target_id)][:3]
    ids = [outside, q.reference_ids[0], q.target_id, *others]
    kept, marks, _ = protocol_scope("gallery", q, ids)
    assert [ids[i] for i in kept] == ids[1:] and marks == {q.reference_ids[0]: (REFERENCE_MARK,)}
    assert protocol_scope("gallery", q, [q.target_id, *others])[1] == {}  # not ranked: nothing marked
    flat = make_query("p1", positives=["a"], refs=("r1", "r2"))  # no scope (PinPoint): every reference
    assert protocol_scope(None, flat, ["a", "r2", "b", "r1"])[1] == {"r2": (REFERENCE_MARK,), "r1": (REFERENCE_MARK,)}
    cirr_kept, cirr_marks, _ = protocol_scope("reference_deleted", flat, ["a", "r1"])  # CIRR deletes it instead
    assert cirr_kept == [0] and REFERENCE_MARK not in str(cirr_marks)


# --------------------------------------------------------------------------- hand-built frames, every family
def make_query(qid, positives=(), negatives=(), refs=("r1",), group="g1", target=None, **meta):
    return Query(
        qid,
        tuple(refs),
        f"instruction {qid}",
        group,
        Judgments(tuple(positives), tuple(negatives)),
        meta,
        target_id=target,
    )


class Bench:
    def __init__(self, queries):
        self.queries = queries


def context(family: str, queries, runs, modality=None, reranked=False) -> SortContext:
    return SortContext(
        metric_family(family),
        query_table(Bench(queries)),
        list(runs),
        modality or {r: "composed" for r in runs},
        reranked,
    )


def frame(family: str, rankings: dict[str, dict[str, list[str]]], queries) -> pd.DataFrame:
    """The runs' per-query rows by the family's official per-query code (what the store scores with)."""
    mod = metric_family(family).metrics_module()
    return pd.concat([mod.per_query(r, queries).assign(run=n) for n, r in rankings.items()], ignore_index=True)


def order(family, queries, rankings, sort, **kw) -> list[str]:
    ctx = context(family, queries, [n for n in rankings if not n.endswith("+rerank")], **kw)
    rows, _ = sort_rows(ctx.table, frame(family, rankings, queries), sort, ctx)
    return list(rows["query_id"])


def test_diff_ties_break_by_the_finer_measure_then_benchmark_order():
    # PinPoint: primary AP@10, finer precision@10. q1..q4 tie on the AP gain (0); q2 has A's better P@10.
    qs = [make_query(f"q{i}", positives=["p1", "p2"], group=f"g{i}") for i in range(1, 6)]
    a = {"q1": ["x", "p1"], "q2": ["x", "p1", "p2"], "q3": ["p1"], "q4": ["x"], "q5": ["p1", "p2"]}
    b = {"q1": ["x", "p1"], "q2": ["x", "p1"], "q3": ["p1"], "q4": ["x"], "q5": ["x"]}
    got = order("pinpoint", qs, {"A": a, "B": b}, "diff:A,B")
    assert got == ["q5", "q2", "q1", "q3", "q4"]  # A's gain first; equal gains: A's P@10 edge; then order
    assert order("pinpoint", qs, {"A": a, "B": b}, "diff:B,A") == ["q1", "q3", "q4", "q2", "q5"]
    assert order("pinpoint", qs, {"A": a, "B": b}, "all_fail") == ["q4"]


def test_circo_missed_ground_truths_against_a_loop():
    qs = [
        make_query(f"q{i}", positives=[f"g{i}{j}" for j in range(i + 1)], target=f"g{i}0", group=f"g{i}")
        for i in range(4)
    ]
    run = {"q0": ["g00"], "q1": ["x", "g10"], "q2": ["x"] * 0 + ["y"], "q3": ["g30", "g31", "z", "g32"]}
    missed = {q.query_id: min(len(q.positives), 10) - len(set(q.positives) & set(run[q.query_id][:10])) for q in qs}
    got = order("circo", qs, {"A": run}, "missed_gt")
    assert got == sorted([k for k, v in missed.items() if v > 0], key=lambda k: -missed[k])


def test_edir_hard_negative_sort_names_the_subcategory():
    qs = [
        make_query(f"q{i}", positives=[f"p{i}"], negatives=[f"n{i}"], edit_subcategory=s)
        for i, s in enumerate(["color", "count", "remove"])
    ]
    a = {"q0": ["n0", "p0"], "q1": ["p1"], "q2": ["n2"]}
    b = {"q0": ["n0"], "q1": ["p1"], "q2": ["p2"]}
    ctx = context("edir", qs, ["A", "B"])
    rows, _ = sort_rows(ctx.table, frame("edir", {"A": a, "B": b}, qs), "hard_negative", ctx)
    assert list(rows["query_id"]) == ["q0", "q2"]  # both runs before one
    assert rows["why"].iloc[0] == "hard negative at rank 1 for A, B (color)"


def test_icir_worst_instances_first():
    qs = [
        make_query(f"q{i}", positives=[f"p{i}"], group=inst, instance=inst)
        for i, inst in enumerate(["mug", "mug", "temple", "temple"])
    ]
    run = {"q0": ["p0"], "q1": ["x", "p1"], "q2": ["x", "x2", "p2"], "q3": ["p3"]}
    ap = {"q0": 1.0, "q1": 0.25, "q2": 1 / 6, "q3": 1.0}  # trapezoid AP ((0 + 1/(r+1)) / 2 at rank r > 0), up to 1e-5
    inst = {"mug": (ap["q0"] + ap["q1"]) / 2, "temple": (ap["q2"] + ap["q3"]) / 2}
    assert inst["temple"] < inst["mug"]
    assert order("icir", qs, {"A": run}, "worst_instances") == ["q2", "q3", "q1", "q0"]


def test_sorts_offered_only_with_data_and_why_not():
    single = [make_query(f"q{i}", positives=["p"], group=f"g{i}", target="p") for i in range(3)]
    names = {c.name: c for c in sort_choices(context("cirr", single, ["A", "B"]))}
    assert names["diff:A,B"].available and names["diff:B,A"].available
    assert not names["rerank_helped"].available and "no reranker" in names["rerank_helped"].reason
    assert not names["shortcut"].available and not names["subset_rank"].available
    assert "negatives" not in names and "target_rank" in names
    pin = {
        c.name: c for c in sort_choices(context("pinpoint", single, ["A", "img"], {"A": "composed", "img": "image"}))
    }
    assert pin["shortcut"].available
    assert not pin["spread"].available and pin["spread"].reason == "every intent has one phrasing"
    assert not pin["two_image"].available and not pin["negatives"].available
    with pytest.raises(ServiceError, match="two different runs"):
        sort_rows(query_table(Bench(single)), None, "diff:A,Z", context("cirr", single, ["A", "B"]))


def test_rerank_and_shortcut_sorts_on_the_primary_metric():
    qs = [make_query(f"q{i}", positives=["p"], group=f"g{i}") for i in range(3)]
    base = {"q0": ["x", "p"], "q1": ["p"], "q2": ["x"]}
    rr = {"q0": ["p"], "q1": ["x", "p"], "q2": ["x"]}
    img = {"q0": ["x"], "q1": ["p"], "q2": ["p"]}
    runs = {"A": base, "A+rerank": rr, "img": img}
    mod = {"A": "composed", "img": "image"}
    assert order("pinpoint", qs, runs, "rerank_helped", modality=mod, reranked=True) == ["q0"]
    assert order("pinpoint", qs, runs, "rerank_hurt", modality=mod, reranked=True) == ["q1"]
    assert order("pinpoint", qs, runs, "shortcut", modality=mod) == ["q2"]
