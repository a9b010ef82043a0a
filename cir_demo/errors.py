"""One path from an exception to the line a user reads, for the command line and the app.

`UserError` is a problem the user can fix; its message is one line that names the fix.
`user_message(exc)` turns it, and the other errors we raise on purpose (bad benchmark
files, unknown names, bad configs, missing images, damaged files, a remote-code opt-in, a
missing package, a hub download that failed), into that line; anything else is a bug and gets
None. `report_errors` runs a command: a known error prints `error: <line>` with no traceback
(`--debug` prints it) and exits 2 when the fix is in what the user gave (`UserError`, a bad
benchmark or results file, an unknown name: `USAGE_ERRORS`), else 1; an unknown one prints its
type and message in one line and the hint to rerun with `--debug`. `OneLineFormatter` writes the
app's log the same way. The app's guard (cir_demo/ui/guard.py) uses `user_message` too, so a
failure reads the same on the page, in the log and in a terminal.
"""

from __future__ import annotations

import logging
import sys
import traceback
from typing import Callable


USAGE_EXIT = 2  # a problem the user fixes (the same status as a bad flag, cir_demo.preflight.commands)
# (module, name) of the errors about what the user gave (a file's content, a name): exit USAGE_EXIT
USAGE_ERRORS = {
    ("cir_demo.benchmarks.schema", "BenchmarkError"),
    ("cir_demo.utils.names", "UnknownNameError"),
    ("cir_demo.benchmarks.registry", "BenchmarkArgumentError"),
}
# the other errors raised on purpose whose message is written for users
KNOWN_ERRORS = {
    ("cir_demo.retrievers.registry", "ConfigError"),
    ("cir_demo.benchmarks.images", "ImageUnavailableError"),
    ("cir_demo.integrity", "DamagedFileError"),
    ("cir_demo.paths", "DataFolderError"),
}


class UserError(Exception):
    """A problem the user can fix; the message is one line per problem, each naming its fix."""


def _hub_error_message(exc: BaseException) -> str | None:
    try:
        from huggingface_hub import errors as hub_errors
    except ImportError:  # pragma: no cover - huggingface_hub comes with transformers
        return None
    what = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, hub_errors.GatedRepoError):
        return (
            f"a gated model repository refused the download ({what}); accept its terms on its hub page, "
            "then log in with `hf auth login` (or set HF_TOKEN)"
        )
    if isinstance(exc, hub_errors.RepositoryNotFoundError):
        return (
            f"a model repository was not found or is private ({what}); check the name, or log in "
            "with `hf auth login` (or set HF_TOKEN) if it is private"
        )
    if isinstance(exc, (hub_errors.LocalEntryNotFoundError, hub_errors.OfflineModeIsEnabled)):
        return (
            f"model files are not in the local cache and the hub cannot be reached ({what}); "
            "run `python -m cir_demo doctor` with the same flags for the download command"
        )
    return None


def user_message(exc: BaseException) -> str | None:
    """The one line to show for an error we raise on purpose; None for a bug. The error types of
    other modules are known by name: this module, in the bottom layer, imports none of them."""
    if isinstance(exc, UserError) or _is_usage_error(exc):
        return str(exc)
    hub = _hub_error_message(exc)
    if hub is not None:
        return hub
    if any((t.__module__, t.__name__) in KNOWN_ERRORS for t in type(exc).__mro__):
        return str(exc)
    if isinstance(exc, ImportError) and "pip install" in str(exc):  # registry.check_requirements
        return str(exc)
    if isinstance(exc, PermissionError) and "--trust-remote-code" in str(exc):  # registry.check_remote_code
        return str(exc)
    return None


def _is_usage_error(exc: BaseException) -> bool:
    return isinstance(exc, UserError) or any((t.__module__, t.__name__) in USAGE_ERRORS for t in type(exc).__mro__)


def error_lines(exc: BaseException, debug: bool = False) -> list[str]:
    """The lines a user reads for `exc` (one per problem), without the "error: " each is printed with."""
    message = user_message(exc)
    if message is None:
        message = f"{type(exc).__name__}: {exc}" + ("" if debug else " (rerun with --debug for the traceback)")
    # a problem list of a file (ValidationIssue lines) says "error: " itself: one prefix is enough
    return [one_line(line.removeprefix("error: ")) for line in str(message).splitlines() or [""]]


def print_error(exc: BaseException, stream=None) -> int:
    """Print `exc` as its "error: ..." lines (one prefix each); the exit status `report_errors` gives it."""
    for line in error_lines(exc):
        print(f"error: {line}", file=stream or sys.stderr)
    return USAGE_EXIT if _is_usage_error(exc) else 1


class OneLineFormatter(logging.Formatter):
    """A log record with an exception: its message, then the exception's one line as `--eval`
    prints it, no traceback; with `debug` the traceback as logging writes it."""

    def __init__(self, fmt: str | None = None, debug: bool = False):
        super().__init__(fmt)
        self.debug = debug

    def format(self, record: logging.LogRecord) -> str:
        if self.debug or not record.exc_info or record.exc_info[1] is None:
            return super().format(record)
        saved = record.exc_info, record.exc_text
        record.exc_info, record.exc_text = None, None
        try:
            text = super().format(record)
        finally:
            record.exc_info, record.exc_text = saved
        return f"{text}: {' | '.join(error_lines(saved[0][1]))}"


def one_line(text: str, limit: int = 2000) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + " ..."


def report_errors(
    fn: Callable[[], int | None], debug: bool = False, stream=None, expected: tuple[type[BaseException], ...] = ()
) -> int:
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
        if user_message(exc) is None and isinstance(exc, expected):
            lines = [one_line(line) for line in str(exc).splitlines() or [""]]
        else:
            lines = error_lines(exc, debug)
        for line in lines:  # one line per problem
            print(f"error: {line}", file=stream)
        return USAGE_EXIT if _is_usage_error(exc) else 1
