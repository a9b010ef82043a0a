"""The shipped eval outputs (cir_demo/index/prebuilt_run.py) under `python -m cir_demo index prebuilt`:
building them runs `--eval` of the benchmark's defaults in this process, exactly as `python app.py
--eval` with the same flags does, and packs the run; `--check` says whether they match the benchmark,
the weights, the code and the libraries, and `--check --rerun` also runs `--eval` again and compares
every shipped file with what it wrote, byte for byte."""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

EVAL_COMMAND = ["python", "-m", "cir_demo", "eval"]


def eval_flags(args: argparse.Namespace, names: list[str], reranker: str | None) -> list[str]:
    """The `--eval` flags of the shipped run: the benchmark's, its retrievers and reranker, every other
    flag at its default (as the app's background run)."""
    from cir_demo.benchmarks.cli_args import benchmark_flags, benchmark_kwargs

    return [*benchmark_flags(args.benchmark, benchmark_kwargs(args), getattr(args, "limit", None)),
            "--retrievers", ",".join(names),
            "--rerank", reranker or "none"]


def run_eval(flags: list[str], out: Path) -> None:
    from cir_demo.harness import cli as eval_cli

    parser = argparse.ArgumentParser(prog="eval")
    eval_cli.add_arguments(parser)
    rc = eval_cli.run(parser.parse_args([*flags, "--out", str(out)]))
    if rc:
        raise ValueError(f"the --eval run for the shipped outputs failed (exit {rc}); see its message above")


def key_of_run(run_dir: Path) -> dict:
    """`run_key` of an `--eval` run folder, from its run_info.json and the code and libraries now."""
    from cir_demo.index.prebuilt_run import run_key
    from cir_demo.rerank.base import spec_hash_of
    from cir_demo.retrievers.base import spec_hash

    info = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    rr = info.get("reranker")
    return run_key(info["benchmark_fingerprint"], {n: spec_hash(s) for n, s in info["retrievers"].items()},
                   spec_hash_of(rr) if rr else None, info.get("rerank_top_n"))


def build_shipped_run(args: argparse.Namespace, bench, names: list[str], reranker: str | None) -> Path:
    """Run `--eval` and write its outputs as the benchmark's shipped run; refuses when the code changed
    while it ran (the key names the code the outputs came from)."""
    from cir_demo.index.prebuilt import code_version
    from cir_demo.index.prebuilt_run import output_code_sha256, pack_run, shipped_dir

    flags = eval_flags(args, names, reranker)
    code = output_code_sha256()
    with tempfile.TemporaryDirectory(prefix="cir-demo-shipped-") as tmp:
        out, started = Path(tmp) / "run", time.perf_counter()
        run_eval(flags, out)
        output_code_sha256.cache_clear()
        if output_code_sha256() != code:
            raise ValueError("the code under cir_demo/ changed while the run ran; run the command again")
        provenance = {"code": code_version(), "eval_seconds": round(time.perf_counter() - started, 1),
                      "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        return pack_run(out, shipped_dir(bench), key_of_run(out), [*EVAL_COMMAND, *flags], provenance)


def served_key(bench, names: list[str], reranker: str | None, top_n: int = 20) -> dict:
    """The key of the outputs `--eval` would write now for these retrievers and reranker."""
    from cir_demo.engine import RetrievalEngine, benchmark_fingerprint
    from cir_demo.index.prebuilt_run import run_key
    from cir_demo.retrievers.base import spec_hash

    engine = RetrievalEngine(bench, names, device="cpu")
    try:
        hashes = {n: spec_hash(engine.run_spec(n)) for n in names}
        rr = engine.reranker(reranker).spec_hash() if reranker else None
    finally:
        engine.close()
    return run_key(benchmark_fingerprint(bench), hashes, rr, top_n)


def differences(shipped: Path, written: Path) -> list[str]:
    """The files of installed run folder `shipped` that differ from run folder `written` (run_info.json's
    record of the run itself, times and command line, aside, and run_manifest.json's checksum of it);
    [] = byte-identical."""
    from cir_demo.index.prebuilt_run import INSTALLED_MARK, RUN_RECORD_KEYS, shipped_file

    names = set(json.loads((shipped / INSTALLED_MARK).read_text(encoding="utf-8"))["files"])
    wrote = {rel for rel in (p.relative_to(written).as_posix() for p in written.rglob("*") if p.is_file())
             if shipped_file(rel)}
    out = [f"{n}: shipped, not written by --eval" for n in sorted(names - wrote)]
    out += [f"{n}: written by --eval, not shipped" for n in sorted(wrote - names)]
    for name in sorted(names & wrote):
        a, b = (shipped / name).read_bytes(), (written / name).read_bytes()
        if Path(name).name == "run_info.json":  # the top one's and a split folder's
            a, b = ({k: v for k, v in json.loads(x).items() if k not in RUN_RECORD_KEYS} for x in (a, b))
        elif name == "run_manifest.json":  # it records run_info.json's checksum, which holds the run's times
            a, b = ({k: v for k, v in json.loads(x)["files"].items() if Path(k).name != "run_info.json"}
                    for x in (a, b))
        if a != b:
            out.append(f"{name}: differs from what --eval writes now")
    return out


def check_shipped_run(bench, names: list[str], reranker: str | None, rerun: bool) -> list[str]:
    """Why the benchmark's shipped outputs are not current ([] = they are); `rerun`: also run `--eval`
    again with their command and compare every file byte for byte."""
    from cir_demo.index.prebuilt_run import (install_shipped_run, read_shipped_manifest, shipped_dir,
                                             shipped_problems)

    directory = shipped_dir(bench)
    problems = shipped_problems(directory, served_key(bench, names, reranker))
    if problems or not rerun:
        return problems
    flags = read_shipped_manifest(directory)["command"][len(EVAL_COMMAND):]
    with tempfile.TemporaryDirectory(prefix="cir-demo-shipped-check-") as tmp:
        installed, problems = install_shipped_run(bench, served_key(bench, names, reranker), Path(tmp) / "runs")
        if problems:
            return problems
        run_eval(flags, Path(tmp) / "run")
        return differences(installed, Path(tmp) / "run")
