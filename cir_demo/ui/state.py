"""The Explore view as URL query parameters, so a link opens the same view.

    ?benchmark=world&query=w00013&paraphrase=3&retrievers=world-cir,world-clip-image&rerank=1&top_n=20&k=10&sort=worst

`paraphrase` is the 1-based position of the phrasing within its intent (the query id
names the intent). Parsing never raises: unusable values are dropped with a note
for the page, and the view falls back to defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence
from urllib.parse import urlencode

KEYS = ("benchmark", "query", "paraphrase", "retrievers", "rerank", "top_n", "k", "sort")
ORDER = "order"  # the query list in benchmark order (no sort)
TOP_N_RANGE = (1, 50)
K_RANGE = (5, 50)


@dataclass(frozen=True)
class ViewState:
    benchmark: str | None = None
    query_id: str | None = None
    paraphrase: int | None = None  # 0-based position within the intent
    retrievers: tuple[str, ...] | None = None
    rerank: bool = False
    top_n: int = 20
    k: int = 10
    sort: str = ORDER  # the query list's sort (a failure sort's name)


@dataclass
class ParsedState:
    state: ViewState
    notes: list[str] = field(default_factory=list)


def encode_state(state: ViewState) -> str:
    """The query string (without '?') for a view; defaults are left out to keep links short."""
    params: list[tuple[str, str]] = []
    if state.benchmark:
        params.append(("benchmark", state.benchmark))
    if state.query_id:
        params.append(("query", state.query_id))
    if state.paraphrase is not None:
        params.append(("paraphrase", str(state.paraphrase + 1)))
    if state.retrievers is not None:
        params.append(("retrievers", ",".join(state.retrievers)))
    if state.rerank:
        params.append(("rerank", "1"))
        params.append(("top_n", str(state.top_n)))
    if state.k != ViewState.k:
        params.append(("k", str(state.k)))
    if state.sort and state.sort != ORDER:
        params.append(("sort", state.sort))
    return urlencode(params, safe=",:")


def with_sort(query: str, sort: str | None) -> str:
    """A view's query string (`encode_state`'s) with the list's sort replaced by `sort`."""
    from urllib.parse import parse_qsl

    state = decode_state(dict(parse_qsl(query or ""))).state
    return encode_state(replace(state, sort=sort or ORDER))


ECHO_CHARS = 60  # a link value echoed in a note is cut to this many characters


def cut(value) -> str:
    """A link value for a note, cut to ECHO_CHARS (a 5,000-character id is not echoed whole)."""
    text = str(value)
    return text if len(text) <= ECHO_CHARS else text[: ECHO_CHARS - 1] + "…"


def shown(value) -> str:
    """`cut(value)` in quotes."""
    return f"'{cut(value)}'"


def _int(params: Mapping[str, str], key: str, lo: int, hi: int, notes: list[str]) -> int | None:
    raw = params.get(key)
    if raw in (None, ""):
        return None
    try:
        value = int(str(raw))
    except ValueError:
        notes.append(f"link parameter {key}={shown(raw)} is not a whole number; ignored")
        return None
    if not lo <= value <= hi:
        notes.append(f"link parameter {key}={cut(value)} is outside {lo}..{hi}; ignored")
        return None
    return value


def decode_state(params: Mapping[str, str]) -> ParsedState:
    """Parse URL query parameters (syntax only; `resolve_state` checks them against the app)."""
    notes: list[str] = []
    unknown = sorted(k for k in params if k not in KEYS and not k.startswith("__"))
    if unknown:
        notes.append(
            f"unknown link parameter(s) {', '.join(cut(u) for u in unknown[:5])}"
            f"{' …' if len(unknown) > 5 else ''}; known: {', '.join(KEYS)}"
        )
    retrievers = None
    if params.get("retrievers") is not None:
        retrievers = tuple(dict.fromkeys(r.strip() for r in str(params["retrievers"]).split(",") if r.strip()))
    rerank_raw = str(params.get("rerank", "0")).lower()
    if rerank_raw not in ("0", "1", "true", "false", "yes", "no", "on", "off", ""):
        notes.append(f"link parameter rerank={shown(params.get('rerank'))} should be 0 or 1; ignored")
    paraphrase = _int(params, "paraphrase", 1, 1000, notes)
    state = ViewState(
        benchmark=params.get("benchmark") or None,
        query_id=params.get("query") or None,
        paraphrase=None if paraphrase is None else paraphrase - 1,
        retrievers=retrievers,
        rerank=rerank_raw in ("1", "true", "yes", "on"),
        top_n=_int(params, "top_n", *TOP_N_RANGE, notes) or ViewState.top_n,
        k=_int(params, "k", *K_RANGE, notes) or ViewState.k,
        sort=str(params.get("sort") or ORDER),
    )
    return ParsedState(state, notes)


def resolve_state(
    parsed: ParsedState,
    benchmark: str,
    query_ids: Sequence[str] | set[str],
    group_sizes: Mapping[str, int],
    retrievers: Sequence[str],
    can_rerank: bool,
    default_query: str | None,
    sorts: Sequence[str] | None = None,
) -> ParsedState:
    """Check a parsed link against what this app serves; unusable parts fall back with a note.

    `group_sizes`: query id -> number of paraphrases in its intent; `sorts`: the sorts offered (None: any).
    """
    s, notes = parsed.state, list(parsed.notes)
    if sorts is not None and s.sort != ORDER and s.sort not in sorts:
        notes.append(f"sort {shown(s.sort)} is not offered here; the list is in benchmark order")
        s = replace(s, sort=ORDER)
    if s.benchmark and s.benchmark != benchmark:
        notes.append(f"the link is for benchmark {shown(s.benchmark)}; this app serves {benchmark!r}")
        s = replace(s, query_id=None, paraphrase=None)
    if s.query_id and s.query_id not in query_ids:
        notes.append(f"query {shown(s.query_id)} is not in this benchmark; showing the query a link without one opens")
        s = replace(s, query_id=None, paraphrase=None)
    query_id = s.query_id or default_query
    if s.paraphrase is not None and query_id is not None and s.paraphrase >= group_sizes.get(query_id, 1):
        notes.append(f"paraphrase {s.paraphrase + 1} does not exist for query {query_id}; showing the query as linked")
        s = replace(s, paraphrase=None)
    if s.retrievers is not None:
        known = [r for r in s.retrievers if r in retrievers]
        dropped = [r for r in s.retrievers if r not in retrievers]
        if dropped:
            notes.append(
                f"retriever(s) {', '.join(cut(d) for d in dropped[:5])}{' …' if len(dropped) > 5 else ''} "
                "not loaded in this app; left out"
            )
        s = replace(s, retrievers=tuple(known[:4]) if known else None)
    if s.rerank and not can_rerank:
        notes.append("the link turns the reranker on, but no reranker is available here")
        s = replace(s, rerank=False)
    return ParsedState(replace(s, benchmark=benchmark, query_id=query_id), notes)


HUB_ORIGIN = "https://huggingface.co"  # the Space page that frames the app


def url_js(parent_origin: str = HUB_ORIGIN) -> str:
    """The page script that puts a view's query string into the address bar. Inside a frame (a Space
    shows the app in an iframe on huggingface.co) it also sends the Hub's `{queryString}` message to
    the framing page, which puts it in the address bar a visitor copies; the Hub passes that query
    string back into the frame's URL when the link is opened, where the page load reads it
    (https://huggingface.co/docs/hub/spaces-handle-url-parameters). The message goes to
    `parent_origin` only (a test serves its own framing page)."""
    import json

    return """
(query) => {
    if (typeof query !== "string") { return; }
    const url = new URL(window.location.href);
    url.search = query;
    window.history.replaceState(null, "", url.toString());
    if (window.parent !== window) {
        window.parent.postMessage({queryString: "?" + query}, %s);
    }
}
""" % json.dumps(parent_origin)
