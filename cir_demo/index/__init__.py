"""Corpus indexes: faiss search, on-disk layout and manifests, builds (single or sharded).

Importing this package imports neither faiss nor torch; they load when used.
"""

from cir_demo.index.build import build_corpus_index, default_index_dir, ensure_index
from cir_demo.index.corpus_encode import encode_corpus
from cir_demo.index.faiss_index import brute_force_search, build_index, recall_at_k, search
from cir_demo.index.manifest import (
    IndexManifest,
    LoadedIndex,
    MissingIndexError,
    StaleIndexError,
    check_index,
    corpus_checksum,
    index_dir,
    load_index,
)

__all__ = [
    "IndexManifest",
    "LoadedIndex",
    "MissingIndexError",
    "StaleIndexError",
    "brute_force_search",
    "build_corpus_index",
    "build_index",
    "check_index",
    "corpus_checksum",
    "default_index_dir",
    "encode_corpus",
    "ensure_index",
    "index_dir",
    "load_index",
    "recall_at_k",
    "search",
]
