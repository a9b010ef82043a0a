"""The Report tab: the metrics table (95% intervals) and plots of the latest `--eval` run
of the loaded benchmark (or another run picked from the list)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import re

import gradio as gr
import pandas as pd

from cir_demo.explorer import ExplorerService
from cir_demo.explorer.public_text import hide_paths
from cir_demo.ui.components import md_escape
from cir_demo.ui.guard import guarded


# What a run shares with a visitor, as downloads: text and tables only (never HTML, never a link),
# and all of them with the run's PNG plots in one zip, where report.md's links to plots/ resolve
DOWNLOADS = ("report.md", "metrics.csv", "metrics.json", "per_query.csv", "breakdowns.csv", "paired.csv")
RUN_ZIP = "run.zip"

# Every column the metrics table may show: (label, definition). `metric@K` columns are matched by
# pattern (`column_label`), so a family's other cutoffs read the same way.
COLUMNS = {
    "run": ("Run", "the retriever; “+rerank”: its top n reordered by the reranker"),
    "total_queries": ("Queries", "queries scored"),
    "coverage": ("Coverage", "share of the benchmark's queries the run has a ranking for (1 = all)"),
    "ling_sens_paraphrase_range": ("Paraphrase range",
                                   "AP@10 max − min over the phrasings of one intent, averaged over intents; "
                                   "lower is more robust"),
    "ling_sens_range": ("Official sensitivity range", "precision@10 max − min over queries sharing reference "
                        "images (PinPoint's evaluate.py); lower is more robust"),
}
AT_K = {
    "mAP": ("mAP@{k}", "AP@{k} (average precision of the top {k}) averaged over the queries; higher is better"),
    "precision": ("P@{k}", "positives among the top {k}, divided by {k}, averaged; higher is better"),
    "NegRecall": ("NegRecall@{k}", "explicit negatives in the top {k} over min(negatives, {k}), averaged; lower is better"),
    "recall": ("Recall@{k}", "positives in the top {k} over all positives of the query, averaged; higher is better"),
    "Recall": ("Recall@{k}", "share of queries with a target in the top {k}; higher is better"),
    "hard_negative": ("Hard negative@{k}", "share of queries whose top {k} holds a hard negative; lower is better"),
}
_AT_K = re.compile(r"^(?P<name>[A-Za-z_]+)@(?P<k>\d+)$")


def column_label(column: str) -> tuple[str, str]:
    """(human label, definition) of a metrics-table column; an unknown one keeps its name and says where it
    comes from."""
    if column in COLUMNS:
        return COLUMNS[column]
    m = _AT_K.match(column)
    if m and m["name"] in AT_K:
        label, definition = AT_K[m["name"]]
        return label.format(k=m["k"]), definition.format(k=m["k"])
    return column.replace("_", " "), "a column of the run's metrics.csv (docs/metrics.md)"


# Column widths in pixels (gradio sizes the body's cells from them): about 1,100 px for the world's
# eight columns, so the table fits a laptop and scrolls sideways on a phone instead of squeezing.
WIDTH_PX = {"run": 190, "total_queries": 80, "coverage": 90, "ling_sens_paraphrase_range": 110, "ling_sens_range": 110}
VALUE_WIDTH_PX = 155  # "0.2372 [0.2188, 0.2550]"


def column_widths(columns: list[str]) -> list[str]:
    """Pixel widths of the metrics table's columns: "value [lo, hi]" cells on one line."""
    return [f"{WIDTH_PX.get(c, VALUE_WIDTH_PX)}px" for c in columns]


def labelled(metrics: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The table with human column labels, and the Markdown that defines each shown column."""
    labels = {c: column_label(c) for c in metrics.columns}
    table = metrics.rename(columns={c: label for c, (label, _) in labels.items()})
    defs = "  \n".join(f"**{md_escape(label)}**: {md_escape(definition)}" for label, definition in labels.values())
    return table, "**Columns** (value [95% interval])  \n" + defs


@dataclass
class ReportUI:
    run: Any
    refresh: Any
    info: Any
    metrics: Any
    plots: Any
    files: Any
    columns: Any  # the definitions of the table's columns

    def outputs(self) -> list:
        """The components `show_report`'s keys (`OUTPUTS`) fill, in that order."""
        return [self.run, self.info, self.metrics, self.plots, self.files, self.columns]


OUTPUTS = ("run", "info", "metrics", "plots", "files", "columns")


def create_ui() -> ReportUI:
    with gr.Row():
        # min widths: on a phone the button wraps below and the run's name keeps the full width
        run = gr.Dropdown([], label="Evaluation run (newest first)", elem_id="cir-report-run", scale=4, min_width=300)
        refresh = gr.Button("Refresh", elem_id="cir-report-refresh", scale=1, size="sm", min_width=100)
    info = gr.Markdown("The report appears here when the explorer has loaded.", elem_id="cir-report-info")
    metrics = gr.Dataframe(interactive=False, label="Metrics (value [95% CI])", elem_id="cir-report-metrics", wrap=True,
                           visible=False)  # shown with a run (no empty table with placeholder headers)
    columns = gr.Markdown(elem_id="cir-report-columns")
    # height "auto": each plot whole (a fixed height cropped the first plot's axis label)
    plots = gr.Gallery(visible=False, label="Plots (click to enlarge)", columns=2, height="auto", object_fit="contain",
                       elem_id="cir-report-plots", interactive=False)
    files = gr.File(label="Files of this run (download; run.zip holds them all with the plots)", file_count="multiple",
                    interactive=False, visible=False, elem_id="cir-report-files")
    return ReportUI(run, refresh, info, metrics, plots, files, columns)


def show_report(service: ExplorerService, label: str | None = None, pending=None) -> dict[str, Any]:
    """Run choices, the chosen (default: latest) run's table, plots and notes. `pending`: the
    background run's status, said while there is no run yet."""
    runs = service.runs()
    choices = [r.label for r in runs]
    if not runs:
        name = md_escape(service.benchmark.name)
        if pending is not None and not pending.ready:
            text = (f"⏳ The evaluation run of **{name}** is being computed in the background "
                    f"({pending.progress() or 'starting'}); it appears here by itself when it is done.")
        elif pending is not None and pending.state == "failed":
            text = (f"The background evaluation run of **{name}** failed: {md_escape(hide_paths(pending.detail))}. "
                    "Reload the page to try again.")
        else:
            text = f"No evaluation run of **{name}** yet."
        return {"run": gr.update(choices=[], value=None), "metrics": gr.update(value=None, visible=False),
                "plots": gr.update(value=[], visible=False), "info": text,
                "files": gr.update(value=None, visible=False), "columns": ""}
    label = label if label in choices else choices[0]
    report = service.report(label)
    # folder names and run_info values are whatever is on disk: escaped, never rendered
    lines = [f"Run **{md_escape(report.run.label)}**."] + [md_escape(hide_paths(i)) for i in report.info]
    files = shareable_copies(report.run.path)
    table, columns = labelled(report.metrics)
    return {"run": gr.update(choices=choices, value=label),
            "metrics": gr.update(value=table, visible=True, column_widths=column_widths(list(report.metrics.columns))),
            "plots": gr.update(value=plot_images(report.plots), visible=True), "info": "\n\n".join(lines),
            "files": gr.update(value=files or None, visible=bool(files)), "columns": columns}


_COPIES: dict[tuple, list[str]] = {}


def run_plots(run_path) -> list:
    """The run's plots/*.png that are plain files and PNG images (a link or anything else is left out)."""
    from pathlib import Path

    from PIL import Image

    folder = Path(run_path) / "plots"
    out = []
    for f in sorted(folder.glob("*.png")) if folder.is_dir() and not folder.is_symlink() else []:
        try:
            if f.is_file() and not f.is_symlink():
                with Image.open(f) as im:
                    if im.format == "PNG":
                        out.append(f)
        except (OSError, ValueError):
            continue
    return out


def shareable_copies(run_path) -> list[str]:
    """Copies of the run's `DOWNLOADS` in a temporary folder (gradio serves those, never a path under
    runs/), then `RUN_ZIP`: those files and the PNG plots, laid out as in the run folder (report.md's
    plot links work once unzipped). Plain files only: a link planted in a run folder is not followed.
    Memoised per file state, so a page reload does not copy again."""
    import shutil
    import tempfile
    import zipfile
    from pathlib import Path

    files = [Path(run_path) / name for name in DOWNLOADS]
    files = [f for f in files if f.is_file() and not f.is_symlink()]
    plots = run_plots(run_path)
    key = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files + plots)
    cached = _COPIES.get(key)
    if cached and all(Path(c).is_file() for c in cached):
        return cached
    folder = Path(tempfile.mkdtemp(prefix="cir-report-"))
    out = []
    for f in files:
        try:
            shutil.copyfile(f, folder / f.name)
            out.append(str(folder / f.name))
        except OSError:  # unreadable: left out, the rest still downloads
            continue
    if out:
        with zipfile.ZipFile(folder / RUN_ZIP, "w", zipfile.ZIP_DEFLATED) as zf:
            for copy in out:
                zf.write(copy, Path(copy).name)
            for plot in plots:
                try:
                    zf.write(plot, f"plots/{plot.name}")
                except OSError:
                    continue
        out.append(str(folder / RUN_ZIP))
    _COPIES[key] = out
    return out


def plot_images(plots) -> list[tuple[Any, str]]:
    """The run's PNG plots decoded in memory (gradio serves its own copies), so no file under runs/
    is ever served by path: a run folder holding an .html file, or a link to one, cannot reach a visitor."""
    from PIL import Image

    out = []
    for path, caption in plots:
        try:
            with Image.open(path) as im:
                if im.format != "PNG":
                    continue
                out.append((im.convert("RGB"), str(caption)))
        except (OSError, ValueError):  # a damaged plot is left out; the table still shows
            continue
    return out


def wire(ui: ReportUI, get_service: Callable[[], ExplorerService], get_pending: Callable[[], Any] = lambda: None) -> None:
    @guarded("Loading the report")
    def on_show(label):
        out = show_report(get_service(), label, get_pending())
        return tuple(out[k] for k in OUTPUTS)

    outputs = ui.outputs()
    ui.run.input(on_show, [ui.run], outputs)
    ui.refresh.click(on_show, [ui.run], outputs)
