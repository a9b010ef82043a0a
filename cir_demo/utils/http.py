"""The one HTTP client of the project and its one retry policy.

Every outgoing request (bulk image fetches, on-demand benchmark images, the chat-completions
reranker, the text proxy's description writer) goes through `request`, so they all:
- reuse connections: one `httpx.Client` per process, thread-safe, with a keep-alive pool
  large enough for the widest thread pool that shares it;
- retry the same failures: timeouts, connection errors, HTTP 408, 425, 429 and 5xx except
  501 and 505 (those two will not change on a retry), and a body the caller's `check` refuses;
- wait the same way between tries: exponential back-off `backoff_s * 2**attempt`, spread by a
  random factor in [0.5, 1.5) so that many workers turned away together do not come back
  together, or the server's `Retry-After` (seconds or an HTTP date) when it sends one; never
  more than `max_wait_s`.
httpx is imported on first use: a run that sends nothing does not pay for it.
"""

from __future__ import annotations

import email.utils
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable

MAX_WAIT_S = 60.0  # the longest pause between two tries, whatever Retry-After asks for
POOL_CONNECTIONS = 64  # open connections at once (image fetch workers, reranker concurrency)
KEEPALIVE_CONNECTIONS = 32  # idle connections kept for the next request

_clients: dict[int, object] = {}  # process id -> client: a forked child must not share its parent's sockets
_clients_lock = threading.Lock()


def retryable_status(status: int) -> bool:
    """An answer a later try may change: timeout, too early, rate limited, or a server error."""
    return status in (408, 425, 429) or (status >= 500 and status not in (501, 505))


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds a `Retry-After` header asks to wait (delay-seconds or an HTTP date); None when absent
    or unreadable. A date in the past means no wait."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None  # HTTP dates are GMT; one without a zone is not one
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass(frozen=True)
class RetryPolicy:
    """`retries` tries after the first; the pause before try n+1 is described in the module docstring."""

    retries: int = 2
    backoff_s: float = 0.5
    max_wait_s: float = MAX_WAIT_S

    def __post_init__(self):
        if self.retries < 0 or self.backoff_s < 0 or self.max_wait_s < 0:
            raise ValueError(f"retries, backoff_s and max_wait_s must be >= 0, got {self}")

    def wait_s(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds to wait after failed try `attempt` (0 = the first)."""
        asked = retry_after_seconds(retry_after)
        if asked is None:
            asked = self.backoff_s * (2**attempt) * random.uniform(0.5, 1.5)
        return min(asked, self.max_wait_s)


class RetryableBody(Exception):
    """Raised by a `check` for a complete answer whose body is still worth another try (a truncated image)."""


class HttpError(Exception):
    """A request that failed for good. `kind`: "status" (an HTTP error answer; `status`, `reason` and
    the start of `body` say which), "timeout", "network", or "body" (the caller's `check` refused it)."""

    def __init__(
        self,
        kind: str,
        message: str,
        url: str,
        *,
        attempts: int,
        status: int | None = None,
        reason: str = "",
        body: bytes = b"",
    ):
        super().__init__(message)
        self.kind, self.url, self.attempts = kind, url, attempts
        self.status, self.reason, self.body = status, reason, body

    @property
    def retryable(self) -> bool:
        """Whether the policy retried this kind of failure (so `attempts` tries were all spent)."""
        return self.kind != "status" or retryable_status(self.status or 0)


def client():
    """This process's shared `httpx.Client` (created on first use)."""
    pid = os.getpid()
    with _clients_lock:
        if pid not in _clients:
            import httpx

            limits = httpx.Limits(max_connections=POOL_CONNECTIONS, max_keepalive_connections=KEEPALIVE_CONNECTIONS)
            _clients[pid] = httpx.Client(limits=limits, follow_redirects=True)
        return _clients[pid]


def request(
    method: str,
    url: str,
    *,
    timeout: float,
    policy: RetryPolicy = RetryPolicy(),
    headers: dict | None = None,
    content: bytes | None = None,
    check: Callable[[bytes], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
):
    """Send one request, retried as `policy` says; the 2xx `httpx.Response` (its body read, and
    passed by `check` when given), or HttpError after the last try or at a failure not worth retrying."""
    import httpx

    for attempt in range(policy.retries + 1):
        last = attempt == policy.retries
        retry_after = None
        try:
            response = client().request(method, url, headers=headers, content=content, timeout=timeout)
        except httpx.TimeoutException:
            error = HttpError("timeout", f"timeout after {timeout:g} s", url, attempts=attempt + 1)
        except httpx.TransportError as exc:  # refused, reset, DNS, a cut transfer
            error = HttpError("network", f"connection failed: {exc or type(exc).__name__}", url, attempts=attempt + 1)
        else:
            error, retry_after = _answer_error(response, url, attempt + 1, check)
            if error is None:
                return response
            if not error.retryable:
                raise error
        if last:
            raise error
        sleep(policy.wait_s(attempt, retry_after))
    raise AssertionError("unreachable: the loop returns or raises")


def post_json(url: str, body: dict, *, api_key: str | None, timeout: float, policy: RetryPolicy):
    """POST `body` as JSON with the bearer key (when there is one), as `request` sends it: how the
    OpenAI-compatible clients (the chat reranker, the text proxy's description writer) call their endpoint."""
    import json

    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return request(
        "POST", url, timeout=timeout, policy=policy, headers=headers, content=json.dumps(body).encode("utf-8")
    )


def failure_kind(error: HttpError) -> str:
    """What failed, as a short code: http_<status>, timeout, network or body."""
    return f"http_{error.status}" if error.kind == "status" else error.kind


def failure_line(error: HttpError) -> str:
    """A failed request in one line, as every remote client reports it: the HTTP status with the start of
    the answer (or the timeout, the connection, the refused body), the URL, and the tries spent when the
    failure was retried."""
    if error.kind == "status":
        body = error.body.decode("utf-8", "replace").strip()
        what = f"HTTP {error.status} {error.reason}".strip() + (f": {body}" if body else "")
    else:
        what = str(error)
    tries = f" (after {error.attempts} attempts)" if error.retryable and error.attempts > 1 else ""
    return f"{what} ({error.url}){tries}"


def _answer_error(response, url: str, attempts: int, check) -> tuple[HttpError | None, str | None]:
    """(None, None) for a good answer; else the error and the answer's Retry-After."""
    if response.status_code >= 400:
        error = HttpError(
            "status",
            f"HTTP {response.status_code}",
            url,
            attempts=attempts,
            status=response.status_code,
            reason=response.reason_phrase,
            body=response.content[:300],
        )
        return error, response.headers.get("Retry-After")
    if check is not None:
        try:
            check(response.content)
        except RetryableBody as exc:
            return HttpError("body", str(exc), url, attempts=attempts), None
    return None, None
