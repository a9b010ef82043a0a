"""The facts about one requested run on this machine, as lines: item, status, detail, fix.

Statuses: "ready"; "download" (not here, fetched on first use from a reachable hub);
"warning" (runs, but read the detail); "missing" and "blocked" stop a run: their
`message()` is the one line a user reads, with the fix. The doctor prints every line;
`--eval` and `index build` stop on the blocking ones before any long work; the app
shows a retriever's lines when it cannot load. A `Line` is the one problem type of
preflight/: the flag and folder checks (`flags`, `folders`, `commands`) return blocking lines too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cir_demo.benchmarks.cli_args import BenchmarkChoice
from cir_demo.preflight.weights import WeightsSource

BLOCKING = ("missing", "blocked")


@dataclass
class Line:
    item: str
    status: str
    detail: str
    fix: str = ""

    @property
    def blocking(self) -> bool:
        return self.status in BLOCKING

    def message(self) -> str:
        """The one line a user reads; a problem with no single subject (item "") is its detail alone."""
        return (f"{self.item}: " if self.item else "") + self.detail + (f"; {self.fix}" if self.fix else "")


# --------------------------------------------------------------------------- device
def device_line(device: str | None = None) -> Line:
    try:
        import torch
    except ImportError:
        return Line("device", "blocked", "torch is not installed", "pip install -r requirements.txt")
    cores = os.cpu_count() or 1
    if device and not str(device).startswith("cuda"):
        return Line("device", "ready", f"{device} (requested; {cores} CPU cores)")
    if torch.cuda.is_available():
        i = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(i)
        return Line(
            "device",
            "ready",
            f"cuda:{i} {props.name}, {props.total_memory / 2**30:.1f} GiB "
            f"(torch {torch.__version__}, CUDA {torch.version.cuda})",
        )
    if device:
        return Line(
            "device",
            "blocked",
            f"--device {device} asked for CUDA, but torch sees no GPU",
            "drop --device, or install a CUDA build of torch (see README, GPU)",
        )
    return Line(
        "device",
        "ready",
        f"CPU only ({cores} cores, no CUDA GPU visible to torch {torch.__version__}): "
        "real models run, slowly; the offline world is sized for it",
    )


# --------------------------------------------------------------------------- models
def _weights_line(item: str, src: WeightsSource, check_hub: bool) -> Line:
    from cir_demo.preflight.hub import human_bytes, repo_info

    if src.kind == "api":
        if src.cached:
            return Line(item, "ready", f"{src.label}")
        return Line(item, "blocked", f"{src.label}: {'; '.join(src.notes)}", src.fix)
    if src.cached:
        return Line(item, "ready", f"{src.label}: weights at {src.location}")
    if src.kind == "file" or src.kind == "none" or src.repo is None and src.kind != "url":
        return Line(item, "missing", f"{src.label}: not found at {src.location}", src.fix)
    if src.kind == "url":
        return Line(item, "download", f"{src.label}: not cached at {src.location}; downloaded on first use", src.fix)
    info = repo_info(src.repo, src.patterns) if check_hub else None
    if info is None or info.exists is None:
        why = info.problem if info is not None else "hub not asked"
        return Line(
            item,
            "missing",
            f"{src.label} from the Hugging Face repo {src.repo} is not in the cache "
            f"({src.location}) and cannot be downloaded: {why}",
            f"on a connected machine run {src.fix}, then run again",
        )
    if info.problem:
        return Line(item, "blocked", f"{src.label}: {info.problem}", "")
    return Line(
        item,
        "download",
        f"{src.label}: not cached; {human_bytes(info.size_bytes)} from the hub repo {src.repo} on first use",
        f"or fetch it now: {src.fix}",
    )


def retriever_lines(name: str, trust_remote_code: bool = False, check_hub: bool = True) -> list[Line]:
    """Everything that decides whether retriever `name` can load here; one ready line when it can."""
    from cir_demo.preflight.weights import retriever_sources
    from cir_demo.retrievers import registry

    item = f"retriever {name}"
    cfg = registry.get_config(name)
    lines: list[Line] = []
    missing = registry.missing_requirements(cfg)
    if missing:
        reqs = " ".join(f"'{r.split(' (installed')[0]}'" for r in missing)
        lines.append(Line(item, "blocked", f"needs {', '.join(missing)}", f"pip install {reqs}"))
    if cfg.get("needs_remote_code") and not trust_remote_code:
        lines.append(
            Line(
                item,
                "blocked",
                f"runs the code of its model repository {cfg.get('model')}",
                "review that code, then add --trust-remote-code",
            )
        )
    pin = cfg.get("transformers_pin")
    if pin:
        from packaging.specifiers import SpecifierSet
        from packaging.version import Version

        from importlib.metadata import version

        installed = Version(version("transformers"))
        if installed not in SpecifierSet(pin["spec"]):
            want = pin.get("tested") or pin["spec"]
            detail = f"its remote code is written for transformers{pin['spec']}, this environment has {installed}"
            fix = (
                f"run it in a separate environment (pip install 'transformers=={want.lstrip('=<>~!')}') "
                "and load its rankings as a 'precomputed' retriever"
            )
            lines.append(Line(item, "blocked" if pin.get("hard") else "warning", detail, fix))
    weights = [_weights_line(item, src, check_hub) for src in retriever_sources(name)]
    lines += [w for w in weights if w.status != "ready"]
    lines += _asset_lines(item, cfg)
    if not lines:
        return [Line(item, "ready", "; ".join(w.detail for w in weights))]
    return lines


def _asset_lines(item: str, config) -> list[Line]:
    """Committed weights (assets/) that do not match their manifest: size always, checksum too."""
    from cir_demo.integrity import check_assets_of

    return [Line(item, "missing", p) for p in check_assets_of(config)]  # each names its restore command


def reranker_lines(backend: str, **kw) -> list[Line]:
    from cir_demo.preflight.weights import reranker_sources
    from cir_demo.rerank import BACKENDS
    from cir_demo.utils.names import lookup

    lookup("reranker backend", backend, BACKENDS)  # unknown names: "did you mean"
    item = f"reranker {backend}"
    lines = [_weights_line(item, src, True) for src in reranker_sources(backend, **kw)]
    from cir_demo.rerank import reranker_settings

    lines += _asset_lines(item, reranker_settings(backend, **kw))
    bad = [ln for ln in lines if ln.status != "ready"]
    return bad or lines


# --------------------------------------------------------------------------- benchmark
def pending_generation_of(choice: BenchmarkChoice):
    """What loading the benchmark `choice` names would generate first (the world, not generated yet), or None."""
    from cir_demo.benchmarks.registry import pending_generation

    return pending_generation(choice.name, choice.kwargs)


def benchmark_lines(choice: BenchmarkChoice, load: bool = True):
    """(benchmark or None, lines). A world not generated yet is not generated here."""
    from cir_demo.errors import user_message
    from cir_demo.images.coverage import benchmark_flags, image_coverage, missing_images_parts

    item = f"benchmark {choice.name}"
    pending = pending_generation_of(choice)
    if pending is not None:
        return None, [
            Line(item, "ready", f"{pending.what} is not generated yet; the run generates it first ({pending.seconds})")
        ]
    if not load:
        return None, []
    try:
        bench = choice.load()
    except Exception as exc:  # noqa: BLE001 - a benchmark that cannot load is a line, not a crash
        msg = user_message(exc)
        if msg is None:
            raise
        return None, [
            Line(
                item,
                "blocked",
                msg.splitlines()[0] + (" ..." if "\n" in msg else ""),
                f"`python -m cir_demo validate {benchmark_flags(choice)}` lists every problem",
            )
        ]
    lines = [Line(item, "ready", f"{len(bench.queries)} queries, {len(bench.corpus_ids)} corpus images")]
    cov = image_coverage(bench)
    if cov is None:
        lines.append(Line("images", "ready", "generated on demand"))
    elif cov.complete:
        lines.append(Line("images", "ready", cov.describe()))
    else:
        any_present = cov.corpus_present > 0
        detail, fix = missing_images_parts(cov, choice)
        status = "warning" if any_present else "missing"
        if any_present:
            detail += "; a run proceeds on the images present, with the coverage stated"
        lines.append(Line("images", status, detail, fix))
    return bench, lines


def render_table(lines: list[Line]) -> str:
    """A fixed-width table: item, status, detail (and the fix under it)."""
    w_item = max([len(ln.item) for ln in lines] + [4])
    w_status = max([len(ln.status) for ln in lines] + [6])
    out = [f"{'item':<{w_item}}  {'status':<{w_status}}  detail / fix", f"{'-' * w_item}  {'-' * w_status}  {'-' * 40}"]
    for ln in lines:
        out.append(f"{ln.item:<{w_item}}  {ln.status:<{w_status}}  {ln.detail}")
        if ln.fix:
            out.append(f"{'':<{w_item}}  {'':<{w_status}}  fix: {ln.fix}")
    return "\n".join(out)


def load_failure_lines(
    name: str, exc: BaseException, trust_remote_code: bool = False, reranker_kw: dict | None = None
) -> list[str]:
    """What the app says about a retriever (or, with `reranker_kw`, a reranker backend) that
    could not load: the doctor's lines for it that are not ready (each with its fix), else
    the error's own one line."""
    from cir_demo.errors import one_line, user_message

    try:
        lines = (
            reranker_lines(name, **reranker_kw)
            if reranker_kw is not None
            else retriever_lines(name, trust_remote_code=trust_remote_code)
        )
        facts = [ln.message() for ln in lines if ln.status != "ready"]
    except Exception:  # noqa: BLE001 - the facts are a help; the error itself still shows
        facts = []
    what = "reranker" if reranker_kw is not None else "retriever"
    return facts or [f"{what} {name}: " + one_line(user_message(exc) or f"{type(exc).__name__}: {exc}")]
