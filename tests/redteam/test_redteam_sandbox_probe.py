"""Red team of the sandbox's probe (verifier/common/sandbox.py ``status``): whether candidate code runs in bubblewrap is
decided once per process by running a sandbox. The first probes of a batch come from several threads at once (the
execution slots, the compile pool); they ran in one directory named after the process, one removed it under
another's bubblewrap, and the "none" that one found was kept for the process: every candidate after it ran with the
host's HOME, /tmp and /dev/shm, its network and its processes (found by a warm fork server test whose job found, on
the host, a file an earlier candidate had written). Here the batch starts from an unprobed process, its candidates'
files written to HOME, TMPDIR and /dev/shm never reach the host, and concurrent first probes all find the sandbox."""

import dataclasses
import os
import threading
import uuid
from pathlib import Path
from unittest import mock

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import screen
from verifier.common import sandbox
from verifier.engine import VerifyConfig, verify_batch
from verifier.front.static import scan

HOST = VerifyConfig().host()
pytestmark = pytest.mark.skipif(not sandbox.enabled(HOST),
                                reason=f"no sandbox here: {sandbox.status(HOST).get('reason')}")


def test_first_probes_from_many_threads_at_once_all_find_the_sandbox(monkeypatch):
    monkeypatch.setattr(sandbox, "_PROBED", {})
    barrier, found = threading.Barrier(8), []

    def probe():
        barrier.wait()
        found.append(sandbox.status(HOST)["isolation"])

    threads = [threading.Thread(target=probe) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(found) == 8 and "none" not in found, found
    assert [v["isolation"] for v in sandbox._PROBED.values()] == [found[0]]


def test_a_present_bubblewrap_that_fails_its_probe_is_tried_again_and_an_absent_one_is_not(monkeypatch):
    monkeypatch.setattr(sandbox, "_PROBED", {})
    monkeypatch.setattr(sandbox, "PROBE_WAIT_S", 0.0)
    real, calls = sandbox._status, []

    def flaky(host):
        calls.append(1)
        if len(calls) == 1:
            return {"isolation": "none", "reason": "bubblewrap refused here: a moment's failure", "retry": True}
        return real(host)

    monkeypatch.setattr(sandbox, "_status", flaky)
    assert sandbox.status(HOST)["isolation"] != "none" and len(calls) == 2
    monkeypatch.setattr(sandbox, "_PROBED", {})
    calls.clear()
    monkeypatch.setattr(sandbox, "_status", lambda host: calls.append(1) or {"isolation": "none", "reason": "no bwrap"})
    assert sandbox.status(HOST) == {"isolation": "none", "reason": "no bwrap"} and len(calls) == 1


def test_a_batch_that_starts_unprobed_keeps_every_candidates_files_off_the_host(monkeypatch):
    """Four candidates on two execution slots from a process that has not probed yet: each writes a file of its own
    name to HOME, TMPDIR and /dev/shm from its constructor (in the sandbox, its private scratch: no escape, it
    passes); none reaches the host, and each verdict says it ran in bubblewrap."""
    monkeypatch.setattr(sandbox, "_PROBED", {})
    tag = uuid.uuid4().hex[:12]
    task = Task.from_code(fx.RELU_TASK, name="relu", source="seed", level=1)
    items = []
    for i in range(4):
        code = fx.cpu_candidate("return ext.relu(x.contiguous())", init=(
            "import os, pathlib\n"
            f"for d in (os.environ.get('HOME', '/root'), os.environ.get('TMPDIR', '/tmp'), '/dev/shm'):\n"
            "    if os.access(d, os.W_OK):\n"
            f"        pathlib.Path(d, 'km-left-{tag}-{i}').write_text('for the host')"))
        items.append((task, Candidate(candidate_id=f"s{i}", task_id=task.task_id, backend="cpu", generator="redteam",
                                      code=code)))
    cfg = VerifyConfig(trials=2, timing_trials=0, run_timeout_s=60, exec_workers=2)
    # the runtime boundary alone decides: the source scan would refuse a constructor that writes files
    with mock.patch.object(screen, "scan", lambda code, backend="cpu": dataclasses.replace(scan(code, backend),
                                                                                         findings=[])):
        out = verify_batch(items, config=cfg, compile_workers=2)
    homes = {os.environ.get("HOME", "/root"), os.path.expanduser("~"), "/tmp", "/dev/shm", "/root"}
    left = [str(p) for d in homes for p in Path(d).glob(f"km-left-{tag}-*")]
    for p in left:
        Path(p).unlink(missing_ok=True)
    assert not left, left
    assert all(v.status == "pass" for v in out), [(v.status, v.feedback[:300]) for v in out]
    assert all(v.versions.get("sandbox", {}).get("isolation", "none") != "none" for v in out), \
        [v.versions.get("sandbox") for v in out]


def test_sandboxes_started_at_once_each_get_a_pids_cgroup_of_their_own():
    """The fork-bomb bound's cgroup (``PidsLimit``) of sandboxes a batch's threads start at once: one name each (a
    name two threads shared left the second sandbox without its limit), and the parent found by threads probing at
    once (each probe in a directory of its own)."""
    sandbox._pids_cgroup_parent.cache_clear()
    barrier, made = threading.Barrier(8), []

    def start():
        barrier.wait()
        made.append(sandbox.PidsLimit(64))

    threads = [threading.Thread(target=start) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        paths = [m.path for m in made]
        if not sandbox._pids_cgroup_parent():
            assert paths == [None] * 8  # no pids cgroup here: the supervisor's own count bounds a fork bomb
        else:
            assert None not in paths and len(set(paths)) == 8, paths
            assert all((p / "pids.max").read_text().strip() == "64" for p in paths)
    finally:
        for m in made:
            m.remove()
