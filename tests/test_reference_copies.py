"""The job's reference in the verifier's process (verifier/judge/outputs.py): constructed once on the cpu per job
(``pristine_reference``), every user (the harness, the prefetch, the judge) given a copy of it (``reference_cpu``)
with the weights a construction of its own draws from the init seed, never the kept one, which nobody runs."""

import threading
import time
from types import SimpleNamespace

import torch

from verifier.common.inputs import build_model, cpu_model
from verifier.engine import VerifyConfig, task_plan
from verifier.judge import outputs

# a stateful forward (BatchNorm in training mode updates its running statistics on every call) and weights drawn
# from the generator at construction
TASK = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.bn = nn.BatchNorm1d(n)

    def forward(self, x):
        return self.bn(self.lin(x))

def get_inputs():
    return [torch.randn(8, 16)]

def get_init_inputs():
    return [16]
"""


def _plan_and_job(seed: int = 1234):
    cfg = VerifyConfig()
    return task_plan(TASK, "cpu", cfg, "stateful"), SimpleNamespace(init_seed=seed), cfg


def _state(model) -> dict:
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_copies_have_the_weights_a_construction_of_their_own_draws_and_share_nothing():
    plan, job, cfg = _plan_and_job()
    fresh, _ = build_model(plan.ref_mod, job.init_seed, "cpu", plan.text, cfg.eval_mode)
    first = outputs.reference_cpu(plan, job, cfg)
    want = _state(fresh)
    assert all(torch.equal(want[k], v) for k, v in first.state_dict().items())
    first(torch.randn(8, 16))  # its forward moves its own running statistics only
    assert not torch.equal(first.bn.running_mean, want["bn.running_mean"])
    second = outputs.reference_cpu(plan, job, cfg)
    assert second is not first and second.lin.weight.data_ptr() != first.lin.weight.data_ptr()
    assert all(torch.equal(want[k], v) for k, v in second.state_dict().items())
    # another job's seed, other weights
    _, other_job, _ = _plan_and_job(seed=99)
    other = outputs.reference_cpu(plan, other_job, cfg)
    assert not torch.equal(other.lin.weight, want["lin.weight"])
    outputs.forget_reference(plan, job, cfg)
    outputs.forget_reference(plan, other_job, cfg)


def test_the_kept_model_is_built_once_per_job_and_dropped_when_the_job_ends(monkeypatch):
    plan, job, cfg = _plan_and_job(seed=4321)
    built = []

    def counting(*a, **k):
        built.append(threading.current_thread().name)
        return cpu_model(*a, **k)

    monkeypatch.setattr(outputs, "cpu_model", counting)
    outputs.warm_reference(plan, job, cfg)  # on a thread of its own, as the job starts
    deadline = time.monotonic() + 30
    while outputs._pristine_key(plan, job, cfg) not in outputs._PRISTINE and time.monotonic() < deadline:
        time.sleep(0.01)
    model, model64 = outputs.reference_models(plan, job, "cpu", cfg)
    outputs.reference_cpu(plan, job, cfg)
    assert built == ["km-reference-warm"], built
    assert model64 is None or model64.lin.weight.dtype == torch.float64
    outputs.forget_reference(plan, job, cfg)
    assert outputs._pristine_key(plan, job, cfg) not in outputs._PRISTINE
    outputs.reference_cpu(plan, job, cfg)  # asked again after its end: constructed again
    assert len(built) == 2
    outputs.forget_reference(plan, job, cfg)


def test_at_most_pristine_keep_models_are_kept():
    plan, _, cfg = _plan_and_job()
    jobs = [SimpleNamespace(init_seed=s) for s in range(100, 100 + outputs.PRISTINE_KEEP + 3)]
    for j in jobs:
        outputs.reference_cpu(plan, j, cfg)
    kept = [outputs._pristine_key(plan, j, cfg) in outputs._PRISTINE for j in jobs]
    assert kept == [False] * 3 + [True] * outputs.PRISTINE_KEEP
    for j in jobs:
        outputs.forget_reference(plan, j, cfg)


def test_a_model_deepcopy_cannot_take_is_constructed_again():
    plan, job, cfg = _plan_and_job(seed=777)
    key = outputs._pristine_key(plan, job, cfg)
    model = outputs.pristine_reference(plan, job, cfg)
    model.gen = (i for i in range(3))  # a generator: deepcopy refuses it
    copy_ = outputs.reference_cpu(plan, job, cfg)
    assert copy_ is not model and not hasattr(copy_, "gen")
    assert torch.equal(copy_.lin.weight, model.lin.weight)
    assert outputs._PRISTINE[key] is model
    outputs.forget_reference(plan, job, cfg)
