"""The checks `--eval` and `index build` make before any long work (and before creating
anything): every requested retriever and reranker can load here (packages, remote-code
opt-in, transformers pin, weights cached or downloadable, API keys), and the benchmark's
images are present, fetched on request (`--fetch-images`), or the run is cut to the
images present with its coverage stated. A problem is a `UserError` with one line per
problem, each naming its fix.
"""

from __future__ import annotations

import sys

from cir_demo.errors import UserError
from cir_demo.preflight.checks import Line, device_line, reranker_lines, retriever_lines
from cir_demo.preflight.request import RunRequest


def model_lines(
    names, reranker: str | None, trust_remote_code: bool, device: str | None, device_when_blocked: bool = True
) -> list[Line]:
    """The device's line, then each retriever's and the reranker's. `device_when_blocked=False` leaves the
    device out when a model line already stops the run and no device was asked for: the device's line then
    says nothing the run needs (without a device asked for it blocks only where torch is missing, which each
    model that needs torch names in its own lines), and it costs the import of torch."""
    from cir_demo.retrievers.registry import get_config

    for name in names:
        get_config(name)  # unknown names first, with "did you mean"
    lines = []
    for name in names:
        lines += retriever_lines(name, trust_remote_code=trust_remote_code)
    if reranker:
        lines += reranker_lines(reranker)
    if device_when_blocked or device or not any(ln.blocking for ln in lines):
        lines.insert(0, device_line(device))
    return lines


def raise_on_blocking(lines: list[Line]) -> None:
    blocking = [ln for ln in lines if ln.blocking]
    if blocking:
        raise UserError("\n".join(ln.message() for ln in blocking))


def say(lines: list[Line], stream=None) -> None:
    """Warnings and first-use downloads, one line each (a run goes ahead with them)."""
    for ln in lines:
        if ln.status in ("warning", "download"):
            print(f"note: {ln.message()}", file=stream or sys.stderr, flush=True)


def images_for_run(bench, request: RunRequest, stream=None):
    """The benchmark a run can do with its images: fetched first with --fetch-images, then
    cut to the images present (coverage stated); a UserError when none are present."""
    from cir_demo.images.coverage import (
        coverage_line,
        image_coverage,
        missing_images_message,
        missing_images_parts,
        restrict_to_present,
    )

    stream = stream or sys.stderr
    cov = image_coverage(bench)
    if cov is None or cov.complete:
        return bench
    if request.fetch_images and cov.fetchable:
        from cir_demo.images.benchmark_fetch import fetch_for

        report = fetch_for(bench, request.fetch)
        print(f"fetch: {report.summary()}", file=stream, flush=True)
        cov = image_coverage(bench)
        if cov.complete:
            return bench
        detail, _ = missing_images_parts(cov, request.benchmark)
        message = f"{detail}; the ids that could not be fetched and why: {report.report_path}"
    else:
        message = missing_images_message(cov, request.benchmark)
    kept = restrict_to_present(bench, cov)
    if not kept.corpus_ids or not kept.queries:
        raise UserError(message)
    print(f"warning: {message}", file=stream, flush=True)
    print(f"warning: {coverage_line(bench, kept)}", file=stream, flush=True)
    return kept


def check_run(request: RunRequest, bench, names, reranker: str | None = None):
    """All checks for a run, cheap ones first; returns the benchmark to run (maybe cut to its images)."""
    from cir_demo.images.benchmark_fetch import check_fetch_arguments

    if request.fetch_images:
        check_fetch_arguments(request.fetch)
    lines = model_lines(names, reranker, request.trust_remote_code, request.device, device_when_blocked=False)
    raise_on_blocking(lines)
    say(lines)
    return images_for_run(bench, request)
