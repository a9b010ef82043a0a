"""What `python app.py` costs the machine when nobody uses it, and how long its start took.

    python bench/bench_idle_app.py [--seconds 30] [app.py flags ...]
    python bench/bench_idle_app.py --seconds 30 --world-size tiny --limit 6 --no-thumbnail-warmer

Starts `python app.py` with the given flags in an empty data folder of its own, waits until its log says
"failure sorts and report: ready" (the background run done or the shipped outputs installed), then reads
the app's own CPU seconds (/proc, its children left out) over `--seconds` with no page open. Prints the
log's "page served" and "explorer ready" seconds, the CPU seconds the app had used by "ready", and the
idle share of one core. Run it in two checkouts one after the other (old, new, new, old) for a ratio on
a shared machine.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICK_S = 1 / os.sysconf("SC_CLK_TCK")
READY = "failure sorts and report: ready"


def own_cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of `pid` itself (its children left out)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to measure the idle app")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up when not ready after this long")
    args, app_flags = parser.parse_known_args()
    with tempfile.TemporaryDirectory(prefix="cir-demo-bench-idle-") as data:
        env = {**os.environ, "CIR_DEMO_DATA": data, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        log = Path(data) / "app.log"
        with open(log, "w") as out:
            app = subprocess.Popen([sys.executable, "app.py", *app_flags], cwd=ROOT, env=env, stdout=out, stderr=out)
        try:
            deadline = time.monotonic() + args.timeout
            while READY not in log.read_text():
                if app.poll() is not None:
                    print(f"the app stopped: {log.read_text()[-2000:]}", file=sys.stderr)
                    return 1
                if time.monotonic() > deadline:
                    print(f"not ready after {args.timeout:.0f} s: {log.read_text()[-2000:]}", file=sys.stderr)
                    return 1
                time.sleep(0.5)
            text = log.read_text()
            served = re.search(r"page served ([\d.]+) s", text)
            ready = re.search(r"explorer ready ([\d.]+) s", text)
            at_ready = own_cpu_seconds(app.pid)
            time.sleep(1.0)  # the last step's work out of the figure
            before = own_cpu_seconds(app.pid)
            time.sleep(args.seconds)
            idle = own_cpu_seconds(app.pid) - before
        finally:
            app.terminate()
            app.wait(30)
    print(
        f"page served {served.group(1) if served else '?'} s, explorer ready {ready.group(1) if ready else '?'} s; "
        f"app CPU up to 'report: ready' {at_ready:.2f} s; idle {idle:.2f} CPU s in {args.seconds:.0f} s "
        f"({100 * idle / args.seconds:.1f} % of a core)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
