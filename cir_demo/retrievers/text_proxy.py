"""Text-proxy retrieval (the PinPoint paper's "GPT-5 text" paradigm).

An OpenAI-compatible chat endpoint looks at the reference image(s) and the
instruction and writes descriptions of the *target* image at several lengths
(short, medium, long). Retrieval is then text-only with a CLIP-family text
encoder (another registered retriever, `params.text_encoder`), merged
- before retrieval ("pre"): average of the normalised description embeddings,
  renormalised: one query vector; or
- after retrieval ("post"): one ranking per description, merged by each
  image's best score (`recipes.postmerge_max`). Such a retriever has
  `query_variants > 1`; use `encode_query_variants`.

Descriptions are cached on disk (one JSON file per description, keyed by the
sha256 of model + prompt + image ids + instruction + generation settings,
written atomically); a cache hit makes no request. Timeouts, HTTP errors,
malformed responses and refusals are handled per query: the query is flagged
in `generation_report()` and the run continues. A query whose descriptions all
failed falls back to its own instruction text (markers rendered as words), so
it still gets a ranking; missing variants of a partly generated query are
left out (pre-merge) or repeat an available one (post-merge: max is
unchanged by duplicates).

Requests go through the project's one HTTP client (`cir_demo.utils.http`): connections
reused, timeouts, 429 (after its Retry-After) and 5xx retried with back-off and jitter.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from cir_demo.retrievers import recipes
from cir_demo.retrievers.base import ComposedQuery, Retriever, check_embeddings, render_markers
from cir_demo.utils.code_hash import code_key
from cir_demo.utils.http import HttpError, RetryPolicy, failure_kind, failure_line, post_json

FAMILY = "text_proxy"
LENGTHS = ("short", "medium", "long")
PARAMS = {
    "text_encoder": None,  # name of a registered open_clip / hf_clip retriever
    "merge": "pre",  # "pre" | "post"
    "base_url": "https://api.openai.com/v1",
    "api_key_env": "OPENAI_API_KEY",
    "lengths": list(LENGTHS),
    "timeout_s": 60.0,
    "max_retries": 2,
    "retry_backoff_s": 2.0,
    "concurrency": 4,
    "temperature": None,  # None: the endpoint's default (GPT-5 accepts only its default)
    "max_tokens": None,  # sent as max_completion_tokens when set
    "cache_dir": None,  # default: <cache>/text_proxy
    "image_max_side": 768,
    "batch_size": 64,
}

SYSTEM_PROMPT = (
    "You write target-image descriptions for a text-to-image search engine. You are given one or two "
    "reference images and a modification instruction. Imagine the image a user is looking for: the "
    "reference image(s) changed as the instruction asks. Describe that target image as a caption of it. "
    "Describe only what the target image shows; do not mention the reference images, the instruction "
    "or the search. When the instruction mentions <img1> and <img2>, they are the first and the second "
    "image given, in that order. Reply with the description only."
)
LENGTH_PROMPTS = {
    "short": "Write a short description: one sentence of at most 15 words.",
    "medium": "Write a medium-length description: two or three sentences, about 40 words.",
    "long": "Write a long, detailed description: about 100 words covering subject, attributes, setting and style.",
}
_REFUSAL_RE = re.compile(r"^\s*(i'?m sorry|i am sorry|sorry,|i can(no|')t|i'?m unable|i am unable|i won'?t)", re.I)


def validate(config: dict, where: str) -> None:
    p = config.get("params", {})
    if not isinstance(p.get("text_encoder"), str) or not p["text_encoder"]:
        raise ValueError(f"{where}: key 'params.text_encoder' (a registered CLIP-family retriever) is required")
    if not config.get("model"):
        raise ValueError(f"{where}: key 'model' (the chat model that writes descriptions) is required")
    if p.get("merge", "pre") not in ("pre", "post"):
        raise ValueError(f"{where}: key 'params.merge' must be 'pre' or 'post', got {p.get('merge')!r}")
    lengths = p.get("lengths", list(LENGTHS))
    if (
        not isinstance(lengths, list)
        or not lengths
        or any(x not in LENGTHS for x in lengths)
        or len(set(lengths)) != len(lengths)
    ):
        raise ValueError(f"{where}: key 'params.lengths' must be a non-empty list of distinct values from {LENGTHS}")
    for key in ("timeout_s", "retry_backoff_s"):
        v = p.get(key, PARAMS[key])
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"{where}: key 'params.{key}' must be a non-negative number")
    for key in ("max_retries", "concurrency", "image_max_side"):
        v = p.get(key, PARAMS[key])
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if key == "max_retries" else 1):
            raise ValueError(f"{where}: key 'params.{key}' must be an integer >= {0 if key == 'max_retries' else 1}")


def weights(config: dict) -> list:
    """The chat API that writes descriptions, and whatever the text encoder needs."""
    from cir_demo.utils.needs import ApiAccess, RetrieverNeeds

    p = {**PARAMS, **config.get("params", {})}
    return [ApiAccess(p["base_url"], p["api_key_env"], config.get("model"))] + (
        [RetrieverNeeds(p["text_encoder"])] if p.get("text_encoder") else []
    )


def api_key_env(config: dict) -> str | None:
    """The environment variable the listing checks (`retrievers list`)."""
    return config["params"].get("api_key_env", PARAMS["api_key_env"])


def recipe_label(config: dict) -> str:
    """How the listing names the way queries are composed: the merge rule."""
    return f"{config['params'].get('merge', 'pre')}-merge"


# --------------------------------------------------------------------------- HTTP client
class ChatError(Exception):
    """A failed generation; `kind` is timeout, http_<code>, network, malformed, refusal or empty."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind


@dataclass
class ChatClient:
    """Minimal OpenAI-compatible `/chat/completions` client."""

    base_url: str
    api_key: str | None = None
    timeout_s: float = 60.0
    max_retries: int = 2
    retry_backoff_s: float = 2.0

    def complete(
        self, model: str, messages: list[dict], temperature: float | None = None, max_tokens: int | None = None
    ) -> str:
        """The assistant's text; raises ChatError after retries (timeouts, 429 and 5xx are retried)."""
        body: dict[str, Any] = {"model": model, "messages": messages}
        if temperature is not None:
            body["temperature"] = temperature
        if max_tokens is not None:
            body["max_completion_tokens"] = max_tokens
        try:
            response = post_json(
                self.base_url.rstrip("/") + "/chat/completions",
                body,
                api_key=self.api_key,
                timeout=self.timeout_s,
                policy=RetryPolicy(self.max_retries, self.retry_backoff_s),
            )
        except HttpError as exc:
            raise ChatError(failure_kind(exc), failure_line(exc)) from None
        return parse_completion(response.content)


def parse_completion(raw: bytes) -> str:
    """The text of the first choice; refusals and empty answers are errors."""
    try:
        payload = json.loads(raw)
        choice = payload["choices"][0]
        message = choice["message"]
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ChatError("malformed", f"response is not JSON: {raw[:80]!r}") from None
    except (KeyError, IndexError, TypeError):
        raise ChatError("malformed", "response has no choices[0].message") from None
    if not isinstance(message, dict):
        raise ChatError("malformed", "choices[0].message is not an object")
    if message.get("refusal"):
        raise ChatError("refusal", str(message["refusal"])[:200])
    if choice.get("finish_reason") == "content_filter":
        raise ChatError("refusal", "finish_reason=content_filter")
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    if not isinstance(content, str) or not content.strip():
        raise ChatError("empty", "the answer has no text")
    text = " ".join(content.split())
    if _REFUSAL_RE.match(text):
        raise ChatError("refusal", text[:200])
    return text


# --------------------------------------------------------------------------- prompts + cache
def image_data_url(img, max_side: int) -> str:
    """PNG data URL, downscaled so the longer side is at most `max_side`."""
    img = img if img.mode == "RGB" else img.convert("RGB")
    if max(img.size) > max_side:
        scale = max_side / max(img.size)
        img = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def user_prompt(instruction: str, length: str, n_images: int) -> str:
    images = "the reference image" if n_images == 1 else "the reference images <img1> and <img2>"
    return f"Reference: {images} above.\nInstruction: {instruction}\n{LENGTH_PROMPTS[length]}"


def build_messages(images: Sequence, instruction: str, length: str, max_side: int) -> list[dict]:
    parts: list[dict] = [{"type": "image_url", "image_url": {"url": image_data_url(img, max_side)}} for img in images]
    parts.append({"type": "text", "text": user_prompt(instruction, length, len(images))})
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": parts}]


def image_identity(query: ComposedQuery) -> list[str]:
    """Reference ids when given; otherwise content hashes of the images."""
    if query.reference_ids:
        return list(query.reference_ids)
    out = []
    for img in query.reference_images:
        rgb = img if img.mode == "RGB" else img.convert("RGB")
        h = hashlib.sha256(f"{rgb.size}".encode() + rgb.tobytes()).hexdigest()
        out.append(f"sha256:{h}")
    return out


def cache_key(
    model: str,
    instruction: str,
    image_ids: Sequence[str],
    length: str,
    n_images: int,
    temperature: float | None,
    max_tokens: int | None,
    max_side: int,
) -> str:
    fields = {
        "model": model,
        "system": SYSTEM_PROMPT,
        "user": user_prompt(instruction, length, n_images),
        "image_ids": list(image_ids),
        "instruction": instruction,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "image_max_side": max_side,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode("utf-8")).hexdigest()


class DescriptionCache:
    """One JSON file per generated description under `root/<key[:2]>/<key>.json`."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> str | None:
        path = self._path(key)
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None  # a damaged entry is regenerated (and overwritten atomically)
        text = entry.get("text") if isinstance(entry, dict) else None
        return text if isinstance(text, str) and text else None

    def put(self, key: str, text: str, meta: dict) -> None:
        from cir_demo.utils.io import write_json_atomic

        write_json_atomic(self._path(key), {"text": text, **meta})


# --------------------------------------------------------------------------- generation
@dataclass
class Generation:
    """Descriptions of one query by length (None where generation failed) and the errors."""

    descriptions: dict[str, str | None]
    errors: dict[str, str]

    @property
    def status(self) -> str:
        ok = sum(v is not None for v in self.descriptions.values())
        return "ok" if ok == len(self.descriptions) else ("failed" if ok == 0 else "partial")


class DescriptionGenerator:
    def __init__(
        self,
        client: ChatClient,
        model: str,
        cache: DescriptionCache,
        lengths: Sequence[str],
        temperature: float | None = None,
        max_tokens: int | None = None,
        image_max_side: int = 768,
        concurrency: int = 4,
    ):
        self.client, self.model, self.cache = client, model, cache
        self.lengths = list(lengths)
        self.temperature, self.max_tokens = temperature, max_tokens
        self.image_max_side, self.concurrency = image_max_side, concurrency

    def _one(self, query: ComposedQuery, length: str) -> tuple[str | None, str | None]:
        ids = image_identity(query)
        key = cache_key(
            self.model,
            query.text,
            ids,
            length,
            len(query.reference_images),
            self.temperature,
            self.max_tokens,
            self.image_max_side,
        )
        cached = self.cache.get(key)
        if cached is not None:
            return cached, None
        try:
            messages = build_messages(query.reference_images, query.text, length, self.image_max_side)
            text = self.client.complete(self.model, messages, self.temperature, self.max_tokens)
        except ChatError as exc:
            return None, str(exc)
        except Exception as exc:  # never lose the run to one query
            return None, f"error: {type(exc).__name__}: {exc}"
        self.cache.put(
            key,
            text,
            {
                "model": self.model,
                "length": length,
                "image_ids": ids,
                "instruction": query.text,
                "query_id": query.query_id,
            },
        )
        return text, None

    def generate(self, queries: Sequence[ComposedQuery], progress: bool = False) -> list[Generation]:
        jobs = [(qi, length) for qi in range(len(queries)) for length in self.lengths]
        results: dict[tuple[int, str], tuple[str | None, str | None]] = {}
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(jobs), desc=f"{self.model}: descriptions", unit="desc")
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            futures = {pool.submit(self._one, queries[qi], length): (qi, length) for qi, length in jobs}
            for fut, job in futures.items():
                results[job] = fut.result()
                if bar is not None:
                    bar.update(1)
        if bar is not None:
            bar.close()
        out = []
        for qi in range(len(queries)):
            desc = {length: results[(qi, length)][0] for length in self.lengths}
            errs = {length: results[(qi, length)][1] for length in self.lengths if results[(qi, length)][1]}
            out.append(Generation(desc, errs))
        return out


# --------------------------------------------------------------------------- retriever
class TextProxyRetriever(Retriever):
    def __init__(
        self,
        name: str,
        encoder_retriever,
        generator: DescriptionGenerator,
        merge: str,
        spec: dict,
        progress: bool = False,
    ):
        self.name = name
        self.text_encoder = encoder_retriever
        self.generator = generator
        self.merge = merge
        self.spec = spec
        self.dim = encoder_retriever.dim
        self.device = encoder_retriever.device
        self.progress = progress
        self.query_variants = len(generator.lengths) if merge == "post" else 1
        self.report: dict[str, dict] = {}

    def encode_images(self, images, batch_size: int | None = None) -> np.ndarray:
        return self.text_encoder.encode_images(images, batch_size)

    def generation_report(self) -> dict[str, dict]:
        """query id (or position) -> {"status": ok|partial|failed, "errors": {length: message}, "fallback": bool}."""
        return dict(self.report)

    def _variant_embeddings(self, queries: Sequence[ComposedQuery], batch_size: int | None) -> list[np.ndarray]:
        """Per query: (available variants, dim) unit rows; the instruction itself when none came back."""
        gens = self.generator.generate(queries, self.progress)
        texts: list[str] = []
        owners: list[int] = []
        for qi, (q, g) in enumerate(zip(queries, gens)):
            ok = [g.descriptions[length] for length in self.generator.lengths if g.descriptions[length] is not None]
            fallback = not ok
            if fallback:
                ok = [render_markers(q.text, "words")]
            texts.extend(ok)
            owners.extend([qi] * len(ok))
            key = q.query_id if q.query_id is not None else str(qi)
            self.report[key] = {"status": g.status, "errors": dict(g.errors), "fallback": fallback}
        failed = sum(not g.descriptions or all(v is None for v in g.descriptions.values()) for g in gens)
        if failed:
            import warnings

            warnings.warn(
                f"{self.name}: {failed} of {len(queries)} queries got no description and fall back to "
                f"their instruction text; see generation_report()",
                RuntimeWarning,
                stacklevel=3,
            )
        emb = self.text_encoder.encode_texts(texts, batch_size)
        owners_arr = np.asarray(owners)
        return [emb[owners_arr == qi] for qi in range(len(queries))]

    def encode_queries(self, queries: Sequence[ComposedQuery], batch_size: int | None = None) -> np.ndarray:
        if self.merge == "post":
            raise TypeError(
                f"retriever {self.name!r} merges after retrieval (query_variants={self.query_variants}): "
                f"rank each variant from encode_query_variants() and merge with recipes.postmerge_max"
            )
        queries = list(queries)
        if not queries:
            return np.zeros((0, self.dim), dtype=np.float32)
        per_query = self._variant_embeddings(queries, batch_size)
        out = np.stack([recipes.mean_of_references(list(v)) for v in per_query])
        return check_embeddings(out, len(queries), self.dim, f"{self.name}: queries")

    def encode_query_variants(self, queries: Sequence[ComposedQuery], batch_size: int | None = None) -> np.ndarray:
        if self.merge == "pre":
            return self.encode_queries(queries, batch_size)[:, None, :]
        queries = list(queries)
        v = self.query_variants
        out = np.zeros((len(queries), v, self.dim), dtype=np.float32)
        for qi, emb in enumerate(self._variant_embeddings(queries, batch_size)):
            # Repeating an available variant leaves the max-merge unchanged.
            out[qi] = emb[np.arange(v) % len(emb)]
        return out


def load(config: dict, device: str, progress: bool = False, trust_remote_code: bool = False, **_: Any):
    from cir_demo.paths import cache_dir
    from cir_demo.retrievers.base import resolve_path
    from cir_demo.retrievers.dual_encoder import DualEncoderRetriever
    from cir_demo.retrievers.registry import load_retriever

    name = config["name"]
    p = {**PARAMS, **config.get("params", {})}
    inner = load_retriever(
        p["text_encoder"],
        device=device,
        progress=progress,
        trust_remote_code=trust_remote_code,
        batch_size=p["batch_size"],
    )
    if not isinstance(inner, DualEncoderRetriever):
        raise TypeError(
            f"retriever {name!r}: params.text_encoder {p['text_encoder']!r} must be an open_clip or "
            f"hf_clip retriever (it needs a text encoder)"
        )
    api_key = None
    if p["api_key_env"]:
        api_key = os.environ.get(p["api_key_env"])
        if not api_key:
            raise RuntimeError(
                f"retriever {name!r}: set the environment variable {p['api_key_env']} to the API key of "
                f"{p['base_url']} (or set params.api_key_env to null for an endpoint without keys)"
            )
    client = ChatClient(
        p["base_url"], api_key, float(p["timeout_s"]), int(p["max_retries"]), float(p["retry_backoff_s"])
    )
    cache_root = resolve_path(p["cache_dir"]) if p["cache_dir"] else cache_dir() / "text_proxy"
    generator = DescriptionGenerator(
        client,
        config["model"],
        DescriptionCache(cache_root),
        p["lengths"],
        p["temperature"],
        p["max_tokens"],
        int(p["image_max_side"]),
        int(p["concurrency"]),
    )
    spec = {
        "name": name,
        "family": FAMILY,
        "llm": {
            "model": config["model"],
            "base_url": p["base_url"],
            "temperature": p["temperature"],
            "max_tokens": p["max_tokens"],
            "image_max_side": p["image_max_side"],
        },
        "prompt_sha256": hashlib.sha256(
            json.dumps([SYSTEM_PROMPT, LENGTH_PROMPTS], sort_keys=True).encode()
        ).hexdigest(),
        "lengths": list(p["lengths"]),
        "merge": p["merge"],
        "postmerge": "max" if p["merge"] == "post" else None,
        "fallback": "instruction_text",
        "text_encoder": {k: v for k, v in inner.spec.items() if k != "versions"},
        "versions": inner.spec.get("versions", {}),
        "code": code_key((__name__,), ("pillow",)),
    }
    return TextProxyRetriever(name, inner, generator, p["merge"], spec, progress)
