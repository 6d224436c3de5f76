"""Corpora in, token ids and loss masks out.

Reading: :func:`load_corpus` returns a ``datasets.Dataset`` for one config (sft, rft, rl). When the corpus directory
has a dataset card (README.md with YAML ``configs``, written by curation/corpus.py) it calls
``datasets.load_dataset(corpus_dir, name)``, exactly what a trainer outside kernelmill would do; otherwise it reads
``<corpus_dir>/<name>/*.parquet`` through the ``parquet`` builder. On a box without the ``datasets`` package (the GPU
image) it falls back to pyarrow and says so once.

Chat format: ``<|bos|>``, then every message as ``<|role|> content <|end|>``, with the role and end markers as single
special tokens. A system message is folded into the user message after it (system text, a blank line, user text:
:func:`fold_system`), which is how curation writes the prompt of rft and rl rows (``curation.filters.render_prompt``),
so a [system, user] chat from the generate stage, an sft dialogue and an rft / rl row's single user turn are one
token sequence. A generation prompt ends with ``<|assistant|>``; the model stops at ``<|end|>``. Content is encoded
segment by segment, so the token boundary between a prompt and its response is exactly where generation starts (no
merge across the boundary).

Served checkpoints: :data:`CHAT_TEMPLATE` is this format as a Jinja chat template; every checkpoint carries it
(train/model.py), so ``tokenizer.apply_chat_template`` (what ``transformers serve`` and other OpenAI-compatible
servers call) gives the ids :func:`encode_chat` gives: the markers match the special tokens and the text between
them is tokenized on its own (tests/test_serve_model.py checks the ids for the tokenizer train/model.py builds; a
base model's tokenizer that adds a prefix space to every segment is not checked). Roles other than system, user and
assistant are refused, as here.

Loss masks: 1 on the content tokens and the closing ``<|end|>`` of assistant turns, 0 elsewhere (system/user turns,
role markers, padding). Sequences longer than ``max_len`` keep their start and are cut at ``max_len``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Iterable

from kernelmill.errors import InputError

log = logging.getLogger("kernelmill.train")

CONFIGS = ("sft", "rft", "rl")
ROLES = ("system", "user", "assistant")
BOS, END, PAD = "<|bos|>", "<|end|>", "<|pad|>"
SPECIAL_TOKENS = [PAD, BOS, END] + [f"<|{r}|>" for r in ROLES]
# encode_chat (with fold_system) as a chat template; literal markers: a base model's bos_token may be another token
CHAT_TEMPLATE = (
    "<|bos|>{% set ns = namespace(system=none) %}{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('message role ' + message['role'] + ' must be one of system, user, assistant') }}{% endif %}"
    "{% if message['role'] == 'system' %}"
    "{% set ns.system = message['content'] if ns.system is none else ns.system + '\n\n' + message['content'] %}"
    "{% elif message['role'] == 'user' %}"
    "<|user|>{% if ns.system is not none %}{{ ns.system + '\n\n' }}{% set ns.system = none %}{% endif %}"
    "{{ message['content'] }}<|end|>"
    "{% else %}{% if ns.system is not none %}<|user|>{{ ns.system }}<|end|>{% set ns.system = none %}{% endif %}"
    "<|assistant|>{{ message['content'] }}<|end|>{% endif %}{% endfor %}"
    "{% if ns.system is not none %}<|user|>{{ ns.system }}<|end|>{% endif %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


# ---------------------------------------------------------------------------- reading corpora


def _has_card(corpus_dir: Path) -> bool:
    card = corpus_dir / "README.md"
    return card.is_file() and "configs:" in card.read_text(errors="replace")


def load_corpus(corpus_dir: str | Path, name: str):
    """One corpus config as a Dataset-like table (a ``datasets.Dataset``, or a list of dicts where
    ``datasets`` is not installed). Raises InputError naming the directory when the config is absent."""
    corpus_dir = Path(corpus_dir)
    if name not in CONFIGS:
        raise InputError(f"corpus config {name!r}", f"must be one of {', '.join(CONFIGS)}")
    if not corpus_dir.is_dir():
        raise InputError(f"corpus {corpus_dir}", "is not a directory")
    files = sorted((corpus_dir / name).glob("*.parquet"))
    if not files:
        raise InputError(f"corpus {corpus_dir}", f"has no {name}/*.parquet files")
    try:  # datasets is optional (absent on the GPU box) and slow to import: only here
        import datasets
    except ModuleNotFoundError:
        log.warning("datasets is not installed; reading %s/%s with pyarrow", corpus_dir, name)
        import pyarrow as pa
        import pyarrow.parquet as pq

        return pa.concat_tables([pq.read_table(f) for f in files], promote_options="default").to_pylist()
    datasets.disable_progress_bars()
    if _has_card(corpus_dir):
        return datasets.load_dataset(str(corpus_dir), name, split="train")
    return datasets.load_dataset("parquet", data_files={"train": [str(f) for f in files]}, split="train")


def rows_of(ds) -> list[dict]:
    """Plain dict rows of a Dataset (or list)."""
    return list(ds) if isinstance(ds, list) else ds.to_list()


def row_test_spec(row: dict) -> dict:
    """An RL row's test_spec as a dict (stored as canonical JSON)."""
    ts = row.get("test_spec") or {}
    return json.loads(ts) if isinstance(ts, str) else dict(ts)


# ---------------------------------------------------------------------------- held-out split


def is_heldout(task_id: str, frac: float, seed: int = 0) -> bool:
    """Deterministic task-level split: the same task is held out in every stage and every run."""
    if frac <= 0:
        return False
    h = int(hashlib.sha256(f"{seed}:{task_id}".encode()).hexdigest()[:8], 16)
    return (h / 0xFFFFFFFF) < frac


def split_rows(rows: list[dict], frac: float, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(train, heldout) by task_id."""
    train, held = [], []
    for r in rows:
        (held if is_heldout(r["task_id"], frac, seed) else train).append(r)
    return train, held


# ---------------------------------------------------------------------------- dialogues


def sft_dialogues(rows: Iterable[dict]) -> list[list[dict]]:
    """SFT rows -> message lists ({role, content}), skipping rows with no assistant turn."""
    out = []
    for r in rows:
        msgs = [{"role": m["role"], "content": m["content"]} for m in r["messages"]]
        if any(m["role"] == "assistant" for m in msgs):
            out.append(msgs)
    return out


def rft_dialogues(rows: Iterable[dict], *, only_correct: bool = True, min_reward: float | None = None) -> list[list[dict]]:
    """RFT rows -> [user prompt, assistant completion] dialogues (rejection sampling: correct only)."""
    out = []
    for r in rows:
        if only_correct and not r.get("correct"):
            continue
        if min_reward is not None and float(r.get("reward", 0.0)) < min_reward:
            continue
        out.append([{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["completion"]}])
    return out


def prompt_messages(row: dict) -> list[dict]:
    """The opening conversation of an RL row."""
    return [{"role": "user", "content": row["prompt"]}]


def corpus_texts(corpus_dir: str | Path) -> list[str]:
    """Every text of a corpus (all configs present), for training a tokenizer."""
    if not Path(corpus_dir).is_dir():
        raise InputError(f"corpus {corpus_dir}", "is not a directory")
    texts: list[str] = []
    for name in CONFIGS:
        try:
            rows = rows_of(load_corpus(corpus_dir, name))
        except InputError:
            continue
        for r in rows:
            if name == "sft":
                texts += [m["content"] for m in r["messages"]]
            elif name == "rft":
                texts += [r["prompt"], r["completion"]]
            else:
                texts += [r["prompt"]]
    if not texts:
        raise InputError(f"corpus {corpus_dir}", "holds no sft, rft or rl rows to train a tokenizer on")
    return texts


# ---------------------------------------------------------------------------- tokens


def role_id(tok, role: str) -> int:
    if role not in ROLES:
        raise InputError(f"message role {role!r}", f"must be one of {', '.join(ROLES)}")
    return tok.convert_tokens_to_ids(f"<|{role}|>")


def encode_text(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def fold_system(messages: list[dict]) -> list[dict]:
    """The messages with each system message folded into the next user message (joined by a blank
    line, as curation.filters.render_prompt joins them); a system message with no user message after
    it becomes a user turn of its own. Raises InputError on a role other than system, user, assistant."""
    out: list[dict] = []
    pending: list[str] = []
    for m in messages:
        if m["role"] not in ROLES:
            raise InputError(f"message role {m['role']!r}", f"must be one of {', '.join(ROLES)}")
        if m["role"] == "system":
            pending.append(m["content"])
            continue
        if m["role"] == "user":
            out.append({"role": "user", "content": "\n\n".join(pending + [m["content"]])})
        else:
            if pending:
                out.append({"role": "user", "content": "\n\n".join(pending)})
            out.append({"role": m["role"], "content": m["content"]})
        pending = []
    if pending:
        out.append({"role": "user", "content": "\n\n".join(pending)})
    return out


def encode_chat(tok, messages: list[dict], *, add_generation_prompt: bool = False,
                train_roles: tuple[str, ...] = ("assistant",)) -> tuple[list[int], list[int]]:
    """(ids, loss_mask) of a conversation (system messages folded: :func:`fold_system`); mask is 1 on
    the content and end token of turns whose role is in ``train_roles``."""
    end = tok.convert_tokens_to_ids(END)
    ids = [tok.convert_tokens_to_ids(BOS)]
    mask = [0]
    for m in fold_system(messages):
        content = encode_text(tok, m["content"]) + [end]
        on = 1 if m["role"] in train_roles else 0
        ids += [role_id(tok, m["role"])] + content
        mask += [0] + [on] * len(content)
    if add_generation_prompt:
        ids.append(role_id(tok, "assistant"))
        mask.append(0)
    return ids, mask


def turn_suffix(tok, feedback_turn: str, closed: bool) -> list[int]:
    """Tokens appended after a sampled answer to open the next turn: the answer's <|end|> when it
    was cut by max_new_tokens, the user turn with feedback, and <|assistant|>."""
    end = tok.convert_tokens_to_ids(END)
    return ([] if closed else [end]) + [role_id(tok, "user")] + encode_text(tok, feedback_turn) + [end, role_id(tok, "assistant")]


def pad_batch(seqs: list[list[int]], masks: list[list[int]], pad_id: int, max_len: int):
    """Right-padded (input_ids, attention_mask, loss_mask) LongTensors, each sequence cut at max_len."""
    import torch  # here: the chat format above is used without torch (curation, the serving template)

    seqs = [s[:max_len] for s in seqs]
    masks = [m[:max_len] for m in masks]
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    att = torch.zeros((len(seqs), T), dtype=torch.long)
    lm = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, (s, m) in enumerate(zip(seqs, masks)):
        ids[i, : len(s)] = torch.tensor(s)
        att[i, : len(s)] = 1
        lm[i, : len(m)] = torch.tensor(m)
    return ids, att, lm
