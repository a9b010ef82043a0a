"""The tiny retriever and benchmark the index tests use (cir_demo/testing/tiny_index.py)."""

from __future__ import annotations

import numpy as np
import pytest

from cir_demo.retrievers.base import ComposedQuery
from cir_demo.testing.tiny_index import TinyConvRetriever, tiny_benchmark


def test_tiny_retriever_is_deterministic_and_normalised():
    bench = tiny_benchmark(10)
    images = [bench.images.open(i) for i in bench.corpus_ids]
    a = TinyConvRetriever(seed=3).encode_images(images)
    b = TinyConvRetriever(seed=3).encode_images(images[:4])
    c = TinyConvRetriever(seed=4).encode_images(images)
    assert a.shape == (10, 16) and a.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(a[:4], b, atol=1e-6)  # batch composition does not change a row
    assert not np.allclose(a, c)  # the seed is the model
    # distinct images get distinct embeddings (the tests rely on no accidental duplicates)
    assert np.unique(a.round(5), axis=0).shape[0] == 10


def test_tiny_retriever_spec_hash_ignores_versions_only():
    a, b = TinyConvRetriever(seed=1), TinyConvRetriever(seed=1)
    b.spec = {**b.spec, "versions": {"torch": "0.0"}}
    assert a.spec_hash() == b.spec_hash()
    assert TinyConvRetriever(seed=2).spec_hash() != a.spec_hash()


def test_tiny_retriever_encodes_queries():
    bench = tiny_benchmark(4)
    r = TinyConvRetriever()
    q = ComposedQuery(reference_images=(bench.images.open("img0001"),), text="x")
    np.testing.assert_allclose(r.encode_queries([q])[0], r.encode_images([bench.images.open("img0001")])[0], atol=1e-6)
    with pytest.raises(ValueError):
        ComposedQuery(reference_images=(), text="x")
