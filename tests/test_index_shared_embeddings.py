"""Recipes of one image tower encode a corpus once; the shared embeddings equal a fresh encode. On the
tiny world's first 100 corpus images (two batches of 64): every pass renders each image it encodes,
and sharing does not depend on the corpus size."""

from __future__ import annotations

import dataclasses

import numpy as np

from cir_demo.index import build as index_build, embedding_cache

N_CORPUS = 100


def small_tiny_world():
    """The tiny world with only its first `N_CORPUS` corpus images."""
    from cir_demo.world import load_world

    bench = load_world(size="tiny")
    return dataclasses.replace(bench, corpus_ids=list(bench.corpus_ids)[:N_CORPUS])


def test_recipes_share_corpus_embeddings(tmp_path, monkeypatch):
    from cir_demo.retrievers import registry
    from cir_demo.testing.tiny_retrievers import build_tiny_open_clip, tiny_open_clip_config

    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CIR_DEMO_INDEXES", str(tmp_path / "indexes"))
    bench = small_tiny_world()
    weights = build_tiny_open_clip(tmp_path)
    calls = []
    real_encode = embedding_cache.encode_corpus
    monkeypatch.setattr(embedding_cache, "encode_corpus", lambda *a, **k: calls.append(1) or real_encode(*a, **k))
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
        assert a.ids == b.ids == list(bench.corpus_ids) and len(a.ids) == N_CORPUS
        np.testing.assert_allclose(xb, fresh, atol=1e-6)
        np.testing.assert_array_equal(xa, xb)
    finally:
        for n in names:
            registry.unregister(n)


def test_prefetch_encodes_several_image_towers_in_one_pass_equal_to_separate_encodes(tmp_path, monkeypatch):
    """Oracle: each encoder's cache after one shared pass equals its own `encode_corpus`, and every
    corpus image was opened once, not once per encoder."""
    from cir_demo.retrievers import registry
    from cir_demo.testing.tiny_retrievers import build_tiny_open_clip, tiny_open_clip_config

    monkeypatch.setenv("CIR_DEMO_CACHE", str(tmp_path / "cache"))
    bench = small_tiny_world()
    ids = index_build.corpus_ids_of(bench)
    assert len(ids) == N_CORPUS
    encoders, registered = [], []
    try:
        for n, seed_dir in enumerate(("a", "b")):
            weights = build_tiny_open_clip(tmp_path / seed_dir, seed=n)
            registry.register_config(tiny_open_clip_config(weights, f"prefetch-{n}", recipe="image_only"), replace=True)
            registered.append(f"prefetch-{n}")
            encoders.append(registry.load_retriever(f"prefetch-{n}"))
        assert encoders[0].image_spec != encoders[1].image_spec
        opened = []

        class CountingStore:
            def open(self, image_id):
                opened.append(image_id)
                return bench.images.open(image_id)

        class Bench:
            name, images, corpus_ids, queries = bench.name, CountingStore(), bench.corpus_ids, bench.queries

            def __getattr__(self, item):
                return getattr(bench, item)

        assert embedding_cache.prefetch_corpus_embeddings(Bench(), ids, encoders, progress=False) == [
            e.name for e in encoders
        ]
        assert sorted(opened) == sorted(ids)  # one pass
        for e in encoders:
            cached = embedding_cache.cached_encode_corpus(bench, ids, e, progress=False)
            np.testing.assert_allclose(
                cached, embedding_cache.encode_corpus(bench.images, ids, e, progress=False), atol=1e-6
            )
        assert embedding_cache.prefetch_corpus_embeddings(Bench(), ids, encoders, progress=False) == []  # all cached
    finally:
        for name in registered:
            registry.unregister(name)
