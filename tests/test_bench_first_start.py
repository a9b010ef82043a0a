"""bench/bench_first_start.sh empties the folder it is given: it refuses one that holds a user's files."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "bench_first_start.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def run(out: Path) -> subprocess.CompletedProcess:
    # PORT 1: should the guard ever let it through, the app's start fails at once instead of serving
    return subprocess.run(
        ["bash", str(SCRIPT), str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PORT": "1"},
    )


@pytest.mark.parametrize("make", ["folder with a file", "a file"])
def test_a_folder_with_a_users_files_is_refused_and_kept(tmp_path, make):
    if make == "a file":
        out = tmp_path / "notes.txt"
        out.write_text("mine")
        kept = out
    else:
        out = tmp_path / "mine"
        (out / "sub").mkdir(parents=True)
        kept = out / "sub" / "keep.txt"
        kept.write_text("mine")
    res = run(out)
    assert res.returncode == 2, res.stderr
    assert f"error: {out} is neither a new or empty folder nor an earlier output" in res.stderr
    assert "nothing deleted" in res.stderr
    assert kept.read_text() == "mine"
    assert res.stdout == ""
