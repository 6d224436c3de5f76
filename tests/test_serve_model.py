"""A trained checkpoint served by the real `transformers serve` on a loopback port, sampled through the
project's OpenAI client and its generate stage (the `kernelmill generate` command). Nothing is faked:
the checkpoint is trained here for a few steps with train/sft.py on procedural tasks whose prompts are
the generate stage's own (synth/generate/prompts.py), and the server is the FastAPI/uvicorn app of
transformers in a child process (train/serve.py). The model is tiny and barely trained, so what it
writes is not code; the test checks the plumbing a real model relies on: the served prompt is the
token sequence the trainer trained on, the server's greedy answer is the in-process greedy answer,
and completions come back as candidates of the generate stage."""

import json
from pathlib import Path

import httpx
import pytest

from curation.filters import render_prompt
from kernelmill import store
from flows.cli import main as kernelmill_main
from synth.generate.generators import OpenAIGenerator
from synth.generate.prompts import build_prompt

from model_fixtures import train_tiny

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(checkpoint dir, tasks, root with the corpus): a 1-layer model trained 4 steps on 6 procedural tasks."""
    root = tmp_path_factory.mktemp("serve")
    return (*train_tiny(root), root)


@pytest.fixture(scope="module")
def server(trained):
    from train.serve import ModelServer, prepare_checkpoint

    ckpt, changed = prepare_checkpoint(trained[0])
    assert changed == []  # train/model.py already wrote the chat template and the generation config
    with ModelServer(ckpt, device="cpu", log_path=trained[2] / "server.log", timeout_s=240) as s:
        yield s


def test_checkpoint_chat_template_is_the_training_format(trained):
    from transformers import AutoTokenizer

    from train import data as D

    tok = AutoTokenizer.from_pretrained(str(trained[0]))
    for task in trained[1][:3]:
        msgs = [{"role": m.role, "content": m.content} for m in build_prompt(task, "cpu")]
        served = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
        assert served == D.encode_chat(tok, msgs, add_generation_prompt=True)[0]
        # an rft / rl row's prompt (system and user text in one user turn) is the same token sequence
        row_prompt = [{"role": "user", "content": render_prompt(build_prompt(task, "cpu"))}]
        assert served == D.encode_chat(tok, row_prompt, add_generation_prompt=True)[0]
    with pytest.raises(Exception, match="role"):
        tok.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


def test_server_answers_as_the_trained_model(trained, server):
    """The server counts the prompt tokens encode_chat makes, and its greedy answer (temperature 0) is
    the in-process greedy answer of train/rollout.py: same prompt ids, same weights, same stop token."""
    from train import data as D
    from train.model import load_pretrained
    from train.rollout import decode_response, sample

    assert httpx.get(server.base_url + "/models", timeout=30).status_code == 200
    msgs = [{"role": m.role, "content": m.content} for m in build_prompt(trained[1][0], "cpu")]
    r = httpx.post(server.base_url + "/chat/completions", timeout=120,
                   json={"model": server.model, "messages": msgs, "temperature": 0, "max_tokens": 12})
    assert r.status_code == 200, r.text
    body = r.json()
    model, tok = load_pretrained(trained[0])
    ids = D.encode_chat(tok, msgs, add_generation_prompt=True)[0]
    assert body["usage"]["prompt_tokens"] == len(ids)
    local = sample(model, tok, [ids], max_new_tokens=12, greedy=True)[0]
    assert body["choices"][0]["message"]["content"] == decode_response(tok, local.ids)
    wrong = httpx.post(server.base_url + "/chat/completions", timeout=60,
                       json={"model": "another-model", "messages": msgs, "max_tokens": 2})
    assert wrong.status_code == 400  # the served name is the checkpoint path, nothing else


def test_openai_client_samples_the_served_checkpoint(trained, server, tmp_path):
    gen = OpenAIGenerator(server.base_url, server.model, temperature=1.0, max_tokens=8, cache_dir=tmp_path / "cache",
                          concurrency=2, max_retries=1)
    out = gen.generate(build_prompt(trained[1][1], "cpu"), 3)  # transformers serve ignores n: the client asks again
    assert len(out) == 3 and all(isinstance(t, str) for t in out)
    assert gen.requests_sent == 3
    assert gen.generate(build_prompt(trained[1][1], "cpu"), 3) == out and gen.requests_sent == 3  # cached


def test_generate_stage_against_the_served_checkpoint(trained, server, tmp_path, capsys):
    """`kernelmill generate RUN --set generate.base_url=... --set generate.model=...`, as with any hosted model."""
    run = tmp_path / "run"
    store.write_records(run, "tasks", trained[1][:2])
    argv = ["generate", str(run), "--set", "run.backend=cpu", "--set", "generate.samples_per_task=2",
            "--set", "generate.max_tokens=8", "--set", f"generate.cache_dir={tmp_path / 'cache'}"]
    argv += [a for s in server.settings() for a in ("--set", s)]
    assert kernelmill_main(argv) == 0
    counts = json.loads(capsys.readouterr().out)["generate"]
    assert counts["generator"] == server.model and counts["candidates_written"] == 4
    cands = store.read_records(run, "candidates")
    assert len(cands) == 4
    assert {c.task_id for c in cands} == {t.task_id for t in trained[1][:2]}
    assert {c.generator for c in cands} == {server.model}
    assert all(c.prompt and c.response is not None for c in cands)
    assert Path(server.log_path).read_text().count("POST /v1/chat/completions") >= 4


def test_generate_verify_repair_sample_each_first_turn_once(trained, server, tmp_path, capsys):
    """`kernelmill run --stages generate,verify,repair` against the served checkpoint: the generate stage
    samples each first turn, the verify stage judges it, and the repair stage continues the stored
    dialogues without sampling any first turn again. Counted at the server (its access log) and in the
    stored rows; the response cache is off, so every answer is a request."""
    run = tmp_path / "run"
    store.write_records(run, "tasks", trained[1][:2])
    log = Path(server.log_path)
    before = log.read_text().count("POST /v1/chat/completions")
    argv = ["run", "--no-prefect", "--no-progress", "--stages", "generate,verify,repair", "--out", str(run),
            "--set", "run.backend=cpu", "--set", "generate.samples_per_task=2", "--set", "generate.tasks_per_level=0",
            "--set", "generate.max_tokens=8", "--set", "generate.cache_dir=", "--set", "repair.max_turns=2"]
    argv += [a for s in server.settings() for a in ("--set", s)]
    assert kernelmill_main(argv) == 0
    capsys.readouterr()
    requests = log.read_text().count("POST /v1/chat/completions") - before
    cands = store.read_records(run, "candidates")
    first = [c for c in cands if c.turn == 0]
    assert len(first) == 4 and len({c.dialogue_id for c in first}) == 4  # 2 tasks x 2 samples, once each
    # the tiny model writes no program: every first turn fails and gets exactly one repair turn
    assert sorted(c.turn for c in cands) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {c.parent_id for c in cands if c.turn == 1} == {c.candidate_id for c in first}
    assert requests == len(cands) == 8
    assert {v.candidate_id for v in store.read_records(run, "verdicts")} == {c.candidate_id for c in cands}
    dialogues = store.read_records(run, "dialogues")
    assert len(dialogues) == 4 and all(d.num_turns == 2 for d in dialogues)
    assert all([m.role for m in d.messages] == ["system", "user", "assistant", "user", "assistant"] for d in dialogues)
    # run again: everything is stored, nothing is asked
    assert kernelmill_main(argv) == 0
    capsys.readouterr()
    assert log.read_text().count("POST /v1/chat/completions") - before == 8
    assert len(store.read_records(run, "candidates")) == 8


def test_loop_round_from_a_served_checkpoint(trained, tmp_path, capsys):
    """`kernelmill loop RUN_DIR --model CKPT` at tiny size: the checkpoint served by the real `transformers serve`,
    its answers judged by the real verifier (cpu), one round of generate -> verify -> repair -> curate on the
    training split and an evaluation of each model on the held-out split, with metrics and intervals per
    model. The barely trained model writes no program, so nothing is correct: the round keeps its model
    (RFT has no rows) and every pass rate is 0. Run again, it resumes: no request, no new row."""
    from train.data import is_heldout

    run = tmp_path / "run"
    store.write_records(run, "tasks", trained[1])
    held = [t for t in trained[1] if is_heldout(t.task_id, 0.5, 0)]
    assert 0 < len(held) < len(trained[1])  # both sides of the split have tasks
    argv = ["loop", str(run), "--model", str(trained[0]), "--rounds", "1", "-k", "2", "--backend", "cpu",
            "--set", "loop.device=cpu", "--set", "loop.pool_tasks=2", "--set", "loop.eval_tasks=1",
            "--set", "train.heldout_frac=0.5", "--set", "generate.max_tokens=8", "--set", "generate.cache_dir=",
            "--set", "repair.max_turns=2"]
    assert kernelmill_main(argv) == 0
    out = json.loads(capsys.readouterr().out)["loop"]
    assert out["pool_tasks"] == 2 and out["heldout_tasks"] == 1
    (rnd,) = out["rounds"]
    assert rnd["generate"]["candidates_written"] == 4 and rnd["verify"]["verified"] == 4
    assert rnd["repair"]["new_turns"] == 4 and rnd["rft"] == {"skipped": "no correct answer in the pool"}
    assert out["models"] == [str(trained[0])] * 2
    loop = run / "loop"
    rows = [json.loads(line) for line in (loop / "metrics.jsonl").read_text().splitlines()]
    assert [r["model_index"] for r in rows] == [0, 1]
    assert all(r["pass@1"] == 0.0 and r["pass@1_ci"] == [0.0, 0.0] and r["tasks"] == 1 for r in rows)
    assert rows[1]["pass@k_diff"] == [0.0, 0.0, 0.0]
    assert len(store.read_records(loop / "eval-0", "verdicts")) == 2  # 1 held-out task x k
    assert not {c.task_id for c in store.read_records(loop / "round-1" / "pool", "candidates")} & {t.task_id for t in held}
    assert "| m1 | 1 | 1 |" in (loop / "loop.md").read_text()
    posts = lambda: sum(p.read_text().count("POST /v1/chat/completions") for p in loop.glob("*.log"))  # noqa: E731
    before = posts()
    assert before == 4 + 4 + 2 + 2  # pool first turns, their repair turns, two evaluations
    assert kernelmill_main(argv) == 0
    capsys.readouterr()
    assert posts() == before and len((loop / "metrics.jsonl").read_text().splitlines()) == 2


def test_server_child_ends_when_the_run_that_started_it_is_killed(tmp_path):
    """A model server runs in its own session (so stop() can end its whole group); when the process that started
    it dies without cleaning up (SIGKILL; SIGTERM with Python's default handler), the server's parent watch ends
    it: a killed `kernelmill loop` left `train.serve` serving at 126% cpu before this watch."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    root = Path(__file__).resolve().parents[1]
    child = ("import os, sys, time; sys.path.insert(0, %r); from train.serve import end_with_parent; "
             "end_with_parent(os.getppid(), poll_s=0.1); time.sleep(120)" % str(root))
    parent = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', %r], start_new_session=True); "
              "print(p.pid, flush=True); time.sleep(120)" % child)
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    pid = int(proc.stdout.readline())
    time.sleep(1.0)  # the child is up and watching
    assert psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    def gone() -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    deadline = time.time() + 15
    while not gone() and time.time() < deadline:
        time.sleep(0.1)
    assert gone(), "the server child outlived its killed parent"
