"""Load test of the explorer through its public API (/search, /query, /failures, /image, called by name with
the parameters the app's API page lists) beside page visitors (each opening the page as a browser does), over
gradio's queue protocol in plain HTTP (`--client gradio_client` for the official client).

    python bench/bench_load.py --visitors 20 --duration 60 -- --world-size tiny
    python bench/bench_load.py --url http://127.0.0.1:7860 --server-pid PID --visitors 20 --duration 60
    nice -n 10 python bench/bench_load.py --duration 1800 --think 2 --burst 0 --rss-every 60 -- --world-size tiny

Without --url it starts `python app.py <args after -->` on a free port, waits until the explorer is
ready, and measures it. Every input comes from the app itself: the queries from /failures (benchmark
order), their phrasings from /query, a reference image from /image. Each API visitor repeats what a
script does: open a query, swap to another phrasing of it, rerank it (when the app has a reranker),
search with an image, list the worst failures, fetch an image; each page visitor (`--page-visitors`,
default a quarter) opens the page again and again; beside them `--api-clients` scripts (default 4, through
gradio_client) call /query reranked, /search, /failures and /evaluate (a results file built from the app's
own answers). A started app is measured once it has said its failure sorts are ready (`--settle`). The report gives p50/p95 per action and overall,
errors, the machine's load average, the CPU the bench and the server used, and the server's RSS (over time
with --rss-every). Then `--burst` visitors (default 60) fire one request each at once: beyond the queue
they must get a clean "queue is full" refusal, never an error of another kind.
"""

from __future__ import annotations

import argparse
import functools
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


_SCRATCH: dict = {}  # the TemporaryDirectory, held for the process's life
_SCRATCH_LOCK = threading.Lock()  # the clients' threads upload at once


def scratch() -> Path:
    """The folder of this bench process for the files its clients upload, removed when the process ends
    (the TemporaryDirectory's finalizer at exit): the bench made every file in it."""
    import tempfile

    with _SCRATCH_LOCK:
        if "dir" not in _SCRATCH:
            _SCRATCH["dir"] = tempfile.TemporaryDirectory(prefix="bench_load_")
        return Path(_SCRATCH["dir"].name)


def scratch_file(name: str) -> Path:
    """A path named `name` in a new folder of `scratch()` (each client's files apart)."""
    import tempfile

    return Path(tempfile.mkdtemp(dir=scratch())) / name


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


SETTLED = "failure sorts and report:"  # the app's line once the background run's outputs are installed or started


def start_app(app_args: list[str], port: int, settle_s: float = 300.0) -> subprocess.Popen:
    """Start the app and wait until the explorer is ready, then up to `settle_s` more for its line on the
    failure sorts (the shipped outputs installed, or the background run started): the load measures the
    steady state, not a /failures that computes a whole run because it came before the install."""
    cmd = [sys.executable, "app.py", "--port", str(port), *app_args]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    ready, settled = threading.Event(), threading.Event()

    def read() -> None:
        for line in iter(proc.stdout.readline, ""):
            if not settled.is_set():
                sys.stderr.write(f"[app] {line}")
            if "explorer ready" in line:
                ready.set()
            if ready.is_set() and SETTLED in line:
                settled.set()

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 1800
    while not ready.wait(1.0):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("the app did not become ready")
    if not settled.wait(settle_s):  # no background run (--no-precompute, --runs): no such line comes
        sys.stderr.write(f"[bench] no '{SETTLED}' line within {settle_s:.0f} s of ready: measuring anyway\n")
    return proc


class Refused(Exception):
    """The server refused to queue the request (HTTP 503: "Queue is full")."""


class AppFailed(Exception):
    """The app answered a request with an error."""


class RawVisitor:
    """One visitor speaking gradio's queue protocol over plain HTTP, as the page's JavaScript does:
    POST /gradio_api/queue/join with the values, then read the session's event stream (GET
    /gradio_api/queue/data, server-sent events) until the result arrives. Much cheaper per call than
    gradio_client (no polling threads), so the load generator does not eat the CPU it measures. Named
    endpoints get their values by parameter name, in the order the app's API description gives."""

    def __init__(self, url: str, app: "AppInfo", seed: int):
        import httpx

        self.url = url.rstrip("/")
        self.base = self.url + "/gradio_api"
        self.app = app
        self.session_hash = f"bench{seed:05d}{random.Random(seed).getrandbits(40):010x}"
        self.http = httpx.Client(timeout=120.0)

    def call(self, endpoint: str, **kwargs):
        """A public endpoint by name, e.g. call("query", query_id="w00001", rerank=True)."""
        return self._join(self.app.fn_ids[endpoint], self.app.ordered(endpoint, kwargs), endpoint)[0]

    def page(self):
        """The page load as a browser makes it (the view the page's URL names, prepared in full)."""
        return self._join(self.app.fn_ids[PAGE_EVENT], [], "page")

    def upload(self, data: bytes, name: str) -> dict:
        r = self.http.post(self.base + "/upload", files={"files": (name, data)})
        r.raise_for_status()
        return {"path": r.json()[0], "orig_name": name, "meta": {"_type": "gradio.FileData"}}

    def download(self, filedata: dict) -> bytes:
        r = self.http.get(filedata.get("url") or f"{self.base}/file={filedata['path']}")
        r.raise_for_status()
        return r.content

    def _join(self, fn_index: int, data: list, what: str):
        body = {
            "data": data,
            "event_data": None,
            "fn_index": fn_index,
            "trigger_id": None,
            "session_hash": self.session_hash,
        }
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
                        raise AppFailed(f"{what}: {out.get('error') or out}"[:300])
                    return msg["output"]["data"]
                if msg.get("msg") in ("close_stream", "unexpected_error"):
                    break
        raise RuntimeError(f"{what}: the event stream ended without a result")


class GradioClientVisitor:
    """The same calls through gradio_client (heavier on the client's CPU: it polls in threads); the page
    load is not an API endpoint, so page visitors always speak the raw protocol."""

    def __init__(self, url: str, app: "AppInfo", seed: int):
        from gradio_client import Client

        # one TLS context for all the client's calls: gradio_client opens an httpx client per call, and
        # httpx otherwise builds a context for each (reading the CA bundle), CPU the load generator would
        # take from the server it measures; `ssl_verify` is passed on as httpx's `verify`, which takes one
        self.client = Client(url, verbose=False, ssl_verify=tls_context())
        self.raw = RawVisitor(url, app, seed)

    def call(self, endpoint: str, **kwargs):
        from gradio_client import handle_file

        kwargs = {k: handle_file(v["path"]) if isinstance(v, dict) and "path" in v else v for k, v in kwargs.items()}
        return self.client.predict(**kwargs, api_name=f"/{endpoint}")

    def page(self):
        return self.raw.page()

    def upload(self, data: bytes, name: str) -> dict:
        path = scratch_file(name)
        path.write_bytes(data)
        return {"path": str(path)}

    def download(self, filedata) -> bytes:
        return Path(filedata).read_bytes() if isinstance(filedata, str) else self.raw.download(filedata)


PAGE_EVENT = "on_ready"  # the page load's second step (the first only polls the load status)
ENDPOINTS = ("search", "query", "failures", "image", "evaluate")


class AppInfo:
    """What the bench asks of the app before the load: the endpoints (ids and parameters, from the app's
    config and API description) and inputs taken from its own answers."""

    def __init__(self, url: str):
        import httpx

        base = url.rstrip("/")
        config = httpx.get(base + "/config", timeout=60.0).json()
        self.fn_ids = {d["api_name"]: d["id"] for d in config["dependencies"] if d.get("api_name")}
        info = httpx.get(base + "/gradio_api/info", timeout=60.0).json()["named_endpoints"]
        missing = [e for e in ENDPOINTS if f"/{e}" not in info]
        if missing:
            raise SystemExit(f"the app has no endpoint(s) {', '.join(missing)}; it lists {', '.join(info)}")
        self.parameters = {e: info[f"/{e}"]["parameters"] for e in ENDPOINTS}
        self.groups: list[list[str]] = []
        self.rerank = False
        self.image_id = ""
        self.image: dict | None = None
        self.image_bytes = b""
        self.results: dict[str, dict[str, float]] = {}  # a run dict of the app's own first column, for /evaluate

    def ordered(self, endpoint: str, kwargs: dict) -> list:
        """The values in the endpoint's parameter order, the app's defaults where none is given."""
        params = self.parameters[endpoint]
        unknown = set(kwargs) - {p["parameter_name"] for p in params}
        if unknown:
            raise ValueError(f"/{endpoint} has no parameter {', '.join(sorted(unknown))}")
        out = []
        for p in params:
            name = p["parameter_name"]
            if name not in kwargs and not p["parameter_has_default"]:
                raise ValueError(f"/{endpoint}: {name} is required")
            out.append(kwargs.get(name, p["parameter_default"]))
        return out

    def discover(self, visitor, n_groups: int = 20) -> None:
        """Queries and their phrasings, whether reranking is offered, and an image to search with."""
        listed = visitor.call("failures", sort="benchmark", top=200)
        seen: list[str] = []
        for row in listed["rows"]:
            qid = row["query_id"]
            if qid in seen:
                continue
            answer = visitor.call("query", query_id=qid, k=10)
            group = [p["query_id"] for p in answer["paraphrases"]] or [qid]
            ranked = answer["columns"][0]["results"]
            self.results[qid] = {r["image_id"]: float(len(ranked) - i) for i, r in enumerate(ranked)}
            seen += group
            self.groups.append(group)
            if not self.image_id:
                self.image_id = answer["query"]["reference_ids"][0]
            if len(self.groups) >= n_groups:
                break
        try:
            visitor.call("query", query_id=self.groups[0][0], k=1, rerank=True)
            self.rerank = True
        except AppFailed:
            self.rerank = False  # no reranker here: the rerank action is left out
        self.image_bytes = visitor.download(visitor.call("image", image_id=self.image_id))


WORDS = ["in red", "without the pattern", "the same in blue", "on a wooden table", "made of leather"]


@functools.cache
def tls_context():
    """The bench's one TLS context, built on first use and shared by every thread."""
    import ssl

    return ssl.create_default_context()


class Visitor:
    def __init__(self, url: str, app: AppInfo, seed: int, client: str = "raw", page: bool = False):
        self.client = (RawVisitor if client == "raw" else GradioClientVisitor)(url, app, seed)
        self.app, self.is_page = app, page
        self.client.page()  # a visitor opens the page first, as a browser does (a script too: its first GET)
        self.image = None if page else self.client.upload(app.image_bytes, "reference.png")
        self.rng = random.Random(seed)

    def actions(self):
        if self.is_page:
            return [("page load", self.client.page)]
        group = self.rng.choice(self.app.groups)
        first = group[0]
        other = self.rng.choice(group[1:]) if len(group) > 1 else first
        call = self.client.call
        out = [
            ("query", lambda: call("query", query_id=first)),
            ("query (other phrasing)", lambda: call("query", query_id=other)),
        ]
        if self.app.rerank:
            out.append(("query reranked", lambda: call("query", query_id=other, rerank=True)))
        out += [
            ("search", lambda: call("search", image=self.image, instruction=self.rng.choice(WORDS))),
            ("failures", lambda: call("failures", sort="worst", top=20)),
            ("image", lambda: call("image", image_id=self.app.image_id)),
        ]
        return out


class ApiClient(Visitor):
    """A script on the named endpoints through gradio_client (`--api-clients`): one round is a reranked
    query, a search, the worst failures and an /evaluate of a results file (the app's own first column on
    the queries it was asked, a run dict), as a notebook driving the Space does."""

    def __init__(self, url: str, app: AppInfo, seed: int):
        self.client = GradioClientVisitor(url, app, seed)
        self.app, self.is_page = app, False
        self.rng = random.Random(seed)
        self.image = self.client.upload(app.image_bytes, "reference.png")
        self.results_file = scratch_file(f"script{seed}.json")
        self.results_file.write_text(json.dumps(app.results))

    def actions(self):
        from gradio_client import handle_file

        group = self.rng.choice(self.app.groups)
        call = self.client.client.predict
        image = handle_file(self.image["path"])
        return [
            ("api /query", lambda: call(query_id=self.rng.choice(group), rerank=self.app.rerank, api_name="/query")),
            ("api /search", lambda: call(image=image, instruction=self.rng.choice(WORDS), api_name="/search")),
            ("api /failures", lambda: call(sort="worst", top=20, api_name="/failures")),
            ("api /evaluate", lambda: call(results_file=handle_file(str(self.results_file)), api_name="/evaluate")),
        ]


def is_refusal(exc: BaseException) -> bool:
    return isinstance(exc, Refused) or bool(re.search(r"queue is full|too many|429", str(exc), re.I))


def percentiles(vals: list[float]) -> dict:
    vals = sorted(vals)
    return {
        "n": len(vals),
        "p50_s": round(statistics.median(vals), 3),
        "p95_s": round(vals[min(len(vals) - 1, int(0.95 * len(vals)))], 3),
        "max_s": round(vals[-1], 3),
    }


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (its children not included)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def load_phase(
    url,
    app: AppInfo,
    visitors: int,
    duration: float,
    think: float = 0.0,
    server_pid: int | None = None,
    rss_every: float = 0.0,
    client: str = "raw",
    page_visitors: int = 0,
    min_rounds: int = 0,
    api_clients: int = 0,
) -> dict:
    """`think`: seconds a visitor pauses after each action (0: back to back); `rss_every`: seconds
    between samples of the server's RSS (0: none); the first `page_visitors` of the visitors load the page; each visitor does all its actions at least
    `min_rounds` times, past `duration` if need be."""
    load_before = os.getloadavg()[0]
    times: dict[str, list[float]] = defaultdict(list)
    page_loads: list[float] = []
    errors: list[str] = []
    refusals = 0
    lock = threading.Lock()
    # every visitor opens the page first (timed apart: it prepares the whole page); the clock of
    # the load phase starts when all have, so the actions measured are the steady state; the
    # `api_clients` scripts (gradio_client) join the visitors
    connected = threading.Barrier(visitors + api_clients + 1)
    stop_at = [float("inf")]

    def run(i: int) -> None:
        nonlocal refusals
        t = time.perf_counter()
        try:
            if i >= visitors:
                v = ApiClient(url, app, seed=i)
            else:
                v = Visitor(url, app, seed=i, client=client, page=i < page_visitors)
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
        rounds = 0
        while time.monotonic() < stop_at[0] or rounds < min_rounds:
            rounds += 1
            for name, call in v.actions():
                if time.monotonic() >= stop_at[0] and rounds > min_rounds:
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

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(visitors + api_clients)]
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
            rss_timeline.append(
                {"t_s": round(elapsed), "rss_mb": rss_mb(server_pid), "load_avg_1m": round(os.getloadavg()[0], 2)}
            )
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
    measured = [t for vals in times.values() for t in vals]
    if page_loads:
        times["first page load (before the clock)"] = page_loads
    for name, vals in times.items():
        per_action[name] = percentiles(vals)
    return {
        "visitors": visitors,
        "page_visitors": min(page_visitors, visitors),
        "api_clients": api_clients,
        "duration_s": duration,
        "requests": len(measured),
        "errors": len(errors),
        "error_examples": errors[:5],
        "refusals": refusals,
        "all_actions": percentiles(measured) if measured else None,
        "per_action": per_action,
        "load_avg_1m_before": round(load_before, 2),
        "load_avg_1m_mean": round(statistics.mean(loads), 2) if loads else None,
        "load_avg_1m_max": round(max(loads), 2) if loads else None,
        "client": client,
        "wall_s": round(wall, 1),
        # CPU used over the load phase, in cores (CPU seconds / wall seconds): what the load
        # generator takes from the machine it measures, beside what the server takes
        "bench_cpu_cores": round(bench_cpu / wall, 2),
        "server_cpu_cores": round(server_cpu / wall, 2) if server_cpu is not None else None,
        **({"server_rss_timeline": rss_timeline} if rss_timeline else {}),
    }


def burst_phase(url, app: AppInfo, visitors: int, client: str = "raw") -> dict:
    """Every visitor fires one request at the same moment."""
    outcome = {"ok": 0, "refused": 0, "errors": []}
    lock = threading.Lock()
    clients = []
    for i in range(visitors):
        clients.append(Visitor(url, app, seed=1000 + i, client=client))
    barrier = threading.Barrier(visitors)

    def run(v: Visitor) -> None:
        name, call = v.actions()[2]  # the reranked query (the heaviest action), else a search
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
    return {
        "visitors": visitors,
        "ok": outcome["ok"],
        "refused": outcome["refused"],
        "errors": len(outcome["errors"]),
        "error_examples": outcome["errors"][:5],
    }


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    app_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", help="a running explorer (default: start one with the arguments after --)")
    p.add_argument("--server-pid", type=int, help="with --url: the server's process id (its CPU and RSS are reported)")
    p.add_argument("--visitors", type=int, default=20)
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--burst", type=int, default=60, help="visitors firing at once in the refusal phase (0: skip)")
    p.add_argument(
        "--page-visitors",
        type=int,
        default=None,
        help="of the visitors, how many load the page over and over (default: a quarter)",
    )
    p.add_argument(
        "--min-rounds",
        type=int,
        default=0,
        help="each visitor does all its actions at least this many times, past --duration if need be",
    )
    p.add_argument(
        "--api-clients",
        type=int,
        default=4,
        help="gradio_client scripts calling /query (reranked), /search, /failures and /evaluate beside the visitors",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=300.0,
        help="seconds to wait after 'explorer ready' for the app's failure-sorts line before the load (default 300)",
    )
    p.add_argument("--think", type=float, default=0.0, help="seconds each visitor pauses after an action (default 0)")
    p.add_argument(
        "--rss-every",
        type=float,
        default=0.0,
        help="sample the started server's RSS every this many seconds during the load (default: never)",
    )
    p.add_argument(
        "--client",
        choices=["raw", "gradio_client"],
        default="raw",
        help="raw: gradio's queue protocol over plain HTTP as the page does (default, cheap); "
        "gradio_client: the official client (polls in threads: costs the measured machine CPU)",
    )
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    proc = None
    url = args.url
    if url is None:
        port = free_port()
        proc = start_app(app_args, port, args.settle)
        url = f"http://127.0.0.1:{port}/"
    try:
        app = AppInfo(url)
        app.discover(RawVisitor(url, app, seed=99999))
        pages = args.visitors // 4 if args.page_visitors is None else args.page_visitors
        result = {
            "url": url,
            "app_args": app_args,
            "cpu_count": os.cpu_count(),
            "rerank": app.rerank,
            "load": load_phase(
                url,
                app,
                args.visitors,
                args.duration,
                args.think,
                proc.pid if proc is not None else args.server_pid,
                args.rss_every,
                args.client,
                pages,
                args.min_rounds,
                args.api_clients,
            ),
        }
        if proc is not None:
            result["server_rss_mb_after_load"] = rss_mb(proc.pid)
        if args.burst:
            result["burst"] = burst_phase(url, app, args.burst, args.client)
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
