"""The Space's public API: five named, typed endpoints (`gr.api`) over the explorer service, listed by
`gradio_client.Client(url).view_api()` and, with `python app.py --mcp`, served as MCP tools (their
names, descriptions and parameter descriptions come from the docstrings below). Every answer is built
by `cir_demo.explorer.api`; the page's own events are kept off the API (`hide_page_events`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
from typing import Any, Callable

import gradio as gr

from cir_demo.errors import user_message
from cir_demo.explorer import ServiceError, UploadError, validate_upload
from cir_demo.explorer import api as answers
from cir_demo.explorer.public_text import cut_inputs, hide_paths
from cir_demo.ui.gpu import on_gpu
from cir_demo.ui.served_files import served_folder

log = logging.getLogger("cir_demo.ui")


def hide_page_events(demo: gr.Blocks) -> None:
    """Every event wired so far only serves the page: off the API page and refused by the client libraries
    (the page itself still calls them)."""
    for fn in demo.fns.values():
        fn.api_visibility = "private"


def api_call(action: str) -> Callable:
    """A known problem (bad input, an unknown name) becomes one `gr.Error` line, which a client raises as
    its error; anything else too, with its type, its traceback in the log. No server path in either, and
    no input quoted beyond its first 100 characters (`cut_inputs`)."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def call(*args, **kwargs):
            inputs = [args, {k: v for k, v in kwargs.items() if k != "request"}]
            try:
                return fn(*args, **kwargs)
            except gr.Error as exc:
                raise gr.Error(hide_paths(cut_inputs(str(exc.message), inputs)), print_exception=False) from None
            except (ServiceError, UploadError) as exc:
                raise gr.Error(hide_paths(cut_inputs(f"{action}: {exc}", inputs)), print_exception=False) from None
            except Exception as exc:
                known = user_message(exc)
                if known is None:
                    log.exception("%s", action)
                text = f"{action}: {known}" if known is not None else f"{action} failed ({type(exc).__name__}: {exc})"
                raise gr.Error(hide_paths(cut_inputs(text, inputs)), print_exception=False) from None

        return call

    return wrap


def session_of(request: gr.Request | None) -> str:
    """The client's session (a `gradio_client.Client`, a page visitor): whose uploaded runs a call may name."""
    return getattr(request, "session_hash", None) or ""


def uploaded_image(file: Any, field: str):
    """An uploaded image validated as the page validates one (`validate_upload`), named by its field and
    its file name only."""
    if not file:
        return None
    path = file.get("path") if isinstance(file, dict) else str(file)
    name = (file.get("orig_name") if isinstance(file, dict) else None) or "upload"
    return validate_upload(path, name=f"{field} ({name})")


def image_file(image, image_id: str) -> gr.FileData:
    """The image as a PNG in this process's served folder (written once per id), for gradio to send."""
    path = served_folder() / "api-images" / f"{hashlib.sha256(image_id.encode()).hexdigest()[:24]}.png"
    if not path.is_file():
        import io

        from cir_demo.utils.io import write_bytes_atomic

        buffer = io.BytesIO()
        image.convert("RGB").save(buffer, format="PNG")
        write_bytes_atomic(path, buffer.getvalue())
    return gr.FileData(path=str(path), orig_name=f"{image_id}.png", mime_type="image/png")


def add_endpoints(demo: gr.Blocks, get_service: Callable) -> None:
    """Add the public endpoints to `demo` (inside its `with` block)."""
    runs_by_service: dict[int, answers.RunRankings] = {}

    @api_call("search")
    @on_gpu
    def search(
        image: gr.FileData,
        instruction: str,
        image2: gr.FileData | None = None,
        retrievers: list[str] | None = None,
        k: int = 10,
        rerank: bool = False,
        rerank_top_n: int = 20,
        request: gr.Request = None,
    ) -> dict:
        """Search the loaded corpus with one or two reference images and an instruction; per retriever, the ranked list (image_id, score, rank; with rerank also first_stage_rank and p_yes) and the seconds it took.

        Args:
            image: the reference image (PNG, JPEG, WebP, ...; at most 25 MB)
            instruction: what should change in the reference image, e.g. "the same bag in red"; with two images write <img1> and <img2>
            image2: an optional second reference image
            retrievers: the retrievers to rank with, 1 to 4 of those the app serves (default: its first four)
            k: results per retriever, 1 to 50 (default 10)
            rerank: rerank each retriever's top rerank_top_n with the app's reranker (default false)
            rerank_top_n: how many of each ranking the reranker rescores, 1 to 100 (default 20)
        """
        images = [v for v in (uploaded_image(image, "image"), uploaded_image(image2, "image2")) if v is not None]
        service = get_service()
        if retrievers:
            answers.check_runs(service, retrievers, session_of(request), noun="retriever")
        return answers.search_answer(service, images, instruction, retrievers, k, rerank, rerank_top_n)

    @api_call("query")
    @on_gpu
    def query(
        query_id: str,
        retrievers: list[str] | None = None,
        k: int = 10,
        rerank: bool = False,
        rerank_top_n: int = 20,
        request: gr.Request = None,
    ) -> dict:
        """A benchmark query ranked by each retriever: the ranked lists with each item's judgment (positive, negative or null), each retriever's per-query metrics of the benchmark's family, the query and its paraphrases.

        Args:
            query_id: a query id of the loaded benchmark (e.g. from /failures rows or a paraphrase's query_id)
            retrievers: the retrievers to rank with, 1 to 4 of those the app serves or this session sent to /evaluate (default: the app's first four)
            k: results per retriever, 1 to 50 (default 10)
            rerank: rerank each retriever's top rerank_top_n with the app's reranker (default false)
            rerank_top_n: how many of each ranking the reranker rescores, 1 to 100 (default 20)
        """
        return answers.query_answer(get_service(), query_id, retrievers, k, rerank, rerank_top_n, session_of(request))

    @api_call("failures")
    @on_gpu
    def failures(
        sort: str = "worst",
        runs: list[str] | None = None,
        top: int | None = 20,
        columns: str = "key",
        request: gr.Request = None,
    ) -> dict:
        """The benchmark's queries in the order of a failure sort, as the page's query list and `python -m cir_demo failures --sort` order them: query_id, why, then <run>/<metric> per run.

        Args:
            sort: the failure sort, any the page's sort menu offers: worst, all_fail, diff:A,B (A's largest gain over B first; diff:A,B:METRIC on another metric), benchmark (benchmark order), shortcut, rerank_helped / rerank_hurt, or a sort of the benchmark's family; an unknown name lists those offered
            runs: the runs to read: columns the app serves, or results files this session sent to /evaluate (default: the app's columns)
            top: only the first top rows (default 20; null: all, up to 10,000)
            columns: "key" (default: each run's primary metric, its tie-breaking measure and the metric a diff sort compares) or "all" (every per-query column `failures` writes)
        """
        service = get_service()
        cache = runs_by_service.setdefault(id(service), answers.RunRankings(service))
        return answers.failures_answer(service, cache, sort, runs, top, columns, session_of(request))

    @api_call("evaluate")
    def evaluate(results_file: gr.FileData, name: str | None = None, request: gr.Request = None) -> dict:
        """Score a results file on the loaded benchmark as `python app.py --eval` scores it: its headline metrics, and the paired comparisons (B - A with a 95% interval and p-value) against the results files the app serves; this session (no other client) may then name it in /query and /failures as the run named in "run".

        Args:
            results_file: a results file for the loaded benchmark, in any format --eval reads (PinPoint or CIRCO JSON, a run dict, a TREC run)
            name: the run's name (default: the file's name without extension)
        """
        if not results_file:
            raise ServiceError("results_file: upload a results file")
        # gradio keeps an upload under its own file name, which errors and the column's name then read
        path = results_file.get("path") if isinstance(results_file, dict) else str(results_file)
        return answers.evaluate_answer(get_service(), path, name or None, session_of(request))

    @api_call("image")
    def image(image_id: str) -> gr.FileData:
        """An image of the loaded benchmark (a corpus image or a query's reference) as PNG.

        Args:
            image_id: the image's id, as the rankings give it
        """
        return image_file(answers.image_of(get_service(), image_id), image_id)

    for fn in (search, query, failures, evaluate, image):
        gr.api(fn, api_name=fn.__name__)
        document(demo, fn)


def document(demo: gr.Blocks, fn: Callable) -> None:
    """Name each parameter of endpoint `fn` on the API page by its name, described by its docstring's
    Args line (gradio labels them "1st", "2nd"... and describes none)."""
    from gradio.utils import get_function_description, get_function_params

    _, described, _ = get_function_description(fn)
    names = [name for name, *_ in get_function_params(fn)]  # gr.Request left out, as gradio leaves it out
    block_fn = next(f for f in demo.fns.values() if f.api_name == fn.__name__)
    for comp, name in zip(block_fn.inputs, names):
        comp.label = name
        comp._api_info = {**comp._api_info, "additional_description": described.get(name, "")}
    for comp in block_fn.outputs:
        comp.label = "image" if fn.__name__ == "image" else "answer"
