"""i-CIR adapter (NeurIPS 2025, billpsomas/icir): `query_files.csv` + `database_files.csv` (+ images).

The annotations ship in a tarball outside GitHub (vrg.fel.cvut.cz/icir/icir_v1.0.0.tar.gz), which this
project could not read; the layout here is the one the repository's own code reads
(`utils_features.icir_dataset`): every line of both files is `image_path,text,instance`, split on
commas, no header. A query is (image, text, instance); its database is the database rows of its
instance; its positives are the rows of its instance with the same text (`map_calc_icir`).

Image id = the path as written, without a leading `./` or `icir/`, its '/' written ':' (ids name
files and cannot hold '/'): `icir/database/temple/hn7.jpg` is `database:temple:hn7.jpg`. The path
itself is kept for the image store, relative to the folder holding `icir/` (the code's
`root="./data"`), or to `image_dir`. Query ids
are the 1-based line numbers of query_files.csv. The instance's database travels in
`ScopedJudgments.gallery`; `meta["instance"]`; the paraphrase group is the instance (confidence
intervals resample instances).
"""

from __future__ import annotations

from pathlib import Path

from cir_demo.benchmarks._common import finish, require_file, warn_rows
from cir_demo.benchmarks.images import FolderImageStore
from cir_demo.benchmarks.schema import Benchmark, IssueCollector, Query
from cir_demo.benchmarks.scoped import ScopedJudgments

QUERY_FILE, DATABASE_FILE = "query_files.csv", "database_files.csv"


def load_icir(root: str | Path, image_dir: str | Path | None = None) -> Benchmark:
    """Read and validate an i-CIR folder; raise one BenchmarkError listing every error found."""
    root = Path(root)
    col = IssueCollector(root)
    db_rows = _read_rows(root / DATABASE_FILE, col)
    q_rows = _read_rows(root / QUERY_FILE, col)
    paths = {image_id(p): p for _, p, _, _ in [*db_rows, *q_rows]}
    galleries: dict[str, dict[str, None]] = {}
    positives: dict[tuple[str, str], dict[str, None]] = {}
    twice: list[str] = []
    for line, path, text, instance in db_rows:
        image = image_id(path)
        gallery = galleries.setdefault(instance, {})
        if image in gallery:
            twice.append(f"line {line}")
        gallery[image] = None
        positives.setdefault((instance, text), {})[image] = None
    warn_rows(
        col,
        twice,
        "image_path",
        "an image is listed twice in one instance's database (ranked once, and a "
        "positive counted once, where the reference code counts each row)",
        file=root / DATABASE_FILE,
    )
    frozen = {i: frozenset(g) for i, g in galleries.items()}
    queries, no_positives = [], []
    for line, path, text, instance in q_rows:
        loc = f"line {line}"
        if instance not in frozen:
            col.error(loc, "instance", f"instance {instance!r} has no database rows", file=root / QUERY_FILE)
            continue
        pos = tuple(positives.get((instance, text), ()))
        if not pos:
            no_positives.append(loc)
        judgments = ScopedJudgments(pos, gallery=frozen[instance])
        queries.append(Query(str(line), (image_id(path),), text, instance, judgments, {"instance": instance}))
    warn_rows(
        col,
        no_positives,
        "text",
        "no database row of the instance has this text: no positives (AP 0, as in the reference code)",
        file=root / QUERY_FILE,
        unit="queries",
    )
    warnings = finish(col)
    first = next(iter(paths.values()), "")
    base = (
        Path(image_dir)
        if image_dir is not None
        else (root.parent if (root.parent / first).exists() or not (root / first).exists() else root)
    )
    store = FolderImageStore(root=base, filename_pattern="{id}", filenames=paths)
    corpus = list(dict.fromkeys(image_id(p) for _, p, _, _ in db_rows))
    info = {"source": str(root), "image_dir": str(base), "instances": len(frozen)}
    return Benchmark("icir", "icir", queries, corpus, images=store, info=info, warnings=warnings)


def _read_rows(path: Path, col: IssueCollector) -> list[tuple[int, str, str, str]]:
    if not require_file(path, col, path.name):
        return []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        col.error(None, None, f"not UTF-8 text ({exc})", file=path)
        return []
    rows = []
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        parts = raw.strip().split(",")
        if len(parts) != 3 or not all(p.strip() for p in parts):
            col.error(
                f"line {n}",
                None,
                f"expected 'image_path,text,instance' (3 non-empty fields; the reference "
                f"code splits on every comma), got {len(parts)} field(s): {raw[:80]!r}",
                file=path,
            )
            continue
        rows.append((n, *parts))
    if not rows and not col.errors:
        col.error(None, None, "no rows", file=path)
    return rows


def image_id(path: str) -> str:
    """`icir/database/temple/hn7.jpg` -> `database:temple:hn7.jpg` (unique per path, usable as a file name)."""
    p = path.strip()
    for prefix in ("./", "icir/"):
        p = p[len(prefix) :] if p.startswith(prefix) else p
    return p.replace("/", ":")


__all__ = ["load_icir", "image_id"]
