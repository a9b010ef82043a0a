"""Results files: reading rankings produced elsewhere and writing ours.

One reader module per format (`pinpoint`, `circo`, `run_dict`, `trec`),
detection and the mapping onto a benchmark's queries in `files`. Below both
`harness` and `rerank` in the layering: it imports only `cir_demo.benchmarks`
and `cir_demo.utils`.
"""

from cir_demo.results.files import (
    FORMAT_CHOICES,
    FORMATS,
    ResultsFile,
    ResultsFormat,
    parse_results,
    problem_line,
    read_results,
    write_results,
)

__all__ = [
    "FORMAT_CHOICES",
    "FORMATS",
    "ResultsFile",
    "ResultsFormat",
    "parse_results",
    "problem_line",
    "read_results",
    "write_results",
]
