"""Reranker backed by an OpenAI-compatible chat completions server (vLLM, SGLang, Ollama).

One request per candidate (max_tokens=1, temperature 0, logprobs with
top_logprobs); requests of one query run concurrently with a bound. Both
reference images and the candidate go in every request as data URLs, in the
order of the shared prompt template, so a server with prefix caching (vLLM's
automatic prefix caching) reuses the reference images' KV cache.

Missing tokens: when the yes or no token is not among the returned top
logprobs, the candidate is flagged "tokens_missing" (the logprob that was
found is kept) and it keeps its first-stage slot when reranked.
Failures: timeouts, connection errors, 429 and 5xx are retried as the project's one HTTP
client retries them (`cir_demo.utils.http`: back-off with jitter, Retry-After honoured,
connections reused); after the last retry (or on another HTTP error, or a response without
logprobs) the candidate is flagged "error: ...".
"""

from __future__ import annotations

import base64
import io
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from cir_demo.rerank.base import (
    FLAG_ERROR_PREFIX,
    FLAG_TOKENS_MISSING,
    CandidateScore,
    RerankRequest,
    Reranker,
    sigmoid,
)
from cir_demo.rerank.prompt import PromptTemplate, render_segments
from cir_demo.utils.code_hash import code_key
from cir_demo.utils.http import HttpError, RetryPolicy, failure_line, post_json


def image_data_url(image, image_format: str = "png") -> str:
    """A PIL image as a base64 data URL."""
    fmt = image_format.lower()
    if fmt not in ("png", "jpeg"):
        raise ValueError(f"image_format must be 'png' or 'jpeg', got {image_format!r}")
    buf = io.BytesIO()
    rgb = image if image.mode == "RGB" else image.convert("RGB")
    rgb.save(buf, format=fmt.upper(), **({"quality": 95} if fmt == "jpeg" else {}))
    return f"data:image/{fmt};base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def build_messages(system: str, segments, image_urls: dict[str, str]) -> list[dict]:
    """Chat messages from rendered prompt segments; image slots ("ref1", "ref2", "candidate") filled from `image_urls`."""
    content = [
        {"type": "text", "text": value}
        if kind == "text"
        else {"type": "image_url", "image_url": {"url": image_urls[value]}}
        for kind, value in segments
    ]
    return [{"role": "system", "content": system}, {"role": "user", "content": content}]


def parse_answer_logprobs(candidate_id: str, data: Any, yes: str, no: str) -> CandidateScore:
    """Score from a chat completion response: P(yes) = sigmoid(logprob_yes - logprob_no) over the first answer token."""
    try:
        first = data["choices"][0]["logprobs"]["content"][0]
        entries = list(first.get("top_logprobs") or [])
    except (KeyError, IndexError, TypeError):
        return CandidateScore(
            candidate_id,
            None,
            None,
            None,
            f"{FLAG_ERROR_PREFIX}response has no logprobs for the first token "
            "(does the server support logprobs/top_logprobs?)",
        )
    if "token" in first and "logprob" in first:
        entries.append({"token": first["token"], "logprob": first["logprob"]})
    found: dict[str, float] = {}
    for e in entries:
        tok = e.get("token") if isinstance(e, dict) else None
        if tok in (yes, no) and tok not in found:
            try:
                found[tok] = float(e["logprob"])
            except (KeyError, TypeError, ValueError):
                continue
    ly, ln = found.get(yes), found.get(no)
    if ly is None or ln is None:
        return CandidateScore(candidate_id, None, ly, ln, FLAG_TOKENS_MISSING)
    return CandidateScore(candidate_id, sigmoid(ly - ln), ly, ln, None)


class OpenAIReranker(Reranker):
    """base_url: e.g. http://localhost:8000/v1. api_key_env: NAME of the environment
    variable holding the key (None: no key, as for a local vLLM). concurrency:
    requests in flight at once. timeout: seconds per request. retries: extra
    attempts after a retryable failure."""

    backend = "openai"
    FLAGS = ("yes_token", "no_token", "model", "base_url", "api_key_env", "concurrency", "timeout", "retries")

    @classmethod
    def weights(cls, **kw) -> list:
        from cir_demo.utils.needs import ApiAccess

        return [ApiAccess(kw.get("base_url") or "http://localhost:8000/v1", kw.get("api_key_env"), kw.get("model"))]

    def __init__(
        self,
        base_url: str = "http://localhost:8000/v1",
        model: str = "Qwen/Qwen2.5-VL-7B-Instruct",
        *,
        api_key_env: str | None = None,
        yes_token: str = "yes",
        no_token: str = "no",
        top_logprobs: int = 20,
        concurrency: int = 8,
        timeout: float = 60.0,
        retries: int = 2,
        backoff: float = 0.5,
        image_format: str = "png",
        prompt: PromptTemplate | dict | None = None,
        extra_body: dict | None = None,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if not 1 <= top_logprobs <= 20:
            raise ValueError(f"top_logprobs must be in 1..20 (the OpenAI API limit), got {top_logprobs}")
        if not yes_token or not no_token or yes_token == no_token:
            raise ValueError(f"yes/no tokens must be two different non-empty strings, got {yes_token!r}, {no_token!r}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.api_key = None
        if api_key_env:
            self.api_key = os.environ.get(api_key_env)
            if not self.api_key:
                raise ValueError(f"environment variable {api_key_env} (api_key_env) is not set")
        self.concurrency = int(concurrency)
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.template = prompt if isinstance(prompt, PromptTemplate) else PromptTemplate.from_dict(prompt or {})
        self.image_format = image_format
        if image_format.lower() not in ("png", "jpeg"):
            raise ValueError(f"image_format must be 'png' or 'jpeg', got {image_format!r}")
        self.request_params = {"max_tokens": 1, "temperature": 0, "logprobs": True, "top_logprobs": int(top_logprobs)}
        self.extra_body = dict(extra_body or {})
        self.spec = {
            "backend": self.backend,
            "base_url": base_url.rstrip("/"),
            "model": model,
            "yes_token": yes_token,
            "no_token": no_token,
            "score": "sigmoid(logprob_yes - logprob_no) of the first answer token; exact token match",
            "prompt": self.template.to_dict(),
            "image_format": image_format.lower(),
            "request": {**self.request_params, **self.extra_body},
            "code": code_key((__name__,), ("pillow",)),
        }

    # ------------------------------------------------------------------ scoring
    def score(
        self, request: RerankRequest, candidate_ids: Sequence[str], candidate_images: Sequence[Any]
    ) -> list[CandidateScore]:
        if self._nothing_to_score(candidate_ids, candidate_images):
            return []
        system, segments = render_segments(
            self.template,
            request.instruction,
            len(request.reference_ids),
            self.spec["yes_token"],
            self.spec["no_token"],
        )
        urls = {f"ref{i + 1}": image_data_url(img, self.image_format) for i, img in enumerate(request.reference_images)}

        def one(i: int) -> CandidateScore:
            cid = str(candidate_ids[i])
            try:
                cand_url = image_data_url(candidate_images[i], self.image_format)
            except Exception as exc:
                return CandidateScore(cid, None, None, None, f"{FLAG_ERROR_PREFIX}cannot encode candidate image: {exc}")
            body = {
                "model": self.spec["model"],
                "messages": build_messages(system, segments, {**urls, "candidate": cand_url}),
                **self.request_params,
                **self.extra_body,
            }
            data, error = self._post_with_retries(body)
            if error is not None:
                return CandidateScore(cid, None, None, None, f"{FLAG_ERROR_PREFIX}{error}")
            return parse_answer_logprobs(cid, data, self.spec["yes_token"], self.spec["no_token"])

        workers = min(self.concurrency, len(candidate_ids))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rerank-api") as pool:
            return list(pool.map(one, range(len(candidate_ids))))

    def _post_with_retries(self, body: dict) -> tuple[Any, str | None]:
        """(response json, None) or (None, error text after the last attempt)."""
        try:
            response = post_json(
                self.url,
                body,
                api_key=self.api_key,
                timeout=self.timeout,
                policy=RetryPolicy(self.retries, self.backoff),
            )
        except HttpError as exc:
            return None, failure_line(exc)
        try:
            return response.json(), None
        except ValueError as exc:  # not JSON, or not UTF-8
            return None, f"response is not JSON ({exc}): {response.content[:200]!r}"
