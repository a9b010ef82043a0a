"""Where a model's weights come from and whether they are on this machine, without downloading.

What a model needs is declared by its own module (a retriever family's `weights(config)`, a
reranker backend's `weights(**kw)`, as `cir_demo.utils.needs` items); this module only finds
them. Hub models are looked up in the Hugging Face cache (`HF_HOME`, `HF_HUB_CACHE`) with
`try_to_load_from_cache`; local files are checked on disk. Nothing here touches the network.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

# weights files a transformers checkpoint has (one of them, or its shard index)
HF_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


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
    return WeightsSource(
        owner,
        "hub" if not Path(repo).expanduser().is_dir() else "file",
        label,
        ok,
        repo=repo,
        location=where or hub_cache_dir(),
        fix=f"`{hub_download_command(repo)}` (into {_where_hub()})",
        patterns=("*.json", "*.safetensors", "*.model", "*.txt", "*.py"),
    )


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
    return WeightsSource(
        owner, "api", label, have_key, location=base_url, fix=fix, notes=[] if have_key else [f"{key_env} is not set"]
    )


def sources_of(owner: str, needs: list) -> list[WeightsSource]:
    """Where each declared need (`cir_demo.utils.needs`) is, whether it is here, how to get it."""
    from cir_demo.utils import needs as n

    out: list[WeightsSource] = []
    for need in needs:
        if isinstance(need, n.HubModel):
            out.append(_hub_source(owner, need.repo, need.label))
        elif isinstance(need, n.HubFiles):
            hit = cached_hub_files(need.repo, need.files)
            fix = (
                f"`{hub_download_command(need.repo)}"
                + (f" --include '{need.include}'" if need.include else "")
                + f"` (into {_where_hub()})"
                + (f" or {need.alternative}" if need.alternative else "")
            )
            out.append(
                WeightsSource(
                    owner,
                    "hub",
                    need.label,
                    hit is not None,
                    repo=need.repo,
                    location=hit or hub_cache_dir(),
                    fix=fix,
                    patterns=need.files,
                )
            )
        elif isinstance(need, n.DownloadedFile):
            out.append(
                WeightsSource(owner, "url", need.label, Path(need.path).is_file(), location=need.path, fix=need.fix)
            )
        elif isinstance(need, n.LocalFile):
            out.append(
                local_file_source(
                    owner, need.path, need.label, need.fix if need.fix is not None else _asset_fix(need.path)
                )
            )
        elif isinstance(need, n.ApiAccess):
            out.append(api_source(owner, need.base_url, need.key_env, need.model))
        elif isinstance(need, n.Unavailable):
            out.append(WeightsSource(owner, "none", need.label, False, fix=need.fix))
        elif isinstance(need, n.RetrieverNeeds):
            out += retriever_sources(need.name)
        else:
            raise TypeError(f"{owner} declares {need!r}, which is not one of cir_demo.utils.needs")
    return out


def retriever_sources(name: str) -> list[WeightsSource]:
    """The weights retriever `name` needs, as its family module declares them (`weights(config)`)."""
    from cir_demo.retrievers.registry import family_module, get_config

    cfg = get_config(name)
    return sources_of(f"retriever {name!r}", family_module(cfg["family"]).weights(cfg))


def reranker_sources(backend: str, **kw) -> list[WeightsSource]:
    """The weights (or API key) reranker `backend` needs with the keywords it would be built with,
    as its class declares them (`weights(**kw)`)."""
    from cir_demo.rerank import backend_class

    return sources_of(f"reranker {backend!r}", backend_class(backend).weights(**kw))
