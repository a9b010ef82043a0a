"""Is the Hugging Face hub reachable, how big is a download, is a repository gated or missing.

Asked only when the hub may be reached: with `HF_HUB_OFFLINE=1` nothing here opens
a connection and every answer is "hub unreachable".
"""

from __future__ import annotations

import functools
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from fnmatch import fnmatch


@dataclass
class RepoInfo:
    repo: str
    exists: bool | None  # None: could not ask
    gated: bool = False
    size_bytes: int | None = None
    problem: str = ""  # why it cannot be downloaded, one line


def offline_reason() -> str | None:
    """Why the hub must not be asked (an environment switch), or None."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE=1"
    if os.environ.get("TRANSFORMERS_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return "TRANSFORMERS_OFFLINE=1"
    return None


@functools.lru_cache(maxsize=1)
def hub_status(timeout: float = 4.0) -> tuple[bool, str]:
    """(reachable, why not). One short request to the hub's address, once per process."""
    why = offline_reason()
    if why:
        return False, why
    from huggingface_hub import constants

    endpoint = constants.ENDPOINT
    try:
        req = urllib.request.Request(endpoint, method="HEAD", headers={"User-Agent": "cir_demo doctor"})
        with urllib.request.urlopen(req, timeout=timeout):
            pass
    except urllib.error.HTTPError:
        pass  # it answered
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        return False, f"{endpoint} did not answer ({getattr(exc, 'reason', exc)})"
    return True, ""


def repo_info(repo: str, patterns: tuple[str, ...] = ()) -> RepoInfo:
    """Size of the files matching `patterns` (all when empty), and whether we may download them."""
    reachable, why = hub_status()
    if not reachable:
        return RepoInfo(repo, None, problem=f"hub unreachable ({why})")
    from huggingface_hub import HfApi
    from huggingface_hub import errors as hub_errors

    try:
        info = HfApi().model_info(repo, files_metadata=True, timeout=15)
    except hub_errors.GatedRepoError:
        return RepoInfo(
            repo,
            True,
            gated=True,
            problem=(
                f"{repo} is gated: accept its terms at https://huggingface.co/{repo}, then `hf auth login` (or set HF_TOKEN)"
            ),
        )
    except hub_errors.RepositoryNotFoundError:
        return RepoInfo(
            repo,
            False,
            problem=(
                f"{repo} does not exist on the hub or is private (log in with `hf auth login` or set HF_TOKEN if it is yours)"
            ),
        )
    except Exception as exc:  # network trouble mid-way: say so, do not guess
        return RepoInfo(repo, None, problem=f"hub did not answer for {repo} ({type(exc).__name__}: {exc})")
    gated = bool(getattr(info, "gated", False))
    size = sum(
        int(s.size or 0)
        for s in (info.siblings or [])
        if not patterns or any(fnmatch(s.rfilename, p) for p in patterns)
    )
    if "open_clip_model.safetensors" in patterns:  # open_clip reads one of its two weight files, safetensors first
        names = {s.rfilename: int(s.size or 0) for s in info.siblings or []}
        size = names.get("open_clip_model.safetensors") or names.get("open_clip_pytorch_model.bin") or size
    return RepoInfo(
        repo,
        True,
        gated=gated,
        size_bytes=size,
        problem=(
            f"{repo} is gated: accept its terms at https://huggingface.co/{repo}, then "
            "`hf auth login` (or set HF_TOKEN)"
        )
        if gated and not _have_token()
        else "",
    )


def _have_token() -> bool:
    try:
        from huggingface_hub import get_token

        return bool(get_token())
    except Exception:
        return False


def human_bytes(n: int | None) -> str:
    if n is None:
        return "size unknown"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n}"
