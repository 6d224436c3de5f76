"""Smaller things a new user meets: `metrics` says when k is more than the verdicts a task has; help shows
readable argument names and every command describes itself; a bad override given to a deployment names the
flow parameter it came from. The real CLI (in a subprocess, or its main function), real Parquet, a real
Prefect flow run. (The dataset card and the run files' modes: tests/test_curation.py.)"""

import os
import subprocess
import sys

import pytest

from flows_fixtures import ROOT, relu_task
from kernelmill import store
from kernelmill.errors import InputError
from kernelmill.schema import Verdict


def kernelmill(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_metrics_says_when_k_exceeds_the_verdicts_per_task(tmp_path):
    task = relu_task()
    store.write_records(tmp_path, "tasks", [task])
    store.write_records(tmp_path, "verdicts", [
        Verdict(candidate_id=f"c{i}", task_id=task.task_id, backend="cpu", stage_reached="timing", status=status,
                compiled=True, correct=status == "pass") for i, status in enumerate(("pass", "wrong", "wrong"))])
    r = kernelmill("metrics", str(tmp_path))  # k defaults to 8
    assert r.returncode == 0, r.stderr
    assert "pass@8" in r.stdout
    assert r.stderr.startswith("note: k=8 but 1 of 1 tasks have fewer judged verdicts (fewest 3, most 3)")
    assert "--k 3" in r.stderr
    r = kernelmill("metrics", str(tmp_path), "--k", "3")
    assert r.returncode == 0 and r.stderr == "" and "pass@3" in r.stdout


def test_help_shows_readable_names_and_every_command_a_description():
    from flows.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    for name, sub in commands.items():
        text = sub.format_help()
        assert "OPT_" not in text and "__" not in text, (name, text)
        assert sub.description, f"`kernelmill {name} --help` has no description"
    r = kernelmill("verify-run", "--help")
    assert "--backend BACKEND" in r.stdout and "--ray RAY_ADDRESS" in r.stdout
    r = kernelmill("metrics", "--help")
    assert "pass@k" in r.stdout and "RUN_DIR" in r.stdout


def test_a_bad_override_of_a_deployment_run_names_the_flow_parameter(prefect_server, tmp_path):
    """What a deployment run's `overrides` parameter gets wrong is reported as that parameter, not as `--set`
    (which the user of a deployment never typed)."""
    from flows.stages import load_flow

    with pytest.raises(InputError) as e:
        load_flow(out=str(tmp_path / "run"), overrides={"load.dri": "data/seed_tasks"})
    assert str(e.value).startswith("flow parameter overrides: key load.dri: unknown") and "--set" not in str(e.value)
    assert "did you mean dir" in str(e.value)
