"""A seeded procedural generator of small KernelBench-style task programs, in families a small model
can learn to translate into kernels (synth/teacher/compact.py writes the answers).

Families (``FamilyTask.kind``):

    ew        a chain of 1-4 elementwise ops over one input x, or two same-shape inputs x and y,
              any shape of 1-3 dims; returns the chain's result
    sum, mean, amax
              a chain of 0-2 elementwise ops over a 2-D input (or two), then a reduction over the
              last dim: returns a 1-D tensor of rows
    softmax   a chain of 0-2 elementwise ops over a 2-D input (or two), then softmax over the last dim

Each elementwise op is one line of ``forward`` (``x = torch.relu(x)``, ``x = x * 0.37``,
``x = torch.maximum(x, y)`` ...) with its constants written literally; ``OPS`` maps each op to that
torch line and to the C expression line the compact teacher emits, so the task -> answer mapping
is one line per op.

Guarantees: :func:`generate_tasks` is deterministic for a seed, returns distinct programs (distinct
source text), and every program imports only torch, defines ``Model`` with ``forward``,
``get_inputs`` and ``get_init_inputs``, computes in float32 and keeps its values finite (at most
one ``exp`` per chain, bounded constants). What it does not promise: that the op chains are
meaningful models, or that two programs with different text differ in anything but shape.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

# op name -> (torch line, C line, uses y, number of constants). {a}/{b} are constants, written by
# fmt_const in torch lines and fmt_const + "f" in C lines.
OPS: dict[str, tuple[str, str, bool, int]] = {
    "relu": ("x = torch.relu(x)", "v = fmaxf(v, 0.0f);", False, 0),
    "sigmoid": ("x = torch.sigmoid(x)", "v = 1.0f / (1.0f + expf(-v));", False, 0),
    "tanh": ("x = torch.tanh(x)", "v = tanhf(v);", False, 0),
    "exp": ("x = torch.exp(x)", "v = expf(v);", False, 0),
    "abs": ("x = torch.abs(x)", "v = fabsf(v);", False, 0),
    "neg": ("x = -x", "v = -v;", False, 0),
    "gelu": ("x = torch.nn.functional.gelu(x)", "v = 0.5f * v * (1.0f + erff(v * 0.70710678f));", False, 0),
    "gelu_tanh": ("x = torch.nn.functional.gelu(x, approximate='tanh')",
                  "v = 0.5f * v * (1.0f + tanhf(0.79788456f * (v + 0.044715f * v * v * v)));", False, 0),
    "silu": ("x = torch.nn.functional.silu(x)", "v = v / (1.0f + expf(-v));", False, 0),
    "mul_c": ("x = x * {a}", "v = v * {a}f;", False, 1),
    "add_c": ("x = x + {a}", "v = v + {a}f;", False, 1),
    "sub_c": ("x = x - {a}", "v = v - {a}f;", False, 1),
    "clamp": ("x = torch.clamp(x, min={a}, max={b})", "v = fminf(fmaxf(v, {a}f), {b}f);", False, 2),
    "mul_y": ("x = x * y", "v = v * w;", True, 0),
    "add_y": ("x = x + y", "v = v + w;", True, 0),
    "sub_y": ("x = x - y", "v = v - w;", True, 0),
    "max_y": ("x = torch.maximum(x, y)", "v = fmaxf(v, w);", True, 0),
    "min_y": ("x = torch.minimum(x, y)", "v = fminf(v, w);", True, 0),
}
UNARY = [k for k, v in OPS.items() if not v[2]]
BINARY = [k for k, v in OPS.items() if v[2]]
# the last line of forward for the row families (a 2-D x)
ROW_OPS = {"sum": "torch.sum(x, dim=-1)", "mean": "torch.mean(x, dim=-1)", "amax": "torch.amax(x, dim=-1)",
           "softmax": "torch.softmax(x, dim=-1)"}
KINDS = ("ew",) + tuple(ROW_OPS)
SIZES = (16, 32, 48, 64, 96, 100, 128, 192, 200, 256, 384, 500, 512, 768, 1000, 1024, 2048)


def fmt_const(c: float) -> str:
    """A constant as a literal valid in Python and (with an 'f' suffix) in C: always has a '.'."""
    s = f"{c:.2f}".rstrip("0")
    return s + "0" if s.endswith(".") else s


@dataclass(frozen=True)
class Op:
    name: str
    consts: tuple[str, ...] = ()  # formatted literals (fmt_const)

    def torch_line(self) -> str:
        return OPS[self.name][0].format(**dict(zip("ab", self.consts)))

    def c_line(self) -> str:
        return OPS[self.name][1].format(**dict(zip("ab", self.consts)))


@dataclass(frozen=True)
class FamilyTask:
    kind: str  # one of KINDS
    ops: tuple[Op, ...]
    two_inputs: bool
    shape: tuple[int, ...]
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def signature(self) -> str:
        """The op combination without constants or shape (e.g. 'ew:relu,mul_c,add_y')."""
        return f"{self.kind}:{','.join(o.name for o in self.ops)}"


def task_code(t: FamilyTask) -> str:
    """The reference program of a task (KernelBench layout)."""
    args = "x, y" if t.two_inputs else "x"
    body = "".join(f"        {o.torch_line()}\n" for o in t.ops)
    ret = "x" if t.kind == "ew" else ROW_OPS[t.kind]
    shape = ", ".join(str(s) for s in t.shape)
    inputs = ", ".join([f"torch.randn({shape})"] * (2 if t.two_inputs else 1))
    return ("import torch\nimport torch.nn as nn\n\n\n"
            "class Model(nn.Module):\n"
            "    def __init__(self):\n        super().__init__()\n\n"
            f"    def forward(self, {args}):\n{body}        return {ret}\n\n\n"
            f"def get_inputs():\n    return [{inputs}]\n\n\n"
            "def get_init_inputs():\n    return []\n")


def _const(rng: random.Random, name: str) -> tuple[str, ...]:
    if name == "mul_c":
        return (fmt_const(rng.uniform(0.1, 3.0)),)
    if name in ("add_c", "sub_c"):
        return (fmt_const(rng.uniform(0.05, 2.0)),)
    if name == "clamp":
        return (fmt_const(-rng.uniform(0.1, 1.5)), fmt_const(rng.uniform(0.1, 1.5)))
    return ()


def _chain(rng: random.Random, n: int, two: bool, kind: str = "ew") -> tuple[Op, ...]:
    """n ops; with two inputs at least one op uses y; at most one exp. A row max never follows a
    clamp or a negation (the max of a long row would saturate to a constant)."""
    names: list[str] = []
    for _ in range(n):
        pool = UNARY + BINARY if two else UNARY
        pool = [p for p in pool if not (p == "exp" and "exp" in names)]
        if kind == "amax":
            pool = [p for p in pool if p not in ("clamp", "neg")]
        names.append(rng.choice(pool))
    if two and not any(OPS[k][2] for k in names):
        names[rng.randrange(n)] = rng.choice(BINARY)
    return tuple(Op(k, _const(rng, k)) for k in names)


def _shape(rng: random.Random, kind: str, max_numel: int) -> tuple[int, ...]:
    while True:
        nd = 2 if kind != "ew" else rng.choice((1, 2, 2, 3))
        shape = tuple(rng.choice(SIZES) for _ in range(nd))
        n = 1
        for s in shape:
            n *= s
        if 64 <= n <= max_numel:
            return shape


def random_task(rng: random.Random, *, max_numel: int = 1 << 20, row_share: float = 0.35) -> FamilyTask:
    """One task drawn from ``rng``: an elementwise chain, or (``row_share`` of the time) a row family."""
    kind = rng.choice(tuple(ROW_OPS)) if rng.random() < row_share else "ew"
    two = rng.random() < 0.35
    n = rng.randint(1, 4) if kind == "ew" else rng.randint(0 if not two else 1, 2)
    return FamilyTask(kind=kind, ops=_chain(rng, n, two, kind) if n else (), two_inputs=two,
                      shape=_shape(rng, kind, max_numel))


def generate_tasks(n: int, seed: int = 0, *, max_numel: int = 1 << 20, row_share: float = 0.35,
                   check: bool = True) -> list[FamilyTask]:
    """``n`` tasks with distinct programs, deterministic for (n, seed, max_numel, row_share, check).

    With ``check`` every program is run (:func:`degenerate`) and dropped when its output is not
    finite or does not depend on its inputs (``relu(-relu(x))``): a verifier rightly rejects a
    kernel whose output is the same for different inputs, so such a task has no correct answer."""
    if n < 0:
        raise ValueError(f"generate_tasks: n must be >= 0, got {n}")
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[FamilyTask] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 50 * n + 1000:
            raise RuntimeError(f"generate_tasks: could not find {n} distinct programs")
        t = random_task(rng, max_numel=max_numel, row_share=row_share)
        code = task_code(t)
        if code in seen:
            continue
        seen.add(code)
        if check and degenerate(code):
            continue
        out.append(t)
    return out


def run_task(code: str, seed: int = 0):
    """Execute a task program and return (model output, inputs); the check that it is a valid task."""
    ns: dict = {}
    exec(compile(code, "<task>", "exec"), ns)  # noqa: S102 - our own generated programs
    torch.manual_seed(seed)
    model = ns["Model"](*ns["get_init_inputs"]())
    inputs = ns["get_inputs"]()
    with torch.no_grad():
        return model(*inputs), inputs


def degenerate(code: str) -> str:
    """Why a task program is unusable ("" when it is fine): its output on two input draws is not
    finite, or is identical (it does not depend on the inputs)."""
    a, _ = run_task(code, seed=1)
    b, _ = run_task(code, seed=2)
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return "output not finite"
    if torch.equal(a, b):
        return "output does not depend on the inputs"
    return ""
