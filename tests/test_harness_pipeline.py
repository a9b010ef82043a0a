"""`--eval` end to end on the tiny world with tiny real (randomly initialised) retrievers."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd
import pytest

from cir_demo.harness import cli as eval_cli


@pytest.fixture(scope="module")
def tiny_retrievers(tmp_path_factory):
    """Two recipes of one tiny open_clip model, with an indexes folder of this module's: the reranking
    test serves its first stage from the fusion index the first test built (when it ran first), instead
    of encoding the corpus again with the same weights."""
    from cir_demo.retrievers import registry
    from cir_demo.testing.tiny_retrievers import build_tiny_open_clip, tiny_open_clip_config

    folder = tmp_path_factory.mktemp("tiny_retrievers")
    mp = pytest.MonkeyPatch()
    mp.setenv("CIR_DEMO_INDEXES", str(folder / "indexes"))
    weights = build_tiny_open_clip(folder)
    names = []
    for recipe in ("early_fusion", "image_only"):
        name = f"tiny-{recipe}"
        registry.register_config(tiny_open_clip_config(weights, name, recipe=recipe), replace=True)
        names.append(name)
    yield names
    for n in names:
        registry.unregister(n)
    mp.undo()


def parse(argv):
    p = argparse.ArgumentParser()
    eval_cli.add_arguments(p)
    return p.parse_args(argv)


def test_eval_runs_retrievers_writes_results_and_matches_brute_force(tmp_path, tiny_retrievers):
    out = tmp_path / "run"
    args = parse(
        [
            "--world-size",
            "tiny",
            "--retrievers",
            ",".join(tiny_retrievers),
            "--rerank",
            "none",
            "--out",
            str(out),
            "--n-boot",
            "50",
            "--no-plots",
        ]
    )
    assert eval_cli.run(args) == 0
    metrics = pd.read_csv(out / "metrics.csv")
    assert set(metrics["model"]) == set(tiny_retrievers)
    info = json.loads((out / "run_info.json").read_text())
    assert set(info["retrievers"]) == set(tiny_retrievers) and info["benchmark"] == "world"

    # Oracle: the fusion run equals a brute-force NumPy ranking with the same model.
    from cir_demo.engine import RetrievalEngine
    from cir_demo.world import load_world

    bench = load_world(size="tiny")
    name = tiny_retrievers[0]
    results = json.loads((out / "results" / f"{name}.json").read_text())
    assert results["_spec"]["recipe"] == "early_fusion"
    engine = RetrievalEngine(bench, [name], progress=False)
    retriever = engine.retriever(name)
    xb = retriever.encode_images([engine.open_image(i) for i in bench.corpus_ids])
    compared = 0
    for q in bench.queries[:5]:
        xq = retriever.encode_queries([engine.composed(q)])[0]
        scores = xb @ xq
        got = results[bench.results_key(q.query_id)]
        top = got["retrieved_items"][:10]
        # ties tolerated: compare the score sequence, and ids where scores are distinct
        expect_scores = np.sort(scores)[::-1][:10]
        assert np.allclose(got["scores"][:10], expect_scores, atol=1e-4)
        order = np.argsort(-scores, kind="stable")[:10]
        for rank, i in enumerate(order):
            if (
                rank + 1 < 10
                and expect_scores[rank] - expect_scores[rank + 1] > 1e-4
                and (rank == 0 or expect_scores[rank - 1] - expect_scores[rank] > 1e-4)
            ):
                assert top[rank] == bench.corpus_ids[i]
                compared += 1
    assert compared >= 10  # ids at distinct scores were compared, not only the score sequence


def test_unknown_retriever_gets_did_you_mean(tmp_path, tiny_retrievers, capsys):
    args = parse(
        [
            "--world-size",
            "tiny",
            "--retrievers",
            "tiny-early_fusio",
            "--rerank",
            "none",
            "--out",
            str(tmp_path / "x"),
            "--n-boot",
            "0",
            "--no-plots",
        ]
    )
    assert eval_cli.run(args) == 2
    assert not (tmp_path / "x").exists()
    assert "Did you mean 'tiny-early_fusion'" in capsys.readouterr().err


def test_eval_with_world_verifier_reranks_top_n_by_its_ranking_key(tmp_path, tiny_retrievers, seeded_cache):
    out = tmp_path / "run"
    name = tiny_retrievers[0]
    args = parse(
        [
            "--world-size",
            "tiny",
            "--retrievers",
            name,
            "--rerank",
            "world-verifier",
            "--rerank-top-n",
            "10",
            "--out",
            str(out),
            "--n-boot",
            "20",
            "--no-plots",
        ]
    )
    assert eval_cli.run(args) == 0
    metrics = pd.read_csv(out / "metrics.csv")
    assert set(metrics["model"]) == {name, f"{name}+rerank"}
    report = (out / "report.md").read_text()
    assert "## Reranking (top 10)" in report and "linguistic sensitivity rose for" in report
    assert "mAP@10 gain [95% CI]" in report and "ling. sens. change" in report

    # Oracle: each query's new top 10 is its first-stage top 10 ordered by P(yes) - penalty * P(near miss)
    # of the verifier scoring that query alone from pixels; the rest is unchanged.
    from cir_demo.engine import RetrievalEngine
    from cir_demo.rerank import RerankRequest, load_reranker
    from cir_demo.world import load_world

    bench = load_world(size="tiny")
    first = json.loads((out / "results" / f"{name}.json").read_text())
    reranked = json.loads((out / "results" / f"{name}+rerank.json").read_text())
    assert reranked["_spec"]["reranker"]["backend"] == "world-verifier" and reranked["_spec"]["top_n"] == 10
    engine = RetrievalEngine(bench, [name], progress=False)
    verifier = load_reranker("world-verifier")
    for q in bench.queries[:6]:
        key = bench.results_key(q.query_id)
        ids0 = first[key]["retrieved_items"]
        ids1 = reranked[key]["retrieved_items"]
        assert ids1[10:] == ids0[10:] and sorted(ids1[:10]) == sorted(ids0[:10])
        request = RerankRequest([engine.open_image(r) for r in q.reference_ids], q.reference_ids, q.instruction)
        p = {
            s.candidate_id: s.p_yes - verifier.near_miss_penalty * s.p_near
            for s in verifier.score(request, ids0[:10], [engine.open_image(c) for c in ids0[:10]])
        }
        got = [p[c] for c in ids1[:10]]
        assert all(a >= b - 1e-6 for a, b in zip(got, got[1:]))
