"""Recipes of one image tower encode a corpus once; the shared embeddings equal a fresh encode."""
from __future__ import annotations

import numpy as np

from cir_demo.index import build as index_build


def test_recipes_share_corpus_embeddings(tmp_path, monkeypatch):
    from cir_demo.retrievers import registry
    from cir_demo.retrievers.testing import build_tiny_open_clip, tiny_open_clip_config
    from cir_demo.world import load_world

    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CIR_DEMO_INDEXES", str(tmp_path / "indexes"))
    bench = load_world(size="tiny")
    weights = build_tiny_open_clip(tmp_path)
    calls = []
    real_encode = index_build.encode_corpus
    monkeypatch.setattr(index_build, "encode_corpus", lambda *a, **k: calls.append(1) or real_encode(*a, **k))
    names = ["share-fusion", "share-image"]
    try:
        for name, recipe in zip(names, ("early_fusion", "image_only")):
            registry.register_config(tiny_open_clip_config(weights, name, recipe=recipe), replace=True)
        fusion, image = (registry.load_retriever(n) for n in names)
        assert fusion.image_spec == image.image_spec and fusion.spec_hash() != image.spec_hash()
        a = index_build.build_corpus_index(bench, fusion, progress=False)
        b = index_build.build_corpus_index(bench, image, progress=False)
        assert len(calls) == 1  # the second recipe reused the first one's corpus embeddings
        xa = a.index.reconstruct_n(0, len(a.ids))
        xb = b.index.reconstruct_n(0, len(b.ids))
        fresh = real_encode(bench.images, list(bench.corpus_ids), image, progress=False)
        assert a.ids == b.ids == list(bench.corpus_ids)
        np.testing.assert_allclose(xb, fresh, atol=1e-6)
        np.testing.assert_array_equal(xa, xb)
    finally:
        for n in names:
            registry.unregister(n)
