"""bench/lib/reap.py: the GPU check's cleanup ends what a command left behind in sessions of its own (which `timeout`
does not reach), and exits with the command's status."""

import subprocess
import sys
from pathlib import Path

from bench.lib.proc_cpu import proc_stat

ROOT = Path(__file__).resolve().parent.parent


def _alive(pid: int) -> bool:
    try:
        return proc_stat(pid)[1][0] != "Z"
    except OSError:
        return False


def test_processes_left_in_sessions_of_their_own_are_ended_and_the_status_kept(tmp_path):
    pids = tmp_path / "pids"
    # a process in a new session, and one that a new session's shell left behind (its parent gone at once)
    script = (f"setsid sleep 300 & echo $! >> {pids}; "
              f"setsid bash -c 'sleep 300 & echo $! >> {pids}' ; exit 7")
    run = subprocess.run([sys.executable, "-m", "bench.lib.reap", "bash", "-c", script], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 7, run.stderr
    left = [int(p) for p in pids.read_text().split()]
    assert len(left) == 2
    assert not any(_alive(p) for p in left), [p for p in left if _alive(p)]
    assert "2 process(es) the command left were ended" in run.stderr, run.stderr


def test_a_command_that_leaves_nothing_ends_nothing():
    run = subprocess.run([sys.executable, "-m", "bench.lib.reap", "true"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0 and "0 process(es)" in run.stderr
