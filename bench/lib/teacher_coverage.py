"""The teacher's coverage set: one reference program per op family the lowering teacher (synth/teacher/writer.py)
writes kernels for: every seed task of data/seed_tasks, named by its family, and an extra task for each family the
seed set lacks (odd sizes, broadcasts over three dims, reductions over middle dims, bmm, a linear layer in 3-D).

    family_tasks() -> [(family, name, reference code)]

tests/test_teacher.py compiles the cpu candidates of all of them; bench/bench_teacher_gpu.py verifies the cuda ones.
"""

from __future__ import annotations

from pathlib import Path

SEED_DIR = Path(__file__).resolve().parents[2] / "data" / "seed_tasks"

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
    for f in sorted(SEED_DIR.glob("*/*.py"), key=str):
        out.append((SEED_FAMILIES.get(f.stem, f.stem), f.stem, f.read_text()))
    out += [(fam, fam, code) for fam, code in FAMILY_TASKS.items()]
    return out
