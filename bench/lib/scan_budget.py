"""Honest sequential fp32 running sums and lowered ones against the verifier's budget, with and without the
running-sum allowance (verifier/judge/budgets.py scan_allowance): prints the table of
bench/results/scan_budget_cpu.md. `PYTHONPATH=. python3 bench/lib/scan_budget.py` (cpu, about 25 s)."""

import types

import numpy as np
import torch
from verifier.engine import VerifyConfig
from verifier.common.backends import CPU_POISON_BYTE
from verifier.judge.outputs import Evidence, check_outputs
from verifier.judge.reduction import ReductionTracker, RefStats, EPS32

CFG = VerifyConfig()


def keep_bits(x, m):
    b = x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    d = 23 - m
    b = ((b + (1 << (d - 1))) & ~((1 << d) - 1)) & 0xFFFFFFFF
    return torch.where(b >= 1 << 31, b - (1 << 32), b).to(torch.int32).view(torch.float32)


def seq(x):
    return torch.from_numpy(np.cumsum(x.numpy(), 1, dtype=np.float32))


def judge(out, x, stats):
    ev = Evidence()
    ok = check_outputs([out], [torch.cumsum(x, 1)], [torch.cumsum(x.double(), 1)], [x], None, "t", CFG,
                       types.SimpleNamespace(), CPU_POISON_BYTE, [], ev, [], pooled=[stats])
    return "pass" if ok and not ev.codes else ("C13" if ev.codes else "wrong")


def excursion(rows, length, drift):
    x = torch.randn(rows, length) * 0.2
    x[:, :4096] += drift
    x[:, 4096:8192] -= drift
    return x


KINDS = {
    "randn 256 x 4096": lambda: torch.randn(256, 4096),
    "randn 16 x 65536": lambda: torch.randn(16, 65536),
    "rand (positive) 16 x 65536": lambda: torch.rand(16, 65536),
    "randn + 10, 16 x 16384": lambda: torch.randn(16, 16384) + 10,
    "excursion to ~1000, 8 x 32768": lambda: excursion(8, 32768, 0.25),
    "excursion to ~2000, 8 x 65536": lambda: excursion(8, 65536, 0.5),
}
print("| inputs | draws | honest: largest error / (EPS32 x sqrt(sum S^2)) | honest verdicts, block scale only | "
      "honest verdicts, with the allowance | fp16-input verdicts, with it | bf16-input verdicts, with it |")
print("| --- | --- | --- | --- | --- | --- | --- |")
torch.manual_seed(0)
for name, make in KINDS.items():
    draws, worst, old, new, f16, b16 = 20, 0.0, {}, {}, {}, {}
    for _ in range(draws):
        x = make()
        with torch.no_grad(), ReductionTracker() as tr:
            r64 = torch.cumsum(x.double(), 1)
        r, = tr.reductions([r64])
        st = RefStats(0.0, float(r64.abs().max()), r.length, r.same_sign, r.scan)
        out = seq(x)
        worst = max(worst, float(((out.double() - r64).abs() / (EPS32 * torch.sqrt((r64 ** 2).sum(1, keepdim=True)))).max()))
        for d, o, s in ((old, out, st._replace(scan=0)), (new, out, st), (f16, seq(keep_bits(x, 10)), st),
                        (b16, seq(keep_bits(x, 7)), st)):
            v = judge(o, x, s)
            d[v] = d.get(v, 0) + 1
    fmt = lambda d: ", ".join(f"{k} {v}" for k, v in sorted(d.items()))
    print(f"| {name} | {draws} | {worst:.2f} | {fmt(old)} | {fmt(new)} | {fmt(f16)} | {fmt(b16)} |", flush=True)
