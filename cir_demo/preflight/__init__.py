"""Before a run: what this machine has (device, weights, API keys, images), what is
missing, what a run would cost, and one line with the fix for each problem.

- `weights`: where each retriever's and reranker's weights come from and whether they are cached.
- `hub`: whether the Hugging Face hub answers, download sizes, gated and missing repositories.
- `checks`: the facts as table lines (the doctor command and the app show them); `Line` is the
  one problem type of this package.
- `request`: the retrievers and reranker a run asks for (its flags or the benchmark's defaults).
- `flags`, `folders`, `commands`: a command's flags, output and data folders, checked before
  any work; `commands.report` prints the problems and gives the exit status.
- `run`: the checks an `--eval` or `index build` makes before any long work.
- `dry_run`: what a run would download, encode and rerank, and how long it would take here.
- `doctor`: `python -m cir_demo doctor`.
"""
