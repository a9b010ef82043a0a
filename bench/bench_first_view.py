"""The first page view of a cold start, in process: what `on_ready` prepares for a link without a query.

    CIR_DEMO_DATA=$(mktemp -d) python bench/bench_first_view.py ready   # the shipped run installed first
    CIR_DEMO_DATA=$(mktemp -d) python bench/bench_first_view.py early   # the view before it is installed

Loads the explorer as `python app.py` does (default world, an empty data folder as on a fresh clone),
then, `ready`: installs the shipped eval outputs (the background job's first step) and prepares the
view; `early`: prepares it first. Prints the seconds until the explorer was ready, the seconds the
first query's choice took, and the view's wall and CPU seconds with the load average. Run it in two
checkouts one after the other (old, new, new, old) for a ratio on a shared machine.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import os  # noqa: E402
import time  # noqa: E402


def main(mode: str) -> None:
    t0 = time.perf_counter()
    from cir_demo.benchmarks.cli_args import benchmark_flags
    from cir_demo.explorer.loader import ServiceLoader
    from cir_demo.explorer.precompute import PrecomputeJob
    from cir_demo.ui import app as ui_app
    from cir_demo.ui.startup import prepare

    startup = prepare(["--no-thumbnail-warmer"])
    config = ui_app.config_from_settings(startup.settings)
    loader = ServiceLoader(config, start=False, world_child=startup.world_child)
    loader.start()
    service = loader.wait(None)
    ready_at = time.perf_counter() - t0
    flags = benchmark_flags(config.benchmark, ui_app.served_split_kwargs(config), config.limit_groups)
    job = PrecomputeJob(flags, enabled=True)
    job.on_done(service.forget_failures)
    if mode == "ready":
        job.start_for(service)
    from cir_demo.explorer.first_view import first_query

    started, cpu = time.perf_counter(), time.process_time()
    query = first_query(service, job.status())
    chosen_s = time.perf_counter() - started
    ui_app.initial_outputs(service, {}, job.status())
    print(
        f"{mode}: explorer ready {ready_at:.2f} s; first query {query} chosen in {chosen_s:.2f} s; page view "
        f"{time.perf_counter() - started:.2f} s wall, {time.process_time() - cpu:.2f} s CPU; background job "
        f"{job.status().state}; load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    job.stop()
    service.engine.close()


if __name__ == "__main__":
    if len(_sys.argv) != 2 or _sys.argv[1] not in ("ready", "early"):
        raise SystemExit(__doc__)
    main(_sys.argv[1])
    os._exit(0)  # the loader's and the job's threads need not be waited for
