"""Load test of the explorer through its real event endpoints (gradio_client, as the page calls them).

    python bench/bench_load.py --visitors 20 --duration 60 -- --world-size tiny
    python bench/bench_load.py --url http://127.0.0.1:7860 --visitors 20 --duration 60

Without --url it starts `python app.py <args after -->` on a free port, waits until the explorer is
ready, and measures it. Each visitor repeats what a person does: open a query, swap to another
phrasing of it, turn reranking on, search the list; the report gives p50/p95 per action, errors,
the machine's load average and the server's RSS. Then `--burst` visitors (default 60) fire one
request each at once: beyond the queue they must get a clean "queue is full" refusal, never an
error of another kind.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script from anywhere


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def start_app(app_args: list[str], port: int) -> subprocess.Popen:
    cmd = [sys.executable, "app.py", "--port", str(port), *app_args]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    deadline = time.monotonic() + 1800
    for line in iter(proc.stdout.readline, ""):
        sys.stderr.write(f"[app] {line}")
        if "explorer ready" in line:
            break
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("the app did not become ready")
    threading.Thread(target=lambda: [None for _ in iter(proc.stdout.readline, "")], daemon=True).start()
    return proc


def query_groups(app_args: list[str]) -> list[list[str]]:
    """Paraphrase groups of the benchmark the app serves (read locally; no server call)."""
    from cir_demo.benchmarks.cli_args import add_benchmark_arguments, load_benchmark_from_args

    p = argparse.ArgumentParser()
    add_benchmark_arguments(p)
    args, _ = p.parse_known_args(app_args)
    bench = load_benchmark_from_args(args)
    return [[q.query_id for q in group] for group in bench.groups().values()]


class Visitor:
    def __init__(self, url: str, groups: list[list[str]], retrievers: list[str], seed: int):
        from gradio_client import Client

        self.client = Client(url, verbose=False)
        # the page load (on_ready) sets this session's phrasing choices to the first query's intent,
        # as a visitor's browser does; gradio refuses a phrasing outside the session's choices
        self.client.predict(api_name="/on_ready")
        self.groups, self.retrievers = groups[:1], retrievers
        self.rng = random.Random(seed)

    def view(self, query_id: str, rerank: bool):
        return self.client.predict(query_id, self.retrievers, 10, rerank, 20, api_name="/on_view")

    def actions(self):
        group = self.rng.choice(self.groups)
        first = group[0]
        other = self.rng.choice(group[1:]) if len(group) > 1 else first
        word = self.rng.choice(["red", "dog", "without", "same", "blue", "hat"])
        return [("open", lambda: self.view(first, False)), ("swap", lambda: self.view(other, False)),
                ("rerank", lambda: self.view(other, True)),
                ("list", lambda: self.client.predict(word, "order", api_name="/on_list"))]


def is_refusal(exc: BaseException) -> bool:
    return bool(re.search(r"queue is full|too many|429", str(exc), re.I))


def load_phase(url, groups, retrievers, visitors: int, duration: float, think: float = 0.0,
               server_pid: int | None = None, rss_every: float = 0.0) -> dict:
    """`think`: seconds a visitor pauses after each action (0: back to back); `rss_every`: seconds
    between samples of the server's RSS (0: none)."""
    times: dict[str, list[float]] = defaultdict(list)
    errors: list[str] = []
    refusals = 0
    lock = threading.Lock()
    stop = time.monotonic() + duration

    def run(i: int) -> None:
        nonlocal refusals
        try:
            v = Visitor(url, groups, retrievers, seed=i)
        except Exception as exc:  # noqa: BLE001 - counted, reported
            with lock:
                errors.append(f"connect: {type(exc).__name__}: {exc}"[:200])
            return
        while time.monotonic() < stop:
            for name, call in v.actions():
                if time.monotonic() >= stop:
                    return
                t = time.perf_counter()
                try:
                    call()
                except Exception as exc:  # noqa: BLE001
                    with lock:
                        if is_refusal(exc):
                            refusals += 1
                        else:
                            errors.append(f"{name}: {type(exc).__name__}: {exc}"[:200])
                    continue
                with lock:
                    times[name].append(time.perf_counter() - t)
                if think:
                    time.sleep(think)

    loads = []
    started = time.monotonic()
    rss_timeline: list[dict] = []
    next_rss = 0.0
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(visitors)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        loads.append(os.getloadavg()[0])
        elapsed = time.monotonic() - started
        if server_pid is not None and rss_every and elapsed >= next_rss:
            rss_timeline.append({"t_s": round(elapsed), "rss_mb": rss_mb(server_pid),
                                 "load_avg_1m": round(os.getloadavg()[0], 2)})
            sys.stderr.write(f"[rss] {rss_timeline[-1]}\n")
            next_rss += rss_every
        time.sleep(2)
    for t in threads:
        t.join()
    per_action = {}
    for name, vals in times.items():
        vals = sorted(vals)
        per_action[name] = {"n": len(vals), "p50_s": round(statistics.median(vals), 3),
                            "p95_s": round(vals[min(len(vals) - 1, int(0.95 * len(vals)))], 3),
                            "max_s": round(vals[-1], 3)}
    return {"visitors": visitors, "duration_s": duration, "requests": sum(len(v) for v in times.values()),
            "errors": len(errors), "error_examples": errors[:5], "refusals": refusals, "per_action": per_action,
            "load_avg_1m_mean": round(statistics.mean(loads), 2) if loads else None,
            "load_avg_1m_max": round(max(loads), 2) if loads else None,
            **({"server_rss_timeline": rss_timeline} if rss_timeline else {})}


def burst_phase(url, groups, retrievers, visitors: int) -> dict:
    """Every visitor fires one request at the same moment."""
    outcome = {"ok": 0, "refused": 0, "errors": []}
    lock = threading.Lock()
    clients = []
    for i in range(visitors):
        clients.append(Visitor(url, groups, retrievers, seed=1000 + i))
    barrier = threading.Barrier(visitors)

    def run(v: Visitor) -> None:
        name, call = v.actions()[2]  # rerank: the heaviest action
        barrier.wait()
        try:
            call()
            key = "ok"
        except Exception as exc:  # noqa: BLE001
            key = "refused" if is_refusal(exc) else "errors"
            if key == "errors":
                with lock:
                    outcome["errors"].append(f"{type(exc).__name__}: {exc}"[:200])
                return
        with lock:
            outcome[key] += 1

    threads = [threading.Thread(target=run, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"visitors": visitors, "ok": outcome["ok"], "refused": outcome["refused"],
            "errors": len(outcome["errors"]), "error_examples": outcome["errors"][:5]}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    app_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", help="a running explorer (default: start one with the arguments after --)")
    p.add_argument("--visitors", type=int, default=20)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--burst", type=int, default=60, help="visitors firing at once in the refusal phase (0: skip)")
    p.add_argument("--retrievers", default="world-cir,world-clip-fusion,world-clip-image,world-clip-text",
                   help="columns each view asks for")
    p.add_argument("--think", type=float, default=0.0, help="seconds each visitor pauses after an action (default 0)")
    p.add_argument("--rss-every", type=float, default=0.0,
                   help="sample the started server's RSS every this many seconds during the load (default: never)")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    proc = None
    url = args.url
    if url is None:
        port = free_port()
        proc = start_app(app_args, port)
        url = f"http://127.0.0.1:{port}/"
    try:
        groups = query_groups(app_args)
        retrievers = [r for r in args.retrievers.split(",") if r]
        result = {"url": url, "app_args": app_args, "cpu_count": os.cpu_count(),
                  "load": load_phase(url, groups, retrievers, args.visitors, args.duration, args.think,
                                    proc.pid if proc is not None else None, args.rss_every)}
        if proc is not None:
            result["server_rss_mb_after_load"] = rss_mb(proc.pid)
        if args.burst:
            result["burst"] = burst_phase(url, groups, retrievers, args.burst)
        if proc is not None:
            result["server_rss_mb_end"] = rss_mb(proc.pid)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
