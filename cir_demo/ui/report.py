"""The Report tab: the metrics table (95% intervals) and plots of the latest `--eval` run
of the loaded benchmark (or another run picked from the list)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import gradio as gr
import pandas as pd

from cir_demo.explorer import ExplorerService
from cir_demo.ui.components import md_escape
from cir_demo.ui.guard import guarded


@dataclass
class ReportUI:
    run: Any
    refresh: Any
    info: Any
    metrics: Any
    plots: Any


def create_ui() -> ReportUI:
    with gr.Row():
        run = gr.Dropdown([], label="Evaluation run (newest first)", elem_id="cir-report-run", scale=4)
        refresh = gr.Button("Refresh", elem_id="cir-report-refresh", scale=1, size="sm")
    info = gr.Markdown(elem_id="cir-report-info")
    metrics = gr.Dataframe(interactive=False, label="Metrics (value [95% CI])", elem_id="cir-report-metrics", wrap=True)
    plots = gr.Gallery(label="Plots (click to enlarge)", columns=2, height=560, object_fit="contain",
                       elem_id="cir-report-plots", interactive=False)
    return ReportUI(run, refresh, info, metrics, plots)


def show_report(service: ExplorerService, label: str | None = None) -> dict[str, Any]:
    """Run choices, the chosen (default: latest) run's table, plots and notes."""
    runs = service.runs()
    choices = [r.label for r in runs]
    if not runs:
        return {"run": gr.update(choices=[], value=None), "metrics": pd.DataFrame(), "plots": [],
                "info": (f"No evaluation run of **{md_escape(service.benchmark.name)}** yet. Run `python app.py --eval` "
                         + ("" if service.is_world else f"--benchmark {md_escape(service.benchmark.name)} ... ")
                         + "and press Refresh.")}
    label = label if label in choices else choices[0]
    report = service.report(label)
    # folder names and run_info values are whatever is on disk: escaped, never rendered
    lines = [f"Run **{md_escape(report.run.label)}** ({md_escape(report.run.path)})."] + [md_escape(i) for i in report.info]
    return {"run": gr.update(choices=choices, value=label), "metrics": report.metrics,
            "plots": plot_images(report.plots), "info": "\n\n".join(lines)}


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


def wire(ui: ReportUI, get_service: Callable[[], ExplorerService]) -> None:
    @guarded("Loading the report")
    def on_show(label):
        out = show_report(get_service(), label)
        return out["run"], out["info"], out["metrics"], out["plots"]

    outputs = [ui.run, ui.info, ui.metrics, ui.plots]
    ui.run.input(on_show, [ui.run], outputs)
    ui.refresh.click(on_show, [ui.run], outputs)
