"""Run a command, then end every process it left behind (a GPU check's cleanup: bench/gpu_check.sh).

`timeout` ends the command's process group, but the verifier starts processes in sessions of their own (build steps
at a lower priority, sandboxes), which outlive it: at a6b853a a capped tests/gpu run's builds went on beside the real
batch that came next in the same device call (its one-off 63 s against 37 s, two verdicts in 91 s). This process is
its descendants' subreaper (Linux ``PR_SET_CHILD_SUBREAPER``): whatever they leave is re-parented here once its
parent ends, and is killed here, until none is left.

    PYTHONPATH=. python3 -m bench.lib.reap CMD [ARGS...]   # exits with CMD's status; says on stderr how many it ended
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

from bench.lib.proc_cpu import proc_stat

PR_SET_CHILD_SUBREAPER = 36


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = proc_stat(int(name))[1]
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(name))
    return out


def reap_all(deadline_s: float = 30.0) -> int:
    """Kill this process's children until none is left (each killed one's own children come here next); the
    number of processes ended."""
    me, ended, stop = os.getpid(), 0, time.monotonic() + deadline_s
    while time.monotonic() < stop:
        kids = children(me)
        if not kids:
            break
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
                ended += 1
            except ProcessLookupError:
                pass
        time.sleep(0.2)
        while True:  # collect the ended ones (zombies are not counted as children)
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
    return ended


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    rc = subprocess.call(argv)
    ended = reap_all()
    print(f"[reap] {ended} process(es) the command left were ended", file=sys.stderr)
    return rc


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
