"""The code keys of an app start, computed with and without the per-process parse memo
(`cir_demo.utils.parse_memo`, which the entry points install): CPU per process and syntax trees built.

    python bench/bench_parse_memo.py [--repeats 7]

Each repeat runs two fresh Python processes, alternating which goes first: one computes the keys with
code_hash as written, the other with the memo installed. The keys are those the default world's app
computes before its explorer is ready (each world retriever's encoder, the FAISS index code, the
renderer, the judge and its features) and the shipped outputs' code hash (`--eval`'s every module). The
two processes must give the same keys; prints the median CPU seconds of computing them and the number of
`ast.parse` calls.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

ROOT = _Path(__file__).resolve().parent.parent
_sys.path.insert(0, str(ROOT))  # run as a script from anywhere

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

ROOTS = [
    ["cir_demo.retrievers.world_cir"],
    ["cir_demo.retrievers.openclip"],
    ["cir_demo.index.faiss_index"],
    ["cir_demo.world.render"],
    ["cir_demo.rerank.world_verifier"],
    ["cir_demo.models.world_judge"],
]

CHILD = """
import ast, json, sys, time
from cir_demo.utils import code_hash, parse_memo
if sys.argv[1] == "memo":
    parse_memo.install()
calls = [0]
parse = ast.parse
def counted(*a, **k):
    calls[0] += 1
    return parse(*a, **k)
ast.parse = counted
roots = json.loads(sys.argv[2])
started = time.process_time()
keys = [code_hash.code_sha256(tuple(r)) for r in roots]
from cir_demo.index.prebuilt_run import output_code_sha256
keys.append(output_code_sha256())  # its on-disk memo is in this process's own empty cache folder
print(json.dumps({"cpu": time.process_time() - started, "parses": calls[0], "keys": keys}))
"""


def run(mode: str) -> dict:
    with tempfile.TemporaryDirectory() as cache:  # empty: the shipped outputs' code hash is computed, not read back
        out = subprocess.run(
            [_sys.executable, "-c", CHILD, mode, json.dumps(ROOTS)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "CIR_DEMO_CACHE": cache},
        )
    return json.loads(out.stdout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=7, help="process pairs (default 7)")
    args = p.parse_args()
    got = {"plain": [], "memo": []}
    for i in range(args.repeats):
        for mode in ("plain", "memo") if i % 2 == 0 else ("memo", "plain"):
            got[mode].append(run(mode))
    keys = {mode: {json.dumps(r["keys"]) for r in runs} for mode, runs in got.items()}
    assert keys["plain"] == keys["memo"] and len(keys["plain"]) == 1, "the memo changed a key"
    cpu = {mode: statistics.median(r["cpu"] for r in runs) for mode, runs in got.items()}
    print(f"{len(ROOTS)} code keys and the shipped outputs' code hash, {args.repeats} fresh processes each")
    for mode in ("plain", "memo"):
        print(f"{mode:>6}: {cpu[mode]:.3f} CPU s (median), {got[mode][0]['parses']} syntax trees")
    print(f"ratio memo / plain: {cpu['memo'] / cpu['plain']:.2f}")


if __name__ == "__main__":
    main()
