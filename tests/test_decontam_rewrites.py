"""Decontamination catches benchmark programs rewritten the way a mined copy is (bench/lib/rewrites.py):
renamed class, variables and attributes, changed sizes, methods in another order, no docstrings."""

from __future__ import annotations

from curation_fixtures import reference
from curation import decontam
from kernelmill.schema import Task, content_hash
from bench.lib.rewrites import rewrite

LAYER = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Conv, GroupNorm, then a gated activation."""

    def __init__(self, in_channels, out_channels, groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.norm = nn.GroupNorm(groups, out_channels)

    def forward(self, x):
        y = self.norm(self.conv(x))
        return y * torch.sigmoid(y) + torch.tanh(y).mean(dim=1, keepdim=True)


batch_size = 16
in_channels = 32


def get_inputs():
    return [torch.randn(batch_size, in_channels, 64, 64)]


def get_init_inputs():
    return [in_channels, 64, 8]
'''


def _task(code: str) -> Task:
    return Task(task_id=content_hash(code), name="t", source="github", level=2, reference_code=code)


def test_rewritten_benchmark_programs_are_caught_and_named(tmp_path):
    programs = {"level2/1_Layer.py": LAYER,
                "level1/2_Softmax.py": reference("Softmax", "torch.softmax(x, dim=-1)"),
                "level1/3_LogSumExp.py": reference("LSE", "torch.logsumexp(x, dim=1, keepdim=True)")}
    for i, extra in enumerate(["torch.cumsum(x, dim=0)", "torch.clamp(x, min=0.0, max=6.0)", "x.abs().sqrt()"]):
        programs[f"level1/{10 + i}_Other.py"] = reference(f"Other{i}", extra)
    for rel, code in programs.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(code)
    bench = decontam.load_benchmark(tmp_path)
    rw = rewrite(LAYER, seed=3)
    assert "class Model" not in rw and "self.conv" not in rw and "batch_size = 16" not in rw
    assert rw.index("def forward") < rw.index("def __init__")
    hits = decontam.find_contamination([_task(rw)], bench)
    # the same program up to names, sizes and method order: its canonical tokens match
    assert [(h.benchmark_path, h.reason) for h in hits] == [("level2/1_Layer.py", "tokens")]
    # one edit more (an extra statement in forward): the n-gram Jaccard still catches it
    edited = rw.replace("return ", "y = y.contiguous()\n        return ", 1) if "y = " in rw else rw + "\nextra = 1\n"
    hits = decontam.find_contamination([_task(edited)], bench)
    assert [(h.benchmark_path, h.reason) for h in hits] == [("level2/1_Layer.py", "ngram")]
    # another program with the same frame but other ops is not flagged, and says how close it came
    other = _task(reference("Gelu", "torch.nn.functional.gelu(x) * 2.0"))
    assert decontam.find_contamination([other], bench) == []
    close = decontam.closest_programs([other], bench)
    assert all(c.jaccard < 0.5 for c in close)


ATTENTION = '''import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Masked multi-head self-attention."""

    def __init__(self, n_embd, n_head, max_len):
        super().__init__()
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.register_buffer("mask", torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


batch_size = 8
seq_len = 128


def get_inputs():
    return [torch.randn(batch_size, seq_len, 256)]


def get_init_inputs():
    return [256, 8, seq_len]
'''

FEED_FORWARD = '''

class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))
'''

# a model file as a repository has it: its own attention class (renamed, reordered), a
# feed-forward, residual blocks, a small language model around them, the miner's get_inputs
BLOCK = '''import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):

    def forward(self, h):
        B, T, C = h.size()
        q, k, v = self.c_attn(h).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)

    def __init__(self, d, heads, block_size):
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.heads = heads
        self.register_buffer('bias', torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))
''' + FEED_FORWARD + '''

class Block(nn.Module):
    def __init__(self, d, heads, block_size):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, block_size)
        self.mlp = FeedForward(d, 4 * d)

    def forward(self, x):
        x = x + self.attn(self.ln(x))
        return self.mlp(x)


class TinyLM(nn.Module):
    def __init__(self, vocab, d, heads, block_size, layers):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, block_size, d))
        self.drop = nn.Dropout(0.1)
        self.blocks = nn.ModuleList([Block(d, heads, block_size) for _ in range(layers)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(self, idx):
        b, t = idx.shape
        h = self.drop(self.tok(idx) + self.pos[:, :t, :])
        for blk in self.blocks:
            h = blk(h)
        logits = self.head(self.norm(h))
        return logits

    @torch.no_grad()
    def sample(self, idx, steps, temperature=1.0, top_k=None):
        for _ in range(steps):
            logits = self(idx[:, -self.pos.size(1):])[:, -1, :] / temperature
            if top_k is not None:
                kth = torch.topk(logits, top_k).values[:, [-1]]
                logits = logits.masked_fill(logits < kth, float('-inf'))
            probs = F.softmax(logits, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
        return idx


class Model(Block):
    pass


def get_inputs():
    return [torch.randn(4, 64, 128)]


def get_init_inputs():
    return [128, 4, 64]
'''


def _bench(tmp_path, programs: dict[str, str]):
    for rel, code in programs.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(code)
    return decontam.load_benchmark(tmp_path)


def _fillers() -> dict[str, str]:
    """Small problems of the common frame, so the frame's n-grams are common."""
    exprs = ["torch.relu(x)", "torch.sigmoid(x)", "torch.tanh(x)", "torch.cumsum(x, dim=0)", "x.abs().sqrt()",
             "torch.clamp(x, min=0.0, max=6.0)", "torch.softmax(x, dim=-1)", "torch.logsumexp(x, dim=1, keepdim=True)"]
    return {f"level1/{i + 1}_P{i}.py": reference(f"P{i}", e) for i, e in enumerate(exprs)}


def test_a_module_that_embeds_a_benchmark_problem_is_flagged_as_contained(tmp_path):
    bench = _bench(tmp_path, {**_fillers(), "level3/43_Attention.py": ATTENTION})
    hits = decontam.find_contamination([_task(BLOCK)], bench)
    assert [(h.benchmark_path, h.reason) for h in hits] == [("level3/43_Attention.py", "contained")]
    assert hits[0].contained >= 0.8 and hits[0].overlap < 0.5  # Jaccard alone would miss it
    # the same file without the attention: its feed-forward and language model are not the problem
    no_attn = BLOCK.split("class CausalSelfAttention")[0] + FEED_FORWARD + "\n" + BLOCK.split(FEED_FORWARD)[1].replace(
        "        self.attn = CausalSelfAttention(d, heads, block_size)\n", "").replace("self.attn(self.ln(x))", "self.ln(x)")
    assert decontam.find_contamination([_task(no_attn)], bench) == []
    # the rule's floor: a one-line problem (P0 is a ReLU) is not "contained" in a model that applies a ReLU
    relu_model = no_attn + "\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
    o = decontam.task_overlaps([_task(relu_model)], bench)[0]
    relu = next(p for p in o.programs if p.benchmark_path == "level1/1_P0.py")
    assert relu.benchmark_in_task == 1.0 and relu.benchmark_ngrams < 12
    assert decontam.find_contamination([_task(relu_model)], bench) == []


def test_problems_made_of_common_ngrams_are_caught_by_their_tokens(tmp_path):
    """Problems that differ from each other only in sizes have no uncommon n-gram: a rewrite of one
    is caught by its canonical tokens and named (the same problem, whichever file)."""
    conv = reference("Conv", "self.conv(x)").replace(
        "        super().__init__()\n", "        super().__init__()\n        self.conv = nn.Conv2d(3, 16, 3)\n")
    programs = {**_fillers(), **{f"level1/{50 + i}_Conv{i}.py": conv.replace("nn.Conv2d(3, 16, 3)", f"nn.Conv2d(3, {16 + i}, {3 + i})")
                                 for i in range(8)}}
    bench = _bench(tmp_path, programs)
    idx = decontam._Index(bench, 0.05)
    assert idx.sizes[[p.path for p in bench].index("level1/50_Conv0.py")] == 0
    hits = decontam.find_contamination([_task(rewrite(conv, seed=1))], bench)
    assert len(hits) == 1 and hits[0].reason == "tokens" and "Conv" in hits[0].benchmark_path


def test_overlaps_are_reported_best_first_with_both_measures(tmp_path):
    bench = _bench(tmp_path, {**_fillers(), "level3/43_Attention.py": ATTENTION, "level2/1_Layer.py": LAYER})
    o = decontam.task_overlaps([_task(BLOCK)], bench)[0]
    assert o.programs[0].benchmark_path == "level3/43_Attention.py"
    assert all(0 <= p.jaccard <= 1 and 0 <= p.benchmark_in_task <= 1 for p in o.programs)
    hit = decontam.find_contamination([_task(BLOCK)], bench)[0]
    assert all(x["path"] != hit.benchmark_path for x in hit.others)
    assert set(hit.as_dict()) >= {"task_id", "reason", "benchmark_path", "overlap", "contained", "others"}
