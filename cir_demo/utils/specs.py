"""The one spec hash: a spec (everything that determines a model's outputs, JSON-able) as
canonical JSON and its sha256. Retrievers hash the whole digest without library versions;
rerankers key their score cache with its first 16 hex digits."""

from __future__ import annotations

import hashlib
import json
from typing import Sequence


def canonical_spec_json(spec: dict, exclude: Sequence[str] = ()) -> str:
    """The spec as canonical JSON (sorted keys, no whitespace), top-level `exclude` keys dropped."""
    kept = {k: v for k, v in spec.items() if k not in exclude}
    return json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def spec_hash(spec: dict, exclude: Sequence[str] = (), length: int = 64) -> str:
    """sha256 (hex) of the canonical JSON spec, cut to `length` hex digits."""
    return hashlib.sha256(canonical_spec_json(spec, exclude).encode("utf-8")).hexdigest()[:length]
