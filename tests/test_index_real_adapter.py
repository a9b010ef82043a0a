"""The index with a real registry retriever (a tiny random open_clip model through the real adapter)."""

from __future__ import annotations

import numpy as np
import pytest

from cir_demo.index.build import build_corpus_index
from cir_demo.index.faiss_index import brute_force_search
from cir_demo.index.manifest import check_index, read_manifest
from cir_demo.testing.tiny_index import tiny_benchmark


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny_clip")


@pytest.mark.slow
def test_open_clip_adapter_index_matches_brute_force_and_tracks_weights(weights_dir, tmp_path):
    from cir_demo.retrievers.base import ComposedQuery
    from cir_demo.testing.tiny_retrievers import tiny_open_clip_retriever

    bench = tiny_benchmark(30)
    retriever = tiny_open_clip_retriever(weights_dir, seed=0)
    out = tmp_path / "idx"
    loaded = build_corpus_index(bench, retriever, out_dir=out, batch_size=7, progress=False)
    m = read_manifest(out)
    assert m.weights_sha256 and len(m.weights_sha256) == 64 and m.dim == retriever.dim
    # Composed queries through the real adapter, searched in the index == brute force over per-image encodings.
    xb = np.concatenate([retriever.encode_images([bench.images.open(i)]) for i in bench.corpus_ids])
    queries = [
        ComposedQuery((bench.images.open(q.reference_ids[0]),), q.instruction, q.query_id) for q in bench.queries
    ]
    xq = retriever.encode_queries(queries)
    D_bf, I_bf = brute_force_search(xq, xb, 5)
    exact = xq.astype(np.float64) @ xb.astype(np.float64).T
    position = {image_id: j for j, image_id in enumerate(bench.corpus_ids)}
    for q, ((ids, scores), d_row) in enumerate(zip(loaded.search(xq, 5), D_bf)):
        np.testing.assert_allclose(scores, d_row, atol=1e-5)
        # ties tolerated: every returned id scores at least the exact 5th best (to 1e-5), no repeats
        assert len(set(ids)) == 5
        assert all(exact[q, position[i]] >= d_row[-1] - 1e-5 for i in ids)
    assert check_index(out, retriever, bench.corpus_ids) == []
    # Other weights (same architecture, another seed): the index is stale for them.
    other = tiny_open_clip_retriever(weights_dir, seed=1)
    reasons = check_index(out, other, bench.corpus_ids)
    assert any(r.startswith("weights changed") for r in reasons), reasons
