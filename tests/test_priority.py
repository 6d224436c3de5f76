"""The CPU priority of the verifier's background work holds where each process runs in a session of its own
(verifier/common/priority.py): on a kernel with autogroup scheduling a session is a scheduling group, shared at its
autogroup's nice whatever its processes' own nice, so a build at nice 10 and a header at nice 19 each took as much
CPU as an execution child. Each test reads the process's nice and, where the kernel has autogroups
(``/proc/self/autogroup``), its session's: both must be the priority the verifier gave it."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verifier.build import pch
from verifier.build.steps import COMPILE_NICE, BuildSandbox
from verifier.common import priority, sandbox
from verifier.engine import VerifyConfig

ROOT = Path(__file__).resolve().parent.parent
HOST = VerifyConfig().host()
# whether this kernel schedules sessions as groups, read in a session of its own: a process of a session the kernel
# never gave an autogroup (one kept from the container's init, as CI's test runner) reads an empty file
AUTOGROUPS = subprocess.run(
    [sys.executable, "-c", "from verifier.common import priority; print(priority.autogroup_nice())"],
    capture_output=True, text=True, timeout=60, start_new_session=True, cwd=ROOT,
    env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout.split() != ["None"]
REPORT = "import os\nfrom verifier.common import priority\nprint(os.nice(0), priority.autogroup_nice())\n"


def _read(stdout: str) -> tuple[int, int | None]:
    nice, group = stdout.split()
    return int(nice), None if group == "None" else int(group)


def _expected(nice: int) -> tuple[int, int | None]:
    return nice, nice if AUTOGROUPS else None


def test_the_background_header_compile_runs_at_its_priority_as_a_session():
    out = pch._compile([sys.executable, "-c", REPORT], background=True)
    assert out.returncode == 0, out.stderr
    assert _read(out.stdout) == _expected(pch.BACKGROUND_NICE) and pch.BACKGROUND_NICE > COMPILE_NICE


@pytest.mark.skipif(not sandbox.enabled(HOST), reason=f"no sandbox here: {sandbox.status(HOST).get('reason')}")
def test_a_build_step_keeps_its_priority_inside_the_sandbox(tmp_path):
    """The build's sandbox runs in the session the pool starts (no bwrap ``--new-session``, whose fresh session is
    a group at nice 0): the step and what it starts run at the builds' priority as a group too."""
    jail = BuildSandbox([tmp_path / "work"], HOST, read_only=[str(ROOT)])
    cmd = jail.argv([sys.executable, "-c", REPORT], {"PYTHONPATH": str(ROOT)})
    assert "--new-session" not in cmd
    p = subprocess.run(cmd, env={}, capture_output=True, text=True, timeout=120, start_new_session=True,
                       preexec_fn=jail.preexec, pass_fds=jail.pass_fds)
    jail.started()
    assert jail.finish() == [] and p.returncode == 0, p.stderr
    assert _read(p.stdout) == _expected(COMPILE_NICE)


def _in_session(script: str, preexec=None) -> str:
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=300,
                       start_new_session=True, preexec_fn=preexec, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_a_session_lowered_for_a_block_gets_its_priority_back():
    out = _in_session("""
        from verifier.common import priority
        with priority.session_at(priority.BUILD):
            print(priority.autogroup_nice())
        print(priority.autogroup_nice())
    """)
    assert out.split() == (["10", "0"] if AUTOGROUPS else ["None", "None"])


def test_a_lowered_session_raised_for_a_block_goes_back_below():
    """The module object every build waits for is compiled at priority 0 by a build step at 10, which its
    session's autogroup allows without privilege (only a nice below 0 needs it)."""
    out = _in_session("""
        import os
        from verifier.common import priority
        with priority.session_at(0, strict=False):
            print(priority.autogroup_nice(), os.nice(0))
        print(priority.autogroup_nice(), os.nice(0))
    """, preexec=lambda: priority.lower(COMPILE_NICE))
    assert out.split() == (["0", "10", "10", "10"] if AUTOGROUPS else ["None", "10", "None", "10"])


def test_the_compiled_reference_builds_at_the_builds_priority_and_times_at_its_own():
    """torch.compile's build of a task's reference (inductor's C++ compiles, on cpu) runs below the
    execution children, like a build; the child's timing after it runs at the child's own priority."""
    out = _in_session("""
        import torch
        from verifier.child.reference import build_compiled
        from verifier.common import priority
        from verifier.common.contract import ChildReport

        seen = []

        @torch._dynamo.disable
        def note():
            seen.append(priority.autogroup_nice())

        class M(torch.nn.Module):
            def forward(self, x):
                note()
                return torch.relu(x) * 2

        class Cpu:
            def synchronize(self):
                pass

        report = ChildReport(kind="reference")
        compiled = build_compiled(M(), lambda s: (torch.randn(64),), [0], Cpu(), report)
        assert compiled is not None, report.compile_error
        print(seen[0], priority.autogroup_nice())
    """)
    assert out.split() == (["10", "0"] if AUTOGROUPS else ["None", "None"])


@pytest.mark.skipif(not sandbox.enabled(HOST), reason=f"no sandbox here: {sandbox.status(HOST).get('reason')}")
def test_a_build_step_without_bwraps_new_session_has_no_terminal_to_inject_into(tmp_path):
    """Red team for dropping ``--new-session`` in the build sandbox: what it guards is a controlling terminal
    (TIOCSTI input injection). The session the pool starts has none, so code in the step (a static initialiser in the
    import check) cannot open one, and cannot take one: it leads no session (``setsid`` makes a new one, without a
    terminal either)."""
    script = ("import os\n"
              "try:\n    os.open('/dev/tty', os.O_RDWR)\n    print('terminal')\nexcept OSError:\n    print('none')\n"
              "print(os.getsid(0) == os.getpid())\n")
    jail = BuildSandbox([tmp_path / "work"], HOST, read_only=[str(ROOT)])
    p = subprocess.run(jail.argv([sys.executable, "-c", script], {"PYTHONPATH": str(ROOT)}), env={}, capture_output=True, text=True,
                       timeout=120, start_new_session=True, preexec_fn=jail.preexec, pass_fds=jail.pass_fds)
    jail.started()
    jail.finish()
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["none", "False"]
