"""The numbers behind the verifier's measured tolerance (verifier/numerics.py), on the cpu.

For long reductions and a few elementwise ops it prints, as a markdown table, the fp32 reference's own error
against float64 (``ref_err``), the output's scale ``S`` (largest |float64 value|), and for honest fp32
implementations in another accumulation order (sequential, tiled, block + atomics) and for the same
computations at lower precision (fp16 / TF32 / bf16 inputs, fp16 accumulation) their largest error, that
error as a multiple of ``ref_err`` and as a share of ``S``. The verifier passes an fp32 output whose every
element is within max(64 x ref_err, 8e-5 x S, 1e-6).

    python bench/bench_tolerance.py [--out bench/results/tolerance_cpu.md]
"""

from __future__ import annotations

import argparse
import platform

import numpy as np
import torch

FACTOR, SCALE = 64.0, 8e-5


def keep_bits(x: np.ndarray, mantissa: int) -> np.ndarray:
    """Round float32 values to ``mantissa`` bits (10: fp16 / TF32 inputs, 7: bf16)."""
    drop = 23 - mantissa
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + (1 << (drop - 1))) & ~np.uint64((1 << drop) - 1)).astype(np.uint32)
    return b.view(np.float32)


def seq_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.cumsum(a[:, :, None] * b[None, :, :], axis=1, dtype=np.float32)[:, -1, :]


def rows() -> list[tuple]:
    rng = np.random.default_rng(0)
    out = []

    def case(name, r32, r64, cands):
        r32, r64 = np.asarray(r32, np.float64), np.asarray(r64, np.float64)
        e_ref, s = float(np.abs(r32 - r64).max()), float(np.abs(r64).max())
        for cname, c in cands.items():
            err = float(np.abs(np.asarray(c, np.float64) - r64).max())
            verdict = "pass" if err <= max(FACTOR * e_ref, SCALE * s, 1e-6) else "rejected"
            out.append((name, cname, e_ref, s, err, err / max(e_ref, 1e-30), err / s, verdict))

    m = n = 96
    k = 8192
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    case("matmul K=8192", (torch.from_numpy(a) @ torch.from_numpy(b)).numpy(), a.astype(np.float64) @ b,
         {"honest: sequential fp32": seq_matmul(a, b),
          "honest: 32-wide tiles": np.cumsum((a[:, :, None] * b[None]).reshape(m, k // 32, 32, n).sum(
              2, dtype=np.float32), axis=1, dtype=np.float32)[:, -1],
          "fp16 / TF32 inputs": seq_matmul(keep_bits(a, 10), keep_bits(b, 10)),
          "bf16 inputs": seq_matmul(keep_bits(a, 7), keep_bits(b, 7))})
    x = rng.standard_normal((8, 1 << 20)).astype(np.float32)
    case("sum of 1M", torch.from_numpy(x).sum(1).numpy(), x.astype(np.float64).sum(1),
         {"honest: sequential fp32": np.cumsum(x, axis=1, dtype=np.float32)[:, -1],
          "honest: 256-blocks + atomics": np.cumsum(x.reshape(8, -1, 256).sum(2, dtype=np.float32), axis=1,
                                                    dtype=np.float32)[:, -1],
          "fp16 inputs": np.cumsum(keep_bits(x, 10).reshape(8, -1, 256).sum(2, dtype=np.float32), axis=1,
                                   dtype=np.float32)[:, -1],
          "fp16 accumulation": np.cumsum(x.astype(np.float16), axis=1, dtype=np.float16)[:, -1]})
    x = rng.standard_normal((64, 32768)).astype(np.float32)
    case("cumsum of 32768", torch.cumsum(torch.from_numpy(x), 1).numpy(), np.cumsum(x.astype(np.float64), 1),
         {"honest: sequential fp32": np.cumsum(x, 1, dtype=np.float32),
          "fp16 inputs": np.cumsum(keep_bits(x, 10), 1, dtype=np.float32),
          "bf16 inputs": np.cumsum(keep_bits(x, 7), 1, dtype=np.float32)})
    x = rng.standard_normal(1 << 20).astype(np.float32) * 3
    t = torch.from_numpy(x)
    tanh_gelu = 0.5 * x * (1 + np.tanh(np.float32(0.7978845608) * (x + np.float32(0.044715) * x ** 3)))
    case("GELU (erf)", torch.nn.functional.gelu(t).numpy(), torch.nn.functional.gelu(t.double()).numpy(),
         {"tanh approximation": tanh_gelu, "fp16": torch.nn.functional.gelu(t.half()).float().numpy(),
          "bf16": torch.nn.functional.gelu(t.bfloat16()).float().numpy()})
    x = rng.standard_normal((64, 16384)).astype(np.float32) * 2
    t = torch.from_numpy(x)
    e = np.exp(x - x.max(1, keepdims=True))
    case("softmax of 16384", torch.softmax(t, 1).numpy(), torch.softmax(t.double(), 1).numpy(),
         {"honest: sequential sum": e / np.cumsum(e, 1, dtype=np.float32)[:, -1:],
          "fp16": torch.softmax(t.half().float(), 1).half().float().numpy()})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    lines = [f"# Tolerance calibration (cpu: {platform.processor() or platform.machine()}, torch {torch.__version__})",
             "", "Command: `python bench/bench_tolerance.py`. Budget: max(64 x ref_err, 8e-5 x S, 1e-6).", "",
             "| computation | implementation | ref_err | S | max error | / ref_err | / S | verdict |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, cname, e_ref, s, err, ratio, rel, verdict in rows():
        lines.append(f"| {name} | {cname} | {e_ref:.3g} | {s:.3g} | {err:.3g} | {ratio:.1f} | {rel:.3g} | {verdict} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
