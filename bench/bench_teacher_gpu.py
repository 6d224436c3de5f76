"""The teacher's cuda candidates, one task per op family, through the cuda verifier.

    PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 python bench/bench_teacher_gpu.py [--out bench/results]

Builds the teacher's (bug-free) cuda candidate for every seed task in data/seed_tasks and for the
extra family tasks below (families the seed set lacks), verifies them all in one
``verifier.api.verify_batch`` call with backend cuda, prints a table (family, task, status,
max error, runtime, eager and torch.compile speedups) and writes it to
``<out>/teacher_cuda_<device>.md`` with the device named. Needs only torch and this repo's
verifier/ and synth/ teacher modules (no prefect, duckdb or nnsmith), so it runs on a bare GPU box.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

_HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"


def _task(init: str, forward: str, inputs: str, init_inputs: str = "[]", extra_init: str = "") -> str:
    return (_HEAD + f"class Model(nn.Module):\n    def __init__(self{init}):\n        super().__init__()\n{extra_init}"
            f"\n    def forward(self, {forward}\n\n\ndef get_inputs():\n    return {inputs}\n\n\n"
            f"def get_init_inputs():\n    return {init_inputs}\n")


# family -> reference program, for the families data/seed_tasks does not cover.
FAMILY_TASKS = {
    "unary_silu": _task("", "x):\n        return F.silu(x)", "[torch.randn(333, 1000)]"),
    "unary_leaky_relu_elu": _task("", "x):\n        return F.elu(F.leaky_relu(x, 0.2)) + F.hardtanh(x, -0.5, 0.5)",
                                  "[torch.randn(64, 129, 65)]"),
    "binary_broadcast_3d": _task("", "a, b, c):\n        return torch.maximum(a * b, c) - a / (b.abs() + 1.0)",
                                 "[torch.randn(16, 1, 512), torch.randn(1, 64, 512), torch.randn(512)]"),
    "reduce_amax_dim0": _task("", "x):\n        return torch.amax(x, dim=0)", "[torch.randn(300, 1000)]"),
    "reduce_sum_middle_dims": _task("", "x):\n        return x.sum(dim=(1, 2), keepdim=True)",
                                    "[torch.randn(32, 63, 65, 17)]"),
    "reduce_mean_all": _task("", "x):\n        return x.mean()", "[torch.randn(1000, 1000)]"),
    "log_softmax_dim1_of_3d": _task("", "x):\n        return torch.log_softmax(x, dim=1)", "[torch.randn(8, 300, 128)]"),
    "softmax_odd_rows": _task("", "x):\n        return torch.softmax(x, dim=-1)", "[torch.randn(1000, 1000)]"),
    "layernorm_3d_odd": _task("", "x):\n        return self.ln(x)", "[torch.randn(16, 50, 777)]", "[]",
                              "        self.ln = nn.LayerNorm(777)\n"),
    "rmsnorm_weighted": _task("", "x):\n        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.w",
                              "[torch.randn(512, 1000)]", "[]", "        self.w = nn.Parameter(torch.ones(1000))\n"),
    "matmul_odd_sizes": _task("", "a, b):\n        return a @ b", "[torch.randn(333, 257), torch.randn(257, 129)]"),
    "bmm": _task("", "a, b):\n        return torch.bmm(a, b)", "[torch.randn(8, 128, 96), torch.randn(8, 96, 160)]"),
    "linear_3d_gelu": _task("", "x):\n        return F.gelu(self.fc(x))", "[torch.randn(4, 64, 256)]", "[]",
                            "        self.fc = nn.Linear(256, 384)\n"),
    "transpose_add": _task("", "x, y):\n        return x.transpose(0, 1) + y", "[torch.randn(256, 512), torch.randn(512, 256)]"),
    "fused_chain_nnsmith_like": _task("", "x, y):\n        z = torch.sigmoid(x) * torch.tanh(y)\n"
                                      "        return torch.sum(z * z + 1.0, dim=-1)",
                                      "[torch.randn(128, 2048), torch.randn(128, 2048)]"),
}

# seed file stem -> family name
SEED_FAMILIES = {"1_ReLU": "activation_relu", "2_Add_Broadcast": "binary_broadcast", "3_GELU": "activation_gelu",
                 "4_Sigmoid": "activation_sigmoid", "5_Sum_Reduction_Dim": "reduce_sum_dim",
                 "6_Mean_Reduction": "reduce_mean", "7_Softmax": "softmax", "8_Matmul": "matmul_tiled",
                 "9_LayerNorm": "layernorm", "10_RMSNorm": "rmsnorm", "11_Matmul_Bias_ReLU": "linear_bias_relu",
                 "12_Scale_Add_Tanh": "fused_elementwise", "13_Softmax_Then_Sum": "fused_softmax_sum"}


def family_tasks() -> list[tuple[str, str, str]]:
    """(family, name, reference code) for every seed task and every extra family task."""
    out = []
    for f in sorted(glob.glob(str(ROOT / "data" / "seed_tasks" / "*" / "*.py"))):
        stem = Path(f).stem
        out.append((SEED_FAMILIES.get(stem, stem), stem, Path(f).read_text()))
    out += [(fam, fam, code) for fam, code in FAMILY_TASKS.items()]
    return out


def _fmt(v, spec=".3g"):
    return "-" if v is None else format(v, spec)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--only", default="", help="regex over family names")
    ap.add_argument("--exec-workers", type=int, default=2, help="execution children at a time")
    ap.add_argument("--timing-trials", type=int, default=10)
    args = ap.parse_args(argv)

    import torch

    from kernelmill.schema import Candidate, Task
    from synth.teacher.writer import TeacherDeclined, write_candidate
    from verifier.api import VerifyConfig, verify_batch

    items, rows, declined = [], [], []
    for fam, name, code in family_tasks():
        if args.only and not re.search(args.only, fam):
            continue
        task = Task.from_code(code, name=name, source="teacher")
        try:
            cand_code = write_candidate(code, args.backend)
        except TeacherDeclined as e:
            declined.append((fam, str(e)))
            continue
        cand = Candidate(candidate_id=Candidate.make_id(task.task_id, args.backend, cand_code), task_id=task.task_id,
                         backend=args.backend, generator="teacher", code=cand_code)
        items.append((task, cand))
        rows.append((fam, name))
    t0 = time.time()
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    slug = re.sub(r"[^A-Za-z0-9]+", "_", device).strip("_")
    partial = Path(os.environ.get("OUT") or args.out, f"teacher_{args.backend}_{slug}.partial.tsv")
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_text("")

    def on_verdict(i, v):  # a run cut short by a time limit still leaves every verdict it reached
        with open(partial, "a") as f:
            f.write("\t".join(map(str, (rows[i][0], v.status, v.stage_reached, v.max_abs_err, v.runtime_us,
                                         v.eager_us, v.speedup_eager, v.speedup_compile,
                                         " ".join(v.feedback.split())[:300]))) + "\n")

    cfg = VerifyConfig(exec_workers=args.exec_workers, timing_trials=args.timing_trials)
    verdicts = verify_batch(items, config=cfg, on_verdict=on_verdict)
    wall = time.time() - t0
    lines = [f"# Teacher {args.backend} candidates through the verifier", "",
             f"device: {device}; torch {torch.__version__}; {len(items)} tasks, one per op family; "
             f"verify_batch wall time {wall:.0f} s; exec_workers {cfg.exec_workers}, timing_trials "
             f"{cfg.timing_trials}, correctness trials {cfg.trials}", "",
             "| family | task | status | stage | max abs err | runtime us | eager us | speedup eager | speedup compile |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (fam, name), v in zip(rows, verdicts):
        lines.append(f"| {fam} | {name} | {v.status} | {v.stage_reached} | {_fmt(v.max_abs_err)} | "
                     f"{_fmt(v.runtime_us, '.1f')} | {_fmt(v.eager_us, '.1f')} | {_fmt(v.speedup_eager, '.2f')} | "
                     f"{_fmt(v.speedup_compile, '.2f')} |")
    passed = [v for v in verdicts if v.correct]
    sp_e = [v.speedup_eager for v in passed if v.speedup_eager]
    sp_c = [v.speedup_compile for v in passed if v.speedup_compile]
    lines += ["", f"passing: {len(passed)}/{len(verdicts)} ({len(passed) / max(len(verdicts), 1):.0%})",
              f"median speedup vs eager (passing): {statistics.median(sp_e):.2f}" if sp_e else "median speedup vs eager: -",
              f"median speedup vs torch.compile (passing): {statistics.median(sp_c):.2f}" if sp_c else
              "median speedup vs torch.compile: -",
              f"declined: {declined or 'none'}"]
    fails = [(r, v) for r, v in zip(rows, verdicts) if not v.correct]
    if fails:
        lines += ["", "## Failures", ""]
        for (fam, name), v in fails:
            lines += [f"- {fam}: {v.status}: " + " ".join(v.feedback.split())[:600]]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"teacher_{args.backend}_{slug}.md").write_text(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], f"teacher_{args.backend}_{slug}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
