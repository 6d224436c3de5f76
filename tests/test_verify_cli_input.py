"""`kernelmill verify TASK CANDIDATE` tells a user what is wrong with what they passed: a `.py` candidate that
does not parse gets a verdict naming the syntax error and its line (not "no code block found"), and a task
file that is not a KernelBench program is refused before anything runs it. The real CLI in a subprocess, the
real verifier (the candidate stops at the extract stage: nothing is compiled)."""

import json
import os
import subprocess
import sys

from flows_fixtures import ROOT
from bench.lib import fixtures as fx


def kernelmill(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_a_candidate_with_a_syntax_error_is_told_the_error_and_its_line(tmp_path):
    (tmp_path / "task.py").write_text(fx.RELU_TASK)
    broken = fx.HONEST_RELU.replace("return ext.relu(x.contiguous())", "return ext.relu(x.contiguous()")
    line = next(i for i, text in enumerate(broken.splitlines(), 1) if "ext.relu(x.contiguous()" in text)
    (tmp_path / "cand.py").write_text(broken)
    r = kernelmill("verify", "task.py", "cand.py", "--backend", "cpu", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]  # a verdict, as for anything a candidate does
    v = json.loads(r.stdout)
    assert v["status"] == "extract_error"
    assert "no code block" not in v["feedback"] and "does not parse" in v["feedback"], v["feedback"]
    assert f"line {line}" in v["feedback"]
    assert f"cand.py: line {line}" in r.stderr and "SyntaxError" in r.stderr and "Traceback" not in r.stderr


def test_a_task_file_that_is_no_kernelbench_program_is_refused_unrun(tmp_path):
    (tmp_path / "cand.py").write_text(fx.HONEST_RELU)
    marker = tmp_path / "ran"
    (tmp_path / "notask.py").write_text(f"open({str(marker)!r}, 'w').write('x')\nprint('side effect')\n"
                                        "class Model:\n    pass\n")
    r = kernelmill("verify", "notask.py", "cand.py", "--backend", "cpu", cwd=tmp_path)
    assert r.returncode == 2
    assert "not a KernelBench program" in r.stderr and "`get_inputs`" in r.stderr and "`get_init_inputs`" in r.stderr
    assert not marker.exists() and "side effect" not in r.stdout + r.stderr  # parsed, never executed
    (tmp_path / "badtask.py").write_text(fx.RELU_TASK + "\ndef oops(:\n")
    r = kernelmill("verify", "badtask.py", "cand.py", "--backend", "cpu", cwd=tmp_path)
    assert r.returncode == 2 and "does not parse as Python" in r.stderr and "SyntaxError" in r.stderr
    assert "Traceback" not in r.stderr
