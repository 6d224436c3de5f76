"""The CPU priority of the verifier's background processes (builds below execution, headers below builds), made to
hold where each process runs in a session of its own.

A nice value orders processes only inside one scheduling group. On a kernel with autogroup scheduling
(``/proc/sys/kernel/sched_autogroup_enabled`` = 1, the default of most distributions' kernels, and of the project's
2-core machine) every session (``setsid``: ``Popen(start_new_session=True)``, bubblewrap's ``--new-session``) is a
group of its own, and the CPU is shared between the groups first, each at the weight of its *autogroup's* nice,
0 unless someone sets it. The verifier starts every build, header compile and child in a session of its own (so
that it can end all it left), so a build at nice 10 and a header at nice 19 each got as much CPU as an execution
child at nice 0: on the 2-core machine the background header took 40-50% of a core for the whole first 130 s of a
cold run, beside the builds the first verdict waited for (a per-process CPU sampler over ``kernelmill verify-run``,
the thirty-fifth session). ``lower`` sets both the process's nice and its session's autogroup's; a process a caller
starts in a session of its own keeps that session inside the sandbox (``Sandbox.argv(..., new_session=False)``).

Where a process's CPU cgroup is not the root one (a container with a CPU controller), autogroups do not apply and
the nice alone orders the processes of the cgroup, as it should; where ``/proc/self/autogroup`` is missing or
refuses the value, the nice alone is set. Imports: the standard library only."""

from __future__ import annotations

import contextlib
import os
import time

BUILD = 10  # builds (verifier/build/pool.py) and torch.compile's build of a reference: below execution and timing
BACKGROUND = 19  # headers made for later builds (verifier/build/pch.py): below the builds, with the CPU left over
AUTOGROUP = "/proc/self/autogroup"
# the kernel takes an autogroup's nice from a process without CAP_SYS_ADMIN at most once a 100 ms, machine-wide
# (EAGAIN otherwise, also after another process's change, its own included): tries spread over that
_TRIES, _PAUSE_S = 4, 0.03
_RESTORE_S = 5.0  # how long ``session_at`` tries to give the session its priority back


def lower(nice: int) -> None:
    """In a process just started in a session of its own (a ``preexec_fn``: it runs after the session is made):
    run ``nice`` below its parent, as a process and as its session's autogroup."""
    os.nice(nice)
    set_autogroup(os.getpriority(os.PRIO_PROCESS, 0))


def set_autogroup(nice: int) -> bool:
    """This process's session's autogroup to ``nice``; False where there is none to set or the kernel refused."""
    for i in range(_TRIES):
        try:
            with open(AUTOGROUP, "w") as f:
                f.write(str(nice))
            return True
        except BlockingIOError:  # EAGAIN: another autogroup's nice was set in the last 100 ms
            time.sleep(_PAUSE_S * (i + 1))
        except OSError:  # no autogroup scheduling (the file is missing or not writable)
            return False
    return False


@contextlib.contextmanager
def session_at(nice: int, strict: bool = True):
    """Within the block, this process's session at ``nice`` (its autogroup's: a process's own nice cannot be
    raised again without privilege, an autogroup's can, down to 0), and back where it was after it. Where the
    session has no autogroup, or the kernel refuses the change, the block runs as it is. ``strict``: raise
    ``PriorityNotRestored`` where the kernel kept refusing the way back for ``_RESTORE_S`` (what follows would run
    at the block's priority, unseen); otherwise leave it there."""
    before = autogroup_nice()
    if before is None or before == nice or not set_autogroup(nice):
        yield
        return
    try:
        yield
    finally:
        deadline = time.monotonic() + _RESTORE_S
        while not set_autogroup(before):
            if time.monotonic() > deadline or autogroup_nice() is None:
                if strict:
                    raise PriorityNotRestored(f"this session's autogroup stayed at nice {nice}, not {before}")
                break
            time.sleep(_PAUSE_S)


class PriorityNotRestored(RuntimeError):
    """``session_at`` could not give the session its priority back."""


def autogroup_nice(pid: int | str = "self") -> int | None:
    """The nice of ``pid``'s session's autogroup (``/autogroup-N nice K``); None where the kernel has none, or
    has none for that session (the file is empty for a session kept from init's, never made with ``setsid``)."""
    try:
        with open(f"/proc/{pid}/autogroup") as f:
            return int(f.read().split()[-1])
    except (OSError, ValueError, IndexError):
        return None
