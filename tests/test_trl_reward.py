"""TRL's GRPOTrainer with rewards from a real `kernelmill serve-verifier` (cpu backend, subprocess), and the adapter
that makes them: completions as strings or chat messages, dataset columns, the rewards the trainer logs."""

from __future__ import annotations

import pytest
import torch

from kernelmill.errors import InputError
from kernelmill.schema import task_id_for
from test_serve_verifier import start_server
from bench.lib import fixtures as fx
from train.trl_reward import VerifierReward, completion_text, service_reward_fn

PROMPT_KERNEL = "Write ModelNew for this task with a C++ kernel:\n" + fx.RELU_TASK
PROMPT_CHAT = "Say hi."
ANSWERS = {PROMPT_KERNEL: fx.HONEST_RELU, PROMPT_CHAT: "Hi! No code from me today."}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("serve_trl"))
    yield s
    s.stop()


def test_completion_text_reads_strings_and_chat_messages():
    assert completion_text("plain") == "plain"
    assert completion_text([{"role": "assistant", "content": "code"}]) == "code"
    parts = [{"type": "text", "text": "fi"}, {"type": "text", "text": "nal"}]
    assert completion_text([{"role": "assistant", "content": "call a tool"}, {"role": "tool", "content": "42"},
                            {"role": "assistant", "content": parts}]) == "final"
    assert completion_text([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]) == "a\nb"
    with pytest.raises(InputError):
        completion_text(3)


def test_the_adapter_scores_string_and_chat_completions_through_the_service(server):
    reward = VerifierReward(server.url)
    extra, metrics = {}, {}
    chat = [{"role": "assistant", "content": f"Here:\n```python\n{fx.HONEST_RELU}\n```"}]
    rewards = reward(prompts=["p"] * 3, completions=[fx.HONEST_RELU, chat, [{"role": "assistant", "content": "no"}]],
                     reference_code=[fx.RELU_TASK] * 3, task_id=["my-own-id"] * 3,
                     log_extra=lambda k, v: extra.setdefault(k, v), log_metric=metrics.__setitem__)
    (response,) = reward.history
    assert [v.status for v in response.verdicts] == ["pass", "pass", "extract_error"]
    assert rewards == [v.reward for v in response.verdicts] and rewards[0] > 0 > rewards[2]
    assert extra == {"verifier_status": ["pass", "pass", "extract_error"]}
    assert metrics == {"verifier/pass_rate": pytest.approx(2 / 3)}
    # a task id the server holds is enough (the reference program went with the call above)
    by_id = VerifierReward(server.url)(prompts=["p"], completions=["still no code"],
                                       task_id=[task_id_for(fx.RELU_TASK)])
    assert by_id == [rewards[2]]


def test_the_adapter_names_the_columns_it_needs():
    reward = VerifierReward("http://127.0.0.1:9")  # never called: the input is refused first
    with pytest.raises(InputError) as e:
        reward(prompts=["p"], completions=["x"], level=[1])
    assert "reference_code" in str(e.value) and "task_id" in str(e.value)
    with pytest.raises(InputError) as e:
        reward(prompts=["p", "q"], completions=["x", "y"], reference_code=[fx.RELU_TASK])
    assert "1 values for 2 completions" in str(e.value)


def test_the_rl_loops_reward_function_scores_through_the_service(server):
    score = service_reward_fn(server.url, backend="cpu")
    row = {"task_id": task_id_for(fx.RELU_TASK), "reference_code": fx.RELU_TASK}
    honest, junk = score([(row, fx.HONEST_RELU), (row, "no code")])
    assert honest.correct and honest.reward > 0 and honest.stage == "timing"
    assert not junk.correct and junk.reward < 0 and junk.stage == "extract" and junk.feedback


def lookup_model(tok, answers: dict[str, str]):
    """A one-block GPT-2 that writes ``answers[prompt]`` for each prompt: its blocks add nothing, the hidden state
    at position p is the one-hot of p (wpe = identity) and lm_head maps p to the answer's token at p + 1 (the
    prompts have different lengths, so their answers take different positions). Its weights are set, not trained,
    so that a cpu test gets real kernels out of TRL's own generation in seconds; GRPO then trains it as any model."""
    from transformers import GPT2Config, GPT2LMHeadModel

    table = {}
    for prompt, answer in answers.items():
        p, a = tok(prompt)["input_ids"], tok(answer)["input_ids"] + [tok.eos_token_id]
        for k, t in enumerate(a):
            assert len(p) + k - 1 not in table, "two answers share a position: change a prompt's length"
            table[len(p) + k - 1] = t
    n = max(table) + 8
    cfg = GPT2Config(vocab_size=len(tok), n_positions=n, n_embd=n, n_layer=1, n_head=1, tie_word_embeddings=False,
                     embd_pdrop=0.0, resid_pdrop=0.0, attn_pdrop=0.0, bos_token_id=tok.bos_token_id,
                     eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for w in model.parameters():
            w.zero_()
        model.transformer.wpe.weight.copy_(torch.eye(n))
        for ln in (model.transformer.ln_f, model.transformer.h[0].ln_1, model.transformer.h[0].ln_2):
            ln.weight.fill_(1.0)
        for pos, t in table.items():
            model.lm_head.weight[t, pos] = 2.0  # logit ~32 after ln_f: sampling at temperature 1 keeps to the table
    return model, max(len(tok(a)["input_ids"]) for a in answers.values()) + 1


@pytest.mark.slow
def test_a_grpo_run_on_cpu_takes_its_rewards_from_the_service(server, tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from train.model import build_tokenizer

    tok = build_tokenizer([*ANSWERS, *ANSWERS.values()] * 3, vocab_size=2000, split_words=False)
    tok.clean_up_tokenization_spaces = False  # the decoded completion is the program, byte for byte
    model, max_len = lookup_model(tok, ANSWERS)
    reward = VerifierReward(server.url)
    rows = [{"prompt": p, "reference_code": fx.RELU_TASK, "task_id": "relu"} for p in ANSWERS]
    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), max_steps=2, per_device_train_batch_size=4,
                      num_generations=2, max_completion_length=max_len, learning_rate=1e-5, logging_steps=1,
                      report_to=[], use_cpu=True, save_strategy="no", bf16=False, seed=0)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=Dataset.from_list(rows),
                          processing_class=tok)
    trainer.train()

    assert len(reward.history) == 2  # one service call per step, each of the step's 4 completions
    served = server.records()
    for step, response in zip((1, 2), reward.history):
        verdicts = response.verdicts
        assert sorted(v.status for v in verdicts) == ["extract_error", "extract_error", "pass", "pass"]
        # what the server wrote down is what the trainer got, and logged as this step's reward
        batch = [r for r in served if r["batch_id"] == response.batch.batch_id]
        assert [(r["candidate_id"], r["reward"]) for r in batch] == [(v.candidate_id, v.reward) for v in verdicts]
        logged = next(h for h in trainer.state.log_history if h.get("step") == step and "reward" in h)
        mean = sum(v.reward for v in verdicts) / len(verdicts)
        assert logged["rewards/kernelmill_verifier/mean"] == pytest.approx(mean)
        assert logged["verifier/pass_rate"] == pytest.approx(0.5)
    # per completion, in the trainer's own log of the last step (trl 1.16's GRPOTrainer._logs): the model's
    # answers, the service's reward and status for each
    last = reward.history[-1].verdicts
    assert sorted(trainer._logs["completion"]) == sorted(list(ANSWERS.values()) * 2)
    # (the trainer keeps rewards as float32: a speedup's reward, 1 + log2 s, is not exactly representable there)
    assert list(trainer._logs["rewards"]["kernelmill_verifier"]) == pytest.approx([v.reward for v in last], rel=1e-6)
    assert list(trainer._logs["extra"]["verifier_status"]) == [v.status for v in last]
