"""The background precompute: on a first start, what the failure sorts and the Report need (the
per-query metrics of every column with and without reranking) is computed as a normal `--eval`
run of the served benchmark, retrievers and reranker, in a low-priority subprocess started once
the explorer is usable, so a visitor never needs a terminal.

The run is staged by the harness under runs/.partial/ and published when complete; progress
is the number of results files written so far (one per retriever, one per reranked retriever)
plus the report. No gradio here.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from cir_demo.benchmarks.failure_views import base_sort
from cir_demo.benchmarks.registry import RERANK_SUFFIX
from cir_demo.explorer.run_lock import RunLock, holder_run_name, lock_path
from cir_demo.utils.procs import end_with_parent

log = logging.getLogger("cir_demo.explorer")

NICENESS = 15  # the job yields the CPU to page views
FOLLOWING = "by another app process"  # the detail of a run this process follows instead of computing


@dataclass(frozen=True)
class PrecomputeStatus:
    state: str  # "off", "waiting", "running", "done", "failed"
    done: int = 0
    total: int = 0
    detail: str = ""
    ready_sorts: frozenset = frozenset()  # sorts whose data was on disk before the run (offered at once)

    @property
    def ready(self) -> bool:
        """Every failure sort and the Report have their data (or nothing will be computed)."""
        return self.state in ("done", "off", "failed")

    def sort_ready(self, sort: str | None) -> bool:
        """Whether `sort` can be applied now (its data exists, or nothing more will come)."""
        return self.ready or not sort or sort == "order" or base_sort(sort) in self.ready_sorts

    def progress(self) -> str:
        return f"{self.done}/{self.total}" if self.total else ""

    def text(self) -> str:
        if self.state == "waiting":
            return "failure sorts and report: starting after the explorer and the first view are ready"
        if self.state == "running":
            by = f" {FOLLOWING}" if self.detail == FOLLOWING else ""
            return f"failure sorts and report: being computed in the background{by} ({self.progress() or 'starting'})"
        if self.state == "failed":
            return (
                f"failure sorts and report: the background run failed ({self.detail}); they are computed when "
                "asked for instead, and reloading the page tries the run again"
            )
        if self.state == "done":
            return f"failure sorts and report: ready ({self.detail})"
        return ""


def complete_run(service) -> Path | None:
    """A run of this benchmark content with every served column, plain and reranked, for every
    query the app shows, each under the key the app's store asks for (then nothing needs computing)."""
    store = service.store
    names = list(store.spec_hashes(service.retriever_names))
    if not names:
        return None
    # without a reranker that loads, the plain runs are all that is needed
    runs = names + ([f"{n}{RERANK_SUFFIX}" for n in names] if store.reranker_hash() else [])
    return store.stored_folder(runs)


def installed_shipped_run(service, root: Path) -> Path | None:
    """The complete run the repository ships for this view (the default world's `--eval` outputs,
    `cir_demo.index.prebuilt_run`), installed into `root`; None when none is shipped or it does not
    match what is served (then it is computed in the background, never served as current)."""
    from cir_demo.index.prebuilt_run import install_shipped_run, run_key

    try:
        served = run_key(
            service.fingerprint,
            service.store.spec_hashes(service.retriever_names),
            service.store.reranker_hash(),
            service.config.default_top_n,
        )
        path, problems = install_shipped_run(service.benchmark, served, root)
    except Exception:  # a failed install never stops the background run that replaces it
        log.exception("installing the shipped eval outputs")
        return None
    if problems:
        log.info("the shipped eval outputs are not used (%s); computing them in the background", "; ".join(problems))
    return complete_run(service) if path is not None else None


def _low_priority_child() -> None:
    """In the child before it runs: lowest-but-one CPU priority, and (Linux) ended with the app, so
    an app killed without cleanup leaves no eval running on."""
    os.nice(NICENESS)
    end_with_parent()


def spawn_low_priority(argv: Sequence[str], cwd: Path, log, env: dict | None = None) -> subprocess.Popen:
    """Start `argv` as the background run is started: nice 15, one BLAS/OpenMP thread, output to
    the open file `log`, no stdin, ended with the thread that starts it (Linux)."""
    env = dict(
        env if env is not None else os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1"
    )
    return subprocess.Popen(
        list(argv),
        cwd=str(cwd),
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        stdin=subprocess.DEVNULL,
        preexec_fn=_low_priority_child,
    )


def log_tail(path: Path, limit: int = 200) -> str:
    """The line of a failed run's log that says why: its last `error` line (the command line's
    one-line message) when there is one, else the last line. Progress bars redraw with carriage
    returns, so a bar's last state counts as a line of its own, never as the reason."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.replace("\r", "\n").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.lower().startswith(("error", "traceback")) or "Error:" in ln]
    line = (errors or lines or [""])[-1]
    return line if len(line) <= limit else line[:limit] + " …"


class PrecomputeJob:
    """One background `--eval` run for the served view; `status()` any time, from any thread.

    App processes sharing the runs folder compute a run once: the one that takes the run's lock
    (`run_lock`) computes it, the others follow its progress and use its result; if the holder
    ends without a complete run, a follower takes the lock and computes it itself."""

    FOLLOW_POLL_S = 3.0
    WATCH_POLL_S = 1.0  # how often the running child's staged results are counted

    def __init__(self, benchmark_argv: Sequence[str], runs_root: Path | None = None, enabled: bool = True):
        self.benchmark_argv = list(benchmark_argv)
        self.enabled = enabled
        self._runs_root = runs_root
        self._status = PrecomputeStatus("waiting" if enabled else "off")
        self._proc: subprocess.Popen | None = None
        self._out: Path | None = None
        self._run_lock: RunLock | None = None
        self._total = 0
        self._ready_sorts: frozenset = frozenset()
        self._lock = threading.Lock()
        self._on_done = []

    def on_done(self, callback) -> None:
        """`callback()` once the run is published (e.g. to forget cached failure measures)."""
        self._on_done.append(callback)

    def start_for(self, service) -> None:
        """Start the run for `service` unless a complete one exists (then: done at once) or one is
        running (here, or in another app process on the same storage: then follow that one).
        After a failed run, calling it again retries."""
        if not self.enabled:
            return
        with self._lock:
            if self._status.state == "running":
                return
            self._status = PrecomputeStatus("running", 0, 0, "starting")
        from cir_demo.paths import runs_dir

        try:
            root = self._runs_root or runs_dir()
            existing = complete_run(service) or installed_shipped_run(service, root)
            if existing is not None:
                self._set(PrecomputeStatus("done", detail=f"from {existing.name}"))
                return
        except Exception as exc:  # an unreadable runs folder: the sorts then compute on demand
            self._set(PrecomputeStatus("failed", detail=f"cannot read the runs folder: {exc}"))
            return
        names = list(service.retriever_names)
        self._total = len(names) * (2 if service.reranker_name else 1) + 1
        try:  # e.g. a first-stage-only run on disk: those sorts need not wait for this one
            self._ready_sorts = frozenset(service.stored_sorts())
        except Exception:
            log.exception("reading the stored per-query results")
        self._launch_or_follow(service, root)

    def _lock_path(self, service, root: Path) -> Path:
        return lock_path(
            root,
            [*self.benchmark_argv, "--retrievers", *service.retriever_names, "--rerank", str(service.reranker_name)],
        )

    def _launch_or_follow(self, service, root: Path, held: RunLock | None = None) -> None:
        out = root / f"{time.strftime('%Y%m%d-%H%M%S')}-{service.benchmark.name}-app"
        try:
            held = held or RunLock.take(self._lock_path(service, root), out.name)
        except OSError as exc:  # an unwritable runs folder: the sorts then compute on demand
            self._set(PrecomputeStatus("failed", detail=f"cannot start: {exc}"))
            return
        if held is None:
            self._set(PrecomputeStatus("running", 0, self._total, FOLLOWING, ready_sorts=self._ready_sorts))
            threading.Thread(
                target=self._follow, args=(service, root), name="cir-precompute-follow", daemon=True
            ).start()
            return
        try:  # the holder before us may have published it between our look and our lock
            existing = complete_run(service)
        except Exception:
            existing = None
        if existing is not None:
            held.release()
            self._set(PrecomputeStatus("done", detail=f"from {existing.name}"))
            return
        from cir_demo.paths import REPO_ROOT

        held.record(out.name)
        self._run_lock, self._out = held, out
        argv = self.command(service, out)
        self._set(PrecomputeStatus("running", 0, self._total, ready_sorts=self._ready_sorts))
        # The child is started by the thread that then waits for it: the child's "end with my parent"
        # signal follows that thread, which lives exactly as long as the child.
        threading.Thread(target=self._run, args=(argv, REPO_ROOT), name="cir-precompute", daemon=True).start()

    def _follow(self, service, root: Path) -> None:
        """Another app process holds the lock: show its progress, use its run once published, and
        compute the run here if that process ends without one (killed, failed)."""
        path = self._lock_path(service, root)
        seen = None
        while True:
            time.sleep(self.FOLLOW_POLL_S)
            try:  # complete_run reads per-query files: look only when a run folder was added
                published = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
                existing = complete_run(service) if published != seen else None
                seen = published
            except Exception:
                existing = None
            if existing is not None:
                self._set(PrecomputeStatus("done", detail=f"from {existing.name}, computed by another app process"))
                return
            try:
                held = RunLock.take(path, "")
            except OSError:
                held = None
            if held is not None:
                log.info("the app process computing the background run ended without it; computing it here")
                self._launch_or_follow(service, root, held)
                return
            done = self._count_staged(root, holder_run_name(path))
            self._set(PrecomputeStatus("running", done, self._total, FOLLOWING, ready_sorts=self._ready_sorts))

    def command(self, service, out: Path) -> list[str]:
        """The background run: `python -m cir_demo eval` of the served benchmark, columns and reranker."""
        argv = [
            sys.executable,
            "-m",
            "cir_demo",
            "eval",
            *self.benchmark_argv,
            "--retrievers",
            ",".join(service.retriever_names),
            "--rerank",
            service.reranker_name or "none",
            "--rerank-top-n",
            str(service.config.default_top_n),
            "--out",
            str(out),
        ]
        if service.config.device:
            argv += ["--device", service.config.device]
        if service.config.trust_remote_code:
            argv.append("--trust-remote-code")
        if service.config.index_uri and not service.config.index_uri.strip().endswith(".db"):
            argv += ["--index-uri", service.config.index_uri]  # a Milvus Lite folder opens in one process only
        return argv

    def _run(self, argv: list[str], cwd: Path) -> None:
        try:
            self._out.parent.mkdir(parents=True, exist_ok=True)
            self._log_path = self._out.parent / f".{self._out.name}.log"
            with open(self._log_path, "w") as out:
                self._proc = spawn_low_priority(argv, cwd, out)
        except OSError as exc:  # an unwritable runs folder: the sorts then compute on demand
            self._release_run_lock()
            self._set(PrecomputeStatus("failed", detail=f"cannot start: {exc}"))
            return
        log.info("background run started (pid %d, nice %d): %s", self._proc.pid, NICENESS, " ".join(argv[2:]))
        self._watch()

    def _set(self, status: PrecomputeStatus) -> None:
        if status.state == "done":  # before "done" is visible: no page re-sorts from stale cached measures
            for callback in self._on_done:
                try:
                    callback()
                except Exception:
                    log.exception("precompute callback")
        with self._lock:
            before, self._status = self._status, status
        if status.state in ("done", "failed") and before.state != status.state:
            log.info(status.text())  # the console says when the sorts are ready, as the page does

    def _count_staged(self, root: Path, run_name: str) -> int:
        """Results files the run `run_name` has staged so far (the report is the last step)."""
        if not run_name:
            return 0
        staged = list((root / ".partial").glob(f"*-{run_name}/results/*.json"))
        return min(len(staged), self._total - 1)

    def _watch(self) -> None:
        assert self._proc is not None
        while True:
            with self._lock:
                self._status = PrecomputeStatus(
                    "running",
                    self._count_staged(self._out.parent, self._out.name),
                    self._total,
                    ready_sorts=self._ready_sorts,
                )
            try:  # returns as the child ends, not at the next count: the page's "ready" follows the exit
                self._proc.wait(self.WATCH_POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
        self._release_run_lock()
        if self._proc.returncode == 0 and (self._out / "metrics.csv").is_file():
            self._set(PrecomputeStatus("done", self._total, self._total, f"run {self._out.name}"))
        else:
            self._set(PrecomputeStatus("failed", detail=f"exit {self._proc.returncode}: {log_tail(self._log_path)}"))

    def _release_run_lock(self) -> None:
        held, self._run_lock = self._run_lock, None
        if held is not None:
            held.release()

    def status(self) -> PrecomputeStatus:
        with self._lock:
            return self._status

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._release_run_lock()
