"""`kernelmill query` without --corpus reads the latest run started from the working directory it is called
in, says which on stderr, and is never redirected by a run another process started from elsewhere. The real
CLI in subprocesses (one shared KERNELMILL_HOME, as one user's shells share it), real Parquet, real DuckDB."""

import json
import os
import shutil
import subprocess
import sys

from flows_fixtures import ROOT
from kernelmill.config import DATA_DIR

SEEDS = ["level1/1_ReLU.py", "level1/4_Sigmoid.py"]
COUNT = ["query", "--format", "json", "SELECT count(*) AS n FROM tasks"]


def kernelmill(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def seeds(d, names):
    for rel in names:
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA_DIR / "seed_tasks" / rel, d / rel)
    return d


def load_run(cwd, seed_dir, out="run"):
    cwd.mkdir(exist_ok=True)
    r = kernelmill("run", "--no-prefect", "--no-progress", "--stages", "load,annotate", "--out", out,
                   "--set", f"load.dir={seed_dir}", cwd=cwd)
    assert r.returncode == 0, r.stderr[-3000:]


def test_query_reads_the_run_started_here_never_one_started_elsewhere(tmp_path):
    mine, other, fresh = tmp_path / "mine", tmp_path / "other", tmp_path / "fresh"
    load_run(mine, seeds(tmp_path / "one", SEEDS[:1]))
    load_run(other, seeds(tmp_path / "two", SEEDS))  # later, from another directory: another user, a test, a worker

    r = kernelmill(*COUNT, cwd=mine)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [{"n": 1}]  # its own run, not the later one
    assert r.stderr.strip() == (f"reading {mine / 'run'} (the latest run started from this directory; "
                                "--corpus DIR reads another)")
    r = kernelmill(*COUNT, cwd=other)
    assert json.loads(r.stdout) == [{"n": 2}] and str(other / "run") in r.stderr

    # where no run was started, nothing is guessed
    fresh.mkdir()
    r = kernelmill(*COUNT, cwd=fresh)
    assert r.returncode == 2 and "no run was started from this directory" in r.stderr and "--corpus" in r.stderr
    assert r.stdout == ""
    # --corpus names any directory, and is read without a note
    r = kernelmill(*COUNT, "--corpus", str(other / "run"), cwd=fresh)
    assert json.loads(r.stdout) == [{"n": 2}] and r.stderr == ""
