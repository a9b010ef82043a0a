"""HTML for the result grid and the query header (pure string functions; no gradio).

Judgments are shown by colour AND text AND frame style, never colour alone:
positives get a solid green frame and the badge "✓ positive"; explicit negatives a
dashed red frame and "✗ explicit negative" (in the benchmark family's words: "target" on CIRR
and FashionIQ, "hard negative" on EDIR). Every image has an alt text that says the same thing.
"""

from __future__ import annotations

import html
import math
import re
from typing import Iterable, Sequence

from cir_demo.explorer import MODALITY_LABELS, Column, Comparison, QueryView, Tile
from cir_demo.explorer.views import REFERENCE_MARK

NEAR_MISS_SHOWN = 0.5  # a tile says "near miss?" when the judge's P(near miss) is at least this
TAG_TITLES = {
    "composed": "ranks with the reference image(s) and the instruction together",
    "image only": "ranks with the reference image alone (a baseline)",
    "text only": "ranks with the instruction alone (a baseline)",
    "results file": "a ranking read from a results file",
}
# short names on the rows, each with its full name in a title and the legend; other metrics keep their own
METRIC_PREFIXES = {"Recall@": "R@", "Recall_subset@": "Rs@", "precision@": "P@"}
METRIC_LABELS = {"precision@10": "P@10"}  # names that are no prefix's


def metric_label(metric: str) -> str:
    """A per-column metric's short name: R@5 (Recall@5), Rs@2 (Recall_subset@2), P@10; AP@25 as it is."""
    if metric in METRIC_LABELS:
        return METRIC_LABELS[metric]
    for full, short in METRIC_PREFIXES.items():
        if metric.startswith(full):
            return short + metric[len(full) :]
    return metric


def abbreviations(metrics: Iterable[str]) -> list[str]:
    """ "R@k = Recall@k" for each short prefix the `metrics` use (the legend's line of names)."""
    used = [full for full in METRIC_PREFIXES if any(m.startswith(full) for m in metrics)]
    return [f"{METRIC_PREFIXES[f]}k = {f}k" for f in used]


# Scoped to each gr.HTML through `css_template` (so it works however the app is launched).
CSS = """
.cir-legend { font-size: 0.8rem; margin: 6px 0 0 0; opacity: 0.9; }
.cir-legend span { margin-right: 14px; display: inline-block; }
/* one row per retriever, its ranks left to right (as CIR papers' qualitative figures); the row's
   width decides how many tiles a line holds: ten on a laptop, two or three on a phone */
.cir-grid { display: flex; flex-direction: column; gap: 6px; container-type: inline-size; }
.cir-col { border: 1px solid #c8c8c8; border-radius: 8px; padding: 3px 6px 4px 6px; min-width: 0; }
.cir-col-head { display: flex; flex-wrap: wrap; align-items: baseline; column-gap: 12px; margin-bottom: 2px; }
.cir-col h3 { font-size: 0.95rem; margin: 0; overflow-wrap: break-word; hyphens: none; }
.cir-tag { display: inline-block; font-size: 0.72rem; font-weight: 400; border: 1px solid #888; border-radius: 4px;
           padding: 0 4px; margin-left: 4px; }
.cir-metrics { font-size: 0.8rem; }
.cir-metrics b { font-variant-numeric: tabular-nums; }
.cir-before { font-size: 0.75rem; opacity: 0.85; }
.cir-counts { font-size: 0.78rem; }
.cir-metrics span[title] { cursor: help; }
/* where the target is beyond the tiles: one more item of the row head, in its size, set apart by its tone */
.cir-where { font-size: 0.78rem; color: #8a4b00; overflow-wrap: anywhere; }
.cir-error { color: #a40000; font-size: 0.85rem; border: 2px solid #a40000; border-radius: 6px; padding: 6px; }
.cir-note { font-size: 0.75rem; opacity: 0.85; }
.cir-tiles { list-style: none; margin: 0; padding: 0; display: grid; gap: 6px;
             grid-template-columns: repeat(10, minmax(0, 1fr)); }
@container (max-width: 820px) { .cir-tiles { grid-template-columns: repeat(auto-fill, minmax(92px, 1fr)); } }
@container (max-width: 560px) { .cir-tiles { grid-template-columns: repeat(auto-fill, minmax(120px, 1fr)); } }
.cir-tile { border: 3px solid transparent; border-radius: 6px; padding: 1px; font-size: 0.72rem; line-height: 1.25;
            min-width: 0; }
.cir-thumb { position: relative; }
.cir-thumb img { width: 100%; aspect-ratio: 1 / 1; object-fit: cover; display: block; border-radius: 3px; }
.cir-tile.cir-pos { border: 3px solid #1a7f37; }
.cir-tile.cir-neg { border: 3px dashed #c62828; }
.cir-chips { position: absolute; left: 2px; top: 2px; right: 2px; display: flex; flex-wrap: wrap; gap: 2px; }
.cir-badge { display: inline-block; font-weight: 700; border-radius: 4px; padding: 0 3px; font-size: 0.68rem; }
.cir-pos .cir-badge { background: #1a7f37; color: #fff; }
.cir-neg .cir-badge { background: #c62828; color: #fff; }
.cir-mark { display: inline-block; border: 1px dotted #555; border-radius: 4px; padding: 0 3px; font-size: 0.68rem;
            background: rgba(255, 255, 255, 0.9); color: #222; }
.cir-near { font-weight: 700; color: #8a4b00; border-bottom: 1px dotted currentColor; cursor: help; }
.cir-rank { font-weight: 700; }
.cir-up { color: #1a7f37; font-weight: 700; }
.cir-down { color: #c62828; font-weight: 700; }
.cir-id { opacity: 0.75; display: block; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.cir-missing { width: 100%; aspect-ratio: 1 / 1; display: flex; align-items: center; justify-content: flex-end;
               flex-direction: column; background: #eee; color: #555; overflow: hidden; text-align: center;
               padding: 2px 2px 8px 2px; box-sizing: border-box; }  /* its text under the chips */
.cir-missing code { font-size: 0.65rem; word-break: break-all; }
.cir-card { display: flex; gap: 10px; align-items: flex-start; }
.cir-card-text { flex: 1 1 160px; min-width: 0; }
.cir-refs { display: flex; gap: 8px; flex-wrap: wrap; align-items: flex-start; }
.cir-refs figure { margin: 0; max-width: 224px; }
.cir-card .cir-refs { gap: 6px; flex: 0 1 auto; flex-wrap: nowrap; }
.cir-card .cir-refs figure { width: 120px; min-width: 72px; flex: 0 1 120px; }
.cir-refs img { width: 100%; border-radius: 6px; border: 1px solid #bbb; display: block; }
.cir-refs figcaption { font-size: 0.72rem; overflow-wrap: anywhere; }
.cir-instruction { font-size: 1.1rem; margin: 0 0 4px 0; overflow-wrap: anywhere; }
.cir-facts { font-size: 0.78rem; opacity: 0.9; }
.cir-facts span { margin-right: 10px; display: inline-block; overflow-wrap: anywhere; line-height: 1.35; }
.cir-loading { border: 1px solid #c8c8c8; border-radius: 8px; padding: 16px 20px; margin: 8px 0; }
.cir-loading h3 { margin: 0 0 8px 0; font-size: 1.15rem; }
.cir-loading p { margin: 4px 0; }
.cir-loading progress { width: 100%; max-width: 520px; height: 14px; display: block; margin: 6px 0; }
.cir-loading .cir-step { font-weight: 600; }
.cir-loading.cir-failed { border: 2px solid #a40000; }
"""


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


# Markdown punctuation that can start a link, image, emphasis, code, heading, list or table, and
# ":" so that no "scheme://" survives for autolinking (GFM/linkify work on the source text)
_MD_PUNCT = re.compile(r"([\\`*_{}\[\]()#+\-.!|~:>])")


def md_escape(text: object) -> str:
    """`text` as inert Markdown: it renders as the same characters, never as a link, image, tag
    or structure. For every value that comes from a URL, a file or folder name, a results file
    or an error message, before it is put into a gr.Markdown."""
    one_line = " ".join(str(text).split())  # a newline could start a block (heading, list, fence)
    return _MD_PUNCT.sub(r"\\\1", html.escape(one_line, quote=False))


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}f}"


def prob(p: float | None) -> str:
    """A probability with two decimals, or two significant digits of its distance to 0 or 1 when that is
    under 0.01 (0.00031, 0.50, 0.99962), so that tiles the reranker ordered never all read 0.00 or 1.00."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "n/a"
    if p <= 0.0 or p >= 1.0:
        return f"{p:g}"
    gap = min(p, 1.0 - p)
    digits = 2 if gap >= 0.01 else min(1 - math.floor(math.log10(gap)), 8)
    return f"{p:.{digits}f}"


_COUNT = re.compile(r"^(?P<what>.*?):?\s*(?P<done>[\d,]+)\s*/\s*(?P<total>[\d,]+)\s*$")


def loading_html(stage: str, detail: str, elapsed: float, error: str | None = None) -> str:
    """The panel shown where the results will be while the explorer loads: what is being done, the
    running counts (n/N, with a bar) and the seconds since start; or why loading failed."""
    if error:
        return (
            f'<div class="cir-loading cir-failed" role="alert"><h3>The explorer could not load</h3>'
            f'<p>{esc(error)}</p><p class="cir-note">The server log has the details; reload the page '
            "after fixing the cause.</p></div>"
        )
    rows = []
    for part in (p.strip() for p in (detail or "").split(";")):
        m = _COUNT.match(part)
        if not m:
            if part:
                rows.append(f"<p>{esc(part)}</p>")
            continue
        done, total = int(m["done"].replace(",", "")), int(m["total"].replace(",", ""))
        share = f" ({done / total:.0%})" if total else ""
        rows.append(
            f"<p>{esc(m['what'] or 'working')}: <b>{done:,} / {total:,}</b>{share}</p>"
            f'<progress max="{total}" value="{min(done, total)}" aria-label="{esc(m["what"])}"></progress>'
        )
    return (
        f'<div class="cir-loading" role="status" aria-live="polite">'
        f'<h3>Loading the explorer… <span class="cir-elapsed">{elapsed:.0f} s</span></h3>'
        f'<p class="cir-step">{esc(stage or "starting")}</p>{"".join(rows)}'
        '<p class="cir-note">The results appear here by themselves when loading is done (a first start '
        "on an empty data folder prepares the benchmark and its indexes once; later starts take seconds).</p>"
        "</div>"
    )


DEFAULT_WORDS = ("positive", "explicit negative")


def badges(words: Sequence[str] = DEFAULT_WORDS) -> dict[str, tuple[str, str]]:
    """judgment -> (badge text, CSS class), in the benchmark family's words."""
    out = {"positive": (f"✓ {words[0]}", "cir-pos")}
    if words[1]:
        out["negative"] = (f"✗ {words[1]}", "cir-neg")
    return out


# what a tile's mark means (the protocol's marks: `explorer.views.protocol_scope`)
MARK_TEXTS = {
    "img_set": "a member of the query's img_set (Recall_subset ranks among them)",
    REFERENCE_MARK: "the query's own reference image, which this benchmark's protocol ranks like any other",
}


def legend(
    reranked: bool,
    judged: bool,
    near_miss: bool = False,
    metrics: dict[str, str] | None = None,
    words: Sequence[str] = DEFAULT_WORDS,
    marks: Iterable[str] = (),
) -> str:
    """`metrics`: per-column metric -> what it means (the family's `FailureViews.legend`); `marks`: the
    marks on the tiles shown (each gets its line)."""
    parts = []
    marks = set(marks)
    if metrics and "Recall_subset@1" in metrics:
        marks.add("img_set")  # the subset metric is defined by it, shown or not
    if judged:
        parts.append(f"<span>✓ {esc(words[0])} = green solid frame</span>")
        if words[1]:
            parts.append(f"<span>✗ {esc(words[1])} = red dashed frame</span>")
        parts.append("<span>no badge = neither</span>")
        names = abbreviations(metrics or {})
        if names:
            parts.append(f"<span>{esc(', '.join(names))}</span>")
        parts += [
            f'<span title="{esc(text)}">{esc(metric_label(m))}: {esc(text)}</span>'
            for m, text in (metrics or {}).items()
        ]
    parts += [f"<span>{esc(m)} = {esc(text)}</span>" for m, text in MARK_TEXTS.items() if m in marks]
    if judged:
        parts.append("<span>definitions: “What am I looking at?”</span>")
    if reranked:
        parts += [
            "<span>▲/▼ places moved by the reranker</span>",
            "<span>P(yes): the reranker's relevance probability</span>",
        ]
    if reranked and near_miss:
        parts += [
            '<span title="the world judge says: the wanted item with one thing wrong (P(near miss) at least '
            f"{NEAR_MISS_SHOWN}); its ranking puts such candidates lower\">near miss?: the judge's warning</span>"
        ]
    return f'<div class="cir-legend">{" ".join(parts)}</div>' if parts else ""


def movement(tile: Tile, k: int) -> tuple[str, str]:
    """(visible text, words for screen readers) of a tile's rank change after reranking."""
    if tile.first_stage_rank is None:
        return "", ""
    if tile.first_stage_rank > k:
        return (
            f'<span class="cir-up">new in top {k}</span> (was #{tile.first_stage_rank})',
            f"new in the top {k}, was rank {tile.first_stage_rank}",
        )
    moved = tile.moved or 0
    if moved > 0:
        return f'<span class="cir-up">▲{moved}</span>', f"moved up {moved} (was rank {tile.first_stage_rank})"
    if moved < 0:
        return f'<span class="cir-down">▼{-moved}</span>', f"moved down {-moved} (was rank {tile.first_stage_rank})"
    return "= same place", "same place"


def tile_html(tile: Tile, k: int, words: Sequence[str] = DEFAULT_WORDS) -> str:
    badge, cls = badges(words).get(tile.judgment or "", ("", ""))
    move_html, move_words = movement(tile, k)
    words = [f"Rank {tile.rank}: {tile.image_id}"]
    if badge:
        words.append(badge[2:])
    words += tile.marks
    if tile.score is not None:
        words.append(f"score {fmt(tile.score)}")
    if move_words:
        words.append(move_words)
    if tile.p_yes is not None:
        words.append(f"P(yes) {prob(tile.p_yes)}")
    if tile.p_near is not None and tile.p_near >= NEAR_MISS_SHOWN:
        words.append(f"the judge calls it a near miss (P {fmt(tile.p_near, 2)})")
    alt = esc(", ".join(words))
    img = (
        f'<img src="{tile.thumb}" alt="{alt}" title="{alt}" loading="lazy">'
        if tile.thumb
        else f'<div class="cir-missing" role="img" aria-label="{alt}" title="{alt}">no image here<br>'
        f"<code>{esc(tile.image_id)}</code></div>"
    )
    # the judgment and the protocol's marks sit on the image, so a tile is two lines of text high
    chips = []
    if badge:
        chips.append(f'<span class="cir-badge">{esc(badge)}</span>')
    chips += [f'<span class="cir-mark" data-mark="{esc(m)}">{esc(m)}</span>' for m in tile.marks]
    thumb = (
        f'<div class="cir-thumb">{img}' + (f'<div class="cir-chips">{"".join(chips)}</div>' if chips else "") + "</div>"
    )
    lines = [
        f'<span class="cir-rank">#{tile.rank}</span>'
        + (f' · <span title="score">{fmt(tile.score)}</span>' if tile.score is not None else "")
    ]
    if move_html:
        lines.append(move_html)
    if tile.p_yes is not None:
        near = (
            f' · <span class="cir-near" title="the judge says: the wanted target with one thing wrong '
            f'(P(near miss) {fmt(tile.p_near, 2)}); reranking ranks it lower">near miss?</span>'
            if tile.p_near is not None and tile.p_near >= NEAR_MISS_SHOWN
            else ""
        )
        shown_near = f" · P(near miss) {prob(tile.p_near)}" if tile.p_near is not None else ""
        lines.append(f"P(yes) {prob(tile.p_yes)}{shown_near}{near}")
    elif tile.flag:
        lines.append(f"not scored ({esc(tile.flag)})")
    judgment = f' data-judgment="{esc(tile.judgment)}"' if tile.judgment else ""
    return (
        f'<li class="cir-tile {cls}" data-image-id="{esc(tile.image_id)}"{judgment}>{thumb}'
        + "<br>".join(lines)
        + f'<span class="cir-id" title="{esc(tile.image_id)}">{esc(tile.image_id)}</span></li>'
    )


def metrics_line(metrics: dict[str, float] | None) -> str:
    if not metrics:
        return ""
    return " · ".join(
        (f'<span title="{esc(m)}">{esc(metric_label(m))}</span>' if metric_label(m) != m else esc(m))
        + f" <b>{fmt(v)}</b>"
        for m, v in metrics.items()
    )


def counts_line(tiles: Sequence[Tile], k: int, words: Sequence[str] = DEFAULT_WORDS) -> str:
    n_pos = sum(t.judgment == "positive" for t in tiles)
    n_neg = sum(t.judgment == "negative" for t in tiles)
    neg = f" · {n_neg} ✗ {esc(words[1])}" if words[1] else ""
    return (
        f'<div class="cir-counts" data-positives="{n_pos}" data-negatives="{n_neg}">top {min(k, len(tiles))}: '
        f"{n_pos} ✓ {esc(words[0])}{neg}</div>"
    )


def column_html(col: Column, k: int, judged: bool, words: Sequence[str] = DEFAULT_WORDS) -> str:
    """One retriever's row: its name, tag, metrics and counts on one line, its tiles left to right."""
    tag = MODALITY_LABELS.get(col.modality, col.modality)
    head = (
        f'<h3>{esc(col.retriever)}<span class="cir-tag" title="{esc(TAG_TITLES.get(tag, ""))}">{esc(tag)}</span></h3>'
    )
    if col.error:
        return (
            f'<section class="cir-col" aria-label="Results of {esc(col.retriever)}">{head}'
            f'<div class="cir-error" role="alert">⚠ {esc(col.retriever)} failed: {esc(col.error)}</div></section>'
        )
    parts = [head]
    if judged:
        parts.append(f'<div class="cir-metrics">{metrics_line(col.metrics)}</div>')
        if col.first_stage_metrics is not None:
            parts.append(f'<div class="cir-before">before reranking: {metrics_line(col.first_stage_metrics)}</div>')
        parts.append(counts_line(col.tiles, k, words))
        if col.where:  # the target's official rank beyond the tiles shown (and CIRR's img_set rank)
            parts.append(f'<div class="cir-where">{esc(col.where)}</div>')
    body = [f'<div class="cir-col-head">{"".join(parts)}</div>']
    if col.note:
        body.append(f'<div class="cir-note">{esc(col.note)}</div>')
    body.append('<ol class="cir-tiles">' + "".join(tile_html(t, k, words) for t in col.tiles) + "</ol>")
    return f'<section class="cir-col" aria-label="Results of {esc(col.retriever)}">{"".join(body)}</section>'


def results_html(comparison: Comparison | None, empty: str = "Pick a query to see results.") -> str:
    """The retrievers' rows, one under the other, and the legend under them (a figure's caption)."""
    if comparison is None or not comparison.columns:
        return f'<p class="cir-note">{esc(empty)}</p>'
    reranked = comparison.reranker is not None
    head = ""
    if reranked:
        head = (
            f'<div class="cir-note">Reranked with {esc(comparison.reranker)}: top {comparison.top_n} reordered by '
            f"{esc(comparison.ranking or 'P(yes)')}; scores are first-stage similarities.</div>"
        )
    grid = "".join(column_html(c, comparison.k, comparison.judged, comparison.words) for c in comparison.columns)
    near_miss = "near miss" in (comparison.ranking or "")
    marks = {m for c in comparison.columns for t in c.tiles for m in t.marks}
    return (
        head
        + f'<div class="cir-grid">{grid}</div>'
        + legend(reranked, comparison.judged, near_miss, comparison.legend, comparison.words, marks)
    )


def references_html(thumbs: Sequence[str | None], labels: Sequence[str]) -> str:
    figs = []
    for uri, label in zip(thumbs, labels):
        img = (
            f'<img src="{uri}" alt="{esc(label)}">'
            if uri
            else f'<div class="cir-missing" role="img" aria-label="{esc(label)}">image unavailable</div>'
        )
        figs.append(f"<figure>{img}<figcaption>{esc(label)}</figcaption></figure>")
    return f'<div class="cir-refs">{"".join(figs)}</div>'


def query_header_html(view: QueryView, instruction: str | None = None) -> str:
    """The query card: its reference image(s) beside the instruction and the query's facts."""
    q = view.query
    labels = [
        f"Reference image {i + 1} ({r})" if len(q.reference_ids) > 1 else f"Reference image ({r})"
        for i, r in enumerate(q.reference_ids)
    ]
    facts = " ".join(f"<span><b>{esc(k)}</b>: {esc(v)}</span>" for k, v in view.facts)
    text = q.instruction if instruction is None else instruction
    return (
        '<div class="cir-card">'
        + references_html(view.reference_thumbs, labels)
        + '<div class="cir-card-text">'
        + f'<div class="cir-instruction" aria-label="instruction">“{esc(text)}”</div>'
        + f'<div class="cir-facts">{facts}</div></div></div>'
    )


def notes_markdown(notes: Iterable[str]) -> str:
    """A Markdown list of plain-text notes (each escaped: notes echo link parameters, file names,
    error messages)."""
    notes = [n for n in notes if n]
    return "\n".join(f"- {md_escape(n)}" for n in notes)
