"""Where a model's weights come from and whether they are on this machine, without downloading.

Hub models are looked up in the Hugging Face cache (`HF_HOME`, `HF_HUB_CACHE`) with
`try_to_load_from_cache`; open_clip tags are resolved through open_clip's own tag
table to the hub repository (or URL) it downloads from; local files are checked on
disk. Nothing here touches the network.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

# weights files a transformers checkpoint has (one of them, or its shard index)
HF_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                   "pytorch_model.bin.index.json")
# the files open_clip reads from a hub repository, safetensors first (open_clip.pretrained)
OPEN_CLIP_HUB_FILES = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")


@dataclass
class WeightsSource:
    """One model's weights: where they come from, whether they are here, how to get them."""

    owner: str  # "retriever 'metaclip2-h14-fusion'"
    kind: str  # "hub" | "url" | "file" | "api" | "none"
    label: str  # what the weights are, for people ("open_clip ViT-H-14 / metaclip2_worldwide")
    cached: bool
    repo: str | None = None  # hub repository
    location: str | None = None  # where they are (or were looked for)
    fix: str = ""  # the command (or step) that gets them
    patterns: tuple[str, ...] = ()  # hub files that make up the download (for its size)
    notes: list[str] = field(default_factory=list)


def hub_cache_dir() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def _cached_file(repo: str, filename: str) -> str | None:
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo, filename)
    except Exception:  # a malformed repo id: not cached
        return None
    return found if isinstance(found, str) else None


def cached_hub_files(repo: str, candidates: tuple[str, ...]) -> str | None:
    """The first of `candidates` cached for `repo`, as a local path."""
    for name in candidates:
        hit = _cached_file(repo, name)
        if hit:
            return hit
    return None


def hf_model_cached(repo_or_dir: str) -> tuple[bool, str | None]:
    """(present, where) for a transformers model: a local folder, or config + weights in the hub cache."""
    p = Path(repo_or_dir).expanduser()
    if p.is_dir():
        ok = (p / "config.json").is_file() and any((p / f).is_file() for f in HF_WEIGHT_FILES)
        return ok, str(p)
    config = _cached_file(repo_or_dir, "config.json")
    weights = cached_hub_files(repo_or_dir, HF_WEIGHT_FILES)
    if config and weights:
        return True, str(Path(weights).parent)
    return False, None


def hub_download_command(repo: str) -> str:
    return f"hf download {repo}"


def _where_hub() -> str:
    return f"the hub cache {hub_cache_dir()}, set by HF_HOME"


def _hub_source(owner: str, repo: str, label: str) -> WeightsSource:
    ok, where = hf_model_cached(repo)
    return WeightsSource(owner, "hub" if not Path(repo).expanduser().is_dir() else "file", label, ok, repo=repo,
                         location=where or hub_cache_dir(),
                         fix=f"`{hub_download_command(repo)}` (into {_where_hub()})",
                         patterns=("*.json", "*.safetensors", "*.model", "*.txt", "*.py"))


def open_clip_source(owner: str, model: str, pretrained: str) -> WeightsSource:
    """An open_clip tag: the hub repository (or URL) open_clip's tag table names."""
    import open_clip

    label = f"open_clip {model} / {pretrained}"
    cfg = open_clip.get_pretrained_cfg(model, pretrained) or {}
    hub = cfg.get("hf_hub") or ""
    create = f"python -c \"import open_clip; open_clip.create_model('{model}', pretrained='{pretrained}')\""
    if hub:
        parts = hub.strip("/").split("/")
        repo = "/".join(parts[:2])
        files = (parts[2],) if len(parts) > 2 and parts[2] else OPEN_CLIP_HUB_FILES
        hit = cached_hub_files(repo, files)
        return WeightsSource(owner, "hub", label, hit is not None, repo=repo, location=hit or hub_cache_dir(),
                             fix=f"`{hub_download_command(repo)} --include 'open_clip_*'` (into {_where_hub()}) "
                                 f"or `{create}`",
                             patterns=files)
    url = cfg.get("url") or ""
    if url:
        cache = Path(os.path.expanduser("~/.cache/clip")) / os.path.basename(url)
        return WeightsSource(owner, "url", label, cache.is_file(), location=str(cache), fix=f"`{create}`")
    return WeightsSource(owner, "none", label, False,
                         fix=f"open_clip has no tag {pretrained!r} for {model!r}; see `open_clip.list_pretrained()`")


def local_file_source(owner: str, path: str, label: str, fix: str) -> WeightsSource:
    from cir_demo.retrievers.base import resolve_path

    p = Path(resolve_path(path))
    return WeightsSource(owner, "file", label, p.is_file(), location=str(p), fix=fix)


def _asset_fix(path: str) -> str:
    """How to get a project asset back: from git, or by training it."""
    trainer = {"world-clip": "world-clip", "world-cir": "world-cir", "world-verifier": "world-verifier"}
    for key, cmd in trainer.items():
        if f"assets/{key}/" in path.replace("\\", "/"):
            return f"`git checkout -- {Path(path).parent.as_posix()}` or `python -m cir_demo train {cmd}`"
    return f"put the file at {path}"


def api_source(owner: str, base_url: str, key_env: str | None, model: str | None) -> WeightsSource:
    have_key = not key_env or bool(os.environ.get(key_env))
    label = f"API model {model or '?'} at {base_url}"
    fix = "" if have_key else f"set the environment variable {key_env} to the API key of {base_url}"
    return WeightsSource(owner, "api", label, have_key, location=base_url, fix=fix,
                         notes=[] if have_key else [f"{key_env} is not set"])


def retriever_sources(name: str) -> list[WeightsSource]:
    """The weights retriever `name` needs (a text proxy also needs its text encoder's)."""
    from cir_demo.retrievers.registry import get_config

    cfg = get_config(name)
    owner = f"retriever {name!r}"
    family = cfg["family"]
    model, pretrained = cfg.get("model"), cfg.get("pretrained")
    if family == "open_clip":
        from cir_demo.retrievers.openclip import is_local_weights

        if is_local_weights(pretrained):
            return [local_file_source(owner, pretrained, f"open_clip {model} weights file", _asset_fix(pretrained))]
        return [open_clip_source(owner, model, pretrained)]
    if family in ("hf_clip", "bge_vl", "gme"):
        return [_hub_source(owner, model, "transformers model")]
    if family == "world_cir":
        return [local_file_source(owner, pretrained, "world-CIR weights", _asset_fix(pretrained))]
    if family == "precomputed":
        path = cfg["params"]["path"]
        return [local_file_source(owner, path, "precomputed rankings", f"put the rankings file at {path}")]
    if family == "text_proxy":
        from cir_demo.retrievers.text_proxy import PARAMS

        p = {**PARAMS, **cfg.get("params", {})}
        out = [api_source(owner, p["base_url"], p["api_key_env"], model)]
        if p.get("text_encoder"):
            out += retriever_sources(p["text_encoder"])
        return out
    return [WeightsSource(owner, "none", family, True)]


def reranker_sources(backend: str, **kw) -> list[WeightsSource]:
    """The weights (or API key) reranker `backend` needs, with the keywords it would be built with."""
    owner = f"reranker {backend!r}"
    if backend == "qwen2.5-vl":
        from cir_demo.rerank.qwen_vl import DEFAULT_MODEL

        model = kw.get("model") or DEFAULT_MODEL
        return [_hub_source(owner, model, "transformers model")]
    if backend == "world-verifier":
        from cir_demo.rerank.world_verifier import DEFAULT_WEIGHTS

        path = str(kw.get("weights") or DEFAULT_WEIGHTS)
        return [local_file_source(owner, path, "world verifier weights", _asset_fix(path))]
    if backend == "openai":
        base = kw.get("base_url") or "http://localhost:8000/v1"
        return [api_source(owner, base, kw.get("api_key_env"), kw.get("model"))]
    return [WeightsSource(owner, "none", backend, True)]
