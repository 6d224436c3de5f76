"""Model export (bench/lib/train_export.py): a policy rounded to bf16 and packed into parts of bounded size comes back as an
fp32 model directory with exactly those weights and the tokenizer."""

import json
import shutil

import pytest
import torch

import bench.lib.train_export as export
from kernelmill.errors import InputError
from train.model import build_tiny_model, build_tokenizer, load_pretrained


def _model():
    tok = build_tokenizer(["def forward(self, x): return torch.relu(x)"] * 50, vocab_size=300)
    return build_tiny_model(len(tok), n_layer=1, d_model=32, n_head=2, pad_id=tok.pad_token_id), tok


def test_a_policy_packed_for_the_next_device_call_comes_back_with_the_same_weights(tmp_path, monkeypatch):
    """The policy rounded to bf16 values, packed into parts under a per-file limit, unpacks to an fp32 model
    directory with exactly those weights and the tokenizer."""
    model, tok = _model()
    export.round_to_bf16(model)
    assert all(torch.equal(p, p.bfloat16().float()) for p in model.parameters())
    monkeypatch.setattr(export, "PART_BYTES", 20_000)  # several parts from a small model
    parts = export.pack_policy(model, tok, tmp_path / "state")
    assert len(parts) > 1 and all(p.stat().st_size <= 20_000 for p in parts)
    assert next(model.parameters()).dtype == torch.float32  # the caller's model is left in fp32
    back, tok2 = load_pretrained(export.unpack_policy(tmp_path / "state", tmp_path / "policy"))
    assert next(back.parameters()).dtype == torch.float32
    want = model.state_dict()
    for k, v in back.state_dict().items():
        assert torch.equal(v, want[k]), k
    assert tok2("return torch.relu(x)")["input_ids"] == tok("return torch.relu(x)")["input_ids"]
    with pytest.raises(InputError, match="no policy.tar"):
        export.unpack_policy(tmp_path / "empty", tmp_path / "p2")


def test_a_checkpoint_exported_in_bf16_comes_back_in_fp32_with_the_rounded_weights(tmp_path):
    model, tok = _model()
    model.save_pretrained(str(tmp_path / "ckpt"))
    from train.model import write_serving_files

    write_serving_files(tmp_path / "ckpt", tok)
    export.export_bf16(tmp_path / "ckpt", tmp_path / "bf16")
    size = lambda d: sum(f.stat().st_size for f in (tmp_path / d).glob("*.safetensors"))  # noqa: E731
    assert size("bf16") < 0.6 * size("ckpt")  # two bytes a weight, not four
    back, _ = load_pretrained(export.fp32_copy(tmp_path / "bf16", tmp_path / "fp32"))
    want = model.state_dict()
    for k, v in back.state_dict().items():
        assert v.dtype == torch.float32 and torch.equal(v, want[k].bfloat16().float()), k
    (tmp_path / "bf16" / "config.json").unlink()  # an existing fp32 copy is kept, not rebuilt
    assert export.fp32_copy(tmp_path / "bf16", tmp_path / "fp32") == tmp_path / "fp32"


def test_loop_state_carries_the_runs_but_not_checkpoints_and_reruns_a_phase_whose_model_is_gone(tmp_path):
    """The rounds' records travel, the checkpoints they name do not: the RL step whose model is gone is not
    done on the next machine (the loop runs it again), the pool's steps are. Same for an arm kept in an
    earlier version's layout (round-<r>/phases.json)."""
    from orchestrator import ledger

    work, dest, back = tmp_path / "work", tmp_path / "parts", tmp_path / "back"
    rnd = work / "arms" / "rl" / "loop" / "round-1"
    old = work / "arms" / "rft" / "loop" / "round-1"
    for d in (rnd, old):
        (d / "rl" / "ckpt-5").mkdir(parents=True)
        (d / "rl" / "ckpt-5" / "model.safetensors").write_bytes(b"w")
    (work / "m0").mkdir()
    (work / "m0" / "config.json").write_text("{}")
    ledger.mark(rnd / "pool", "generate", {"candidates_written": 3})
    ledger.mark(rnd / "rl", "rl", {"steps_done": 5}, model=str(rnd / "rl" / "ckpt-5"))
    (old / "phases.json").write_text('{"pool": {"generate": {"tasks": 1}}, "rl": {"model": "'
                                     + str(old / "rl" / "ckpt-5") + '"}}')
    assert ledger.done(rnd / "rl", "rl") and ledger.done(old / "rl", "rl")
    assert export.pack_loop_state(work, dest)
    shutil.rmtree(work)  # the next call's machine: the checkpoint is not there
    export.unpack_loop_state(dest, back)
    kept = sorted(p.relative_to(back).as_posix() for p in back.rglob("*") if p.is_file())
    assert kept == ["arms/rft/loop/round-1/phases.json", "arms/rl/loop/round-1/pool/ledger.json",
                    "arms/rl/loop/round-1/rl/ledger.json"]
    for arm in ("rl", "rft"):
        d = back / "arms" / arm / "loop" / "round-1"
        assert ledger.done(d / "rl", "rl") is None and ledger.done(d / "pool", "generate") is not None
    with pytest.raises(InputError, match="no loop_state.tar"):
        export.unpack_loop_state(tmp_path / "empty", back)
