"""CIRR: the adapter on the repository's layout, and parity of `--eval` with CLIP4Cir's
`compute_cirr_val_metrics`, re-implemented below from its description (array operations over a full
ranking matrix), on the offline world exported to CIRR's files with a tied-score run dict."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from cir_demo.benchmarks.cirr import export_cirr, load_cirr
from cir_demo.benchmarks.schema import BenchmarkError
from cir_demo.cli import main
from cir_demo.metrics import CoverageWarning, cirr
from cir_demo.results.cirr_submission import write_cirr_submission

# The CIRR README's example entry, plus a second pair of the same set.
SPLIT = {
    f"test1-{k}": f"./dev/test1-{k}.png"
    for k in ("147-1-img1", "1001-2-img0", "83-1-img1", "359-0-img1", "906-0-img1", "83-0-img1", "7-0-img0")
}
MEMBERS = [
    "test1-147-1-img1",
    "test1-1001-2-img0",
    "test1-83-1-img1",
    "test1-359-0-img1",
    "test1-906-0-img1",
    "test1-83-0-img1",
]
VAL = [
    {
        "pairid": 12063,
        "reference": "test1-147-1-img1",
        "target_hard": "test1-83-0-img1",
        "target_soft": {"test1-83-0-img1": 1.0},
        "caption": "remove all but one dog and add a woman hugging   it",
        "img_set": {"id": 1, "members": MEMBERS, "reference_rank": 3, "target_rank": 4},
    },
    {
        "pairid": 12064,
        "reference": "test1-83-1-img1",
        "target_hard": "test1-359-0-img1",
        "target_soft": {"test1-359-0-img1": 1.0, "test1-906-0-img1": 0.5},
        "caption": "make it a puppy",
        "img_set": {"id": 1, "members": MEMBERS},
    },
]


def cirr_folder(root: Path, entries=VAL, split="val", images=SPLIT) -> Path:
    (root / "captions").mkdir(parents=True, exist_ok=True)
    (root / "image_splits").mkdir(parents=True, exist_ok=True)
    (root / "captions" / f"cap.rc2.{split}.json").write_text(json.dumps(entries))
    (root / "image_splits" / f"split.rc2.{split}.json").write_text(json.dumps(images))
    return root


def test_cirr_reads_the_repository_layout(tmp_path):
    bench = load_cirr(cirr_folder(tmp_path))
    assert [q.query_id for q in bench.queries] == ["12063", "12064"]
    q = bench.query("12063")
    assert q.reference_ids == ("test1-147-1-img1",) and q.target_id == "test1-83-0-img1"
    assert q.positives == ("test1-83-0-img1",) and q.judgments.subset == tuple(MEMBERS)
    assert q.instruction == "remove all but one dog and add a woman hugging   it"  # kept as written
    assert dict(q.meta) | {} == {
        "img_set_size": 6,
        "img_set_id": "1",
        "length_category": "medium",
        "sole_target": True,
        "is_single": True,
    }
    assert bench.query("12064").meta["sole_target"] is False  # target_soft marks another image 0.5
    assert bench.corpus_ids == list(SPLIT)
    assert bench.images.local_path("test1-7-0-img0") is None
    (tmp_path / "img_raw" / "dev").mkdir(parents=True)
    (tmp_path / "img_raw" / "dev" / "test1-7-0-img0.png").write_bytes(b"x")
    assert (
        load_cirr(tmp_path).images.local_path("test1-7-0-img0") == tmp_path / "img_raw" / "dev" / "test1-7-0-img0.png"
    )


def test_cirr_errors_name_entry_and_field(tmp_path):
    bad = [
        dict(VAL[0], reference="nowhere"),
        dict(VAL[1], target_hard="test1-7-0-img0"),
        dict(VAL[1]),
        dict(VAL[0], pairid=1, caption=" "),
        dict(VAL[0], pairid=2, target_hard="test1-147-1-img1"),
    ]
    with pytest.raises(BenchmarkError) as exc:
        load_cirr(cirr_folder(tmp_path, bad))
    text = str(exc.value)
    assert "entry 0 (pairid 12063), field 'reference': image 'nowhere' is not in the image split" in text
    assert "entry 1 (pairid 12064), field 'target_hard': the target is not a member of img_set" in text
    assert "entry 2 (pairid 12064), field 'pairid': duplicate pair id (first at entry 1)" in text
    assert "entry 3 (pairid 1), field 'caption': empty caption (kept" in text  # a warning, listed after the errors
    assert "entry 4 (pairid 2), field 'target_hard': the target is the reference image" in text
    with pytest.raises(BenchmarkError, match="split must be one of val, test1"):
        load_cirr(tmp_path, split="train")
    with pytest.raises(BenchmarkError, match="cap.rc2.test1.json.*captions file is missing"):
        load_cirr(tmp_path, split="test1")


def test_subset_ranks_unseen_members_last_and_the_target_after_them(tmp_path):
    bench_queries = load_cirr(cirr_folder(tmp_path)).queries
    q = bench_queries[0]  # reference test1-147-1-img1, target test1-83-0-img1, 5 other members
    full = ["test1-7-0-img0", "test1-147-1-img1", "test1-906-0-img1", "test1-83-0-img1", "test1-83-1-img1"]
    with pytest.warns(cirr.UnseenSetMemberWarning):
        agg, df = cirr.evaluate({"12063": full}, [q])
    row = df.iloc[0]
    # reference deleted: target at rank 3; within the set after 906-0 -> rank 2
    assert row["target_rank"] == 3 and row["subset_rank"] == 2 and row["n_unseen_set_members"] == 2
    assert (row["Recall@1"], row["Recall@5"], row["Recall_subset@1"], row["Recall_subset@2"]) == (0, 1, 0, 1)
    # the target unseen: ranked after every other member (5th of 5), whatever the set's order says
    with pytest.warns(cirr.ShortRankingWarning), pytest.warns(cirr.UnseenSetMemberWarning):
        _, df = cirr.evaluate({"12063": ["test1-7-0-img0"]}, [q])
    assert df.iloc[0]["subset_rank"] == 5 and df.iloc[0]["Recall_subset@3"] == 0
    assert np.isnan(df.iloc[0]["target_rank"])
    with pytest.raises(BenchmarkError, match="query 12063, field 'ranking': the ranking repeats an image"):
        cirr.evaluate({"12063": ["a", "a"]}, [q])


# --------------------------------------------------------------------------- parity through --eval
def clip4cir_cirr(index_names, scores, reference_names, target_names, group_members):
    """CLIP4Cir's protocol on a full score matrix: sort (score descending, equal scores by name
    descending, the order a run dict is read in), delete the reference, label, mask to the set."""
    names = np.array(index_names)
    by_name_desc = np.argsort(np.argsort([n.encode() for n in index_names]))  # rank of each name, ascending
    order = np.lexsort((np.broadcast_to(-by_name_desc, scores.shape), -scores), axis=1)
    sorted_names = names[order]
    n = len(target_names)
    keep = sorted_names != np.array(reference_names)[:, None]
    sorted_names = sorted_names[keep].reshape(n, len(index_names) - 1)
    labels = sorted_names == np.array(target_names)[:, None]
    group_mask = (sorted_names[..., None] == np.array(group_members)[:, None, :]).sum(-1).astype(bool)
    group_labels = labels[group_mask].reshape(n, -1)
    assert (labels.sum(1) == 1).all() and (group_labels.sum(1) == 1).all()
    out = {f"Recall@{k}": labels[:, :k].sum() / n for k in (1, 5, 10, 50)}
    out.update({f"Recall_subset@{k}": group_labels[:, :k].sum() / n for k in (1, 2, 3)})
    return out, sorted_names, sorted_names[group_mask].reshape(n, -1)


@pytest.fixture(scope="module")
def world_cirr(tmp_path_factory):
    from cir_demo.world import load_world

    root = tmp_path_factory.mktemp("world_cirr")
    export_cirr(load_world(size="tiny", progress=False), root, skip_two_image=True)
    return root


def tied_scores(bench, seed):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 11, size=(len(bench.queries), len(bench.corpus_ids))).astype(float) / 10  # many ties
    for i, q in enumerate(bench.queries):  # targets at the top for some, so every cutoff matters; the
        if i % 3 == 0:  # reference above them for some, so its deletion matters
            scores[i, bench.corpus_ids.index(q.target_id)] = 1.1
        if i % 2 == 0:
            scores[i, bench.corpus_ids.index(q.reference_ids[0])] = 1.2
    return scores


@pytest.mark.parametrize("seed", [0, 1])
def test_eval_matches_clip4cir_on_the_exported_world(world_cirr, tmp_path, seed):
    bench = load_cirr(world_cirr)
    assert len(bench.queries) > 100 and all(len(q.judgments.subset) >= 2 for q in bench.queries)
    scores = tied_scores(bench, seed)
    run = {q.query_id: dict(zip(bench.corpus_ids, map(float, row))) for q, row in zip(bench.queries, scores)}
    (tmp_path / "run.json").write_text(json.dumps(run))
    assert (
        main(
            [
                "eval",
                "--benchmark",
                "cirr",
                "--root",
                str(world_cirr),
                "--results-json",
                str(tmp_path / "run.json"),
                "--out",
                str(tmp_path / "out"),
                "--n-boot",
                "0",
                "--no-plots",
            ]
        )
        == 0
    )
    got = json.loads((tmp_path / "out" / "metrics.json").read_text())["runs"][0]["metrics"]
    ref, _, _ = clip4cir_cirr(
        bench.corpus_ids,
        scores,
        [q.reference_ids[0] for q in bench.queries],
        [q.target_id for q in bench.queries],
        [list(q.judgments.subset) for q in bench.queries],
    )
    for name, value in ref.items():
        assert abs(got[name] - value) <= 1e-9, name
    assert got[cirr.AVERAGE] == pytest.approx((ref["Recall@5"] + ref["Recall_subset@1"]) / 2, abs=1e-12)
    assert got["n_queries_with_unseen_set_members"] == 0 and got["n_short_rankings"] == 0
    assert 0 < ref["Recall@50"] < 1 and 0 < ref["Recall_subset@1"] < 1  # the numbers compared are informative
    csv = (tmp_path / "out" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert csv[:8] == ["model", *cirr.OFFICIAL_COLUMNS]
    report = (tmp_path / "out" / "report.md").read_text()
    assert (
        "### By `img_set_size`" in report and "### By `sole_target`" in report and "### By `length_category`" in report
    )


def test_missing_queries_unknown_ids_short_and_empty_runs_are_reported(world_cirr, tmp_path, capsys):
    bench = load_cirr(world_cirr)
    qs = bench.queries
    run = {q.query_id: [q.reference_ids[0], "ghost", *bench.corpus_ids[:3]] for q in qs[:-5]}  # 5 missing
    (tmp_path / "part.json").write_text(json.dumps(run))
    assert (
        main(
            [
                "eval",
                "--benchmark",
                "cirr",
                "--root",
                str(world_cirr),
                "--results-json",
                str(tmp_path / "part.json"),
                "--out",
                str(tmp_path / "o1"),
                "--n-boot",
                "0",
                "--no-plots",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "5 benchmark queries have no entry" in err
    assert f"{len(qs) - 5} retrieved ids are not in the corpus" in err
    assert "rankings lack some members of their img_set" in err
    assert "shorter than 50 once the reference is deleted" in err
    got = json.loads((tmp_path / "o1" / "metrics.json").read_text())["runs"][0]["metrics"]
    assert got["total_queries"] == len(qs) - 5 and got["coverage"] == pytest.approx((len(qs) - 5) / len(qs))
    (tmp_path / "empty.json").write_text("{}")
    assert (
        main(
            [
                "eval",
                "--benchmark",
                "cirr",
                "--root",
                str(world_cirr),
                "--results-json",
                str(tmp_path / "empty.json"),
                "--out",
                str(tmp_path / "o2"),
                "--n-boot",
                "0",
                "--no-plots",
            ]
        )
        == 0
    )
    assert f"{len(qs)} benchmark queries have no entry (coverage 0.0%)" in capsys.readouterr().err
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoverageWarning)
        with pytest.raises(CoverageWarning):
            cirr.evaluate({}, qs)


# --------------------------------------------------------------------------- test1 submission
def test_test1_run_writes_both_server_files(world_cirr, tmp_path, capsys):
    test = load_cirr(world_cirr, split="test1")
    assert all(q.target_id is None for q in test.queries)
    val = load_cirr(world_cirr)
    scores = tied_scores(val, 3)
    run = {q.query_id: dict(zip(test.corpus_ids, map(float, row))) for q, row in zip(test.queries, scores)}
    (tmp_path / "mine.json").write_text(json.dumps(run))
    assert (
        main(
            [
                "submission",
                "--benchmark",
                "cirr",
                "--root",
                str(world_cirr),
                "--split",
                "test1",
                "--results-json",
                str(tmp_path / "mine.json"),
                "--out",
                str(tmp_path / "sub"),
            ]
        )
        == 0
    )
    recall = json.loads((tmp_path / "sub" / "recall_submission_mine.json").read_text())
    subset = json.loads((tmp_path / "sub" / "recall_subset_submission_mine.json").read_text())
    assert (recall.pop("version"), recall.pop("metric")) == ("rc2", "recall")
    assert (subset.pop("version"), subset.pop("metric")) == ("rc2", "recall_subset")
    _, sorted_names, sorted_group = clip4cir_cirr(
        val.corpus_ids,
        scores,
        [q.reference_ids[0] for q in val.queries],
        [q.target_id for q in val.queries],
        [list(q.judgments.subset) for q in val.queries],
    )
    assert list(recall) == [q.query_id for q in test.queries]
    for i, q in enumerate(test.queries):
        assert recall[q.query_id] == sorted_names[i, :50].tolist()
        assert subset[q.query_id] == sorted_group[i, :3].tolist()
    # a second submission of the same name replaces the files only with --overwrite
    first = (tmp_path / "sub" / "recall_submission_mine.json").read_bytes()
    (tmp_path / "mine.json").write_text(
        json.dumps(
            {
                q.query_id: dict(zip(test.corpus_ids, map(float, row)))
                for q, row in zip(test.queries, tied_scores(val, 4))
            }
        )
    )
    submit = [
        "submission",
        "--benchmark",
        "cirr",
        "--root",
        str(world_cirr),
        "--split",
        "test1",
        "--results-json",
        str(tmp_path / "mine.json"),
        "--out",
        str(tmp_path / "sub"),
    ]
    capsys.readouterr()
    assert main(submit) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: {tmp_path / 'sub' / name}: exists; add --overwrite to replace it, or name a new file"
        for name in ("recall_submission_mine.json", "recall_subset_submission_mine.json")
    ]
    assert (tmp_path / "sub" / "recall_submission_mine.json").read_bytes() == first
    assert main([*submit, "--overwrite"]) == 0
    assert (tmp_path / "sub" / "recall_submission_mine.json").read_bytes() != first
    # scoring test1 asks for the submission instead of a number
    assert (
        main(
            [
                "eval",
                "--benchmark",
                "cirr",
                "--root",
                str(world_cirr),
                "--split",
                "test1",
                "--results-json",
                str(tmp_path / "mine.json"),
                "--out",
                str(tmp_path / "o"),
                "--n-boot",
                "0",
                "--no-plots",
            ]
        )
        == 2
    )
    assert "python -m cir_demo submission" in capsys.readouterr().err
    with pytest.raises(BenchmarkError, match="1 pairs have no ranking"):
        write_cirr_submission(test, {q.query_id: [] for q in test.queries[1:]}, tmp_path, "x")
