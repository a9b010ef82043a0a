"""FashionIQ adapter (validation split): `captions/cap.<category>.val.json` + `image_splits/split.<category>.val.json`.

Layout (as CLIP4Cir's FashionIQDataset reads it, categories dress, shirt, toptee):

- captions/cap.dress.val.json: a list of {"candidate": "<reference image>", "target": "<image>",
  "captions": ["<first relative caption>", "<second>"]}
- image_splits/split.dress.val.json: a list of image names; the category's gallery, the only images
  CLIP4Cir ranks for that category's queries.
- images/<name>.jpg (optional here; needed to embed).

Query ids are `<category>-<entry index>`; positives = (target,); `meta["category"]`; the query's
gallery travels in `ScopedJudgments.gallery` (one shared frozenset per category), so a run over the
union of the three galleries scores as the per-category ranking would. The instruction is the two
captions joined as CLIP4Cir's validation joins them (`join_captions`); both captions are kept in
`meta["captions"]` for other templates.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from cir_demo.benchmarks._common import files_checksum, finish, require_file, warn_rows
from cir_demo.benchmarks.images import FolderImageStore
from cir_demo.benchmarks.schema import Benchmark, BenchmarkError, IssueCollector, Query
from cir_demo.benchmarks.scoped import ScopedJudgments
from cir_demo.utils.io import write_json_atomic

CATEGORIES = ("dress", "shirt", "toptee")
SPLIT = "val"
GROUP_FIELD = "paraphrase_group_id"  # the exporter's extra key (caption pairs of one intent); CLIP4Cir ignores it


def join_captions(first: str, second: str) -> str:
    """CLIP4Cir's validation text: "<First, stripped and capitalised> and <second, stripped>".

    `strip('.?, ')` removes those characters at both ends; `str.capitalize` also lowercases the rest
    of the first caption, as in the reference code.
    """
    return f"{first.strip('.?, ').capitalize()} and {second.strip('.?, ')}"


def captions_path(root: Path, category: str) -> Path:
    return root / "captions" / f"cap.{category}.{SPLIT}.json"


def split_path(root: Path, category: str) -> Path:
    return root / "image_splits" / f"split.{category}.{SPLIT}.json"


def load_fashioniq(
    root: str | Path, image_dir: str | Path | None = None, categories: Sequence[str] | str = CATEGORIES
) -> Benchmark:
    """Read and validate the FashionIQ val files of `categories`; raise one BenchmarkError listing every error.

    image_dir: default root/images. The corpus is the union of the categories' galleries (file order).
    """
    root = Path(root)
    if isinstance(categories, str):
        categories = tuple(c.strip() for c in categories.split(",") if c.strip())
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown or not categories:
        raise BenchmarkError(f"parameter categories: choose among {', '.join(CATEGORIES)}, got {list(categories)!r}")
    col = IssueCollector(root)
    queries: list[Query] = []
    corpus: dict[str, None] = {}
    for category in categories:
        gallery_ids = _read_gallery(split_path(root, category), col)
        corpus.update(dict.fromkeys(gallery_ids))
        queries += _read_category(captions_path(root, category), category, frozenset(gallery_ids), col)
    img_dir = Path(image_dir) if image_dir is not None else root / "images"
    if image_dir is not None and not img_dir.is_dir():
        col.error(None, None, "image folder does not exist", file=img_dir)
    warnings = finish(col)
    info = {
        "source": str(root),
        "split": SPLIT,
        "categories": ",".join(categories),
        "image_dir": str(img_dir),
        "checksum": files_checksum(
            [p for c in categories for p in (split_path(root, c), captions_path(root, c))], SPLIT, categories
        ),
    }
    return Benchmark(
        "fashioniq",
        "fashioniq",
        queries,
        list(corpus),
        images=FolderImageStore(root=img_dir, filename_pattern="{id}.jpg"),
        info=info,
        warnings=warnings,
    )


def _read_json(path: Path, col: IssueCollector, what: str) -> Any:
    if not require_file(path, col, what):
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        col.error(None, None, f"malformed JSON: {exc}", file=path)
        return []
    if not isinstance(data, list) or not data:
        col.error(
            None,
            None,
            f"expected a non-empty JSON list, got {type(data).__name__}" + (" (empty)" if data == [] else ""),
            file=path,
        )
        return []
    return data


def _read_gallery(path: Path, col: IssueCollector) -> list[str]:
    names = _read_json(path, col, "image split file")
    bad = [k for k, n in enumerate(names) if not isinstance(n, str) or not n.strip()]
    for k in bad[:20]:
        col.error(f"entry {k}", None, "image name must be a non-empty string", file=path)
    ids = [n for n in names if isinstance(n, str) and n.strip()]
    if len(set(ids)) != len(ids):
        col.warn(None, None, f"{len(ids) - len(set(ids))} image names are listed twice (ranked once)", file=path)
    return list(dict.fromkeys(ids))


def _read_category(path: Path, category: str, gallery: frozenset[str], col: IssueCollector) -> list[Query]:
    queries = []
    ref_outside: list[str] = []
    empty: list[str] = []  # the real shirt and toptee files have three
    for k, e in enumerate(_read_json(path, col, "captions file")):
        loc = f"entry {k}"
        if not isinstance(e, dict):
            col.error(loc, None, f"expected an object, got {type(e).__name__}", file=path)
            continue
        n_errors = len(col.errors)
        ref, target, captions = e.get("candidate"), e.get("target"), e.get("captions")
        if not isinstance(ref, str) or not ref.strip():
            col.error(loc, "candidate", "missing reference image name", file=path)
        elif ref not in gallery:
            ref_outside.append(loc)
        if not isinstance(target, str) or not target.strip():
            col.error(loc, "target", "missing target image name", file=path)
        elif target not in gallery:
            col.error(
                loc,
                "target",
                f"target {target!r} is not in split.{category}.{SPLIT}.json (CLIP4Cir ranks "
                "only that gallery and asserts the target is in it)",
                file=path,
            )
        if not isinstance(captions, list) or len(captions) != 2 or not all(isinstance(c, str) for c in captions):
            col.error(loc, "captions", "expected a list of two relative captions", file=path)
        if len(col.errors) > n_errors:
            continue
        if not all(c.strip(".?, ") for c in captions):
            empty.append(loc)
        qid = f"{category}-{k}"
        meta = {"category": category, "captions": tuple(captions)}
        judgments = ScopedJudgments((target,), gallery=gallery)
        group = e.get(GROUP_FIELD) if isinstance(e.get(GROUP_FIELD), str) else qid
        queries.append(Query(qid, (ref,), join_captions(*captions), group, judgments, meta, target_id=target))
    warn_rows(
        col, empty, "captions", "an empty caption (kept, joined as CLIP4Cir joins it: ' and <second>')", file=path
    )
    warn_rows(
        col,
        ref_outside,
        "candidate",
        f"the reference is not in split.{category}.{SPLIT}.json (CLIP4Cir "
        "reads reference features from that gallery and would fail)",
        file=path,
    )
    return queries


# --------------------------------------------------------------------------- export
def export_fashioniq(
    benchmark: Benchmark, out_dir: str | Path, image_mode: str = "none", skip_two_image: bool = False
) -> dict[str, Path]:
    """Write `benchmark` in FashionIQ's val layout, one gallery per category.

    Paraphrases of one intent become FashionIQ's caption pairs: a group's paraphrases are taken two
    at a time (a lone last one is paired with the group's first), so each entry's two captions are
    two wordings of one change, as FashionIQ's two annotators wrote. Paraphrase groups are dealt to
    the three categories in turn. A category's gallery holds its entries' candidates and targets
    and a third of the other images (dealt in turn), so the galleries differ as FashionIQ's do.
    Only single-image queries with a target (else a first positive).
    image_mode "render" writes images/<id>.png (the loader finds .png beside .jpg). Two-image queries
    are refused, or left out with `skip_two_image` (the caller says so).
    """
    from cir_demo.benchmarks.cirr import single_image_queries
    from cir_demo.benchmarks.jsonl import export_images

    out = Path(out_dir)
    queries = single_image_queries(benchmark, skip_two_image, "FashionIQ triplets")
    groups: dict[str, list[Query]] = {}
    for q in queries:
        groups.setdefault(q.group_id, []).append(q)
    entries: dict[str, list[dict]] = {c: [] for c in CATEGORIES}
    for n, group in enumerate(groups.values()):
        first = group[0]
        target = first.target_id or (first.positives[0] if first.positives else None)
        if target is None:
            raise BenchmarkError(f"query {first.query_id!r}: no target or positive to write as 'target'")
        texts = [q.instruction for q in group]
        if len(texts) % 2:
            texts.append(texts[0])
        for i in range(0, len(texts), 2):
            entries[CATEGORIES[n % len(CATEGORIES)]].append(
                {
                    "candidate": first.reference_ids[0],
                    "target": target,
                    "captions": texts[i : i + 2],
                    GROUP_FIELD: first.group_id,
                }
            )
    images = list(dict.fromkeys([*benchmark.corpus_ids, *(q.reference_ids[0] for q in queries)]))
    named = {c: {i for e in entries[c] for i in (e["candidate"], e["target"])} for c in CATEGORIES}
    rest = [i for i in images if not any(i in n for n in named.values())]
    paths: dict[str, Path] = {}
    for n, category in enumerate(CATEGORIES):
        dealt = set(rest[n :: len(CATEGORIES)])
        paths[f"captions/{category}"] = captions_path(out, category)
        write_json_atomic(paths[f"captions/{category}"], entries[category], indent=None)
        paths[f"image_splits/{category}"] = split_path(out, category)
        write_json_atomic(
            paths[f"image_splits/{category}"], [i for i in images if i in named[category] or i in dealt], indent=None
        )
    if image_mode != "none":
        export_images(benchmark, images, out / "images", image_mode)
    return paths


__all__ = ["load_fashioniq", "export_fashioniq", "join_captions", "CATEGORIES"]
