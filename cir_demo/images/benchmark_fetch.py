"""A benchmark's missing images fetched as its command's flags say (`images fetch`,
`--fetch-images` on eval and index build, the app's fetch button): the fetch flags checked,
the address chosen (`--url-pattern` or the benchmark's own), then `fetch.fetch_images`.
"""

from __future__ import annotations

import argparse


def check_fetch_arguments(args: argparse.Namespace) -> None:
    from cir_demo.errors import UserError

    if getattr(args, "fetch_workers", 1) < 1:
        raise UserError(f"--fetch-workers must be at least 1, got {args.fetch_workers}")
    if getattr(args, "fetch_retries", 0) < 0:
        raise UserError(f"--fetch-retries must be 0 or more, got {args.fetch_retries}")
    if getattr(args, "fetch_timeout", 1.0) <= 0:
        raise UserError(f"--fetch-timeout must be positive, got {args.fetch_timeout}")
    pattern = getattr(args, "url_pattern", None)
    if pattern is not None and "{id}" not in pattern:
        raise UserError(f"--url-pattern must contain {{id}}, got {pattern!r}")


def fetch_for(bench, args: argparse.Namespace, progress: bool = True):
    """Fetch `bench`'s missing images as `args` say; returns the FetchReport."""
    from cir_demo.errors import UserError
    from cir_demo.images.coverage import has_file_images, needed_image_ids
    from cir_demo.images.fetch import fetch_images

    check_fetch_arguments(args)
    if not has_file_images(bench):
        raise UserError(f"benchmark {bench.name!r} has no image files to fetch (its images are generated)")
    store = bench.images
    if getattr(args, "url_pattern", None):
        store.url_pattern = args.url_pattern
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
        workers=args.fetch_workers,
        retries=args.fetch_retries,
        timeout=args.fetch_timeout,
        progress=progress,
        report_path=getattr(args, "report", None),
    )
