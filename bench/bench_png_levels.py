"""PNG zlib levels on the world's rendered images: CPU and bytes per image at each level, as the exports
(`world export`, `export_jsonl_benchmark` and the CIRR / FashionIQ / CIRCO exports with images, `world
render`) write them (`cir_demo.benchmarks.jsonl.EXPORT_PNG_LEVEL`).

    python bench/bench_png_levels.py [--size tiny] [--images 200] [--repeats 5]

Renders `--images` corpus images once, then encodes all of them at each level `--repeats` times: prints
the median milliseconds of CPU and the mean kilobytes per image, and checks each level decodes to the
rendered pixels.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import argparse  # noqa: E402
import io  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402


def main() -> None:
    from PIL import Image

    from cir_demo.benchmarks.jsonl import EXPORT_PNG_LEVEL
    from cir_demo.world import load_world

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="tiny", help="world size (default: tiny)")
    p.add_argument("--images", type=int, default=200, help="corpus images encoded (default 200)")
    p.add_argument("--repeats", type=int, default=5, help="encodings of all of them per level (default 5)")
    args = p.parse_args()
    bench = load_world(size=args.size, progress=False)
    ids = list(bench.corpus_ids)[: args.images]
    images = [bench.images.open(i) for i in ids]
    print(
        f"{len(images)} images of the {args.size} world, {images[0].size[0]} px; exports use level {EXPORT_PNG_LEVEL}"
    )
    for level in (6, 3, 1, 0):
        times, sizes = [], []
        for _ in range(args.repeats):
            t = time.process_time()
            encoded = []
            for image in images:
                buffer = io.BytesIO()
                image.save(buffer, format="PNG", compress_level=level)
                encoded.append(buffer.getvalue())
            times.append(time.process_time() - t)
        sizes = [len(b) for b in encoded]
        assert all(Image.open(io.BytesIO(b)).tobytes() == im.tobytes() for b, im in zip(encoded, images))
        print(
            f"  level {level}: {statistics.median(times) / len(images) * 1000:.2f} ms CPU, "
            f"{sum(sizes) / len(sizes) / 1024:.1f} KB per image (lossless: checked)"
        )


if __name__ == "__main__":
    main()
