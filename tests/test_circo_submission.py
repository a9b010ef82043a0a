"""`submission --benchmark circo --split test`: the file CIRCO's evaluation server takes (miccunifi/CIRCO
README "Submission Format" and src/evaluation.py: {"<query id>": [top 50 COCO image ids as ints]}, keys
exactly 0..N-1), checked against a hand-made example."""

from __future__ import annotations

import json

import numpy as np

from cir_demo.cli import main


def circo_folder(root):
    """A CIRCO folder whose test split has three queries (no ground truths, as published), 60 corpus ids."""
    (root / "annotations").mkdir(parents=True)
    test = [
        {"id": i, "reference_img_id": 1000 + i, "relative_caption": f"caption {i}", "shared_concept": "a cat"}
        for i in range(3)
    ]
    (root / "annotations" / "test.json").write_text(json.dumps(test))
    (root / "corpus.txt").write_text("\n".join(str(1000 + i) for i in range(60)))
    return root


def test_circo_test_submission_is_the_servers_format(tmp_path):
    root = circo_folder(tmp_path / "CIRCO")
    run = {str(i): [str(1059 - j) for j in range(55)] for i in range(3)}  # 55 ids each: only the top 50 go
    run["1"] = [str(1000 + j) for j in range(60)]  # another order: kept as ranked
    (tmp_path / "mine.json").write_text(json.dumps(run))
    args = [
        "submission",
        "--benchmark",
        "circo",
        "--annotations",
        str(root),
        "--split",
        "test",
        "--corpus-ids",
        str(root / "corpus.txt"),
        "--results-json",
        str(tmp_path / "mine.json"),
        "--out",
        str(tmp_path / "sub"),
    ]
    assert main(args) == 0
    got = json.loads((tmp_path / "sub" / "circo_test_submission_mine.json").read_text())
    expected = {"0": list(range(1059, 1009, -1)), "1": list(range(1000, 1050)), "2": list(range(1059, 1009, -1))}
    assert got == expected
    assert all(type(x) is int for v in got.values() for x in v)  # COCO ids as JSON numbers, as the example file
    # what the server's evaluation.py asserts before scoring
    assert np.all(np.sort(np.array(list(got.keys()), dtype=int)) == np.arange(len(got)))


def test_a_query_without_ranking_is_refused_and_nothing_written(tmp_path, capsys):
    root = circo_folder(tmp_path / "CIRCO")
    (tmp_path / "part.json").write_text(json.dumps({"0": ["1001"], "2": ["1002"]}))
    assert (
        main(
            [
                "submission",
                "--benchmark",
                "circo",
                "--annotations",
                str(root),
                "--split",
                "test",
                "--corpus-ids",
                str(root / "corpus.txt"),
                "--results-json",
                str(tmp_path / "part.json"),
                "--out",
                str(tmp_path / "sub"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "1 queries have no ranking (e.g. 1)" in err and err.count("error:") == 1
    assert not (tmp_path / "sub" / "circo_test_submission_part.json").exists()


def test_the_test_split_is_refused_by_eval_with_the_way_to_the_server(tmp_path, capsys):
    root = circo_folder(tmp_path / "CIRCO")
    (tmp_path / "r.json").write_text(json.dumps({str(i): ["1001"] for i in range(3)}))
    assert (
        main(
            [
                "eval",
                "--benchmark",
                "circo",
                "--annotations",
                str(root),
                "--split",
                "test",
                "--corpus-ids",
                str(root / "corpus.txt"),
                "--results-json",
                str(tmp_path / "r.json"),
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "3 queries" in err and "submission --benchmark circo --split test" in err
