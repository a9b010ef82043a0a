"""The store of runs: the one path from the engine to scored runs (docs/architecture.md).

`key` (what makes a run: benchmark, specs, depths, code, libraries), `score` (the one scoring: per-query
rows, aggregates, intervals, paired comparisons), `store` (`RunStore`: a run read from a stored eval
run, else the cache, else produced), `folders` (the eval run folders of a benchmark).
"""
