"""SFT and RFT: next-token loss on assistant turns only, with resumable checkpoints.

    train_sft(corpus_dir, out_dir, config="sft")   multi-turn repair dialogues from the sft config
    train_sft(corpus_dir, out_dir, config="rft")   rejection-sampled (prompt, correct completion) pairs

One loop for both, readable top to bottom. The batch of step s is a function of (seed, s) alone
(a per-epoch permutation of the examples), so a run resumed from a checkpoint at step s continues
with exactly the batches an uninterrupted run would have seen, and, with dropout off, ends with the
same weights. Tasks that :func:`train.data.is_heldout` puts in the held-out split are never trained
on, so evaluation on them measures generalisation to unseen tasks.

Not handled: gradient accumulation, mixed precision, multi-GPU (a small model on one device is the
use case); sequences longer than ``max_len`` are truncated, not packed.
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from kernelmill.errors import InputError
from kernelmill.settings import TrainSettings
from train import data as D
from train.model import (build_tiny_model, build_tokenizer, latest_checkpoint, load_pretrained, load_trainer_state,
                         resolve_model_dir, save_checkpoint)
from verifier.common.config import resolve_backend

log = logging.getLogger("kernelmill.train")


class MetricsLog:
    """Append-only JSON-lines metrics file. On resume from step s, lines of the same stage with a step
    beyond s (written after the checkpoint) are dropped first, so each step appears once."""

    def __init__(self, path: str | Path, stage: str, resume_step: int = 0):
        self.path, self.stage = Path(path), stage
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_file():
            kept = []
            for line in self.path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a kill
                if rec.get("stage") == stage and rec.get("step", 0) > resume_step:
                    continue
                kept.append(line)
            self.path.write_text("".join(k + "\n" for k in kept))

    def write(self, rec: dict) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"stage": self.stage, **rec}, sort_keys=True) + "\n")


def read_metrics(path: str | Path, stage: str | None = None) -> list[dict]:
    """The metrics records of a run (optionally of one stage), in order."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if stage is None or rec.get("stage") == stage:
            out.append(rec)
    return out


def lr_at(step: int, total: int, base: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to 10% of ``base``."""
    if step < warmup:
        return base * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def batch_indices(step: int, n: int, batch_size: int, seed: int) -> list[int]:
    """The example indices of step ``step``: consecutive slices of a per-epoch permutation."""
    return stream_indices(step * batch_size, batch_size, n, seed)


def stream_indices(pos: int, k: int, n: int, seed: int) -> list[int]:
    """``k`` indices starting at position ``pos`` of an endless stream of per-epoch permutations of
    range(n); a function of (pos, k, n, seed) only, which is what makes resumed runs reproducible."""

    out: list[int] = []
    while len(out) < k:
        epoch, off = divmod(pos, n)
        g = torch.Generator().manual_seed(seed * 100_003 + epoch)
        perm = torch.randperm(n, generator=g).tolist()
        take = min(k - len(out), n - off)
        out += perm[off: off + take]
        pos += take
    return out


def masked_lm_loss(model, ids, att, lm):
    """Mean cross-entropy over tokens whose loss-mask is 1 (targets shifted by one)."""

    logits = model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
    tgt = ids[:, 1:]
    m = lm[:, 1:].float()
    ce = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt.reshape(-1), reduction="none").view_as(m)
    return (ce * m).sum() / m.sum().clamp(min=1.0), int(m.sum())


def load_examples(corpus_dir, config: str, tok, *, max_len: int, heldout_frac: float, split_seed: int):
    """Encoded (ids, mask) training examples of one config, held-out tasks excluded."""
    rows = D.rows_of(D.load_corpus(corpus_dir, config))
    train_rows, held = D.split_rows(rows, heldout_frac, split_seed)
    dialogs = D.sft_dialogues(train_rows) if config == "sft" else D.rft_dialogues(train_rows)
    examples = []
    for msgs in dialogs:
        ids, mask = D.encode_chat(tok, msgs)
        if sum(mask[:max_len]) > 0:
            examples.append((ids[:max_len], mask[:max_len]))
    if not examples:
        raise InputError(f"corpus {corpus_dir} ({config})",
                         f"has no trainable examples ({len(rows)} rows, {len(held)} held out, max_len {max_len})")
    return examples, {"rows": len(rows), "heldout_rows": len(held), "examples": len(examples)}


def train_sft(corpus_dir: str | Path, out_dir: str | Path, *, config: str = "sft", init: str = "",
              steps: int = TrainSettings.sft_steps, batch_size: int = TrainSettings.batch_size,
              lr: float = TrainSettings.lr, warmup: int = TrainSettings.warmup, max_len: int = TrainSettings.max_len,
              weight_decay: float = 0.0, save_every: int = TrainSettings.save_every,
              heldout_frac: float = TrainSettings.heldout_frac, split_seed: int = TrainSettings.split_seed,
              seed: int = TrainSettings.seed, device: str = TrainSettings.device,
              vocab_size: int = TrainSettings.vocab_size, n_layer: int = TrainSettings.n_layer,
              d_model: int = TrainSettings.d_model, n_head: int = TrainSettings.n_head, resume: bool = True,
              log_every: int = 10, max_seconds: float = 0.0, split_words: bool = True, split_digits: bool = False,
              lr_by_time: bool = False, amp: bool = False,
              progress: Callable[[int, int], None] | None = None) -> dict:
    """Train on the assistant turns of one corpus config; returns a summary dict.

    ``init``: a model directory or a training output directory (its latest checkpoint) to start
    from; empty builds a tokenizer on the corpus and a tiny model. With ``resume`` and a checkpoint
    already in ``out_dir``, training continues from it (same batches, same optimizer state).
    Writes ``out_dir/ckpt-*`` and appends to ``out_dir/metrics.jsonl``. ``max_seconds`` > 0 stops
    early (with a checkpoint) once that much time has passed; the learning-rate schedule assumes
    ``steps``, or with ``lr_by_time`` the larger of step/steps and elapsed/max_seconds (so a run cut by
    its time budget still ends its warm-up and cosine decay; such a run is not step-reproducible).
    ``amp`` runs forward and backward under bfloat16 autocast on a CUDA device (weights stay fp32).
    ``progress(steps_done, steps)`` is called after every step (the stage's progress line or bar)."""

    if config not in ("sft", "rft"):
        raise InputError(f"config {config!r}", "train_sft trains on 'sft' or 'rft'")
    out_dir = Path(out_dir)
    dev = torch.device(resolve_backend(device, "train.device", device_index=True))
    ck = latest_checkpoint(out_dir) if resume else None
    state: dict = {}
    if ck is not None:
        model, tok = load_pretrained(ck)
        state = load_trainer_state(ck)
        log.info("resuming %s from %s (step %d)", config, ck, state["step"])
    elif init:
        model, tok = load_pretrained(resolve_model_dir(init))
    else:
    
        tok = build_tokenizer(D.corpus_texts(corpus_dir), vocab_size=vocab_size, split_words=split_words,
                              split_digits=split_digits)
        model = build_tiny_model(len(tok), n_layer=n_layer, d_model=d_model, n_head=n_head, max_len=max_len,
                                 seed=seed, pad_id=tok.pad_token_id, bos_id=tok.bos_token_id, eos_id=tok.eos_token_id)
    model.to(dev).train()
    examples, counts = load_examples(corpus_dir, config, tok, max_len=max_len, heldout_frac=heldout_frac,
                                     split_seed=split_seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95))
    if state.get("optimizer"):
        opt.load_state_dict(state["optimizer"])
    start = int(state.get("step", 0))
    metrics = MetricsLog(out_dir / "metrics.jsonl", config, start)
    t0 = time.time()
    loss_v = float("nan")
    done = start
    for step in range(start, steps):
        idx = batch_indices(step, len(examples), batch_size, seed)
        ids, att, lm = D.pad_batch([examples[i][0] for i in idx], [examples[i][1] for i in idx],
                                   tok.pad_token_id, max_len)
        ids, att, lm = ids.to(dev), att.to(dev), lm.to(dev)
        cur_lr = lr_at(step, steps, lr, warmup)
        if lr_by_time and max_seconds > 0 and step >= warmup:
            frac = min(1.0, max(step / max(1, steps), (time.time() - t0) / max_seconds))
            cur_lr = lr_at(warmup + int(frac * (steps - warmup)), steps, lr, warmup)
        for g in opt.param_groups:
            g["lr"] = cur_lr
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp and dev.type == "cuda"):
            loss, ntok = masked_lm_loss(model, ids, att, lm)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_v = float(loss.detach())
        metrics.write({"step": step + 1, "loss": loss_v, "lr": cur_lr, "tokens": ntok, "grad_norm": float(gnorm),
                       "time_s": round(time.time() - t0, 3)})
        if log_every and (step + 1) % log_every == 0:
            log.info("%s step %d/%d loss %.4f", config, step + 1, steps, loss_v)
        out_of_time = max_seconds > 0 and time.time() - t0 > max_seconds
        if (save_every and (step + 1) % save_every == 0) or step + 1 == steps or out_of_time:
            save_checkpoint(out_dir, step + 1, model, tok, {"optimizer": opt.state_dict(), "stage": config})
        done = step + 1
        if progress is not None:
            progress(done, steps)
        if out_of_time:
            break
    return {"stage": config, "steps": steps, "steps_done": done, "resumed_from": start, "final_loss": loss_v,
            "checkpoint": str(latest_checkpoint(out_dir)), "seconds": round(time.time() - t0, 2), **counts}
