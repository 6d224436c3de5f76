"""Decontamination catches benchmark programs rewritten the way a mined copy is (bench/bench_decontam.rewrite):
renamed class, variables and attributes, changed sizes, methods in another order, no docstrings."""

from __future__ import annotations

import sys
from pathlib import Path

from curation_fixtures import reference
from curation import decontam
from kernelmill.schema import Task, content_hash

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_decontam import rewrite  # noqa: E402

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
    assert [(h.benchmark_path, h.reason) for h in hits] == [("level2/1_Layer.py", "ngram")]
    # another program with the same frame but other ops is not flagged, and says how close it came
    other = _task(reference("Gelu", "torch.nn.functional.gelu(x) * 2.0"))
    assert decontam.find_contamination([other], bench) == []
    close = decontam.closest_programs([other], bench)
    assert all(c.jaccard < 0.5 for c in close)
