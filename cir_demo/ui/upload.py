"""The "Try your own" tab: upload one or two reference images, type an instruction, and see
each selected retriever's top results from the loaded corpus (optionally reranked).

Files arrive untouched (gr.File, not gr.Image) so the service's validation sees exactly
what was uploaded and can name the problem.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import gradio as gr

from cir_demo.explorer import (
    MAX_COLUMNS,
    ExplorerService,
    ServiceError,
    UploadError,
    ValidatedImage,
    encode_jpeg_data_uri,
    validate_upload,
)
from cir_demo.ui import components
from cir_demo.ui.controls import clamp, number_slider
from cir_demo.ui.gpu import on_gpu
from cir_demo.ui.guard import guarded
from cir_demo.ui.served_files import served_folder
from cir_demo.ui.state import K_RANGE, TOP_N_RANGE
from cir_demo.utils.io import write_bytes_atomic


@dataclass
class UploadUI:
    file1: Any
    file2: Any
    preview: Any
    instruction: Any
    retrievers: Any
    k: Any
    rerank: Any
    top_n: Any
    submit: Any
    example: Any
    note: Any
    message: Any
    results: Any
    files_problem: Any  # inline problems, next to the field to fix
    instruction_problem: Any
    retrievers_problem: Any


def create_ui() -> UploadUI:
    note = gr.Markdown(elem_id="cir-upload-note")
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=300):
            file1 = gr.File(label="Reference image 1", file_count="single", type="filepath", elem_id="cir-upload-1")
            file2 = gr.File(
                label="Reference image 2 (optional: write <img1> and <img2> in the instruction)",
                file_count="single",
                type="filepath",
                elem_id="cir-upload-2",
            )
            files_problem = gr.Markdown(elem_id="cir-upload-files-problem")
            example = gr.Button(
                "Load a world example (two images and an instruction)", elem_id="cir-upload-example", size="sm"
            )
        with gr.Column(scale=2, min_width=400):
            preview = gr.HTML(elem_id="cir-upload-preview", css_template=components.CSS)
            instruction = gr.Textbox(
                label="Instruction",
                placeholder="e.g. the same dress in blue; or: the coat of <img1> in the colour of <img2>",
                elem_id="cir-upload-instruction",
            )
            instruction_problem = gr.Markdown(elem_id="cir-upload-instruction-problem")
            with gr.Row():
                retrievers = gr.CheckboxGroup(
                    [], label=f"Retrievers (1 to {MAX_COLUMNS})", elem_id="cir-upload-retrievers", scale=3
                )
                k = number_slider(
                    *K_RANGE, value=10, step=5, label="Results per retriever", elem_id="cir-upload-k", scale=1
                )
            with gr.Row():
                rerank = gr.Checkbox(False, label="Rerank", interactive=False, elem_id="cir-upload-rerank")
                top_n = number_slider(  # usable while Rerank is on
                    5,
                    TOP_N_RANGE[1],
                    value=20,
                    step=5,
                    label="Rerank top n",
                    elem_id="cir-upload-top-n",
                    interactive=False,
                )
            retrievers_problem = gr.Markdown(elem_id="cir-upload-retrievers-problem")
            submit = gr.Button("Search the corpus", variant="primary", elem_id="cir-upload-submit")
    message = gr.Markdown(elem_id="cir-upload-message")
    results = gr.HTML(elem_id="cir-upload-results", css_template=components.CSS)
    return UploadUI(
        file1,
        file2,
        preview,
        instruction,
        retrievers,
        k,
        rerank,
        top_n,
        submit,
        example,
        note,
        message,
        results,
        files_problem,
        instruction_problem,
        retrievers_problem,
    )


# ------------------------------------------------------------------ callbacks
def validate_files(paths: Sequence[str | None]) -> tuple[list[ValidatedImage], list[str]]:
    """(usable images in upload order, one error line per refused file)."""
    images, errors = [], []
    for i, path in enumerate(paths, 1):
        if not path:
            continue
        name = Path(str(path)).name
        try:
            images.append(validate_upload(path, name=f"image {i} ({name})"))
        except UploadError as exc:
            errors.append(str(exc))
    return images, errors


def preview(paths: Sequence[str | None]) -> dict[str, Any]:
    """Thumbnails of the uploads as the models will see them and what validation changed; a refused
    file is said at once next to the file fields (`problem:files`), which also drops a warning the
    new files settled ("upload at least one reference image")."""
    images, errors = validate_files(paths)
    lines = [f"{v.name}: {n}" for v in images for n in v.notes]
    html = (
        components.references_html(
            [encode_jpeg_data_uri(v.image, 224, 90) for v in images],
            [
                f"Reference image {i + 1}: {v.name} ({v.image.size[0]} x {v.image.size[1]})"
                for i, v in enumerate(images)
            ],
        )
        if images
        else ""
    )
    return {"preview": html, "message": components.notes_markdown(lines), "problem:files": problem_markdown(errors)}


PROBLEM_FIELDS = ("files", "instruction", "retrievers")
TWO_IMAGE_HINT = (
    "Tip: with two images, say which is which: write <img1> and <img2> in the instruction "
    '(e.g. "the coat of <img1> in the colour of <img2>").'
)


def form_problems(
    n_images: int, file_errors: Sequence[str], instruction: str, retrievers: Sequence[str] | None
) -> dict[str, list[str]]:
    """What keeps the form from being searched, by the field to fix (checked before any work)."""
    problems: dict[str, list[str]] = {f: [] for f in PROBLEM_FIELDS}
    problems["files"] += list(file_errors)
    if not n_images and not file_errors:
        problems["files"].append("upload at least one reference image")
    text = (instruction or "").strip()
    if not text:
        problems["instruction"].append("type an instruction (what should change in the reference image)")
    elif n_images == 1 and "<img2>" in text:
        problems["instruction"].append(
            "the instruction mentions <img2> but only one image was uploaded; upload a second image or remove <img2>"
        )
    if not retrievers:
        problems["retrievers"].append("select at least one retriever")
    return problems


def problem_markdown(lines: Sequence[str]) -> str:
    return "  \n".join(f"⚠ {components.md_escape(line)}" for line in lines)  # lines echo file names


def search(
    service: ExplorerService,
    paths: Sequence[str | None],
    instruction: str,
    retrievers: list[str] | None,
    k: int,
    rerank: bool,
    top_n: int,
) -> dict[str, Any]:
    """Results and notes, or (nothing searched, stale results cleared) the problems by field."""
    images, errors = validate_files(paths)
    problems = form_problems(len(images), errors, instruction, retrievers)
    out: dict[str, Any] = {f"problem:{f}": problem_markdown(problems[f]) for f in PROBLEM_FIELDS}
    n_problems = sum(map(len, problems.values()))
    if n_problems:
        what = "the problem" if n_problems == 1 else f"the {n_problems} problems"
        out.update(results=components.results_html(None, f"Fix {what} marked ⚠ above and search again."), message="")
        return out
    k, top_n = clamp(k, *K_RANGE, default=10), clamp(top_n, *TOP_N_RANGE, default=20)
    comparison = service.search_uploads(
        images,
        instruction or "",
        retrievers,
        k=k,
        rerank=bool(rerank) and service.reranker_name is not None,
        top_n=top_n,
    )
    lines = list(comparison.notes)
    text = instruction.strip()
    if len(images) == 2 and "<img1>" not in text and "<img2>" not in text:
        lines.append(TWO_IMAGE_HINT)
    lines.append(
        f"Searched {len(service.benchmark.corpus_ids):,} images of {service.benchmark.name!r} with "
        f"{len(comparison.columns)} retriever(s); uploads have no judgments, so no badges or metrics."
    )
    out.update(results=components.results_html(comparison), message=components.notes_markdown(lines))
    return out


def example_files(service: ExplorerService, folder: str | Path | None = None) -> tuple[str, str | None, str]:
    """Reference images of a benchmark query written to PNG files (a two-image query when there
    is one), and its instruction: something to try the upload path with. The files go to `folder`,
    by default one folder of the benchmark's in this process's served folder (removed at exit), each
    written once and reused by every later click (each click used to leave a folder in /tmp)."""
    queries = service.benchmark.queries
    if not queries:
        raise ServiceError("this benchmark has no queries to take an example from")
    query = next((q for q in queries if len(q.reference_ids) == 2), queries[0])
    if folder is None:
        folder = served_folder() / "examples" / hashlib.sha256(service.benchmark.name.encode()).hexdigest()[:16]
    paths = []
    for ref in query.reference_ids:
        path = Path(folder) / f"{ref}.png"
        if not path.is_file():  # written whole under its name: two visitors' first clicks both read a whole file
            buffer = io.BytesIO()
            service.engine.open_image(ref).save(buffer, format="PNG")
            write_bytes_atomic(path, buffer.getvalue())
        paths.append(str(path))
    return paths[0], (paths[1] if len(paths) > 1 else None), query.instruction


def upload_note(service: ExplorerService) -> str:
    if service.upload_note:  # what the benchmark's declaration says about uploads (the world: its models' limits)
        return f"**{service.upload_heading}** {service.upload_note}"
    return (
        f"Results come from the {len(service.benchmark.corpus_ids):,} corpus images of "
        f"{components.md_escape(repr(service.benchmark.name))}."
    )


# ------------------------------------------------------------------ wiring
def wire(ui: UploadUI, get_service: Callable[[], ExplorerService]) -> None:
    @guarded("Checking the upload")
    def on_files(f1, f2):
        out = preview([f1, f2])
        return out["preview"], out["message"], out["problem:files"]

    ui.file1.change(on_files, [ui.file1, ui.file2], [ui.preview, ui.message, ui.files_problem], show_progress="hidden")
    ui.file2.change(on_files, [ui.file1, ui.file2], [ui.preview, ui.message, ui.files_problem], show_progress="hidden")

    @guarded("Searching with your images")
    @on_gpu
    def on_submit(f1, f2, instruction, retrievers, k, rerank, top_n):
        out = search(get_service(), [f1, f2], instruction, retrievers, k, rerank, top_n)
        return (out["results"], out["message"], *(out[f"problem:{f}"] for f in PROBLEM_FIELDS))

    inputs = [ui.file1, ui.file2, ui.instruction, ui.retrievers, ui.k, ui.rerank, ui.top_n]
    outputs = [ui.results, ui.message, ui.files_problem, ui.instruction_problem, ui.retrievers_problem]
    # progress only over the results: a warning field never shows the queue's "queue: 1/1 | 0.1 s".
    # always_last: a Search (click or Enter) pressed while the last one is still on its way runs when
    # that one is back, with the form as it is then (gradio's default for a click drops it)
    gr.on(
        [ui.submit.click, ui.instruction.submit],
        on_submit,
        inputs,
        outputs,
        show_progress_on=[ui.results],
        trigger_mode="always_last",
    )

    @guarded("Showing the rerank settings")
    def on_rerank(on):  # how many to rerank is asked only while reranking
        return gr.update(interactive=bool(on))

    ui.rerank.change(on_rerank, [ui.rerank], [ui.top_n], queue=False, show_progress="hidden")

    def on_retrievers(selected):  # zero retrievers cannot be submitted
        chosen = bool(selected)
        return (
            gr.update(interactive=chosen, value="Search the corpus" if chosen else "Select a retriever to search"),
            "" if chosen else problem_markdown(["select at least one retriever"]),
        )

    # always_last: boxes unticked while the last change is on its way are applied after it (gradio's
    # default for `.input` drops them, and the button then kept the state of the first untick)
    ui.retrievers.input(
        guarded("Choosing retrievers")(on_retrievers),
        [ui.retrievers],
        [ui.submit, ui.retrievers_problem],
        trigger_mode="always_last",
    )

    @guarded("Checking the instruction")
    def on_instruction(f1, f2, instruction, shown):
        """A shown instruction warning is checked again as the visitor types (none is raised before a search)."""
        if not (shown or "").strip():
            return gr.skip()
        n_images = sum(1 for f in (f1, f2) if f)
        return problem_markdown(form_problems(n_images, [], instruction, ["any"])["instruction"])

    # the warning's own change as a trigger: a Search answered after the visitor typed shows the warning
    # for the text it was sent with; this re-check, run after it, holds it against the text as it is now.
    # One dependency with always_last: a re-check triggered while one is on its way runs after it.
    gr.on(
        [ui.instruction.change, ui.instruction_problem.change],
        on_instruction,
        [ui.file1, ui.file2, ui.instruction, ui.instruction_problem],
        [ui.instruction_problem],
        show_progress="hidden",
        trigger_mode="always_last",
    )

    @guarded("Loading the example")
    def on_example():
        p1, p2, text = example_files(get_service())
        return p1, p2, text

    ui.example.click(on_example, None, [ui.file1, ui.file2, ui.instruction])
