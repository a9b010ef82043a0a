"""Training-free pointwise reranking: P(relevant) = sigmoid(logit_yes - logit_no).

Backends (loaded lazily, so importing this package never imports torch):
- "qwen2.5-vl": local transformers Qwen2.5-VL with a shared-prefix KV cache
  (`cir_demo.rerank.qwen_vl.QwenVLReranker`).
- "openai": an OpenAI-compatible server with logprobs (vLLM, SGLang, Ollama)
  (`cir_demo.rerank.openai_api.OpenAIReranker`).
- "world-verifier": the offline world's trained judge (`cir_demo.rerank.world_verifier`).
A backend is one module and one row of `BACKENDS` ("module:Class"; or, at run time,
`register_backend(name, "module:Class")`). The class takes keyword arguments, implements
`Reranker` (or `LogitPairReranker` when it produces a (logit_yes, logit_no) pair) and declares
what it needs: `FLAGS`, the `rerank` command flags it takes, and the classmethod
`weights(**kw)`, what must be on this machine (`cir_demo.utils.needs`), which the doctor and
`--dry-run` ask.
"""

from __future__ import annotations

import importlib

from cir_demo.rerank.base import (
    FLAG_ERROR_PREFIX,
    FLAG_TOKENS_MISSING,
    CandidateScore,
    LogitPairReranker,
    RerankRequest,
    Reranker,
)
from cir_demo.rerank.cache import ScoreCache, default_cache_path
from cir_demo.rerank.prompt import PromptTemplate
from cir_demo.rerank.rerank import RerankedItem, RunRerank, order_top_block, rerank, rerank_run

# name -> "module:Class"
BACKENDS: dict[str, str] = {
    "qwen2.5-vl": "cir_demo.rerank.qwen_vl:QwenVLReranker",
    "openai": "cir_demo.rerank.openai_api:OpenAIReranker",
    "world-verifier": "cir_demo.rerank.world_verifier:WorldVerifierReranker",
}


def register_backend(name: str, target: str) -> None:
    """Make `load_reranker(name, ...)` build `target` ("module:Class")."""
    if ":" not in target:
        raise ValueError(f"backend target must look like 'package.module:Class', got {target!r}")
    BACKENDS[name] = target


def backend_class(name: str) -> type[Reranker]:
    """The class registered as backend `name` (UnknownNameError with "did you mean" otherwise)."""
    from cir_demo.utils.names import lookup, resolve_ref

    return resolve_ref(lookup("reranker backend", name, BACKENDS), f"reranker backend {name!r}")


def load_reranker(name_or_backend: str, **kw) -> Reranker:
    """Build a reranker by backend name; keyword arguments go to the backend class.

    "qwen2.5-vl": model (hub name or local path), device ("auto"), dtype ("auto"),
    yes_token/no_token, batch_size, min_pixels/max_pixels, prompt.
    "openai": base_url, model, api_key_env (env var NAME), concurrency, timeout,
    retries, yes_token/no_token, top_logprobs, prompt.
    "world-verifier": weights (default assets/world-verifier/world_judge.safetensors), device, batch_size.
    """
    from cir_demo.integrity import require_assets_of

    require_assets_of(reranker_settings(name_or_backend, **kw))  # damaged weights: one line saying how to restore
    return backend_class(name_or_backend)(**kw)


def reranker_settings(name_or_backend: str, **kw) -> dict:
    """The backend and the keyword arguments it would load with, its default weights filled in
    (UnknownNameError for an unknown backend). Used to check committed weights before loading."""
    from cir_demo.utils.names import lookup

    module_name, _ = lookup("reranker backend", name_or_backend, BACKENDS).split(":")
    settings = {"backend": name_or_backend, **kw}
    default = getattr(importlib.import_module(module_name), "DEFAULT_WEIGHTS", None)
    if default is not None:
        settings.setdefault("weights", default)
    return settings


__all__ = [
    "BACKENDS",
    "FLAG_ERROR_PREFIX",
    "FLAG_TOKENS_MISSING",
    "CandidateScore",
    "LogitPairReranker",
    "PromptTemplate",
    "RerankRequest",
    "RerankedItem",
    "Reranker",
    "RunRerank",
    "backend_class",
    "ScoreCache",
    "default_cache_path",
    "load_reranker",
    "order_top_block",
    "register_backend",
    "reranker_settings",
    "rerank",
    "rerank_run",
]
