"""The loop's RL phase and its dynamic sampling, on cpu at tiny size.

A real checkpoint (train/sft.py, a few steps on procedural tasks with the generate stage's prompts), served
by the in-process server of train/serve.py (the GPU image's path: no fastapi), its answers judged by the
real cpu verifier, the real stage functions (orchestrator/stages.py) for sampling, verification and
curation, and the real GRPO trainer. The barely trained model writes no program, so every group fails
every sample: the RL pool is screened from never-solved tasks (rl_fail_share) and dynamic sampling
replaces each all-fail group. A mixed group needs an answer that passes, which no model trained in seconds
writes; that rule is tested on the trainer with scripted outcomes (test_dynamic_sampling_keeps_mixed_groups).
"""

import json

import httpx
import pytest

from kernelmill import store
from kernelmill.config import load_settings
from orchestrator import ledger
from bench.lib.loop_arms import share_start
from orchestrator.loop import rl_pool, run_loop
from orchestrator.stages import BY_NAME

from model_fixtures import train_tiny

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(checkpoint dir, tasks): a 1-layer model trained 4 steps on 6 procedural tasks."""
    return train_tiny(tmp_path_factory.mktemp("looprl"))


def settings(ckpt, **more):
    sets = {"run.backend": "cpu", "loop.model": str(ckpt), "loop.server": "local", "loop.device": "cpu",
            "loop.k": 2, "loop.pool_tasks": 3, "loop.eval_tasks": 1, "loop.train": "rl", "loop.rl_steps": 2,
            "loop.group_size": 2, "loop.prompts_per_step": 2, "loop.rl_fail_share": 0.5,
            "train.heldout_frac": 0.5, "train.device": "cpu", "train.turns": 1, "train.max_new_tokens": 8,
            "train.micro_batch": 8, "generate.max_tokens": 8, "generate.cache_dir": "", "repair.max_turns": 1}
    sets.update(more)
    return load_settings(None, sets)


def counting_phases(calls):
    """The real stage functions, each call counted."""
    def wrap(name):
        def run(run_dir, s, progress):
            calls.append(name)
            return BY_NAME[name].run(run_dir, s, progress)
        return run
    return {n: wrap(n) for n in ("generate", "verify", "repair", "curate")}


def test_local_server_answers_n_choices_in_one_request(trained, tmp_path):
    """The in-process server: one request with n = 3 gets 3 choices, a wrong model name is refused."""
    from train.serve import LocalModelServer

    with LocalModelServer(trained[0], device="cpu", log_path=tmp_path / "s.log") as srv:
        body = {"model": srv.model, "messages": [{"role": "user", "content": "write a kernel"}], "n": 3,
                "temperature": 1.0, "max_tokens": 4}
        r = httpx.post(srv.base_url + "/chat/completions", json=body, timeout=60)
        assert r.status_code == 200 and len(r.json()["choices"]) == 3
        assert httpx.post(srv.base_url + "/chat/completions", json={**body, "model": "x"}, timeout=60).status_code == 400
        assert httpx.get(srv.base_url + "/models", timeout=10).json()["data"][0]["id"] == srv.model
    assert (tmp_path / "s.log").read_text().count("POST /v1/chat/completions 200") == 1


def test_local_server_keeps_answers_inside_the_model_positions(trained, tmp_path):
    """max_tokens is cut to the room the prompt leaves in the model's positions ("length" when that ends
    the answer); a prompt with no room left gets an empty "length" answer, not a sample past the table."""
    from train import data as D
    from train.serve import LocalModelServer

    with LocalModelServer(trained[0], device="cpu", log_path=tmp_path / "s.log") as srv:
        limit = srv._model.config.max_position_embeddings
        msgs = [{"role": "user", "content": "write a kernel"}]
        n_prompt = len(D.encode_chat(srv._tok, msgs, add_generation_prompt=True)[0])
        body = {"model": srv.model, "messages": msgs, "n": 2, "temperature": 1.0, "max_tokens": limit}
        r = httpx.post(srv.base_url + "/chat/completions", json=body, timeout=120).json()
        assert r["usage"]["completion_tokens"] <= 2 * (limit - n_prompt)
        huge = [{"role": "user", "content": "kernel " * limit}]
        r = httpx.post(srv.base_url + "/chat/completions", json={**body, "messages": huge}, timeout=120).json()
        assert [c["message"]["content"] for c in r["choices"]] == ["", ""]
        assert {c["finish_reason"] for c in r["choices"]} == {"length"} and r["usage"]["completion_tokens"] == 0
    assert "cut to 0" in (tmp_path / "s.log").read_text()


def test_loop_rl_phase_screens_replaces_and_resumes(trained, tmp_path):
    """`kernelmill loop` with loop.train=rl: m0 evaluated, the round's pool sampled and verified, the RL pool
    screened from the pool's pass rates, GRPO run with dynamic sampling (each all-fail group replaced), m1
    evaluated against m0 with paired intervals; run again, every phase is skipped (no request, no step)."""
    run = tmp_path / "run"
    store.write_records(run, "tasks", trained[1])
    calls: list[str] = []
    s = settings(trained[0])
    out = run_loop(run, s, lambda *a: None, counting_phases(calls))
    assert "stopped" not in out and out["pool_tasks"] == 3 and out["heldout_tasks"] == 1
    (rnd,) = out["rounds"]
    assert rnd["generate"]["candidates_written"] == 6 and rnd["verify"]["verified"] == 6
    rl = rnd["rl"]
    # nothing passes: every task is never-solved, all kept (no mixed task to ration them against)
    assert rl["screen"] == {"screened": 3, "mixed": 0, "all_pass": 0, "all_fail": 3, "kept": 3}
    assert rl["steps_done"] == 2 and rl["stabilisers"] == {"prime_echo": True, "retry": True, "mirrorpop": True,
                                                           "dynamic_sampling": True}
    loop = run / "loop"
    steps = [json.loads(x) for x in (loop / "round-1" / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert [st["step"] for st in steps] == [1, 2]
    for st in steps:  # every fresh group all-fail when first rolled out: replaced once (dynamic_max_rounds 1)
        assert st["flat_groups_first"] == st["fresh_prompts"] == st["replaced_groups"] and st["dynamic_rounds"] == 1
        assert st["mixed_share_first"] == 0.0 and st["mixed_share"] == 0.0 and st["all_fail_groups"] == st["groups"]
        assert "mirrorpop_dropped" in st and "repair_pass_rate" in st
    assert steps[0]["buffer_added"] > 0  # BDR took the all-fail groups as repair prompts
    rows = [json.loads(x) for x in (loop / "metrics.jsonl").read_text().splitlines()]
    assert [r["model_index"] for r in rows] == [0, 1]
    assert rows[1]["pass@1_diff"] == [0.0, 0.0, 0.0] and rows[1]["rl"]["steps"] == 2
    assert rows[1]["rl"]["replaced_groups"] == sum(st["replaced_groups"] for st in steps)
    assert out["models"][1].startswith(str(loop / "round-1" / "rl" / "ckpt-"))
    rnd1 = loop / "round-1"
    assert set(ledger.entries(rnd1 / "pool")) == {"generate", "verify", "repair", "curate"}
    assert set(ledger.entries(rnd1 / "rl")) == {"rl"} and not (rnd1 / "rft").exists()
    assert ledger.done(rnd1 / "rl", "rl").model == out["models"][1]
    md = (loop / "loop.md").read_text()
    assert "| m1 | 1 | 1 |" in md and "## RL steps, round 1" in md and "mixed_share_first" in md
    assert calls.count("generate") == 3  # eval-0, the pool, eval-1
    # resumed: every phase is done, nothing is asked or trained
    calls.clear()
    posts = lambda: sum(p.read_text().count("POST /v1/chat/completions") for p in loop.glob("*.log"))  # noqa: E731
    before = posts()
    again = run_loop(run, s, lambda *a: None, counting_phases(calls))
    assert calls == [] and posts() == before and again["models"] == out["models"]
    assert len((loop / "round-1" / "rl" / "metrics.jsonl").read_text().splitlines()) == 2
    assert len((loop / "metrics.jsonl").read_text().splitlines()) == 2

    # an ablation arm shares m0's evaluation and the pool: only RL (MirrorPop off) and the evaluation run
    arm = tmp_path / "no_mirrorpop"
    share_start(run, arm)
    calls.clear()
    res = run_loop(arm, settings(trained[0], **{"train.mirrorpop": False}), lambda *a: None, counting_phases(calls))
    assert calls == ["generate", "verify"]  # eval-1 only
    assert res["rounds"][0]["rl"]["stabilisers"]["mirrorpop"] is False
    assert [json.loads(x)["model_index"] for x in (arm / "loop" / "metrics.jsonl").read_text().splitlines()] == [0, 1]


def test_loop_stops_at_its_time_budget_and_resumes(trained, tmp_path):
    """loop.max_seconds spent: the call ends with ``stopped`` and the next call goes on from the last
    finished phase (m0's evaluation is not redone)."""
    run = tmp_path / "run"
    store.write_records(run, "tasks", trained[1])
    calls: list[str] = []
    out = run_loop(run, settings(trained[0], **{"loop.max_seconds": 1e-9}), lambda *a: None, counting_phases(calls))
    assert out["stopped"].startswith("loop.max_seconds") and calls == []
    rows, screen = rl_pool(run / "loop" / "round-1" / "pool", settings(trained[0]))
    assert rows == [] and screen["kept"] == 0  # nothing sampled yet


def test_dynamic_sampling_keeps_mixed_groups(trained, tmp_path):
    """train_rl replaces a fresh group whose samples all pass or all fail by the next prompt's group, and
    keeps a mixed one. Outcomes are scripted per task here (task "pass" always, "fail" never, "mixed" every
    other sample): a real verifier cannot make a model trained for seconds pass."""
    from train.rl import train_rl
    from train.rollout import Score

    count = {"mixed": 0}

    def scripted(items):
        out = []
        for row, _ in items:
            if row["task_id"] == "mixed":
                count["mixed"] += 1
                ok = count["mixed"] % 2 == 0
            else:
                ok = row["task_id"] == "pass"
            out.append(Score(1.0 if ok else -0.5, ok, "" if ok else "wrong output"))
        return out

    rows = [{"task_id": t, "prompt": f"task {t}", "reference_code": ""} for t in ("pass", "fail", "mixed", "mixed")]
    res = train_rl(None, tmp_path / "rl", init=str(trained[0]), rows=rows, reward_fn=scripted, steps=1,
                   prompts_per_step=2, group_size=2, turns=1, max_new_tokens=4, device="cpu", seed=0,
                   dynamic_max_rounds=3, retry=False)
    st = res["last"]
    assert st["flat_groups_first"] >= 1 and st["replaced_groups"] >= 1 and st["mixed_share"] == 1.0
    assert st["mixed_groups"] == st["groups"] == 2


def test_rft_round_trains_at_most_loop_rft_epochs_passes_over_its_rows(trained, tmp_path):
    """RFT over a handful of rows: loop.rft_epochs caps the steps (2 passes over 5 rows in batches of 4: 3
    steps) where train.sft_steps alone would run 7; rft_epochs 0 leaves train.sft_steps in charge."""
    from kernelmill.schema import RFTRow
    from orchestrator.loop import _rft

    pool = tmp_path / "pool"
    store.write_records(pool, "rft", [
        RFTRow(id=f"f{i}", task_id=t.task_id, prompt=f"Write ModelNew for {t.name}", completion="```python\npass\n```",
               candidate_id=f"c{i}", generator="m0", backend="cpu", level=1, correct=True, stage_reached="timing",
               reward=1.0) for i, t in enumerate(trained[1][:5])])
    common = {"train.sft_steps": 7, "train.batch_size": 4, "train.heldout_frac": 0.0, "train.save_every": 0}
    capped = _rft(pool, tmp_path / "capped", str(trained[0]), settings(trained[0], **common), float("inf"))
    assert capped["steps"] == capped["steps_done"] == 3 and not capped["cut"]
    free = _rft(pool, tmp_path / "free", str(trained[0]), settings(trained[0], **common, **{"loop.rft_epochs": 0}),
                float("inf"))
    assert free["steps"] == free["steps_done"] == 7
