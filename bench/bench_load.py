"""Load test of the explorer through its real event endpoints, called as the page calls them
(gradio's queue protocol over plain HTTP; `--client gradio_client` for the official client).

    python bench/bench_load.py --visitors 20 --duration 60 -- --world-size tiny
    python bench/bench_load.py --url http://127.0.0.1:7860 --server-pid PID --visitors 20 --duration 60
    nice -n 10 python bench/bench_load.py --duration 1800 --think 2 --burst 0 --rss-every 60 -- --world-size tiny

Without --url it starts `python app.py <args after -->` on a free port, waits until the explorer is
ready, and measures it. Each visitor opens the page (timed apart), then repeats what a person
does: open a query, swap to another phrasing of it, turn reranking on, search the list; the
report gives p50/p95 per action, errors, the machine's load average, the CPU the bench and the
server used, and the server's RSS (over time with --rss-every). Then `--burst` visitors (default 60) fire one
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


class Refused(Exception):
    """The server refused to queue the request (HTTP 503: "Queue is full")."""


class RawVisitor:
    """One visitor speaking gradio's queue protocol over plain HTTP, as the page's JavaScript does:
    POST /gradio_api/queue/join with the component values, then read the session's event stream
    (GET /gradio_api/queue/data, server-sent events) until the result arrives. Much cheaper per call
    than gradio_client (no polling threads), so the load generator does not eat the CPU it measures."""

    def __init__(self, url: str, fn_ids: dict[str, int], seed: int):
        import httpx

        self.base = url.rstrip("/") + "/gradio_api"
        self.fn_ids = fn_ids
        self.session_hash = f"bench{seed:05d}{random.Random(seed).getrandbits(40):010x}"
        self.http = httpx.Client(timeout=120.0)

    @staticmethod
    def endpoints(url: str) -> dict[str, int]:
        import httpx

        config = httpx.get(url.rstrip("/") + "/config", timeout=60.0).json()
        return {d["api_name"]: d["id"] for d in config["dependencies"] if d.get("api_name")}

    def predict(self, *data, api_name: str):
        body = {"data": list(data), "event_data": None, "fn_index": self.fn_ids[api_name.lstrip("/")],
                "trigger_id": None, "session_hash": self.session_hash}
        r = self.http.post(self.base + "/queue/join", json=body)
        if r.status_code == 503:
            raise Refused(f"queue is full: {r.text[:100]}")
        r.raise_for_status()
        event_id = r.json()["event_id"]
        with self.http.stream("GET", self.base + "/queue/data", params={"session_hash": self.session_hash}) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                msg = json.loads(line[5:])
                if msg.get("msg") == "process_completed" and msg.get("event_id") == event_id:
                    if not msg.get("success"):
                        out = msg.get("output") or {}
                        raise RuntimeError(f"{api_name}: {out.get('error') or out}"[:300])
                    return msg["output"]["data"]
                if msg.get("msg") in ("close_stream", "unexpected_error"):
                    break
        raise RuntimeError(f"{api_name}: the event stream ended without a result")


class GradioClientVisitor:
    """The same calls through gradio_client (heavier on the client's CPU: it polls in threads)."""

    def __init__(self, url: str, fn_ids: dict[str, int], seed: int):
        from gradio_client import Client

        self.client = Client(url, verbose=False)

    def predict(self, *data, api_name: str):
        return self.client.predict(*data, api_name=api_name)


class Visitor:
    def __init__(self, url: str, groups: list[list[str]], retrievers: list[str], seed: int,
                 client: str = "raw", fn_ids: dict[str, int] | None = None):
        self.client = (RawVisitor if client == "raw" else GradioClientVisitor)(url, fn_ids or {}, seed)
        # the page load (on_ready) sets this session's phrasing choices to the first query's intent,
        # as a visitor's browser does; gradio refuses a phrasing outside the session's choices
        self.client.predict(api_name="/on_ready")
        self.groups, self.retrievers = groups[:1], retrievers
        from cir_demo.explorer.config import FILTER_FIELDS

        self.any_filters = ["any"] * len(FILTER_FIELDS)  # the list's filter dropdowns, as the page sends them
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
                ("list", lambda: self.client.predict(word, "order", *self.any_filters, api_name="/on_list"))]


def is_refusal(exc: BaseException) -> bool:
    return isinstance(exc, Refused) or bool(re.search(r"queue is full|too many|429", str(exc), re.I))


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (its children not included)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def load_phase(url, groups, retrievers, visitors: int, duration: float, think: float = 0.0,
               server_pid: int | None = None, rss_every: float = 0.0, client: str = "raw",
               fn_ids: dict[str, int] | None = None) -> dict:
    """`think`: seconds a visitor pauses after each action (0: back to back); `rss_every`: seconds
    between samples of the server's RSS (0: none)."""
    load_before = os.getloadavg()[0]
    times: dict[str, list[float]] = defaultdict(list)
    page_loads: list[float] = []
    errors: list[str] = []
    refusals = 0
    lock = threading.Lock()
    # every visitor opens the page first (timed apart: it prepares the whole page); the clock of
    # the load phase starts when all have, so the actions measured are the steady state
    connected = threading.Barrier(visitors + 1)
    stop_at = [float("inf")]

    def run(i: int) -> None:
        nonlocal refusals
        t = time.perf_counter()
        try:
            v = Visitor(url, groups, retrievers, seed=i, client=client, fn_ids=fn_ids)
        except Exception as exc:  # noqa: BLE001 - counted, reported
            v = None
            with lock:
                errors.append(f"connect: {type(exc).__name__}: {exc}"[:200])
        else:
            with lock:
                page_loads.append(time.perf_counter() - t)
        connected.wait()
        if v is None:
            return
        while time.monotonic() < stop_at[0]:
            for name, call in v.actions():
                if time.monotonic() >= stop_at[0]:
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

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(visitors)]
    for t in threads:
        t.start()
    connected.wait()
    stop_at[0] = time.monotonic() + duration
    loads = []
    started = time.monotonic()
    cpu0 = os.times()
    server_cpu0 = cpu_seconds(server_pid) if server_pid is not None else None
    rss_timeline: list[dict] = []
    next_rss = 0.0
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
    wall = time.monotonic() - started
    cpu1 = os.times()
    bench_cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    server_cpu = (cpu_seconds(server_pid) - server_cpu0) if server_cpu0 is not None else None
    per_action = {}
    if page_loads:
        times["page load (before the clock)"] = page_loads
    for name, vals in times.items():
        vals = sorted(vals)
        per_action[name] = {"n": len(vals), "p50_s": round(statistics.median(vals), 3),
                            "p95_s": round(vals[min(len(vals) - 1, int(0.95 * len(vals)))], 3),
                            "max_s": round(vals[-1], 3)}
    return {"visitors": visitors, "duration_s": duration, "requests": sum(len(v) for v in times.values()) - len(page_loads),
            "errors": len(errors), "error_examples": errors[:5], "refusals": refusals, "per_action": per_action,
            "load_avg_1m_before": round(load_before, 2),
            "load_avg_1m_mean": round(statistics.mean(loads), 2) if loads else None,
            "load_avg_1m_max": round(max(loads), 2) if loads else None,
            "client": client, "wall_s": round(wall, 1),
            # CPU used over the load phase, in cores (CPU seconds / wall seconds): what the load
            # generator takes from the machine it measures, beside what the server takes
            "bench_cpu_cores": round(bench_cpu / wall, 2),
            "server_cpu_cores": round(server_cpu / wall, 2) if server_cpu is not None else None,
            **({"server_rss_timeline": rss_timeline} if rss_timeline else {})}


def burst_phase(url, groups, retrievers, visitors: int, client: str = "raw", fn_ids: dict[str, int] | None = None) -> dict:
    """Every visitor fires one request at the same moment."""
    outcome = {"ok": 0, "refused": 0, "errors": []}
    lock = threading.Lock()
    clients = []
    for i in range(visitors):
        clients.append(Visitor(url, groups, retrievers, seed=1000 + i, client=client, fn_ids=fn_ids))
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
    p.add_argument("--server-pid", type=int, help="with --url: the server's process id (its CPU and RSS are reported)")
    p.add_argument("--visitors", type=int, default=20)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--burst", type=int, default=60, help="visitors firing at once in the refusal phase (0: skip)")
    p.add_argument("--retrievers", default="world-cir,world-clip-fusion,world-clip-image,world-clip-text",
                   help="columns each view asks for")
    p.add_argument("--think", type=float, default=0.0, help="seconds each visitor pauses after an action (default 0)")
    p.add_argument("--rss-every", type=float, default=0.0,
                   help="sample the started server's RSS every this many seconds during the load (default: never)")
    p.add_argument("--client", choices=["raw", "gradio_client"], default="raw",
                   help="raw: gradio's queue protocol over plain HTTP as the page does (default, cheap); "
                        "gradio_client: the official client (polls in threads: costs the measured machine CPU)")
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
        fn_ids = RawVisitor.endpoints(url) if args.client == "raw" else None
        result = {"url": url, "app_args": app_args, "cpu_count": os.cpu_count(),
                  "load": load_phase(url, groups, retrievers, args.visitors, args.duration, args.think,
                                    proc.pid if proc is not None else args.server_pid, args.rss_every, args.client, fn_ids)}
        if proc is not None:
            result["server_rss_mb_after_load"] = rss_mb(proc.pid)
        if args.burst:
            result["burst"] = burst_phase(url, groups, retrievers, args.burst, args.client, fn_ids)
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
