"""Numeric flags and names checked before any work: ranges (`--n-boot -5`), world sizes.

Each problem is a blocking `Line` whose item is the flag with its value; `commands.report`
prints them. Unset flags pass (argparse defaults are valid). The checks read `GivenFlags`, the
flags as parsed, which each command's edge hands over once (`GivenFlags.of(vars(flags))`).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from cir_demo.preflight.checks import Line


@dataclass(frozen=True)
class GivenFlags:
    """A command's flags as parsed, read-only, by attribute name (`--fetch-workers`: "fetch_workers"):
    what the checks before any work read, since they check each flag's raw value by its name (the
    runs read their typed settings). A flag the command does not have reads as None (unset)."""

    values: Mapping[str, Any]
    command: str | None = None
    action: str | None = None  # the subcommand (`world generate`: "generate")

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> GivenFlags:
        command = values.get("command")
        action = values.get(f"{command}_command") if command else None
        return cls(MappingProxyType(dict(values)), command, action)

    def get(self, attr: str) -> Any:
        return self.values.get(attr)


SEED = "a non-negative integer"
FETCH_INT_FLAGS = [("fetch_workers", 1, "a positive integer"), ("fetch_retries", 0, "a non-negative integer")]


def _flag(attr: str) -> str:
    return f"--{attr.replace('_', '-')}"


def _int_problem(flags: GivenFlags, attr: str, minimum: int, what: str, maximum: int | None = None) -> Line | None:
    value = flags.get(attr)
    if value is None or (
        not isinstance(value, bool)
        and isinstance(value, int)
        and value >= minimum
        and (maximum is None or value <= maximum)
    ):
        return None
    bounds = f"{minimum}-{maximum}" if maximum is not None else f">= {minimum}"
    return Line(f"{_flag(attr)} {value}", "blocked", f"must be {what} ({bounds})")


def int_problems(flags: GivenFlags, table: Sequence[tuple]) -> list[Line]:
    """`--flag` range problems for (attribute, minimum, description[, maximum]) rows (unset flags pass)."""
    return [p for row in table if (p := _int_problem(flags, *row))]


def benchmark_name_problems(flags: GivenFlags) -> list[Line]:
    """An unknown `--benchmark` ("did you mean"): checked first, since the other checks read its defaults."""
    name = flags.get("benchmark")
    if name is None:
        return []
    from cir_demo.benchmarks.registry import get_spec
    from cir_demo.utils.names import UnknownNameError

    try:
        get_spec(name)
    except UnknownNameError as exc:
        return [Line("--benchmark", "blocked", str(exc))]
    return []


PORT_ENV = "GRADIO_SERVER_PORT"  # gradio reads it when --port is absent


def _port_from_env() -> tuple[int | None, list[Line]]:
    """`$GRADIO_SERVER_PORT` (what the server binds when --port is absent): its value, or its problem."""
    import os

    raw = os.environ.get(PORT_ENV, "").strip()
    if not raw:
        return None, []
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if 0 <= port <= 65535:
        return port, []
    return None, [
        Line(f"{PORT_ENV}={raw}", "blocked", "must be a port number (0-65535)", f"unset {PORT_ENV} or give --port")
    ]


def _bind_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on host:port (a probe bind, closed at once: the server then
    binds it itself); None when it can. Port 0 checks the interface only."""
    import errno
    import socket

    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT is no conflict
            probe.bind((host, port))
    except OSError as exc:
        return "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
    return None


def port_problems(flags: GivenFlags) -> list[Line]:
    """`--port` (else `$GRADIO_SERVER_PORT`) in 0-65535 and free on the interface the app listens on
    (`--server-name`, else `$GRADIO_SERVER_NAME`), which must be one of this machine's."""
    import os

    problems = int_problems(flags, [("port", 0, "a port number", 65535)])
    port, item = flags.get("port"), "--port"
    if port is None:
        port, problems = _port_from_env()
        item = PORT_ENV
    if problems:
        return problems
    host, host_item = flags.get("server_name"), "--server-name"
    if not host:
        host, host_item = os.environ.get("GRADIO_SERVER_NAME") or "127.0.0.1", "GRADIO_SERVER_NAME="
    reason = _bind_problem(host, 0)  # the interface first: a port is free only on a host this machine has
    if reason is not None:
        shown = f"{host_item} {host}" if host_item == "--server-name" else f"{host_item}{host}"
        return [
            Line(
                shown,
                "blocked",
                f"cannot listen on {host} ({reason})",
                "name an interface of this machine (127.0.0.1, or 0.0.0.0 for all)",
            )
        ]
    reason = _bind_problem(host, port) if port else None
    if reason is None:
        return []
    return [
        Line(
            f"{item} {port}",
            "blocked",
            f"cannot listen on {host}:{port} ({reason})",
            "name another port"
            + (
                ", or leave --port out to take the next free one from 7860"
                if item == "--port"
                else f" (--port, or {PORT_ENV})"
            ),
        )
    ]


def settle_port(port: int | None, server_name: str | None) -> int | None:
    """After `port_problems` passed, the port the app serves on (None: gradio's choice): `--port` given,
    `$GRADIO_SERVER_PORT` set to it (gradio parses the variable when it is imported, and a value like
    `abc` would stop that import though the flag overrides it); `--port 0`, a free port the system picks
    on the interface the app listens on (`--server-name`, else `$GRADIO_SERVER_NAME`)."""
    import os
    import socket

    if port is None:
        return None
    if port == 0:
        host = server_name or os.environ.get("GRADIO_SERVER_NAME") or "127.0.0.1"
        family = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            port = probe.getsockname()[1]
    os.environ[PORT_ENV] = str(port)
    return port


def positive_float_problems(flags: GivenFlags, attrs: Sequence[str]) -> list[Line]:
    """`--flag` problems for floats that must be > 0 (unset flags pass)."""
    out = []
    for attr in attrs:
        value = flags.get(attr)
        if value is not None and not (isinstance(value, (int, float)) and value > 0):
            out.append(Line(f"{_flag(attr)} {value}", "blocked", "must be a positive number (> 0)"))
    return out


def fetch_flag_problems(flags: GivenFlags) -> list[Line]:
    """`--fetch-workers`, `--fetch-retries`, `--fetch-timeout` (eval, index build and images fetch)."""
    return int_problems(flags, FETCH_INT_FLAGS) + positive_float_problems(flags, ["fetch_timeout"])


def benchmark_flag_problems(flags: GivenFlags) -> list[Line]:
    return (
        int_problems(
            flags, [("world_seed", 0, "a non-negative integer"), ("limit", 1, "a positive number of paraphrase groups")]
        )
        + split_problems(flags)
        + world_size_problems(flags, "world_size")
    )


def world_size_problems(flags: GivenFlags, attr: str) -> list[Line]:
    """`--world-size` / `--size` not a world size (generate.SIZES: a size and its folds)."""
    size = flags.get(attr)
    if size is None:
        return []
    from cir_demo.world.generate import SIZES

    if size in SIZES:
        return []
    from cir_demo.utils.names import UnknownNameError

    return [Line(_flag(attr), "blocked", str(UnknownNameError("world size", size, SIZES)))]


def split_problems(flags: GivenFlags) -> list[Line]:
    """`--split` not among the splits the benchmark declares (benchmarks that declare none check it on loading)."""
    split = flags.get("split")
    if split is None:
        return []
    from cir_demo.benchmarks.registry import declared_defaults

    name = flags.get("benchmark")
    spec = declared_defaults(name) if name else None
    if spec is None or not spec.splits or split in spec.splits:
        return []
    return [Line(f"--split {split}", "blocked", f"benchmark {name!r} has the splits {', '.join(spec.splits)}")]


# (command, subcommand) -> (attribute, minimum, description) of its integer flags; `--size` /
# `--world-size` are checked against the world sizes. Eval and index check theirs in `commands`.
COMMAND_INT_FLAGS: dict[tuple[str, str | None], list[tuple[str, int, str]]] = {
    ("world", "generate"): [("seed", 0, SEED)],
    ("world", "contact-sheet"): [
        ("seed", 0, SEED),
        ("per_category", 1, "a positive number of intents"),
        ("sample_seed", 0, SEED),
    ],
    ("world", "stats"): [("seed", 0, SEED)],
    ("world", "export"): [("seed", 0, SEED)],
    ("world", "render"): [("seed", 0, SEED), ("pixels", 32, "an image size in pixels")],
    ("train", None): [
        ("seed", 0, SEED),
        ("data_seed", 0, SEED),
        ("max_steps", 1, "a positive number of steps"),
        ("threads", 1, "a positive number of threads"),
    ],
    ("images", "fetch"): FETCH_INT_FLAGS,
    ("rerank", None): [
        ("top_n", 1, "a positive integer"),
        ("batch_size", 1, "a positive integer"),
        ("max_pixels", 1, "a positive integer"),
        ("concurrency", 1, "a positive integer"),
        ("retries", 0, "a non-negative integer"),
    ],
    ("validate", None): [("max_warnings", 0, "a non-negative integer")],
    # the app (`python app.py`): --port is checked by port_problems (range, then free)
    ("app", None): [
        ("concurrency", 1, "a positive number of requests worked on at once"),
        ("queue_size", 1, "a positive number of waiting requests"),
        ("threads", 1, "a positive number of threads"),
        *FETCH_INT_FLAGS,
    ],
}
COMMAND_POSITIVE_FLOATS: dict[tuple[str, str | None], list[str]] = {
    ("train", None): ["epochs"],
    ("images", "fetch"): ["fetch_timeout"],
    ("rerank", None): ["timeout"],
    ("app", None): ["fetch_timeout"],
}


def command_flag_problems(flags: GivenFlags) -> list[Line]:
    """Range problems of the numeric flags of a command other than eval and index (and every
    command's `--world-seed` / `--limit`), and an unknown world size: checked before anything is created."""
    key = (flags.command, flags.action)
    problems = benchmark_name_problems(flags) + benchmark_flag_problems(flags)
    problems += int_problems(flags, COMMAND_INT_FLAGS.get(key, []))
    problems += positive_float_problems(flags, COMMAND_POSITIVE_FLOATS.get(key, []))
    if flags.command == "world":  # every other command's `--world-size` is checked with the benchmark flags
        problems += world_size_problems(flags, "size")
    return problems
