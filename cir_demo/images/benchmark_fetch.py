"""A benchmark's missing images fetched as its command's flags say (`images fetch`,
`--fetch-images` on eval and index build, the app's fetch button): the fetch settings checked,
the address chosen (`--url-pattern` or the benchmark's own), then `fetch.fetch_images`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FetchSettings:
    """The fetch flags, typed (unpacked once by `images.cli.fetch_settings`); the defaults here are
    the flags' defaults (`images.cli.add_fetch_arguments` reads them)."""

    workers: int = 16  # parallel downloads
    retries: int = 3  # retries per image for transient failures
    timeout: float = 20.0  # seconds per request
    url_pattern: str | None = None  # a mirror's address with {id}; None: the benchmark's own
    report: str | None = None  # where the ids that could not be fetched go; None: beside the images
    progress: bool = True


def check_fetch_arguments(fetch: FetchSettings) -> None:
    from cir_demo.errors import UserError

    if fetch.workers < 1:
        raise UserError(f"--fetch-workers must be at least 1, got {fetch.workers}")
    if fetch.retries < 0:
        raise UserError(f"--fetch-retries must be 0 or more, got {fetch.retries}")
    if fetch.timeout <= 0:
        raise UserError(f"--fetch-timeout must be positive, got {fetch.timeout}")
    if fetch.url_pattern is not None and "{id}" not in fetch.url_pattern:
        raise UserError(f"--url-pattern must contain {{id}}, got {fetch.url_pattern!r}")


def fetch_for(bench, fetch: FetchSettings):
    """Fetch `bench`'s missing images as `fetch` says; returns the FetchReport."""
    from cir_demo.errors import UserError
    from cir_demo.images.coverage import has_file_images, needed_image_ids
    from cir_demo.images.fetch import fetch_images

    check_fetch_arguments(fetch)
    if not has_file_images(bench):
        raise UserError(f"benchmark {bench.name!r} has no image files to fetch (its images are generated)")
    store = bench.images
    if fetch.url_pattern:
        store.url_pattern = fetch.url_pattern
    if getattr(store, "url_pattern", None) is None:
        from cir_demo.benchmarks.registry import image_source

        source = image_source(bench.name)
        raise UserError(
            f"benchmark {bench.name!r} has no per-image address to fetch from. "
            + (source + " " if source else "")
            + "Put the images in the folder given by --image-dir, or pass --url-pattern with {id} "
            "where a server has them one by one"
        )
    return fetch_images(
        store,
        needed_image_ids(bench),
        workers=fetch.workers,
        retries=fetch.retries,
        timeout=fetch.timeout,
        progress=fetch.progress,
        report_path=fetch.report,
    )
