"""The Report tab: the metrics table (95% intervals) and plots of the latest `--eval` run
of the loaded benchmark (or another run picked from the list)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import re
from pathlib import Path

import gradio as gr
import pandas as pd

from cir_demo.explorer import ExplorerService, ServiceError
from cir_demo.explorer.public_text import hide_paths
from cir_demo.ui.components import md_escape
from cir_demo.ui.guard import guarded
from cir_demo.ui.served_files import served_folder

if TYPE_CHECKING:
    from cir_demo.benchmarks.families import MetricFamily


# What a run shares with a visitor, as downloads: text and tables only (never HTML, never a link),
# and all of them with the run's PNG plots in one zip, where report.md's links to plots/ resolve
DOWNLOADS = ("report.md", "report.tex", "metrics.csv", "metrics.json", "per_query.csv", "breakdowns.csv", "paired.csv")
RUN_ZIP = "run.zip"

# Every column the metrics table may show: (label, definition). `metric@K` columns are matched by
# pattern (`column_label`), so a family's other cutoffs read the same way.
COLUMNS = {
    "run": ("Run", "the retriever; “+rerank”: its top n reordered by the reranker"),
    "mean(Recall@5,Recall_subset@1)": ("Avg", "(Recall@5 + Recall_subset@1) / 2, the CIRR leaderboard's average"),
    "average_recall": ("Average", "(Recall@10 + Recall@50) / 2 of the category averages, FashionIQ's average"),
    "total_queries": ("Queries", "queries scored"),
    "coverage": ("Coverage", "share of the benchmark's queries the run has a ranking for (1 = all)"),
    "ling_sens_paraphrase_range": (
        "Paraphrase range",
        "AP@10 max − min over the phrasings of one intent, averaged over intents; lower is more robust",
    ),
    "ling_sens_range": (
        "Official sensitivity range",
        "precision@10 max − min over queries sharing reference images (PinPoint's evaluate.py); lower is more robust",
    ),
}
AT_K = {
    "mAP": ("mAP@{k}", "AP@{k} (average precision of the top {k}) averaged over the queries; higher is better"),
    "precision": ("P@{k}", "positives among the top {k}, divided by {k}, averaged; higher is better"),
    "NegRecall": (
        "NegRecall@{k}",
        "explicit negatives in the top {k} over min(negatives, {k}), averaged; lower is better",
    ),
    "recall": ("Recall@{k}", "positives in the top {k} over all positives of the query, averaged; higher is better"),
    "Recall": ("Recall@{k}", "share of queries with a target in the top {k}; higher is better"),
    "hard_negative": ("Hard negative@{k}", "share of queries whose top {k} holds a hard negative; lower is better"),
    "Recall_subset": (
        "Recall_subset@{k}",
        "share of queries whose target is in the top {k} of its image set "
        "(CIRR's img_set members, in the run's order); higher is better",
    ),
}
_AT_K = re.compile(r"^(?P<name>[A-Za-z_]+)@(?P<k>\d+)(?P<tail>_pooled|/[\w-]+)?$")


def column_label(column: str, family: MetricFamily | None = None) -> tuple[str, str]:
    """(human label, definition) of a metrics-table column; an unknown one keeps its name and says where it
    comes from. `family`: the benchmark's; on a family of strata (FashionIQ's categories) a plain `Recall@10`
    is the mean of the strata's means, the official number, and `_pooled` the mean over all queries."""
    if column in COLUMNS:
        return COLUMNS[column]
    m = _AT_K.match(column)
    if m and m["name"] in AT_K:
        label, definition = AT_K[m["name"]]
        label, definition = label.format(k=m["k"]), definition.format(k=m["k"])
        what, _, better = definition.partition("; ")
        better = f"; {better}" if better else ""
        tail = m["tail"] or ""
        strata = family.strata if family is not None and family.strata else "stratum"
        if tail == "_pooled":
            return (
                f"{label} pooled",
                f"{what}, over all queries at once (the {strata} groups pooled; not the official {strata} "
                f"average){better}",
            )
        if tail:
            return f"{label} {tail[1:]}", f"{what}, over the {tail[1:]} queries only{better}"
        if family is not None and family.strata and f"{column}_pooled" in family.headline.values():
            shown = f" ({', '.join(family.strata_order)})" if family.strata_order else ""
            return (
                f"{label} {strata} average",
                f"{what}, computed per {strata}{shown} and averaged over them: the official number (each "
                f"{strata} counts equally, whatever its number of queries){better}",
            )
        return label, definition
    return column.replace("_", " "), "a column of the run's metrics.csv (docs/metrics.md)"


# Column widths in pixels (gradio sizes the body's cells from them): about 1,100 px for the world's
# eight columns, so the table fits a laptop and scrolls sideways on a phone instead of squeezing.
WIDTH_PX = {"run": 190, "total_queries": 80, "coverage": 90, "ling_sens_paraphrase_range": 110, "ling_sens_range": 110}
VALUE_WIDTH_PX = 155  # "0.2372 [0.2188, 0.2550]"


def column_widths(columns: list[str]) -> list[str]:
    """Pixel widths of the metrics table's columns: "value [lo, hi]" cells on one line."""
    return [f"{WIDTH_PX.get(c, VALUE_WIDTH_PX)}px" for c in columns]


def labelled(metrics: pd.DataFrame, family: MetricFamily | None = None) -> tuple[pd.DataFrame, str]:
    """The table with human column labels, and the Markdown that defines each shown column (`family`: the
    benchmark's, see `column_label`)."""
    labels = {c: column_label(c, family) for c in metrics.columns}
    table = metrics.rename(columns={c: label for c, (label, _) in labels.items()})
    defs = "  \n".join(f"**{md_escape(label)}**: {md_escape(definition)}" for label, definition in labels.values())
    if family is not None and family.strata:  # two means of one metric: which is the official one
        from cir_demo.metrics.headline import strata_note

        defs += "  \n" + strata_note(family)
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
    own_info: Any  # the runs served from results files: what they are
    own_metrics: Any  # ... their headline aggregates
    paired: Any  # paired comparisons (the loaded results files, else the eval run's paired.csv)
    pair: Any  # a pair of columns to open in Explore, sorted A vs B
    open_pair: Any
    run_file: Any = None  # a results file a visitor uploads as a column
    run_note: Any = None
    my_runs: Any = None  # gr.State: the columns this visitor uploaded

    def outputs(self) -> list:
        """The components `show_report`'s keys (`OUTPUTS`) fill, in that order."""
        return [
            self.run,
            self.info,
            self.metrics,
            self.plots,
            self.files,
            self.columns,
            self.own_info,
            self.own_metrics,
            self.paired,
            self.pair,
            self.open_pair,
        ]


OUTPUTS = (
    "run",
    "info",
    "metrics",
    "plots",
    "files",
    "columns",
    "own_info",
    "own_metrics",
    "paired",
    "pair",
    "open_pair",
)


def create_ui() -> ReportUI:
    own_info = gr.Markdown(elem_id="cir-report-own")
    own_metrics = gr.Dataframe(
        interactive=False,
        label="Your runs (results files), scored as --eval scores them",
        elem_id="cir-report-own-metrics",
        wrap=True,
        visible=False,
    )
    with gr.Row():
        # min widths: on a phone the button wraps below and the run's name keeps the full width
        run = gr.Dropdown([], label="Evaluation run (newest first)", elem_id="cir-report-run", scale=4, min_width=300)
        refresh = gr.Button("Refresh", elem_id="cir-report-refresh", scale=1, size="sm", min_width=100)
    info = gr.Markdown("The report appears here when the explorer has loaded.", elem_id="cir-report-info")
    metrics = gr.Dataframe(
        interactive=False, label="Metrics (value [95% CI])", elem_id="cir-report-metrics", wrap=True, visible=False
    )  # shown with a run (no empty table with placeholder headers)
    columns = gr.Markdown(elem_id="cir-report-columns")
    paired = gr.Dataframe(
        interactive=False, label="Paired comparisons", elem_id="cir-report-paired", wrap=True, visible=False
    )
    with gr.Row():
        pair = gr.Dropdown(
            [],
            label="Compare two columns query by query",
            elem_id="cir-report-pair",
            scale=4,
            min_width=300,
            visible=False,
        )
        open_pair = gr.Button(
            "Show the queries sorted A vs B",
            elem_id="cir-report-open-pair",
            scale=1,
            size="sm",
            min_width=160,
            visible=False,
        )
    # height "auto": each plot whole (a fixed height cropped the first plot's axis label)
    plots = gr.Gallery(
        visible=False,
        label="Plots (click to enlarge)",
        columns=2,
        height="auto",
        object_fit="contain",
        elem_id="cir-report-plots",
        interactive=False,
    )
    files = gr.File(
        label="Files of this run (download; run.zip holds them all with the plots as PNG, SVG and PDF)",
        file_count="multiple",
        interactive=False,
        visible=False,
        elem_id="cir-report-files",
    )
    with gr.Accordion("Add your own results file as a column", open=False, elem_id="cir-report-add-run"):
        run_file = gr.File(
            label="A results file for the loaded benchmark (any format --eval reads: PinPoint or "
            "CIRCO JSON, a run dict, a TREC run)",
            file_types=[".json", ".trec", ".run", ".txt"],
            elem_id="cir-report-run-file",
        )
        run_note = gr.Markdown(elem_id="cir-report-run-note")
    return ReportUI(
        run,
        refresh,
        info,
        metrics,
        plots,
        files,
        columns,
        own_info,
        own_metrics,
        paired,
        pair,
        open_pair,
        run_file,
        run_note,
        gr.State([]),
    )


def add_run(service: ExplorerService, path: str | None, mine: list[str], owner: str = "") -> tuple[str, list[str]]:
    """A visitor's uploaded results file as a column: (the note to show, this visitor's uploaded columns).
    `owner`: the visitor's session, whose uploads no other visitor evicts. A file that cannot be used is
    one line naming it (ServiceError from the service)."""
    from pathlib import Path

    if not path:
        return "", mine
    stem = Path(path).stem or "run"
    column, notes = service.add_file_run(path, stem, owner)
    kept = set(service.uploads_of(owner))
    mine = [n for n in dict.fromkeys([*mine, column]) if n in kept]
    text = (
        f"Added **{md_escape(column)}** (from {md_escape(Path(path).name)}): tick it among the retrievers on "
        "Explore, or compare it with another column below."
    )
    return "  \n".join([text, *(md_escape(n) for n in notes)]), mine


def kept_with_note(action: str, exc: Exception, n_outputs: int, at: int = 0) -> tuple:
    """A handler's outputs when its input was unusable: output `at` the one line saying why
    (`guard.error_message`, also a toast), every other output as it was (never an error badge over a table
    that was fine)."""
    from cir_demo.ui.guard import error_message, log

    if not isinstance(exc, ServiceError):  # a bug: its traceback goes to the log
        log.exception("%s", action)
    text = error_message(action, exc)
    gr.Warning(text)
    out = [gr.update() for _ in range(n_outputs)]
    out[at] = f"⚠️ {text}"
    return tuple(out)


def wire_upload(ui: ReportUI, retrievers, get_service: Callable[[], ExplorerService]) -> None:
    """The results-file upload: the file becomes a column of this visitor's Explore tab and Report; a file
    that cannot be used is one line beside the upload, and the tables keep what they showed."""

    @guarded("Adding your results file")  # the outer net; what the file did is answered inside
    def on_file(path, mine, chosen, request: gr.Request = None):  # gradio passes the visitor's request
        try:
            service = get_service()
            note, mine = add_run(service, path, list(mine or []), getattr(request, "session_hash", None) or "")
            own = own_runs_outputs(service, None, mine)
            choices = service.retriever_names + mine
        except Exception as exc:  # noqa: BLE001 - whatever the file did, the page keeps its tables
            return kept_with_note("Adding your results file", exc, 8)
        return (
            note,
            mine,
            gr.update(choices=choices, value=[c for c in (chosen or []) if c in choices]),
            *(own[k] for k in ("own_info", "own_metrics", "paired", "pair", "open_pair")),
        )

    ui.run_file.upload(
        on_file,
        [ui.run_file, ui.my_runs, retrievers],
        [ui.run_note, ui.my_runs, retrievers, ui.own_info, ui.own_metrics, ui.paired, ui.pair, ui.open_pair],
    )


def own_runs_outputs(service: ExplorerService, report=None, extra: list[str] | tuple = ()) -> dict[str, Any]:
    """The results-file columns' aggregates, the paired comparisons (of those columns when two or more are
    loaded, else of the shown eval run) and the pairs of columns to open sorted A vs B. `extra`: the results
    files this visitor uploaded."""
    from cir_demo.explorer.paired import P_VALUE_METHOD, pair_choices, paired_display
    from cir_demo.explorer.runs import metrics_display_table

    scored = service.scored_file_runs(extra=extra)
    out: dict[str, Any] = {"own_info": "", "own_metrics": gr.update(value=None, visible=False)}
    paired, source = (report.paired, "this evaluation run (paired.csv)") if report is not None else (None, "")
    if scored is not None:
        out["own_info"] = (
            f"**Your runs**: {md_escape(', '.join(scored.metrics['run']))}: results files scored on "
            "the loaded benchmark as `--eval` scores them (whole rankings)."
        )
        own, _ = labelled(
            metrics_display_table(scored.metrics.rename(columns={"run": "model"}), service.family), service.family
        )
        out["own_metrics"] = gr.update(value=own, visible=True)
        if len(scored.paired):
            paired, source = paired_display(scored.paired, service.family), "your runs"
    shown = paired is not None and len(paired) > 0
    out["paired"] = gr.update(
        value=paired if shown else None,
        visible=shown,
        label=(
            f"Paired comparisons of {source}: B − A per headline metric with its 95% interval; p: the {P_VALUE_METHOD}"
        )
        if shown
        else "Paired comparisons",
    )
    columns = service.retriever_names + [n for n in extra if n in service.uploaded_runs]
    choices = pair_choices(columns) if len(columns) > 1 else []
    out["pair"] = gr.update(choices=choices, value=choices[0][1] if choices else None, visible=bool(choices))
    out["open_pair"] = gr.update(visible=bool(choices))
    return out


def show_report(service: ExplorerService, label: str | None = None, pending=None, extra=()) -> dict[str, Any]:
    """Run choices, the chosen (default: latest) run's table, plots and notes. `pending`: the
    background run's status, said while there is no run yet; `extra`: the results files this visitor uploaded."""
    runs = service.runs()
    choices = [r.label for r in runs]
    if not runs:
        name = md_escape(service.benchmark.name)
        if pending is not None and not pending.ready:
            text = (
                f"⏳ The evaluation run of **{name}** is being computed in the background "
                f"({pending.progress() or 'starting'}); it appears here by itself when it is done."
            )
        elif pending is not None and pending.state == "failed":
            text = (
                f"The background evaluation run of **{name}** failed: {md_escape(hide_paths(pending.detail))}. "
                "Reload the page to try again."
            )
        else:
            text = f"No evaluation run of **{name}** yet."
        own_plots = own_run_plots(service, extra)
        return {
            "run": gr.update(choices=[], value=None),
            "metrics": gr.update(value=None, visible=False),
            "plots": gr.update(value=own_plots, visible=bool(own_plots)),
            "info": text,
            "files": gr.update(value=None, visible=False),
            "columns": "",
            **own_runs_outputs(service, None, extra),
        }
    label = label if label in choices else choices[0]
    report = service.report(label, runs)
    own_plots = own_run_plots(service, extra)
    # folder names and run_info values are whatever is on disk: escaped, never rendered
    lines = [f"Run **{md_escape(report.run.label)}**."] + [md_escape(hide_paths(i)) for i in report.info]
    files = shareable_copies(report.run.path)
    table, columns = labelled(report.metrics, service.family)
    return {
        "run": gr.update(choices=choices, value=label),
        "metrics": gr.update(value=table, visible=True, column_widths=column_widths(list(report.metrics.columns))),
        "plots": gr.update(value=own_plots + plot_copies(report.plots), visible=True),
        "info": "\n\n".join(lines),
        "files": gr.update(value=files or None, visible=bool(files)),
        "columns": columns,
        **own_runs_outputs(service, report, extra),
    }


_OWN_PLOTS: dict[tuple, list[tuple[str, str]]] = {}


def own_run_plots(service: ExplorerService, extra=()) -> list[tuple[str, str]]:
    """The metric-at-k curves of your runs (results files served as columns), with 95% bands, as --eval
    draws them (`harness.plots.k_curves`): PNGs in this process's served folder, with captions; drawn once
    per set of runs. [] without such runs."""
    import tempfile
    from types import SimpleNamespace

    from cir_demo.explorer.runs import plot_captions
    from cir_demo.harness.plots import k_curves

    scored = service.scored_file_runs(extra=extra)
    if scored is None:
        return []
    key = (service.fingerprint, tuple(scored.per_query), scored.n_boot)
    if key not in _OWN_PLOTS:
        folder = tempfile.mkdtemp(prefix="own-plots-", dir=served_folder())
        runs = [SimpleNamespace(name=n, per_query=f) for n, f in scored.per_query.items()]
        drawn = k_curves(service.benchmark, runs, Path(folder), n_boot=scored.n_boot)
        captions = plot_captions(service.family)
        _OWN_PLOTS[key] = [
            (str(p), "Your runs: " + captions.get(n, n)) for n, p in sorted(drawn.items()) if n.endswith(".png")
        ]
    return _OWN_PLOTS[key]


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


def vector_plots(run_path) -> list:
    """The run's plots/*.svg and *.pdf that are plain files (the vector versions, for papers: in run.zip only)."""
    from pathlib import Path

    folder = Path(run_path) / "plots"
    if not folder.is_dir() or folder.is_symlink():
        return []
    return [f for ext in ("svg", "pdf") for f in sorted(folder.glob(f"*.{ext}")) if f.is_file() and not f.is_symlink()]


def shareable_copies(run_path) -> list[str]:
    """Copies of the run's `DOWNLOADS` in this process's copies folder, removed at exit (gradio serves
    those, never a path under runs/), then `RUN_ZIP`: those files and the plots (PNG, SVG, PDF), laid out as in
    the run folder (report.md's plot links work once unzipped). Plain files only: a link planted in a run folder is not followed.
    Memoised per file state, so a page reload does not copy again."""
    import shutil
    import tempfile
    import zipfile
    from pathlib import Path

    files = [Path(run_path) / name for name in DOWNLOADS]
    files = [f for f in files if f.is_file() and not f.is_symlink()]
    plots = run_plots(run_path) + vector_plots(run_path)
    key = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files + plots)
    cached = _COPIES.get(key)
    if cached and all(Path(c).is_file() for c in cached):
        return cached
    folder = Path(tempfile.mkdtemp(prefix="downloads-", dir=served_folder()))
    out = []
    for f in files:
        try:
            shutil.copyfile(f, folder / f.name)
            out.append(str(folder / f.name))
        except OSError:  # unreadable: left out, the rest still downloads
            continue
    if out:
        # built while the first page view waits: the fastest deflate (a world run's 13 MB per_query.csv
        # to 1.6 MB in 0.06 s, against 1.1 MB in 0.22 s by default), PNGs stored as they are compressed
        with zipfile.ZipFile(folder / RUN_ZIP, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
            for copy in out:
                zf.write(copy, Path(copy).name)
            for plot in plots:
                try:
                    zf.write(plot, f"plots/{plot.name}", compress_type=zipfile.ZIP_STORED)
                except OSError:
                    continue
        out.append(str(folder / RUN_ZIP))
    _COPIES[key] = out
    return out


_PLOT_COPIES: dict[tuple, str] = {}  # (plot path, mtime_ns, size) -> its checked copy


def plot_copies(plots) -> list[tuple[str, str]]:
    """Checked copies of the run's PNG plots, with their captions, in a temporary folder of this process:
    gradio serves those files as they are, so no file under runs/ is ever served by path (a run folder
    holding an .html file, or a link to one, cannot reach a visitor), and no plot is decoded and encoded
    again at every show (as images handed to gradio would be). Only a plain
    file whose bytes are an intact PNG is copied (read once, checked, then written); memoised per file state."""
    import hashlib
    import io
    from pathlib import Path

    from PIL import Image

    out = []
    for path, caption in plots:
        path = Path(path)
        try:
            if path.is_symlink() or not path.is_file():
                continue
            st = path.stat()
            key = (str(path), st.st_mtime_ns, st.st_size)
            copy = _PLOT_COPIES.get(key)
            if copy is None or not Path(copy).is_file():
                data = path.read_bytes()
                with Image.open(io.BytesIO(data)) as im:
                    if im.format != "PNG":
                        continue
                    im.verify()  # every chunk's CRC: a truncated or altered file is left out
                folder = served_folder() / hashlib.sha256(data).hexdigest()[:20]
                folder.mkdir(exist_ok=True)
                (folder / path.name).write_bytes(data)
                copy = _PLOT_COPIES[key] = str(folder / path.name)
            out.append((copy, str(caption)))
        except Exception:  # whatever PIL raises for a damaged file: that plot is left out, the table still shows
            continue
    return out


def wire(
    ui: ReportUI, get_service: Callable[[], ExplorerService], get_pending: Callable[[], Any] = lambda: None, tab=None
) -> None:
    """The run picker and refresh; `tab`: the Report's tab, whose opening shows the report (a page view
    does not prepare it)."""

    @guarded("Loading the report")
    def on_show(label, mine=()):
        try:
            out = show_report(get_service(), label, get_pending(), mine or ())
        except Exception as exc:  # noqa: BLE001 - a run folder that cannot be read: one line, the tables kept
            return kept_with_note("Loading the report", exc, len(OUTPUTS), at=OUTPUTS.index("info"))
        return tuple(out[k] for k in OUTPUTS)

    outputs = ui.outputs()
    ui.run.input(on_show, [ui.run, ui.my_runs], outputs, trigger_mode="always_last")
    ui.refresh.click(on_show, [ui.run, ui.my_runs], outputs)
    if tab is not None:
        tab.select(on_show, [ui.run, ui.my_runs], outputs)


def open_pair(service: ExplorerService, pair: str | None, k, rerank, top_n, pending=None) -> dict[str, Any]:
    """Explore sorted A vs B (the explorer's sort `diff:A,B`: A's largest per-query gains over B first), with
    columns A and B side by side on the first query of that list; outputs by name (see `wire_pair`)."""
    from cir_demo.explorer import ServiceError
    from cir_demo.ui import explore

    if not pair or not pair.startswith("diff:") or pair.count(",") != 1:
        raise ServiceError("pick two columns to compare")
    a, b = pair[len("diff:") :].split(",")
    names = service.check_retrievers([a, b])
    listing = explore.list_queries(service, "", {}, pair, pending)
    if not listing["ids"]:
        raise ServiceError(f"no query to compare {a} and {b} on")
    view = explore.show_view(service, listing["ids"][0], names, k, rerank, top_n, sort=pair)  # the link keeps the sort
    choices = explore.sort_choices(service, pending)
    if pair not in [value for _, value in choices]:
        choices.append((f"{a} vs {b}", pair))
    out = {
        "tab": gr.Tabs(selected="explore"),
        "sort": gr.update(choices=choices, value=pair),
        "compare": explore.compare_update(service, pair),
        "retrievers": gr.update(value=names),
        "search": "",
        "list": explore.list_update(listing["table"]),
        "ids": listing["ids"],
        "list_info": listing["info"],
    }
    out.update({f"filter:{key}": explore.ANY for key in service.filter_choices()})
    out.update({f"view:{key}": value for key, value in view.items()})
    return out


def wire_pair(
    ui: ReportUI,
    targets: dict[str, Any],
    get_service: Callable[[], ExplorerService],
    get_pending: Callable[[], Any],
    inputs: list,
) -> None:
    """The Report's "Show the queries sorted A vs B": `targets` are the components `open_pair`'s keys name
    (the tabs, the Explore tab's list, filters and view); `inputs`: the view's k, rerank and top n."""

    @guarded("Opening the pair")
    def on_open(pair, k, rerank, top_n):
        out = open_pair(get_service(), pair, k, rerank, top_n, get_pending())
        return {targets[key]: value for key, value in out.items() if key in targets}

    ui.open_pair.click(on_open, [ui.pair, *inputs], list(targets.values()))
