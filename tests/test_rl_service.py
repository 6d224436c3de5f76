"""kernelmill's own RL takes its rewards from the verifier service when train.verifier_url names one (issue 39).

Real components: `kernelmill serve-verifier` subprocesses (cpu backend) started by the product's own
train.trl_reward.local_verifier_service (what train.verifier_url = "auto" runs), the real cpu verifier in this
process for the in-process path, a tiny trained checkpoint (tests/model_fixtures.py) for the RL run. The only
service that is not real is the one that is down: a free port with nothing listening."""

from __future__ import annotations

import re
import socket

import pytest

from flows_fixtures import FAST_VERIFY, MEASURED
from kernelmill.config import load_settings
from kernelmill.errors import InputError
from kernelmill.schema import to_row
from model_fixtures import train_tiny
from bench.lib import fixtures as fx
from train.rollout import rl_reward
from train.trl_reward import local_verifier_service, service_reward_fn
from verifier.serve.client import ServiceError, VerifierClient

pytestmark = pytest.mark.slow


def _fenced(code: str) -> str:
    return f"Here is my kernel.\n```python\n{code}```\n"


HONEST_NAMED = fx.HONEST_RELU.replace("return ext.relu(x.contiguous())",
                                      "flat = x.contiguous()\n        return ext.relu(flat)")
# (task, answer) as a policy's batch would hold them: a copy of the first answer, a torch fallback (cheat), a
# wrong kernel, a crashing one, no code at all, and another task
ANSWERS = [("relu", _fenced(fx.HONEST_RELU)), ("relu", _fenced(fx.HONEST_RELU)), ("relu", _fenced(HONEST_NAMED)),
           ("relu", _fenced(fx.cpu_candidate("return torch.relu(x)"))),
           ("relu", _fenced(fx.cpu_candidate("return ext.relu(x.t().contiguous()).view(x.shape)"))),
           ("relu", fx.cpu_candidate("ext.segv(x)\nreturn x")), ("relu", "I cannot write this kernel."),
           ("matmul", _fenced(fx.HONEST_MATMUL))]
ROWS = {"relu": {"task_id": "relu", "reference_code": fx.RELU_TASK, "level": 1},
        "matmul": {"task_id": "matmul", "reference_code": fx.MATMUL_TASK, "level": 1}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def settings():
    return load_settings(None, FAST_VERIFY)


@pytest.fixture(scope="module")
def service(settings, tmp_path_factory):
    """A serve-verifier with the test's [verify] settings, as train.verifier_url = "auto" starts one."""
    with local_verifier_service(settings.verify, backend="cpu",
                                log_path=tmp_path_factory.mktemp("rl_service") / "serve.log") as url:
        yield url


def _row(v) -> dict:
    return {k: x for k, x in to_row(v).items() if k not in MEASURED}


def test_the_service_reward_scores_a_batch_as_the_in_process_reward_does(settings, service):
    batch = [(ROWS[name], answer) for name, answer in ANSWERS]
    with rl_reward("cpu", settings.verify) as in_process:
        here = in_process(batch)
    before = VerifierClient(service).health()
    with rl_reward("cpu", settings.verify, verifier_url=service) as by_service:
        served = by_service(batch)
    after = VerifierClient(service).health()
    # the batch went to the server (one request, the copy verified once there too)
    assert after["items"] - before["items"] == len(ANSWERS)
    assert after["verified"] - before["verified"] == len(ANSWERS) - 1
    statuses = [s.verdict.status for s in here]
    assert statuses == ["pass", "pass", "pass", "cheat", "wrong", "crash", "extract_error", "pass"]
    assert [s.verdict.status for s in served] == statuses
    for a, b in zip(here, served):
        # same candidate ids, same verdict rows apart from what the machine's speed and the random inputs decide
        assert b.verdict.candidate_id == a.verdict.candidate_id
        assert _row(b.verdict) == _row(a.verdict), a.verdict.candidate_id
        assert (b.correct, b.stage) == (a.correct, a.stage) == (bool(a.verdict.correct), a.verdict.stage_reached)
        assert b.reward == float(b.verdict.reward)
        if a.verdict.status == "wrong":  # the share of matching trials moves the reward: same band
            assert 0.2 <= a.reward <= 0.3 and 0.2 <= b.reward <= 0.3
        elif a.verdict.status != "pass":  # a pass earns more with its measured speedup
            assert b.reward == a.reward
            # the feedback's first line says what went wrong; later lines quote logs (times, addresses)
            assert b.feedback.splitlines()[0] == a.feedback.splitlines()[0]
        else:
            assert a.reward >= 1.0 and b.reward >= 1.0
    assert served[0].verdict.candidate_id != served[1].verdict.candidate_id  # a copy keeps its own id


def test_a_service_that_is_down_is_an_input_error_naming_the_setting_and_the_url(settings):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(InputError) as e:  # found before any model loads (after the client's retries)
        with rl_reward("cpu", settings.verify, verifier_url=url):
            pass
    assert e.value.what == f"train.verifier_url = {url}" and "does not answer" in e.value.problem
    # a service that goes away mid-run: the batch raises, never a 0 reward
    score = service_reward_fn(VerifierClient(url, retries=1, backoff_s=0.01), backend="cpu")
    with pytest.raises(InputError) as e:
        score([(ROWS["relu"], _fenced(fx.HONEST_RELU))])
    assert e.value.what == f"train.verifier_url = {url}" and "no answer after 2 attempts" in e.value.problem


def test_train_verifier_url_is_a_checked_train_setting_that_train_rl_receives():
    from kernelmill.settings import keywords_for
    from train.rl import train_rl

    assert load_settings(None, {}).train.verifier_url == ""
    for good in ("auto", "http://127.0.0.1:8770"):
        s = load_settings(None, {"train.verifier_url": good})
        assert keywords_for(train_rl, s.train)["verifier_url"] == good  # what loop._rl and the train stage pass
    with pytest.raises(InputError) as e:
        load_settings(None, {"train.verifier_url": "127.0.0.1:8770"})
    assert e.value.what == "train.verifier_url"


def test_train_rl_with_auto_gets_every_reward_from_a_server_it_starts_and_stops(settings, tmp_path):
    """verifier_url = "auto": train_rl starts serve-verifier before its first step, every answer of the step is
    judged there (the server counts them while the run holds it), and the server is gone when train_rl returns."""
    from train.rl import train_rl

    ckpt, tasks = train_tiny(tmp_path / "tiny")
    rows = [{"task_id": t.task_id, "prompt": f"Write ModelNew for {t.name}", "reference_code": t.reference_code,
             "level": 1} for t in tasks[:2]]
    out = tmp_path / "rl"
    seen = []

    def on_step(metrics):
        url = re.search(r"http://127\.0\.0\.1:\d+", (out / "serve-verifier.log").read_text()).group(0)
        seen.append((url, VerifierClient(url, retries=0).health(), metrics))

    res = train_rl(None, out, init=str(ckpt), rows=rows, steps=1, prompts_per_step=2, group_size=2, turns=1,
                   max_new_tokens=8, device="cpu", seed=0, dynamic_sampling=False, retry=False, backend="cpu",
                   verify_cfg=settings.verify, verifier_url="auto", on_step=on_step)
    assert res["steps_done"] == 1 and len(seen) == 1
    url, health, metrics = seen[0]
    assert metrics["answers"] == 4 and health["items"] == metrics["answers"] and health["backend"] == "cpu"
    with pytest.raises(ServiceError):  # stopped with the run
        VerifierClient(url, retries=0).health()
