"""The Report tab: the metrics table (95% intervals) and plots of the latest `--eval` run
of the loaded benchmark (or another run picked from the list)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import gradio as gr

from cir_demo.explorer import ExplorerService
from cir_demo.ui.components import md_escape
from cir_demo.ui.guard import guarded


# What a run shares with a visitor, as downloads: text and tables only (never HTML, never a link)
DOWNLOADS = ("report.md", "metrics.csv", "metrics.json", "per_query.csv", "breakdowns.csv", "paired.csv")


@dataclass
class ReportUI:
    run: Any
    refresh: Any
    info: Any
    metrics: Any
    plots: Any
    files: Any


def create_ui() -> ReportUI:
    with gr.Row():
        run = gr.Dropdown([], label="Evaluation run (newest first)", elem_id="cir-report-run", scale=4)
        refresh = gr.Button("Refresh", elem_id="cir-report-refresh", scale=1, size="sm")
    info = gr.Markdown(elem_id="cir-report-info")
    metrics = gr.Dataframe(interactive=False, label="Metrics (value [95% CI])", elem_id="cir-report-metrics", wrap=True,
                           visible=False)  # shown with a run (no empty table with placeholder headers)
    plots = gr.Gallery(visible=False, label="Plots (click to enlarge)", columns=2, height=560, object_fit="contain",
                       elem_id="cir-report-plots", interactive=False)
    files = gr.File(label="Files of this run (download)", file_count="multiple", interactive=False, visible=False,
                    elem_id="cir-report-files")
    return ReportUI(run, refresh, info, metrics, plots, files)


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
            text = (f"The background evaluation run of **{name}** failed: {md_escape(pending.detail)}. "
                    "Reload the page to try again.")
        else:
            text = f"No evaluation run of **{name}** yet."
        return {"run": gr.update(choices=[], value=None), "metrics": gr.update(value=None, visible=False),
                "plots": gr.update(value=[], visible=False), "info": text,
                "files": gr.update(value=None, visible=False)}
    label = label if label in choices else choices[0]
    report = service.report(label)
    # folder names and run_info values are whatever is on disk: escaped, never rendered
    lines = [f"Run **{md_escape(report.run.label)}**."] + [md_escape(i) for i in report.info]
    files = shareable_copies(report.run.path)
    return {"run": gr.update(choices=choices, value=label), "metrics": gr.update(value=report.metrics, visible=True),
            "plots": gr.update(value=plot_images(report.plots), visible=True), "info": "\n\n".join(lines),
            "files": gr.update(value=files or None, visible=bool(files))}


_COPIES: dict[tuple, list[str]] = {}


def shareable_copies(run_path) -> list[str]:
    """Copies of the run's `DOWNLOADS` in a temporary folder (gradio serves those, never a path under
    runs/); plain files only: a link planted in a run folder is not followed. Memoised per file
    state, so a page reload does not copy again."""
    import shutil
    import tempfile
    from pathlib import Path

    files = [Path(run_path) / name for name in DOWNLOADS]
    files = [f for f in files if f.is_file() and not f.is_symlink()]
    key = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
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
        return out["run"], out["info"], out["metrics"], out["plots"], out["files"]

    outputs = [ui.run, ui.info, ui.metrics, ui.plots, ui.files]
    ui.run.input(on_show, [ui.run], outputs)
    ui.refresh.click(on_show, [ui.run], outputs)
