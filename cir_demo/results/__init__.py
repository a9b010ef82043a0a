"""Results files: reading rankings produced elsewhere and writing ours.

Below both `harness` and `rerank` in the layering: it imports only
`cir_demo.benchmarks` and `cir_demo.utils`.
"""
from cir_demo.results.files import ResultsFile, ResultsFormat, read_results, write_results

__all__ = ["ResultsFile", "ResultsFormat", "read_results", "write_results"]
