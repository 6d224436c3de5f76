"""A seeded procedural generator of small KernelBench-style task programs, in families a small model can learn to
translate into kernels (bench/lib/teacher_compact.py writes the answers), in four tiers of difficulty so a benchmark can
train on the easy ones and measure, or reinforce, on harder ones.

Families (``FamilyTask.kind``):

    ew          a chain of elementwise ops over one input x, or two inputs x and y, any shape of 1-3 dims;
                returns the chain's result
    sum, mean, amax
                a chain of elementwise ops over a 2-D input (or two), then a reduction over the last dim:
                a 1-D tensor of rows
    softmax     a chain of elementwise ops over a 2-D input (or two), then softmax over the last dim
    logsumexp   a chain, then ``torch.logsumexp`` over the last dim (a reduction of two passes)
    center, rmsnorm, layernorm
                a chain, then a row normalisation that broadcasts a per-row statistic back over the row
                (``x - mean(x, keepdim)``, ``x * rsqrt(mean(x*x, keepdim) + 1e-5)``, both in turn)

Tiers (``FamilyTask.tier``; :func:`random_task` draws one tier, :func:`generate_mix` a mix):

    1  ew with 1-4 ops; sum / mean / amax / softmax after 0-2 ops (the original families, same programs)
    2  longer chains: ew with 5-8 ops, row kinds after 3-4 ops; a second input may be a 1-D row vector
       broadcast over the rows (``y`` of shape ``(cols,)``, ``y_row``)
    3  the tier-1 row kinds, 0-3 ops before and a ``post`` chain of 1-3 elementwise ops on their result
       (``x = torch.sum(x, dim=-1)`` then ``x = torch.sigmoid(x)`` ...): reductions fused with elementwise work
       after them, level 2-3 fusions
    4  logsumexp and the three normalisations, 0-3 ops before and 0-3 after (after a normalisation the post chain
       may use y, broadcast or not: ``x = x * y`` is a layernorm's weight)

Each elementwise op is one line of ``forward`` (``x = torch.relu(x)``, ``x = x * 0.37``,
``x = torch.maximum(x, y)`` ...) with its constants written literally; ``OPS`` maps each op to that torch line and
to the C expression line the compact teacher emits, so the task -> answer mapping is one line per op.

Guarantees: :func:`generate_tasks` / :func:`generate_mix` are deterministic for their arguments, return distinct
programs (distinct source text), and every program imports only torch, defines ``Model`` with ``forward``,
``get_inputs`` and ``get_init_inputs``, computes in float32 and keeps its values finite (at most one ``exp`` per
program, bounded constants, an ``exp`` after a row op only where its values are bounded). With ``check``, a program
whose output is not finite or does not depend on its inputs (above tier 1: barely does) is dropped, since it has no
correct kernel. Tier-1 programs are the same text as before tiers existed (a corpus made then keeps its task ids);
in a mix each tier is drawn with its own seed, so changing one tier's count leaves the others' programs unchanged.
What it does not promise: that the op chains are meaningful models, that two programs with different text differ in
anything but shape, or that a higher tier is harder for a given model (that is measured, by the training benchmark,
per tier).
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
# the last line of forward for the tier-1 row families (a 2-D x)
ROW_OPS = {"sum": "torch.sum(x, dim=-1)", "mean": "torch.mean(x, dim=-1)", "amax": "torch.amax(x, dim=-1)",
           "softmax": "torch.softmax(x, dim=-1)"}
KINDS = ("ew",) + tuple(ROW_OPS)
# tier 4: row ops as the forward lines they take (after the pre chain, before the post chain)
ROW_LINES = {
    "logsumexp": ("x = torch.logsumexp(x, dim=-1)",),
    "center": ("x = x - torch.mean(x, dim=-1, keepdim=True)",),
    "rmsnorm": ("x = x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-5)",),
    "layernorm": ("x = x - torch.mean(x, dim=-1, keepdim=True)",
                  "x = x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-5)"),
}
HARD_KINDS = tuple(ROW_LINES)
ALL_KINDS = KINDS + HARD_KINDS
REDUCING = ("sum", "mean", "amax", "logsumexp")  # output is one value per row
TIERS = (1, 2, 3, 4)
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
    kind: str  # one of ALL_KINDS
    ops: tuple[Op, ...]  # the elementwise chain before the row op (all of it for ew)
    two_inputs: bool
    shape: tuple[int, ...]
    meta: dict = field(default_factory=dict, compare=False, hash=False)
    post: tuple[Op, ...] = ()  # elementwise ops after the row op (row kinds only)
    y_row: bool = False  # y is a 1-D vector of x's last dim, broadcast over the rows
    tier: int = 1

    @property
    def signature(self) -> str:
        """The op combination without constants or shape (e.g. 'ew:relu,mul_c,add_y',
        'rmsnorm:exp|mul_y+row' for a post chain and a broadcast y)."""
        sig = f"{self.kind}:{','.join(o.name for o in self.ops)}"
        if self.post:
            sig += "|" + ",".join(o.name for o in self.post)
        return sig + ("+row" if self.y_row else "")

    @property
    def difficulty(self) -> float:
        """A rough size of the program: ops before and after, the row op (2 for the tier-4 ones), and a
        broadcast input. Used for the corpus rows' ``difficulty``, not for any guarantee."""
        row = 0 if self.kind == "ew" else 2 if self.kind in HARD_KINDS else 1
        return float(len(self.ops) + len(self.post) + row + (1 if self.y_row else 0))


def task_code(t: FamilyTask) -> str:
    """The reference program of a task (KernelBench layout)."""
    args = "x, y" if t.two_inputs else "x"
    body = "".join(f"        {o.torch_line()}\n" for o in t.ops)
    if t.kind == "ew":
        ret = "x"
    elif t.kind in ROW_OPS and not t.post:
        ret = ROW_OPS[t.kind]  # tier 1: the original text
    else:
        lines = ROW_LINES.get(t.kind) or (f"x = {ROW_OPS[t.kind]}",)
        body += "".join(f"        {ln}\n" for ln in lines) + "".join(f"        {o.torch_line()}\n" for o in t.post)
        ret = "x"
    shape = ", ".join(str(s) for s in t.shape)
    inputs = f"torch.randn({shape})"
    if t.two_inputs:
        inputs += f", torch.randn({t.shape[-1]})" if t.y_row else f", torch.randn({shape})"
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


def _chain(rng: random.Random, n: int, two: bool, kind: str = "ew", *, no_exp: bool = False,
           need_y: bool = True) -> tuple[Op, ...]:
    """n ops; with two inputs (and ``need_y``) at least one op uses y; at most one exp (none with
    ``no_exp``). A row max never follows a clamp or a negation (the max of a long row would
    saturate to a constant)."""
    names: list[str] = []
    for _ in range(n):
        pool = UNARY + BINARY if two else UNARY
        pool = [p for p in pool if not (p == "exp" and (no_exp or "exp" in names))]
        if kind == "amax":
            pool = [p for p in pool if p not in ("clamp", "neg")]
        names.append(rng.choice(pool))
    if two and need_y and n and not any(OPS[k][2] for k in names):
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


def random_task(rng: random.Random, *, max_numel: int = 1 << 20, row_share: float = 0.35, tier: int = 1) -> FamilyTask:
    """One task of ``tier`` drawn from ``rng`` (tiers in the module docstring). Tier 1: an elementwise
    chain, or (``row_share`` of the time) a row family; tier 2 likewise with longer chains; tiers 3
    and 4 are row families only. Tier 1 draws exactly what it drew before tiers existed."""
    if tier == 1:
        kind = rng.choice(tuple(ROW_OPS)) if rng.random() < row_share else "ew"
        two = rng.random() < 0.35
        n = rng.randint(1, 4) if kind == "ew" else rng.randint(0 if not two else 1, 2)
        return FamilyTask(kind=kind, ops=_chain(rng, n, two, kind) if n else (), two_inputs=two,
                          shape=_shape(rng, kind, max_numel))
    if tier not in TIERS:
        raise ValueError(f"random_task: tier must be one of {TIERS}, got {tier}")
    if tier == 2:
        kind = rng.choice(tuple(ROW_OPS)) if rng.random() < row_share else "ew"
    else:
        kind = rng.choice(tuple(ROW_OPS) if tier == 3 else HARD_KINDS)
    two = rng.random() < 0.4
    shape = _shape(rng, kind, max_numel)
    y_row = two and len(shape) >= 2 and rng.random() < 0.5
    if tier == 2:
        n_pre, n_post = (rng.randint(5, 8) if kind == "ew" else rng.randint(3, 4)), 0
    elif tier == 3:
        n_pre, n_post = rng.randint(1 if two else 0, 3), rng.randint(1, 3)
    else:
        n_pre, n_post = rng.randint(1 if two else 0, 3), rng.randint(0, 3)
    pre = _chain(rng, n_pre, two, kind)
    post: tuple[Op, ...] = ()
    if n_post:
        # after a reduction the value is per row and y is not: unary ops only; after a shape-keeping row op
        # y may come back (x = x * y: a normalisation's weight). One exp per program, and only after a row op
        # whose values are bounded (softmax, a normalisation): the exp of a row sum or max can overflow
        y_after = two and kind not in REDUCING
        no_exp = any(o.name == "exp" for o in pre) or kind not in ("softmax", "rmsnorm", "layernorm")
        post = _chain(rng, n_post, y_after, "post", no_exp=no_exp, need_y=False)
    return FamilyTask(kind=kind, ops=pre, two_inputs=two, shape=shape, post=post, y_row=y_row, tier=tier)


def generate_tasks(n: int, seed: int = 0, *, max_numel: int = 1 << 20, row_share: float = 0.35,
                   check: bool = True, tier: int = 1) -> list[FamilyTask]:
    """``n`` tasks of one tier with distinct programs, deterministic for all arguments.

    With ``check`` every program is run (:func:`degenerate`) and dropped when its output is not
    finite or does not depend on its inputs (``relu(-relu(x))``), and above tier 1 when it barely
    does: a verifier rightly rejects a kernel whose output is the same for different inputs, so
    such a task has no correct answer, and a near-constant one rewards a constant kernel."""
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
        t = random_task(rng, max_numel=max_numel, row_share=row_share, tier=tier)
        code = task_code(t)
        if code in seen:
            continue
        seen.add(code)
        # tiers 2-4 also drop near-constant outputs (tier 1 keeps its original rule, so its programs stay)
        if check and degenerate(code, atol=0.0 if tier == 1 else 1e-3):
            continue
        out.append(t)
    return out


def parse_shares(spec: str) -> dict[int, float]:
    """'1=0.4,2=0.2,3=0.2,4=0.2' -> {1: 0.4, 2: 0.2, 3: 0.2, 4: 0.2} (tiers not named get 0).
    Raises ValueError for an unknown tier, a negative share or no positive share."""
    out: dict[int, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        k, _, v = part.partition("=")
        tier, share = int(k), float(v)
        if tier not in TIERS or share < 0:
            raise ValueError(f"tier share {part!r}: tiers are {TIERS}, shares >= 0")
        out[tier] = share
    if not any(v > 0 for v in out.values()):
        raise ValueError(f"tier shares {spec!r}: no tier has a positive share")
    return out


def generate_mix(n: int, seed: int = 0, shares: dict[int, float] | None = None, *, max_numel: int = 1 << 20,
                 check: bool = True) -> list[FamilyTask]:
    """``n`` distinct programs over the tiers, ``round(n * share)`` of each (the rounding remainder goes to
    the tier with the largest share); each tier drawn by :func:`generate_tasks` with its own seed, so
    changing one tier's count leaves the others' programs unchanged. Deterministic for its arguments."""
    shares = shares or {1: 1.0}
    total = sum(shares.values())
    counts = {k: int(round(n * v / total)) for k, v in sorted(shares.items())}
    counts[max(shares, key=lambda k: (shares[k], -k))] += n - sum(counts.values())
    out: list[FamilyTask] = []
    seen: set[str] = set()
    for tier, c in counts.items():
        if c <= 0:
            continue
        for t in generate_tasks(c, seed * 10 + tier if tier > 1 else seed, max_numel=max_numel, check=check, tier=tier):
            code = task_code(t)
            if code not in seen:  # tiers draw different structures; a shared text would be a tier-1/2 overlap
                seen.add(code)
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


def degenerate(code: str, atol: float = 0.0) -> str:
    """Why a task program is unusable ("" when it is fine): its output on two input draws is not
    finite, or is identical (it does not depend on the inputs), or with ``atol`` > 0 within ``atol``
    (absolute and relative) everywhere: a saturated output (``tanh`` of a row sum, softmax of a
    long flat row) that a constant kernel would match."""
    a, _ = run_task(code, seed=1)
    b, _ = run_task(code, seed=2)
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return "output not finite"
    if torch.equal(a, b):
        return "output does not depend on the inputs"
    if atol > 0 and torch.allclose(a, b, atol=atol, rtol=atol):
        return "output barely depends on the inputs"
    return ""
