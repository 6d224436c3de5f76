"""The model and tokenizer: any local Hugging Face causal LM, or a tiny Llama built offline.

With no model path, :func:`build_tokenizer` trains a byte-level BPE tokenizer on the corpus text
(``tokenizers``, no download) and :func:`build_tiny_model` makes a randomly initialised
``LlamaForCausalLM`` from a config, so everything runs on a CPU in CI and on a GPU box with no
network. A local model path is loaded with ``from_pretrained``; the chat markers of train/data.py
are added to its tokenizer as special tokens if missing (and the embeddings resized).

Checkpoints are plain directories: ``save_pretrained`` model and tokenizer files plus
``trainer_state.pt`` (optimizer, step, RNG and whatever the loop adds), ready to serve
(:func:`write_serving_files`: the chat template of train/data.py in the tokenizer, and a
generation config that stops at ``<|end|>`` and samples at the request's temperature). :func:`latest_checkpoint`
finds the newest complete one (a checkpoint is written to a temporary folder and renamed, so a run
killed mid-save leaves the previous checkpoint as the latest).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM,
                          PreTrainedTokenizerFast)

from kernelmill.errors import InputError
from train.data import BOS, CHAT_TEMPLATE, END, PAD, SPECIAL_TOKENS


def build_tokenizer(texts: list[str], vocab_size: int = 2000, min_frequency: int = 2, split_words: bool = True,
                    max_token_chars: int = 24, split_digits: bool = False):
    """A byte-level BPE ``PreTrainedTokenizerFast`` trained on ``texts`` with the chat special tokens.

    Deterministic for the same texts and settings. Any byte sequence encodes (byte fallback).
    ``split_words=False`` lets merges cross word boundaries, so boilerplate that repeats across the
    corpus (kernel headers, load_inline calls) becomes fewer, longer tokens (at most
    ``max_token_chars`` characters, so answers stay compositions of reusable pieces rather than
    whole memorised files): shorter sequences for a corpus of near-template programs, at the price
    of a tokenizer that suits only that corpus. ``split_digits`` makes every digit its own token, so a
    number is spelled the same way wherever it occurs (a constant copied from a prompt into code is
    copied digit by digit, whatever surrounds it)."""

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split_words)
    if split_digits:
        tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), tk.pre_tokenizer])
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=SPECIAL_TOKENS,
                                  max_token_length=max_token_chars, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=BOS, eos_token=END, pad_token=PAD,
                                   additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in (BOS, END, PAD)])


def build_tiny_model(vocab_size: int, *, n_layer: int = 2, d_model: int = 64, n_head: int = 4,
                     max_len: int = 512, seed: int = 0, pad_id: int = 0, bos_id: int = 1, eos_id: int = 2):
    """A randomly initialised LlamaForCausalLM (tied embeddings, no dropout), built offline."""

    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=d_model, intermediate_size=4 * d_model,
                      num_hidden_layers=n_layer, num_attention_heads=n_head, num_key_value_heads=n_head,
                      max_position_embeddings=max_len, tie_word_embeddings=True, attention_dropout=0.0,
                      pad_token_id=pad_id, bos_token_id=bos_id, eos_token_id=eos_id)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg)


def load_pretrained(path: str | Path):
    """(model, tokenizer) from a local directory, with the chat special tokens ensured."""

    p = Path(path)
    if not (p / "config.json").is_file():
        raise InputError(f"model {p}", "is not a local Hugging Face model directory (no config.json)")
    tok = AutoTokenizer.from_pretrained(str(p))
    model = AutoModelForCausalLM.from_pretrained(str(p))
    missing = [t for t in SPECIAL_TOKENS if tok.convert_tokens_to_ids(t) in (None, tok.unk_token_id)]
    if missing:
        tok.add_special_tokens({"additional_special_tokens": missing})
    if tok.pad_token is None:
        tok.pad_token = PAD
    if len(tok) > model.get_input_embeddings().num_embeddings:
        model.resize_token_embeddings(len(tok))
    model.config.pad_token_id = tok.pad_token_id
    return model, tok


# ---------------------------------------------------------------------------- checkpoints

STATE_FILE = "trainer_state.pt"


def save_checkpoint(out_dir: str | Path, step: int, model, tok, state: dict, keep: int = 2) -> Path:
    """Write ``<out_dir>/ckpt-<step>`` atomically (temp folder + rename); keep the newest ``keep``."""

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / f"ckpt-{step:07d}"
    tmp = out_dir / f".tmp-ckpt-{step:07d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(str(tmp))
    write_serving_files(tmp, tok)
    torch.save({**state, "step": step}, tmp / STATE_FILE)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in sorted(out_dir.glob("ckpt-*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def write_serving_files(ckpt: str | Path, tok) -> None:
    """Make a checkpoint directory servable as it is: the tokenizer saved with train/data.py's chat
    template (the format every kernelmill stage trains on, whatever template a base model came with),
    and generation_config.json set to stop at ``<|end|>`` and to sample (temperature 1, no top-k or
    top-p cut, as train/rollout.py samples) unless a request sets temperature 0. Callers that pass
    ``do_sample`` to ``generate`` (train/rollout.py) are unaffected."""

    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(str(ckpt))
    end = tok.convert_tokens_to_ids(END)
    GenerationConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, eos_token_id=end,
                     pad_token_id=tok.pad_token_id, bos_token_id=tok.convert_tokens_to_ids(BOS)).save_pretrained(str(ckpt))


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest complete checkpoint directory under ``out_dir`` (None when there is none)."""
    d = Path(out_dir)
    if not d.is_dir():
        return None
    done = [p for p in sorted(d.glob("ckpt-*")) if (p / STATE_FILE).is_file()]
    return done[-1] if done else None


def resolve_model_dir(path: str | Path) -> Path:
    """A model directory, or the latest checkpoint inside a training output directory."""
    p = Path(path)
    if (p / "config.json").is_file():
        return p
    ck = latest_checkpoint(p)
    if ck is None:
        raise InputError(f"model {p}", "is neither a model directory nor a training output with checkpoints")
    return ck


def load_trainer_state(ckpt: Path) -> dict:

    return torch.load(ckpt / STATE_FILE, map_location="cpu", weights_only=False)
