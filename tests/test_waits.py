"""A hang fails, naming the test: pytest.ini's per-test timeout, and the bound of a wait on a working run."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from pathlib import Path

import pytest

from process_cpu import wait_while_working

REPO = Path(__file__).resolve().parent.parent


def test_a_wait_on_a_run_that_works_without_end_fails_within_its_limit():
    cpu = itertools.count(1.0).__next__  # always using more CPU, never done: a spinning run
    started = time.monotonic()
    with pytest.raises(AssertionError, match="never ends"):
        wait_while_working(lambda seconds: time.sleep(seconds) or False, cpu, 0.05, limit_s=0.3)
    assert time.monotonic() - started < 5


def test_the_suites_timeout_turns_a_hang_into_a_failure_naming_the_test(tmp_path):
    (tmp_path / "test_hang.py").write_text("import time\n\ndef test_that_hangs():\n    time.sleep(60)\n")
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(REPO / "pytest.ini"),
            "--rootdir",
            str(tmp_path),
            "-n",
            "0",
            "-p",
            "no:cacheprovider",
            "-o",
            "timeout=2",
            str(tmp_path / "test_hang.py"),
        ],
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert done.returncode == 1 and time.monotonic() - started < 45
    assert "Timeout" in done.stdout and "test_that_hangs" in done.stdout


def test_pytest_ini_sets_a_timeout_for_every_test():
    import configparser

    ini = configparser.ConfigParser()
    ini.read(REPO / "pytest.ini")
    assert 0 < float(ini["pytest"]["timeout"]) <= 900
