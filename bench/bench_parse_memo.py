"""The code keys of an app start, computed with and without the parse memo (`cir_demo.utils.parse_memo`,
which the entry points install): CPU per process and syntax trees built.

    python bench/bench_parse_memo.py [--repeats 7]

Each repeat runs three fresh Python processes, in a rotating order: one computes the keys with code_hash
as written ("plain"), one with the memo installed and its on-disk folder empty ("memo": a first process,
which fills the folder), one with the memo installed and the folder an earlier process filled ("warm":
every later process until a file changes). The keys are those the default world's app
computes before its explorer is ready (each world retriever's encoder, the FAISS index code, the
renderer, the judge and its features) and the shipped outputs' code hash (`--eval`'s every module). The
three must give the same keys; prints the median CPU seconds of computing them and the number of
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
if sys.argv[1] != "plain":
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


def run(mode: str, warm_folder: str) -> dict:
    """One process of `mode`; "warm" uses `warm_folder` (filled by an earlier process), the others an
    empty folder of their own."""
    with tempfile.TemporaryDirectory() as cache:  # empty: the shipped outputs' code hash is computed, not read back
        env = {**os.environ, "CIR_DEMO_CACHE": cache, "CIR_DEMO_CODE_MEMO": os.path.join(cache, "parsed")}
        if mode == "warm":
            env["CIR_DEMO_CODE_MEMO"] = warm_folder
        out = subprocess.run(
            [_sys.executable, "-c", CHILD, mode, json.dumps(ROOTS)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
    return json.loads(out.stdout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=7, help="process pairs (default 7)")
    args = p.parse_args()
    modes = ("plain", "memo", "warm")
    got = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory() as warm:
        run("warm", warm)  # the first process on the folder fills it (not counted)
        for i in range(args.repeats):
            for mode in modes[i % 3 :] + modes[: i % 3]:
                got[mode].append(run(mode, warm))
    keys = {mode: {json.dumps(r["keys"]) for r in runs} for mode, runs in got.items()}
    assert keys["plain"] == keys["memo"] == keys["warm"] and len(keys["plain"]) == 1, "the memo changed a key"
    cpu = {mode: statistics.median(r["cpu"] for r in runs) for mode, runs in got.items()}
    print(f"{len(ROOTS)} code keys and the shipped outputs' code hash, {args.repeats} fresh processes each")
    for mode in modes:
        print(f"{mode:>6}: {cpu[mode]:.3f} CPU s (median), {got[mode][0]['parses']} syntax trees")
    print(f"ratio memo / plain: {cpu['memo'] / cpu['plain']:.2f}; warm / plain: {cpu['warm'] / cpu['plain']:.2f}")


if __name__ == "__main__":
    main()
