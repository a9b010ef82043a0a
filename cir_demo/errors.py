"""One path from an exception to the line a user reads, for the command line and the app.

`UserError` is a problem the user can fix; its message is one line that names the fix.
`user_message(exc)` turns it, and the other errors we raise on purpose (bad benchmark
files, unknown names, bad configs, missing images, a remote-code opt-in, a missing
package, a hub download that failed), into that line; anything else is a bug and gets
None. `report_errors` runs a command: a known error prints `error: <line>` and exits 1
(2 for a `UserError`, like a bad flag) with no traceback (`--debug` prints it); an unknown one prints its type and message in
one line and the hint to rerun with `--debug`. The app's guard (cir_demo/ui/guard.py)
uses `user_message` too, so a failure reads the same on the page and in a terminal.
"""
from __future__ import annotations

import sys
import traceback
from typing import Callable


USAGE_EXIT = 2  # a problem the user fixes (the same status as a bad flag, cir_demo.preflight.commands)


class UserError(Exception):
    """A problem the user can fix; the message is one line per problem, each naming its fix."""


def _hub_error_message(exc: BaseException) -> str | None:
    try:
        from huggingface_hub import errors as hub_errors
    except ImportError:  # pragma: no cover - huggingface_hub comes with transformers
        return None
    what = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, hub_errors.GatedRepoError):
        return (f"a gated model repository refused the download ({what}); accept its terms on its hub page, "
                "then log in with `hf auth login` (or set HF_TOKEN)")
    if isinstance(exc, hub_errors.RepositoryNotFoundError):
        return (f"a model repository was not found or is private ({what}); check the name, or log in "
                "with `hf auth login` (or set HF_TOKEN) if it is private")
    if isinstance(exc, (hub_errors.LocalEntryNotFoundError, hub_errors.OfflineModeIsEnabled)):
        return (f"model files are not in the local cache and the hub cannot be reached ({what}); "
                "run `python -m cir_demo doctor` with the same flags for the download command")
    return None


def user_message(exc: BaseException) -> str | None:
    """The one line to show for an error we raise on purpose; None for a bug. The error types of
    other modules are known by name: this module, in the bottom layer, imports none of them."""
    module = type(exc).__module__
    name = type(exc).__name__
    if isinstance(exc, UserError) or (module, name) == ("cir_demo.utils.names", "UnknownNameError"):
        return str(exc)
    hub = _hub_error_message(exc)
    if hub is not None:
        return hub
    if (module, name) in {("cir_demo.benchmarks.schema", "BenchmarkError"),
                          ("cir_demo.retrievers.registry", "ConfigError"),
                          ("cir_demo.benchmarks.images", "ImageUnavailableError")}:
        return str(exc)
    if isinstance(exc, ImportError) and "pip install" in str(exc):  # registry.check_requirements
        return str(exc)
    if isinstance(exc, PermissionError) and "--trust-remote-code" in str(exc):  # registry.check_remote_code
        return str(exc)
    return None


def one_line(text: str, limit: int = 2000) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + " ..."


def report_errors(fn: Callable[[], int | None], debug: bool = False, stream=None,
                  expected: tuple[type[BaseException], ...] = ()) -> int:
    """Run a command body; turn its failure into one line on stderr (and exit status 1).
    `expected`: more exception types whose message is already written for users."""
    stream = stream or sys.stderr
    try:
        return int(fn() or 0)
    except KeyboardInterrupt:
        print("interrupted", file=stream)
        return 130
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 - the point is to catch everything
        if debug:
            traceback.print_exc(file=stream)
        message = user_message(exc)
        if message is None and isinstance(exc, expected):
            message = str(exc)
        if message is None:
            message = f"{type(exc).__name__}: {exc}" + ("" if debug else " (rerun with --debug for the traceback)")
        for line in str(message).splitlines() or [""]:  # one line per problem
            print(f"error: {one_line(line)}", file=stream)
        return USAGE_EXIT if isinstance(exc, UserError) else 1
