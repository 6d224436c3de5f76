"""The execution job's wall-clock limit (issue 35: technoabsurdist-l1-p7, KernelBench's small-K matmul at
M = N = 32768, a 4 GiB output, correct by its source, was killed as a hang in its timing stage): the limit is
``run_timeout_s`` for the candidate's code plus the time the verifier's own plumbing takes to copy each output
out of the child (verifier/plan.py ``TaskPlan.run_limit_s``), and the timeout verdict names the limit it ran
under. A small task's limit is the configured one; a hang is still a timeout (tests/test_verifier_run.py)."""

import types

import pytest

from verifier.config import VerifyConfig
from verifier.contract import Job
from verifier.plan import TRANSFER_S_PER_GIB, TaskPlan

CFG = VerifyConfig()


def plan(output_bytes: int, trial_scale: float = 1.0) -> TaskPlan:
    return TaskPlan(ref_mod=types.SimpleNamespace(), text="", device="cuda", output_bytes=output_bytes,
                    trial_scale=trial_scale)


def job(n_trials: int = 6, other_shape: str = "", n_timing: int = 20) -> Job:
    return Job(kind="candidate", backend="cuda", build_root="/tmp", reference_code="", init_seed=1,
               n_trials=n_trials, other_shape=other_shape, n_timing=n_timing)


def test_a_small_output_keeps_the_configured_limit():
    assert plan(4 << 20).run_limit_s(CFG, job()) == pytest.approx(CFG.run_timeout_s, abs=0.5)


def test_a_4_gib_output_adds_its_transfer_time():
    """Six trials (the last at 2.25x the inputs), each with the reference's output beside it, and the five
    timed outputs kept for the C16 check: 2 x (5 + 2.25) + 5 = 19.5 outputs of 4 GiB."""
    limit = plan(4 << 30, trial_scale=2.25).run_limit_s(CFG, job(other_shape="x"))
    assert limit == pytest.approx(CFG.run_timeout_s + TRANSFER_S_PER_GIB * 4 * 19.5)
    assert limit > 2 * CFG.run_timeout_s


def test_the_allowance_follows_what_the_job_writes():
    big = plan(1 << 30)
    no_timing = big.run_limit_s(CFG, job(n_timing=0))
    assert no_timing == pytest.approx(CFG.run_timeout_s + TRANSFER_S_PER_GIB * 12)  # 6 trials x 2 outputs
    assert big.run_limit_s(CFG, job()) > no_timing
    assert big.run_limit_s(CFG, job(), child_compiles=True) == pytest.approx(
        big.run_limit_s(CFG, job()) + CFG.compile_timeout_s)
