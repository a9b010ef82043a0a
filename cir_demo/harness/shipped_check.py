"""The check of the shipped `--eval` outputs (`python -m cir_demo index prebuilt --only eval --check`):
every number they hold is recomputed, so a forged one fails whatever records were rewritten with it.

- Per-query rows (per_query.csv of each split): the rows of a sample of intents drawn at check time
  (`SAMPLE_INTENTS` per split, from a random seed that is printed; `--draw-seed` repeats a draw, `--all`
  takes every intent) are recomputed from the models in an empty data folder and compared with the
  shipped ones; every row is checked for what it must satisfy whatever the ranking (`row_problems`).
- Everything else of each split (metrics.csv, metrics.json, paired.csv, breakdowns.csv, report.md,
  report.tex) is written again from those rows by the code `--eval` writes it with (harness/report.py,
  the report's sections) and compared number by number (`number_problems`); run_manifest.json's
  records are compared with the files.
- run_info.json (the run's specs, rerank depth, benchmark) must be what the manifest's key hashes
  (`run_info_problems`); plots/ are not drawn again (images drawn from the same rows; `--check
  --rerun` compares them byte for byte).

A forged row outside the drawn intents that still satisfies `row_problems` is found only when the draw
includes its intent: with f of n intents forged and k drawn, it escapes with probability
C(n - f, k) / C(n, k); `--all` leaves it no chance (CI runs it whenever the shipped outputs change,
.ci/run). The numbers are recomputed whatever the key says: staleness (outputs of other code, libraries
or weights) is reported apart from numbers that differ (`CONTENT`)."""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import random
import re
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from cir_demo.harness.settings import EvalSettings

SAMPLE_INTENTS = 24  # intents per split whose per-query rows are recomputed from the models
CONTENT = "content: "  # the prefix of a problem with a shipped number (not with its key or records)
SLACK = 2e-6  # rows are stored to 6 decimals: what is computed from them moves by a few 1e-7
RECOMPUTED_FILES = ("metrics.csv", "metrics.json", "paired.csv", "breakdowns.csv", "report.md", "report.tex")
PLOTS_SECTION = "\n## Plots\n"  # report.md's last section (harness/report.py)
SIG6 = ("paired.csv", "breakdowns.csv")  # written with %.6g: six significant digits, not a fixed count


@dataclass
class SplitCheck:
    """One split of the shipped run: its folder in the run ("" at the top), its benchmark, its rows."""

    label: str
    folder: str
    bench: object
    rows: pd.DataFrame | None = None

    def path(self, name: str) -> str:
        return f"{self.folder}/{name}" if self.folder else name


def eval_settings_of(flags: Sequence[str]) -> EvalSettings:
    """The settings `--eval` with these flags runs with (unpacked as its command unpacks them)."""
    from cir_demo.harness import cli as eval_cli

    parser = argparse.ArgumentParser(prog="eval")
    eval_cli.add_arguments(parser)
    return eval_cli.eval_settings(parser.parse_args(list(flags)))


def load_splits(settings: EvalSettings) -> list[SplitCheck]:
    """The splits of the shipped run, as `--eval` with its flags loads them."""
    from cir_demo.harness.splits import first_split, load_split, side_splits

    choice = settings.benchmark
    bench = choice.load()
    out = [SplitCheck(first_split(choice, bench), "", bench)]
    return out + [SplitCheck(s, s, load_split(choice, s)) for s in side_splits(choice)]


def run_order(names: Sequence[str], reranker: str | None) -> list[str]:
    """The runs of a split in the order `--eval` evaluates them: each retriever, then it reranked."""
    from cir_demo.benchmarks.registry import RERANK_SUFFIX

    return [r for n in names for r in ((n, f"{n}{RERANK_SUFFIX}") if reranker else (n,))]


def read_rows(path: Path) -> pd.DataFrame:
    """A per_query.csv as `--eval` held it: query metadata as text (an empty cell is no value)."""
    return pd.read_csv(path, dtype={"query_id": str, "group_id": str, "run": str}, keep_default_na=True)


# --------------------------------------------------------------------------- every row, whatever the ranking
def row_problems(split: SplitCheck, runs: Sequence[str], limit: int = 5) -> list[str]:
    """What the rows of `split` break that every ranking satisfies: each query of the benchmark once per
    run of the shipped command; the query's own columns (judgment counts, metadata) the same in every
    run; whole hit counts, recall = hits / positives, hits and negatives growing with the cutoff, AP@k
    within the bounds its hits allow (PinPoint's columns, where present)."""
    rows, name = split.rows, split.path("per_query.csv")
    out: list[str] = []
    want = {(r, q.query_id) for r in runs for q in split.bench.queries}
    have = list(zip(rows["run"], rows["query_id"]))
    if len(set(have)) != len(have):
        out.append(f"{CONTENT}{name}: a (run, query) is written twice")
    for what, keys in (("not shipped", want - set(have)), ("not a query of this run", set(have) - want)):
        if keys:
            run, query = sorted(keys)[0]
            out.append(f"{CONTENT}{name}: run {run} query {query}: {what} (and {len(keys) - 1} more)")
    if out:
        return out
    own = [c for c in rows.columns if c in ("group_id", "ref1", "ref2", "n_pos", "n_neg") or c in _meta_columns(split)]
    first = rows.drop_duplicates("query_id").set_index("query_id")[own]
    again = rows.set_index("query_id")[own]
    differ = ~((again == first.reindex(again.index)) | (again.isna() & first.reindex(again.index).isna()))
    for query, column in list(differ.stack()[lambda s: s].index)[:limit]:
        out.append(f"{CONTENT}{name}: query {query}: {column} differs between runs")
    out += _count_problems(rows, name, limit)
    return out


def _meta_columns(split: SplitCheck) -> list[str]:
    from cir_demo.metrics.breakdown import query_meta_frame

    return [c for c in query_meta_frame(split.bench.queries[:1]).columns if c != "query_id"]


def _count_problems(rows: pd.DataFrame, name: str, limit: int) -> list[str]:
    """Hit counts behind PinPoint's per-query columns (metrics/pinpoint.py): precision@k = hits / k,
    recall@k = hits / positives, AP@k's sum of precisions lies between the hits at the bottom of the top
    k and at its top, NegRecall@k = negatives / min(negatives listed, k); counts grow with k."""
    import numpy as np

    ks = sorted(int(c.split("@")[1]) for c in rows.columns if re.fullmatch(r"precision@\d+", c))
    if not ks or "n_pos" not in rows:
        return []
    scored = rows[rows["scored"].astype(bool)] if "scored" in rows else rows
    n_pos, n_neg = (
        scored["n_pos"].to_numpy(float),
        scored.get("n_neg", pd.Series(0, index=scored.index)).to_numpy(float),
    )
    bad: dict[int, str] = {}
    last_hits = last_negs = np.zeros(len(scored))
    for k in ks:
        hits = scored[f"precision@{k}"].to_numpy(float) * k
        checks = {
            f"precision@{k} is no whole number of hits in {k}": np.abs(hits - np.round(hits)) > 1e-4 * k,
            f"precision@{k} falls from the cutoff before": hits < last_hits - 1e-4 * k,
        }
        hits = np.round(hits)
        if f"recall@{k}" in scored:
            recall = np.where(n_pos > 0, hits / np.maximum(n_pos, 1), 0.0)
            checks[f"recall@{k} is not hits / positives"] = (
                np.abs(scored[f"recall@{k}"].to_numpy(float) - recall) > 2e-6
            )
        if f"AP@{k}" in scored:
            top = np.minimum(n_pos, k)
            low = np.array([sum(j / (k - h + j) for j in range(1, int(h) + 1)) for h in hits])
            ap = scored[f"AP@{k}"].to_numpy(float) * np.maximum(top, 1)
            slack = 1e-6 * np.maximum(top, 1)  # AP is stored to 6 decimals
            checks[f"AP@{k} lies outside what its hits allow"] = (n_pos > 0) & (
                (ap > hits + slack) | (ap < low - slack)
            )
        if f"NegRecall@{k}" in scored:
            negs = scored[f"NegRecall@{k}"].to_numpy(float) * np.minimum(n_neg, k)
            checks[f"NegRecall@{k} is no whole number of negatives"] = np.abs(negs - np.round(negs)) > 1e-4 * k
            checks[f"NegRecall@{k} falls from the cutoff before"] = np.round(negs) < last_negs
            last_negs = np.round(negs)
        for what, mask in checks.items():
            for i in np.flatnonzero(mask)[:limit]:
                bad.setdefault(int(i), what)
        last_hits = hits
    idx = sorted(bad)[:limit]
    return [
        f"{CONTENT}{name}: run {scored['run'].iloc[i]} query {scored['query_id'].iloc[i]}: {bad[i]}"
        + (f" (and {len(bad) - limit} more rows)" if j == limit - 1 and len(bad) > limit else "")
        for j, i in enumerate(idx)
    ]


# --------------------------------------------------------------------------- rows of a sample, from the models
def draw(groups: Sequence[str], k: int | None, seed: int, label: str) -> list[str]:
    """`k` of the paraphrase groups (intents) drawn with `seed` (every one when k is None)."""
    ordered = sorted(set(groups))
    if k is None or k >= len(ordered):
        return ordered
    return sorted(random.Random(f"{seed}/{label}").sample(ordered, k))


def escape_chance(n: int, k: int, forged: int) -> float:
    """The chance that a draw of `k` of `n` intents misses all of `forged` of them."""
    return math.comb(n - forged, k) / math.comb(n, k) if k <= n - forged else 0.0


def recomputed_rows(
    splits: Sequence[SplitCheck], names: Sequence[str], reranker: str | None, top_n: int, drawn: dict[str, list[str]]
) -> dict[str, str]:
    """{split label: per_query.csv text of the drawn intents' rows}, computed by the models as `--eval`
    computes them (harness/pipeline.py: retrieve to the eval depth, rerank the top `top_n`, score)."""
    from cir_demo.benchmarks.registry import RERANK_SUFFIX
    from cir_demo.engine import RetrievalEngine
    from cir_demo.store.score import evaluate_run, written_rows
    from cir_demo.store.store import produce_rerank, produce_run
    from cir_demo.utils.csv_text import frame_csv

    engine = RetrievalEngine(splits[0].bench, list(names), device="cpu")
    out = {}
    try:
        if reranker:
            engine.prefetch_corpus_embeddings(list(names), reranker)
        for split in splits:
            keep = {q.query_id for q in split.bench.queries if q.group_id in set(drawn[split.label])}
            sub = split.bench.subset(keep)
            frames = []
            for name in names:  # produced as the store produces every run (store/store.py)
                run, scores = produce_run(engine, name, queries=sub.queries)
                frames.append(written_rows(evaluate_run(sub, run, name, n_boot=0).per_query, name))
                if reranker:
                    rr = produce_rerank(engine, reranker, run, scores, top_n, queries=sub.queries)
                    frames.append(
                        written_rows(evaluate_run(sub, rr.run, name, n_boot=0).per_query, name + RERANK_SUFFIX)
                    )
            out[split.label] = frame_csv(pd.concat(frames, ignore_index=True))
    finally:
        engine.close()
    return out


def sample_problems(split: SplitCheck, shipped_text: str, recomputed_text: str) -> list[str]:
    """The recomputed rows the shipped per_query.csv lacks or holds other values for."""
    from cir_demo.harness.prebuilt_run_build import _per_query_rows, _same_value

    name = split.path("per_query.csv")
    have, now = _per_query_rows(shipped_text, name), _per_query_rows(recomputed_text, "recomputed rows")
    out = []
    for key, row in now.items():
        old = have.get(key)
        bad = [c for c in row if old is None or not _same_value(old.get(c), row[c])]
        if bad:
            out.append(
                f"{CONTENT}{name}: run {key[0]} query {key[1]}: "
                + (
                    "not shipped"
                    if old is None
                    else f"{bad[0]} is {old.get(bad[0])} shipped, {row[bad[0]]} recomputed by the models"
                    + (f" (and {len(bad) - 1} more columns)" if len(bad) > 1 else "")
                )
            )
    return out


# --------------------------------------------------------------------------- everything else, from the rows
def rewrite_from_rows(
    splits: Sequence[SplitCheck], runs: Sequence[str], run_info: dict, settings: EvalSettings, out: Path
) -> None:
    """Write every file of every split again from the shipped (verified) rows, into `out` as `--eval`
    lays them out: the evaluations, then report.py's writer with the report's sections."""
    from cir_demo.benchmarks.families import metric_family
    from cir_demo.benchmarks.registry import RERANK_SUFFIX
    from cir_demo.store.score import evaluation_of_rows
    from cir_demo.harness.pipeline import query_text_section
    from cir_demo.harness.report import write_outputs
    from cir_demo.harness.splits import SplitRun, both_splits_section

    done = []
    for split in splits:
        run = SplitRun(split.label, split.bench, out / split.folder if split.folder else out)
        for name in runs:
            rows = split.rows[split.rows["run"] == name].drop(columns="run").reset_index(drop=True)
            ev = evaluation_of_rows(split.bench, rows, name, n_boot=settings.n_boot, seed=settings.bootstrap_seed)
            run.evaluations.append(ev)
        by_name = {ev.name: ev for ev in run.evaluations}
        run.pairs = [(by_name[n], by_name[n + RERANK_SUFFIX]) for n in by_name if n + RERANK_SUFFIX in by_name]
        done.append(run)
    top_n, spec = run_info.get("rerank_top_n"), run_info.get("reranker") or {}
    for split in reversed(done):  # as pipeline._write_report: the first split's report has every split's table
        sections = [both_splits_section(done)] if split is done[0] and len(done) > 1 else []
        if split.pairs:
            maker = metric_family(split.bench.metric_family).rerank_section_maker()
            sections.append(
                maker(split.bench, split.pairs, top_n, spec, n_boot=settings.n_boot, seed=settings.bootstrap_seed)
            )
        sections += query_text_section(run_info.get("retrievers") or {})
        write_outputs(
            split.bench,
            split.evaluations,
            split.out,
            n_boot=settings.n_boot,
            seed=settings.bootstrap_seed,
            extra_sections=sections,
            plots=False,
            baseline=settings.baseline,
        )


NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _unit(token: str, sig6: bool) -> float:
    """One unit of the last place `token` was printed to (six significant digits for %.6g files)."""
    mantissa, _, exp = token.lower().partition("e")
    if sig6:
        value = abs(float(token))
        return 10 ** (math.floor(math.log10(value)) - 5) if value else 1e-6
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return 10 ** (int(exp or 0) - decimals) if decimals or exp else 0.0


def same_number(shipped: str, recomputed: str, sig6: bool = False) -> bool:
    """Whether two printed numbers agree to within one unit of their last printed place, plus `SLACK`
    (integers exactly)."""
    if shipped == recomputed:
        return True
    try:
        a, b = float(shipped), float(recomputed)
    except ValueError:
        return False
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    units = (_unit(shipped, sig6), _unit(recomputed, sig6))
    if not any(units):  # integers: counts
        return a == b
    return abs(a - b) <= max(units) + SLACK


def text_problems(name: str, shipped: str, recomputed: str, limit: int = 3) -> list[str]:
    """report.md / report.tex: the words exactly, each number to within `same_number`."""
    out = []
    for i, (a, b) in enumerate(zip(shipped.splitlines(), recomputed.splitlines()), 1):
        if NUMBER.split(a) != NUMBER.split(b) or len(NUMBER.findall(a)) != len(NUMBER.findall(b)):
            out.append(f"{CONTENT}{name} line {i}: {a.strip()[:100]!r}, recomputed {b.strip()[:100]!r}")
        else:
            for x, y in zip(NUMBER.findall(a), NUMBER.findall(b)):
                if not same_number(x, y):
                    out.append(
                        f"{CONTENT}{name} line {i}: {x} shipped, {y} recomputed from the rows ({a.strip()[:80]!r})"
                    )
                    break
        if len(out) >= limit:
            break
    if not out and len(shipped.splitlines()) != len(recomputed.splitlines()):
        out.append(f"{CONTENT}{name}: {len(shipped.splitlines())} lines, {len(recomputed.splitlines())} recomputed")
    return out


def table_problems(name: str, shipped: str, recomputed: str, limit: int = 3) -> list[str]:
    """A CSV: the same columns and rows, every cell to within `same_number`; names the row and column."""
    a, b = list(csv.reader(io.StringIO(shipped))), list(csv.reader(io.StringIO(recomputed)))
    if not a or not b or a[0] != b[0] or len(a) != len(b):
        return [f"{CONTENT}{name}: its columns or rows are not those recomputed from the rows"]
    sig6 = Path(name).name in SIG6
    out = []
    for i, (x, y) in enumerate(zip(a[1:], b[1:]), 2):
        for column, u, v in zip(a[0], x, y):
            if not same_number(u, v, sig6):
                label = " ".join(c for c in x[: next((j for j, c in enumerate(x) if NUMBER.fullmatch(c)), 2)] if c)
                out.append(
                    f"{CONTENT}{name} row {i} ({label}) column {column}: {u} shipped, {v} recomputed from the rows"
                )
                break
        if len(out) >= limit:
            break
    return out


def json_problems(name: str, shipped, recomputed, where: str = "", limit: int = 3) -> list[str]:
    """metrics.json: the same structure, every number to within 1e-5 or 1e-4 of it (written unrounded)."""
    out: list[str] = []

    def walk(a, b, at: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
            for k in a:
                walk(a[k], b[k], f"{at}.{k}" if at else str(k))
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{at}[{i}]")
        elif isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            if not (a == b or (a != a and b != b) or abs(a - b) <= 1e-5 + 1e-4 * abs(b)):
                out.append(f"{CONTENT}{name} {at}: {a} shipped, {b} recomputed from the rows")
        elif a != b:
            out.append(f"{CONTENT}{name} {at}: {str(a)[:60]!r} shipped, {str(b)[:60]!r} recomputed from the rows")

    walk(shipped, recomputed, where)
    return out


def file_problems(name: str, shipped: Path, recomputed: Path) -> list[str]:
    if not recomputed.is_file():
        return [f"{CONTENT}{name}: shipped, but not written from the rows"] if shipped.is_file() else []
    if not shipped.is_file():
        return [f"{CONTENT}{name}: written from the rows, not shipped"]
    a, b = shipped.read_text(encoding="utf-8"), recomputed.read_text(encoding="utf-8")
    if name.endswith("report.md"):  # its list of plots, which are not drawn again (links, no numbers)
        a, b = (x.split(PLOTS_SECTION)[0].rstrip() for x in (a, b))
    if name.endswith(".csv"):
        return table_problems(name, a, b)
    if name.endswith(".json"):
        pick = lambda d: {k: v for k, v in d.items() if k != "benchmark_fingerprint"}  # noqa: E731  (the key's part)
        return json_problems(name, pick(json.loads(a)), pick(json.loads(b)))
    return text_problems(name, a, b)


def manifest_problems(run_dir: Path) -> list[str]:
    """run_manifest.json's records against the shipped files it records (results/ is not shipped)."""
    import hashlib

    path = run_dir / "run_manifest.json"
    if not path.is_file():
        return []
    files = json.loads(path.read_text(encoding="utf-8")).get("files") or {}
    out = []
    for rel, record in files.items():
        sha = record.get("sha256") if isinstance(record, dict) else record
        if not (run_dir / rel).is_file() or not isinstance(sha, str):  # results/: not shipped
            continue
        if hashlib.sha256((run_dir / rel).read_bytes()).hexdigest() != sha:
            out.append(f"{CONTENT}run_manifest.json: its record of {rel} is not the file's")
    return out


def unpack_shipped(directory: Path, manifest: dict, out: Path) -> list[str]:
    """Every shipped file of `directory` decompressed into run folder `out`, with the manifest as
    prebuilt.json, whatever its key says; [] or the file whose content does not match its record."""
    from cir_demo.index.prebuilt_run import INSTALLED_MARK, read_stored, stored_name

    for name, record in manifest["files"].items():
        data = read_stored(directory, name, record)
        if data is None:
            return [f"damaged: {directory / stored_name(name)}: its content does not match the manifest's sha256"]
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    (out / INSTALLED_MARK).write_text(json.dumps(manifest), encoding="utf-8")
    return []


def run_info_problems(run_dir: Path, key: dict) -> list[str]:
    """run_info.json of each split against the key of the manifest: the specs (weights and query
    templates), the reranker and its depth, the benchmark it records are those the key hashes."""
    from cir_demo.harness.prebuilt_run_build import key_of_run

    out = []
    for info in sorted(run_dir.rglob("run_info.json")):
        now = key_of_run(info.parent)
        top = info.parent == run_dir  # a split's folder records its own split's fingerprint
        for field in ("benchmark_fingerprint",) * top + ("retrievers", "reranker", "rerank_top_n"):
            if now.get(field) != key.get(field):
                rel = info.relative_to(run_dir).as_posix()
                out.append(f"{CONTENT}{rel}: its {field} is not what the manifest's key records")
    return out


def check_numbers(
    run_dir: Path,
    names: Sequence[str],
    reranker: str | None,
    sample: int | None = SAMPLE_INTENTS,
    seed: int | None = None,
    say: Callable[[str], None] = print,
) -> list[str]:
    """Every number of the run folder `run_dir` (shipped outputs, unpacked) against its recomputation:
    the drawn intents' rows from the models (in an empty data folder), every row's consistency, every
    other file from the rows. `sample` None: every intent. [] = every number is what the code computes."""
    from cir_demo.harness.prebuilt_run_build import EVAL_COMMAND, empty_data_folder

    manifest = json.loads((run_dir / "prebuilt.json").read_text(encoding="utf-8"))
    settings = eval_settings_of(manifest["command"][len(EVAL_COMMAND) :])
    run_info = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    runs = run_order(names, reranker)
    seed = secrets.randbelow(2**31) if seed is None else seed
    with empty_data_folder():
        splits = load_splits(settings)
        problems = []
        for split in splits:
            split.rows = read_rows(run_dir / split.path("per_query.csv"))
            problems += row_problems(split, runs)
        if problems:
            return problems
        drawn = {s.label: draw([q.group_id for q in s.bench.queries], sample, seed, s.label) for s in splits}
        n = {s.label: len({q.group_id for q in s.bench.queries}) for s in splits}
        escape = max(escape_chance(n[label], len(d), 1) for label, d in drawn.items())
        say(
            "recomputing the per-query rows of "
            + ", ".join(f"{len(drawn[s.label])} of {n[s.label]} intents of the {s.label} split" for s in splits)
            + f" from the models (draw seed {seed}; --draw-seed {seed} repeats it, --all takes every intent; "
            f"one forged intent outside the draw escapes it with probability up to {escape:.0%})"
        )
        now = recomputed_rows(splits, names, reranker, int(run_info.get("rerank_top_n") or 20), drawn)
    for split in splits:
        text = (run_dir / split.path("per_query.csv")).read_text(encoding="utf-8")
        problems += sample_problems(split, text, now[split.label])
    if problems:
        return problems
    with tempfile.TemporaryDirectory(prefix="cir-demo-shipped-rows-") as tmp:
        rewrite_from_rows(splits, runs, run_info, settings, Path(tmp))
        for split in splits:
            for name in RECOMPUTED_FILES:
                rel = split.path(name)
                problems += file_problems(rel, run_dir / rel, Path(tmp) / rel)
    return problems + manifest_problems(run_dir) + run_info_problems(run_dir, manifest["key"])
