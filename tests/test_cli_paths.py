"""Smaller CLI guarantees, through the real CLI in a subprocess: a relative DIR is read from the working
directory; `load` of a directory with no KernelBench program is an error (exit 2, one line); a command that
failed before storing anything leaves no empty --out behind."""

import os
import subprocess
import sys
from pathlib import Path

from bench.lib import fixtures as fx

ROOT = Path(__file__).resolve().parent.parent


def kernelmill(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_relative_dir_is_read_from_the_working_directory(tmp_path):
    (tmp_path / "mybench" / "level1").mkdir(parents=True)
    (tmp_path / "mybench" / "level1" / "1_relu.py").write_text(fx.RELU_TASK)
    r = kernelmill("load", "mybench", "--out", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert list((tmp_path / "run" / "raw" / "tasks").glob("*.parquet"))


def test_load_of_a_directory_without_tasks_fails_and_leaves_no_out(tmp_path):
    (tmp_path / "empty").mkdir()
    r = kernelmill("load", "empty", "--out", "run", cwd=tmp_path)
    assert r.returncode == 2
    assert "no KernelBench program" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()
