"""The execution slots' processes on the cpu backend with real processes (verifier/execute/processes.py): a
batch's execution threads lease slots whose fork servers serve the next batch and keep nothing between candidates;
a slot's two warm servers take turns in their own sandboxes; a slot warmed before its first job gives that job the
servers it started; a fork server preloads what the profiler imports without a thread or CUDA, and exits quietly
when its verifier has gone."""

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import engine, screen
from verifier.engine import VerifyConfig, verify_batch
from verifier.front.static import scan

ROOT = Path(__file__).resolve().parent.parent
TASKS = {"relu": Task.from_code(fx.RELU_TASK, name="relu", source="seed", level=1)}


@pytest.fixture(scope="module")
def config(shared_build_dir):
    return VerifyConfig(build_dir=shared_build_dir, trials=5, timing_trials=5, warmup=1, time_torch_compile=False,
                        run_timeout_s=25, memory_limit_gb=4, exec_workers=2)


def test_execution_slots_serve_the_next_batch_and_keep_nothing_between_candidates(config):
    """verify_batch's execution threads lease slots (verifier/execute/processes.py): the next batch's threads get the
    same slots, so their fork servers serve it instead of piling up; and a
    file a candidate leaves beside its job directory is gone before the slot's next candidate runs."""
    from verifier.execute import processes

    task = TASKS["relu"]
    leaver = fx.cpu_candidate("return ext.relu(x.contiguous())", init=(
        "import os, pathlib\n"
        "pathlib.Path(os.getcwd()).parent.joinpath('left-' + str(os.getpid())).write_text('for the next one')"))
    looker = fx.cpu_candidate("return ext.relu(x.contiguous())", init=(
        "import glob, os\n"
        "left = glob.glob(os.path.join(os.path.dirname(os.getcwd()), 'left-*'))\n"
        "assert not left, f'found what an earlier candidate left: {left}'"))

    def run(codes):
        items = [(task, Candidate(candidate_id=f"c{i}", task_id=task.task_id, backend="cpu", generator="test", code=c))
                 for i, c in enumerate(codes)]
        with mock.patch.object(screen, "scan", lambda code, backend="cpu": dataclasses.replace(scan(code, backend),
                                                                                             findings=[])):
            return verify_batch(items, config=dataclasses.replace(config, exec_workers=1), compile_workers=1)

    first = run([leaver])
    assert first[0].status == "pass", first[0].feedback
    slot_servers = {k: s.proc.pid for k, s in processes._SERVERS.items() if k[1] == "slot"}
    slots_made = processes._SLOTS_MADE
    assert slot_servers, "an execution thread of verify_batch runs in a leased slot"
    roots = [Path(r) for k, r in processes._JOB_ROOTS.items() if k[0] == "slot"]
    assert roots and all(not any(r.iterdir()) for r in roots), "the leaver's file was removed with its job"
    second = run([looker, fx.HONEST_RELU])
    assert [v.status for v in second] == ["pass", "pass"], [v.feedback for v in second]
    after = {k: s.proc.pid for k, s in processes._SERVERS.items() if k[1] == "slot"}
    # the first batch's servers serve on (same processes) and the second batch leased only slots the first made:
    # which free slot a thread takes first depends on which of the batch's threads (its task's preparation, its
    # execution) leased one before (a warm build root made the first batch's preparation lease one and start nothing)
    assert slot_servers.items() <= after.items(), (slot_servers, after)
    assert processes._SLOTS_MADE == slots_made, "the second batch made slots of its own instead of leasing the first's"


def test_warm_fork_servers_take_turns_and_keep_nothing_between_their_jobs(config, monkeypatch):
    """cuda jobs run in children a fork server forked and warmed up before the job existed (verifier/execute/processes.py);
    each slot has two such servers in separate sandboxes, taking turns, so the warm child waiting for the next
    job never shares a sandbox with the running one. Exercised here with cpu jobs through the same path: every
    job runs in a forked child of a ``--serve`` process, the slot has two distinct servers, and what a job left
    in its sandbox's private scratch (HOME, TMPDIR) and /dev/shm is gone before that server's next job (the
    third job runs on the first job's server)."""
    from verifier.execute import processes

    monkeypatch.setattr(processes, "WARM_BACKENDS", ("cuda", "cpu"))
    task = TASKS["relu"]
    name = f"left-behind-{os.getpid()}-{time.time_ns()}"  # this run's: a file on the host would be found below
    leaver = fx.cpu_candidate("return ext.relu(x.contiguous())", init=(
        "import os, pathlib\n"
        "assert '--serve' in pathlib.Path('/proc/self/cmdline').read_text(), 'not a forked child of a server'\n"
        "for d in (os.environ['HOME'], os.environ.get('TMPDIR', '/tmp'), '/dev/shm'):\n"
        "    if os.access(d, os.W_OK):\n"
        f"        pathlib.Path(d, '{name}').write_text('for the next one')"))
    looker = fx.cpu_candidate("return ext.relu(x.contiguous())", init=(
        "import os, pathlib\n"
        "assert '--serve' in pathlib.Path('/proc/self/cmdline').read_text(), 'not a forked child of a server'\n"
        "left = [d for d in (os.environ['HOME'], os.environ.get('TMPDIR', '/tmp'), '/dev/shm')\n"
        f"        if os.path.exists(os.path.join(d, '{name}'))]\n"
        "assert not left, f'found what an earlier job left in {left}'"))
    items = [(task, Candidate(candidate_id=f"w{i}", task_id=task.task_id, backend="cpu", generator="test", code=c))
             for i, c in enumerate([leaver, fx.HONEST_RELU, looker])]
    with mock.patch.object(screen, "scan", lambda code, backend="cpu": dataclasses.replace(scan(code, backend),
                                                                                         findings=[])):
        out = verify_batch(items, config=dataclasses.replace(config, exec_workers=1), compile_workers=1)
    # the leaver's files were in its sandbox's scratch, never on the host (redteam/test_redteam_sandbox_probe.py)
    on_host = [d for d in (os.path.expanduser("~"), "/tmp", "/dev/shm") if os.path.exists(os.path.join(d, name))]
    assert not on_host, on_host
    assert [v.status for v in out] == ["pass"] * 3, [v.feedback for v in out]
    warm = {k: s for k, s in processes._SERVERS.items() if k[0] == "cpu" and k[1] == "slot" and k[-1] is not None}
    # one slot ran the three jobs; a task preparation thread may hold a slot of its own (the reference's timing
    # child, when no kept timing of the task exists yet): every slot has its two servers taking turns
    slots = {k[2] for k in warm}
    assert slots and all(sorted(k[-1] for k in warm if k[2] == s) == [0, 1] for s in slots), warm.keys()
    assert len({s.proc.pid for s in warm.values()}) == 2 * len(slots) and all(s.alive() for s in warm.values())


def test_a_slot_warmed_before_its_first_job_gives_that_job_the_servers_it_started(config, monkeypatch):
    """A slot's execution processes start before its first candidate is built (``runs.warm_slot``; the engine's
    ``SlotWarmUp``), so its first job does not wait for their imports and CUDA contexts: the servers warmed are
    the pair the slot's jobs then run on, not replaced (a warm-up started with other settings than a job asks for
    would only add processes). Exercised with cpu jobs through the same path, as the test above."""
    from verifier import runs
    from verifier.execute import processes

    monkeypatch.setattr(processes, "WARM_BACKENDS", ("cuda", "cpu"))
    cfg = dataclasses.replace(config, warm_processes=-1, prep_cache=False, timing_trials=3)  # a timing of its own
    with processes.exec_slot():
        slot = ("cpu", *processes._slot())
        try:
            runs.warm_slot(["cpu"], cfg, cfg.build_root())
            # (the slot may also have a server of turn None: an earlier cpu job's, not warm)
            warmed = {k[-1]: s for k, s in processes._SERVERS.items() if k[:3] == slot and k[-1] is not None}
            assert sorted(warmed) == [0, 1] and all(s.alive() for s in warmed.values())
            job = runs.new_job("reference", "cpu", cfg, cfg.build_root(), TASKS["relu"].reference_code)
            job_dir = runs.new_job_dir(job, cfg)
            job.write(job_dir)
            _, build_root, locks = processes._job_fields(job_dir)
            # the slot's next two jobs (its turns) are handed to the two servers it warmed
            got = [processes._warm_server("cpu", cfg.host(), build_root, locks) for _ in range(2)]
            assert {id(s) for s in got} == {id(s) for s in warmed.values()}
            assert all(s.alive() for s in got)
            # a real job of the slot (a reference timing) runs on them and leaves them fit for the next
            timing = runs.reference_timing(engine.task_plan(TASKS["relu"].reference_code, "cpu", cfg), "cpu", cfg,
                                           cfg.build_root())
            assert timing.clocked.get("eager_s") and not timing.report.timing_error
            now = {k[-1]: s for k, s in processes._SERVERS.items() if k[:3] == slot and k[-1] is not None}
            assert {t: id(s) for t, s in now.items()} == {t: id(s) for t, s in warmed.items()}
            root = processes._job_root(cfg.host())
            assert [s.unfit_for(cfg.host(), root, build_root, locks) for s in now.values()] == ["", ""]
            # what a runner rewrites at each of its steps (pytest's name of the test now running) changes nothing:
            # the server keeps serving (it was started again at every test of the suite), and no child is told it
            monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/another.py::test_next (call)")
            assert [s.unfit_for(cfg.host(), root, build_root, locks) for s in now.values()] == ["", ""]
            assert "PYTEST_CURRENT_TEST" not in processes.child_env(cfg.host())
            # nor does a setting only the build side reads (the header cache, the binding's form, the split)
            build_only = dataclasses.replace(cfg, pch_dir=str(ROOT / "no-such-pch"), split_build=False,
                                             canonical_binding=False).host()
            assert [s.unfit_for(build_only, root, build_root, locks) for s in now.values()] == ["", ""]
            # one the server's processes use is another server (the sandbox's process limit)
            assert now[0].unfit_for(dataclasses.replace(cfg, sandbox_procs=cfg.sandbox_procs + 1).host(), root,
                                    build_root, locks) == "other host settings"
            # a server started under another environment says so, naming what changed (it is started again)
            monkeypatch.setenv("KM_TEST_WARM_MARK", "1")
            assert now[0].unfit_for(cfg.host(), root, build_root, locks) == "the environment changed (KM_TEST_WARM_MARK)"
        finally:
            for key in [k for k in processes._SERVERS if k[:3] == slot and k[-1] is not None]:
                processes._SERVERS.pop(key).close()


def test_fork_server_preloads_what_the_profiler_imports_without_a_thread_or_cuda():
    """A fork server imports torch._dynamo once (the profiler's first session imports it: 4-6 CPU-s in every
    forked child on the GPU box before): the import must leave the server forkable, no new thread, CUDA
    untouched. If it ever initialised CUDA, the server starts again without the preload and still serves."""
    probe = ("import os, sys, torch\nfrom verifier.child import forkserver\nn = len(os.listdir('/proc/self/task'))\n"
             "assert 'torch._dynamo' not in sys.modules\nforkserver._preload()\n"
             "assert 'torch._dynamo' in sys.modules and len(os.listdir('/proc/self/task')) == n\n"
             "assert not torch.cuda.is_initialized()\nprint('ok')")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]
    # a preload that initialised CUDA (simulated): the server execs itself without it, then serves (EOF: exits 0)
    fake = ("import runpy, sys, torch\ntorch.cuda.is_initialized = lambda: True\nsys.argv = ['worker', '--serve', '64']\n"
            "runpy.run_module('verifier.child.worker', run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", fake], env=env, input="", capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "initialised CUDA in the fork server" in r.stderr and "starts again without the preload" in r.stderr


def test_a_fork_server_whose_verifier_left_exits_without_a_traceback(tmp_path):
    """The verifier closes its end of a fork server's pipe when its batch ends: the server's answer to the last
    job then meets a broken pipe. It exits quietly (a GPU throughput run printed a BrokenPipeError traceback)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", _KM_NO_PRELOAD="1")
    p = subprocess.Popen([sys.executable, "-m", "verifier.child.worker", "--serve", "64"], env=env, cwd=str(ROOT),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.stdout.close()  # the verifier has gone before the answer: the job (an empty directory) fails in its child
    p.stdin.write(f"{tmp_path}\t30\n")
    p.stdin.close()
    assert p.wait(timeout=300) == 0
    err = p.stderr.read()
    assert "Traceback" not in err and "BrokenPipe" not in err, err[-2000:]


def test_every_host_setting_is_the_servers_or_the_build_sides():
    """A fork server is started again only for the host settings its processes use (``SERVER_HOST_FIELDS``); the
    rest are the build side's. A field added to HostSettings must be put in one of the two."""
    import dataclasses as dc

    from kernelmill.settings import HostSettings
    from verifier.execute import processes

    fields = {f.name for f in dc.fields(HostSettings)}
    server, build = set(processes.SERVER_HOST_FIELDS), set(processes.BUILD_HOST_FIELDS)
    assert not server & build and server | build == fields, (fields - server - build, (server | build) - fields)
