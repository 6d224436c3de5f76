"""The reference's timed calls on the cpu pay the sampler's cost as the candidate's do (verifier/child/reference.py):
the sampler of forward's CPU time (verifier/child/sampler.py, a thread that costs a watched call a few percent of a
core) ran on the candidate's timed calls alone, so a cpu candidate's speedup read that much low (the ~4% bias owed
since class 81). The reference's timing job now carries the compiled sampler and its child runs its calls under it;
the reference's samples are not read."""

from pathlib import Path

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Task
from verifier import engine, runs
from verifier.engine import VerifyConfig

TASK = Task.from_code(fx.RELU_TASK.replace("torch.randn(64, 1000)", "torch.randn(40, 700)") + "\n# sampled reference\n",
                      name="sampled_reference_relu", source="seed", level=1)


@pytest.fixture
def fresh_memo(monkeypatch):
    monkeypatch.setattr(runs, "_REF_TIMINGS", {})


def test_the_reference_timing_job_carries_the_sampler_and_times_cleanly(tmp_path, monkeypatch, fresh_memo):
    cfg = VerifyConfig(build_dir=str(tmp_path / "build"), timing_trials=3, warmup=1, time_torch_compile=False,
                       run_timeout_s=60, memory_limit_gb=4, pch=False, prep_cache=False,
                       lock_dir=str(tmp_path / "locks"))
    cfg.build_root().mkdir(parents=True, exist_ok=True)
    jobs = []
    real = runs.new_job
    monkeypatch.setattr(runs, "new_job", lambda *a, **kw: jobs.append(real(*a, **kw)) or jobs[-1])
    plan = engine.task_plan(TASK.reference_code, "cpu", cfg, "sampled")
    timing = runs.measure_reference(plan, "cpu", cfg, cfg.build_root(), runs.EAGER, None)
    (job,) = [j for j in jobs if j.kind == "reference"]
    assert job.cpu_sampler and Path(job.cpu_sampler).is_file(), job.cpu_sampler
    rep = timing.report
    assert not rep.timing_error, rep.timing_error
    assert not [e for e in rep.events if "sampler" in e], rep.events  # it loaded and its timer started
    assert rep.eager is not None and timing.clocked["held"]["brackets"].keys() >= {"reference", "null"}


def test_a_cuda_reference_job_carries_no_sampler(tmp_path):
    from verifier.judge import cpu_time

    assert cpu_time.sampler_for("cuda", tmp_path) == ""
