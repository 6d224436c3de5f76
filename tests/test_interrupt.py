"""Ctrl-C of `kernelmill run` (a Prefect flow run on an ephemeral server) stops it within seconds, with one
line that gives the command to resume and no traceback, leaves no process of its own behind, and the printed
command resumes the run: every seed task annotated, under the ids it was loaded with. A real subprocess and a
real SIGINT to its process group, as a terminal sends it; real annotation workers, a real Prefect server.
(Interrupting the verify stage mid-compile behaves the same; it is left out here for time: a cold compile
costs more than the rest of this test.)"""

import os
import shlex
import signal
import subprocess
import threading
import time

from flows_fixtures import ROOT, kernelmill_cmd
from kernelmill import store
from orchestrator.interrupt import descendants


def test_ctrl_c_stops_a_prefect_run_at_once_and_the_printed_command_resumes_it(tmp_path):
    run_dir = tmp_path / "run"
    args = ["run", "--out", str(run_dir), "--stages", "load,annotate"]  # the 13 seed tasks: about 10 s of annotation
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(kernelmill_cmd(*args), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    while not any("[annotate] started" in line for line in err):  # the stage's start line (stderr is no terminal)
        assert proc.poll() is None and time.monotonic() < deadline, "".join(err)[-3000:]
        time.sleep(0.1)
    time.sleep(2)  # inside the stage: its workers and the Prefect server are up
    assert proc.poll() is None, "".join(err)[-3000:]
    mine = descendants(proc.pid)
    assert mine, "the run started no process"
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the whole foreground process group
    out = proc.stdout.read()
    proc.wait(timeout=30)
    took = time.monotonic() - t0
    reader.join(timeout=10)
    text = "".join(err)
    assert took < 10, took
    assert proc.returncode == 130, text[-3000:]
    assert "Traceback" not in text + out and "Error" not in text, text[-3000:]
    resume = [line for line in text.splitlines() if "Resume with:" in line]
    assert len(resume) == 1 and text.rstrip().endswith(resume[0]), text[-3000:]
    assert resume[0].startswith("kernelmill run: interrupted")
    time.sleep(0.5)
    assert not [p for p in mine if os.path.exists(f"/proc/{p}") and "Z" not in open(f"/proc/{p}/stat").read().split(")")[1][:3]]

    # the printed command, as printed, resumes the run
    command = shlex.split(resume[0].split("Resume with: ", 1)[1])
    assert command[0] == "kernelmill" and command[1:] == args
    loaded = store.stored_ids(run_dir / "raw", "tasks")
    assert len(loaded) == 13 and len(store.stored_ids(run_dir, "tasks")) < 13  # stopped mid-annotation
    r = subprocess.run(kernelmill_cmd(*command[1:]), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert store.stored_ids(run_dir / "raw", "tasks") == loaded  # not loaded twice
    assert store.stored_ids(run_dir, "tasks") == loaded  # every task annotated, under its id
    assert len(store.read_records(run_dir, "tasks")) == 13
