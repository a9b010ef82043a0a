"""Test helpers: a small PinPoint benchmark in the official schema and a real local HTTP
image server (Python's http.server on 127.0.0.1 in a thread) whose images can be good,
missing (404), slow, corrupt (truncated JPEG) or flaky (503 once)."""

from __future__ import annotations

import io
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from loopback import LoopbackServer

STRING, STRINGS = pa.large_string(), pa.list_(pa.string())
SCHEMA = pa.schema(
    [
        ("query_id", STRING),
        ("query_image_signature", STRING),
        ("query_image_signature2", STRING),
        ("instruction", STRING),
        ("positive_candidates", STRINGS),
        ("negative_candidates", STRINGS),
        ("token_count", pa.int64()),
        ("length_category", STRING),
        ("is_question", pa.bool_()),
        ("is_imperative", pa.bool_()),
        ("is_single", pa.bool_()),
        ("query_category", STRING),
        ("skin_tone_bucket", STRING),
        ("l1_interest", STRING),
    ]
)


def sig(n: int) -> str:
    return f"{n:032x}"


def write_pinpoint(folder: Path, n_corpus: int = 12) -> tuple[Path, Path, list[str]]:
    """(parquet, corpus list, every image id): 4 queries (2 intents), references inside the corpus."""
    corpus = [sig(i) for i in range(1, n_corpus + 1)]
    rows = []
    for q, (ref, text, pos, neg) in enumerate(
        [
            (corpus[0], "make it blue", corpus[2:4], corpus[4:6]),
            (corpus[0], "a blue one", corpus[2:4], corpus[4:6]),
            (corpus[1], "make it red", corpus[6:8], corpus[8:10]),
            (corpus[1], "red version", corpus[6:8], corpus[8:10]),
        ],
        start=1,
    ):
        rows.append(
            {
                "query_id": f"query_{q:05d}",
                "query_image_signature": ref,
                "query_image_signature2": "None",
                "instruction": text,
                "positive_candidates": list(pos),
                "negative_candidates": list(neg),
                "token_count": len(text.split()),
                "length_category": "short",
                "is_question": False,
                "is_imperative": True,
                "is_single": True,
                "query_category": "Swap",
                "skin_tone_bucket": "UNKNOWN",
                "l1_interest": "Art",
            }
        )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pinpoint_licensed.parquet"
    pq.write_table(pa.table({f.name: [r[f.name] for r in rows] for f in SCHEMA}, schema=SCHEMA), path)
    ids = folder / "index_signatures.txt"
    ids.write_text("\n".join(corpus))
    return path, ids, corpus


def jpeg_bytes(seed: int, size: int = 40) -> bytes:
    from PIL import Image

    img = Image.new("RGB", (size, size), ((seed * 40) % 256, (seed * 90) % 256, (seed * 150) % 256))
    for x in range(size):  # some structure, so a truncated file is really broken
        img.putpixel((x, (x * seed) % size), (255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


class ImageServer(LoopbackServer):
    """`behaviour[id]` is "ok" (default), "missing", "slow", "corrupt" or "flaky"; `delay_s` slows every answer."""

    def __init__(self, behaviour: dict[str, str] | None = None, delay_s: float = 0.0, slow_s: float = 0.5):
        self.behaviour = dict(behaviour or {})
        self.delay_s, self.slow_s = delay_s, slow_s
        self.requests: Counter = Counter()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                image_id = Path(self.path).stem
                server.requests[image_id] += 1
                kind = server.behaviour.get(image_id, "ok")
                time.sleep(server.delay_s + (server.slow_s if kind == "slow" else 0.0))
                if kind == "missing" or (kind == "flaky" and server.requests[image_id] == 1):
                    self.send_response(404 if kind == "missing" else 503)
                    self.end_headers()
                    return
                data = jpeg_bytes(int(image_id, 16) if all(c in "0123456789abcdef" for c in image_id) else 1)
                if kind == "corrupt":
                    data = data[: len(data) // 2]  # a cut transfer that still says its (cut) length
                self.send_response(200)
                self.send_header("Content-Type", "image/jpeg")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler)

    @property
    def url_pattern(self) -> str:
        return f"http://127.0.0.1:{self.port}/{{id}}.jpg"
