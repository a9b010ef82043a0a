"""What a model needs on this machine before it can run, as its own module declares it.

A retriever family module (`weights(config)`) and a reranker backend class
(`weights(**kwargs)`) answer with a list of these; `cir_demo.preflight` turns each into a
line (here / downloaded on first use / missing, with the command that fixes it) without
knowing which family or backend asked. Plain data: nothing here looks at the disk.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HubModel:
    """A transformers checkpoint (config plus weights): a Hugging Face hub repository or a local folder."""

    repo: str
    label: str = "transformers model"


@dataclass(frozen=True)
class HubFiles:
    """One of `files` from a hub repository (the first found counts)."""

    repo: str
    files: tuple[str, ...]
    label: str
    include: str = ""  # the `hf download --include` pattern that fetches only these files
    alternative: str = ""  # another way to get them (the library's own download command)


@dataclass(frozen=True)
class DownloadedFile:
    """A file a library downloads from a URL into `path` on first use."""

    path: str
    label: str
    fix: str


@dataclass(frozen=True)
class LocalFile:
    """A file that must already be on disk. `fix=None`: a project asset (restored from git or trained)."""

    path: str
    label: str
    fix: str | None = None


@dataclass(frozen=True)
class ApiAccess:
    """A model behind an HTTP API: its address and the environment variable holding the key (None: no key)."""

    base_url: str
    key_env: str | None
    model: str | None


@dataclass(frozen=True)
class Unavailable:
    """Weights that cannot be had as configured (an unknown tag), with what to change."""

    label: str
    fix: str


@dataclass(frozen=True)
class RetrieverNeeds:
    """Everything another registered retriever needs (a text proxy's text encoder)."""

    name: str


Need = HubModel | HubFiles | DownloadedFile | LocalFile | ApiAccess | Unavailable | RetrieverNeeds
