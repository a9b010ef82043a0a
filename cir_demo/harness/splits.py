"""The test splits one `--eval` run evaluates side by side over one corpus (the world's in-distribution
test split and its compositional split): which ones, loading them, and report.md's "Both test splits"
table. One corpus, so the retrievers, indexes and reranker loaded for the first split serve the others."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from cir_demo.benchmarks.cli_args import BenchmarkChoice
from cir_demo.benchmarks.families import metric_family
from cir_demo.benchmarks.registry import RERANK_SUFFIX
from cir_demo.store.score import RunEvaluation

SECTION_TITLE = "Both test splits"


@dataclass
class SplitRun:
    """One split of a run: its benchmark, the folder its files go to, and its evaluations as they come."""

    label: str  # the split's name ("test", "compositional")
    bench: object
    out: Path
    evaluations: list[RunEvaluation] = field(default_factory=list)
    pairs: list[tuple[RunEvaluation, RunEvaluation]] = field(default_factory=list)


def side_splits(choice: BenchmarkChoice) -> list[str]:
    """The splits `--eval` evaluates beside the loaded one, each into `OUT/<split>/`: the benchmark's
    declared `eval_splits` after the first, when `--split` is not given; [] otherwise."""
    from cir_demo.benchmarks.registry import declared_defaults

    spec = declared_defaults(choice.name)
    if spec is None or len(spec.eval_splits) < 2 or choice.split is not None:
        return []
    return list(spec.eval_splits[1:])


def first_split(choice: BenchmarkChoice, bench) -> str:
    """The label of the split at the top of the run folder."""
    from cir_demo.benchmarks.registry import declared_defaults

    spec = declared_defaults(choice.name)
    return str((bench.info or {}).get("split") or (spec.eval_splits[0] if spec and spec.eval_splits else "test"))


def load_split(choice: BenchmarkChoice, split: str):
    """The benchmark the flags name, with `split` in place of its default split (cut to `--limit` as the first)."""
    return choice.load(split)


def _columns(family_name: str) -> list[str]:
    """The aggregates the table shows: the family's primary one, and NegRecall@10 (safety) where reported."""
    fam = metric_family(family_name)
    primary = fam.headline[fam.primary]
    return [primary] + [m for m in ("NegRecall@10",) if m in fam.headline.values() and m != primary]


def _value(ev: RunEvaluation | None, metric: str) -> float:
    return float(ev.metrics.get(metric, math.nan)) if ev is not None else math.nan


def both_splits_rows(splits: Sequence[SplitRun]) -> tuple[list[str], list[list]]:
    """(header, rows) of the table: per retriever, each aggregate per split, first stage then reranked, and
    the reranker's gain (reranked minus first stage) of the primary aggregate per split."""
    metrics = _columns(splits[0].bench.metric_family)
    runs = [{ev.name: ev for ev in s.evaluations} for s in splits]
    reranked = any(n.endswith(RERANK_SUFFIX) for n in runs[0])
    stages = [("", "")] + ([(RERANK_SUFFIX, " reranked")] if reranked else [])
    header = ["retriever"] + [f"{m}{word} {s.label}" for suffix, word in stages for m in metrics for s in splits]
    if reranked:
        header += [f"reranker's {metrics[0]} gain {s.label}" for s in splits]
    rows = []
    for name in [n for n in runs[0] if not n.endswith(RERANK_SUFFIX)]:
        row = [name] + [_value(r.get(name + suffix), m) for suffix, _ in stages for m in metrics for r in runs]
        if reranked:
            row += [_value(r.get(name + RERANK_SUFFIX), metrics[0]) - _value(r.get(name), metrics[0]) for r in runs]
        rows.append(row)
    return header, rows


def both_splits_section(splits: Sequence[SplitRun]) -> str:
    """Markdown: the headline metrics of every split side by side (each split's own files: its folder)."""
    header, rows = both_splits_rows(splits)
    where = ", ".join(
        f"`{s.label}`: " + ("this folder" if i == 0 else f"`{s.out.name}/`") for i, s in enumerate(splits)
    )
    lines = [
        f"## {SECTION_TITLE}",
        "",
        f"The same retrievers, index and reranker on each test split of one corpus ({where}). The compositional "
        "split asks for edits the training data never contains; where a paraphrase form has several templates it "
        "draws the one train never uses, elsewhere train's templates (docs/world.md); the gap "
        "between the columns is what the models lose out of distribution. Gain: reranked minus first stage.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in rows:
        lines.append(
            "| "
            + " | ".join([row[0]] + [_fmt(v, signed=h.startswith("reranker's")) for h, v in zip(header[1:], row[1:])])
            + " |"
        )
    return "\n".join(lines)


def _fmt(v: float, signed: bool = False) -> str:
    if v != v:
        return "n/a"
    return f"{v:+.4f}" if signed else f"{v:.4f}"
