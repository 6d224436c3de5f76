"""Shared inputs of the flows / resume / Ray / deploy tests: a run directory holding real tasks and
real cpu candidates (written through kernelmill.store), and helpers to compare run directories.

The candidates come from bench/lib/fixtures.py and share ONE C++ extension source, so a test
session compiles a single extension however many candidates it verifies (the verifier's build
cache is keyed by the extension's source hash).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from bench.lib import fixtures as fx
from kernelmill import store
from kernelmill.schema import Candidate, Task, to_row

ROOT = Path(__file__).resolve().parent.parent

# Settings that keep one verification short on 2 cores (correctness trials stay at the minimum 5).
FAST_VERIFY = {"verify.timing_trials": 3, "verify.warmup": 1, "verify.time_torch_compile": False,
               "verify.other_shape": False}

# name -> (candidate code, whether the verifier must find it correct)
CANDIDATES = {
    "honest": (fx.HONEST_RELU, True),
    "honest_named": (fx.HONEST_RELU.replace("return ext.relu(x.contiguous())",
                                            "flat = x.contiguous()\n        return ext.relu(flat)"), True),
    "torch_fallback": (fx.cpu_candidate("return torch.relu(x)"), False),
    "hard_coded_rows": (fx.cpu_candidate("return ext.relu_fixed_rows(x.contiguous())"), False),
}


def relu_task() -> Task:
    return Task.from_code(fx.RELU_TASK, name="relu", source="seed", level=1)


def make_candidates(names=None) -> list[Candidate]:
    task = relu_task()
    out = []
    for name in names or CANDIDATES:
        code = CANDIDATES[name][0]
        out.append(Candidate(candidate_id=Candidate.make_id(task.task_id, "cpu", code), task_id=task.task_id,
                             backend="cpu", generator=f"fixture:{name}", code=code, turn=0))
    return out


def seed_run_dir(run_dir: Path, names=None) -> list[Candidate]:
    """A run directory with the relu task and the named candidates, no verdicts yet."""
    cands = make_candidates(names)
    store.write_records(run_dir, "tasks", [relu_task()])
    store.write_records(run_dir, "candidates", cands)
    return cands


# Verdict columns that depend on the machine's speed or on random inputs, not on the candidate.
MEASURED = {"runtime_us", "eager_us", "compile_us", "speedup_eager", "speedup_compile", "speedup_lo", "speedup_hi",
            "reward", "feedback",
            "stage_seconds", "max_abs_err", "max_rel_err", "device", "versions", "compile_log",
            "launch_us", "eager_launch_us", "own_kernel_share", "foreign_kernels"}


def table_digest(run_dir: Path, table: str) -> tuple[int, list[str], str]:
    """(rows, sorted ids, hash of the rows' content) of a table, measured columns left out."""
    cls = store.TABLES[table]
    rows = []
    for r in store.read_records(run_dir, table):
        row = {k: v for k, v in to_row(r).items() if not (table == "verdicts" and k in MEASURED)}
        rows.append(json.dumps(row, sort_keys=True, default=str))
    ids = sorted(getattr(r, cls.id_field) for r in store.read_records(run_dir, table))
    return len(rows), ids, hashlib.sha256("\n".join(sorted(rows)).encode()).hexdigest()


def kernelmill_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "flows.cli", *args]


def sets(overrides: dict) -> list[str]:
    out = []
    for k, v in overrides.items():
        out += ["--set", f"{k}={json.dumps(v) if not isinstance(v, bool) else str(v).lower()}"]
    return out


def run_kernelmill(*args: str, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(kernelmill_cmd(*args), cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, **kw)
