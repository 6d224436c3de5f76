"""NNSmith graphs as KernelBench tasks: seeded generation, emission, numerical equivalence check.

For graph ``i`` of a run with seed ``S`` (the task is named ``nnsmith_s<S>_<i>``):
1. Generate. nnsmith's symbolic generator (``SymbolicGen``, symbolic initial placeholder) inserts up to
   ``max_nodes`` ops drawn from the op set, with seed ``graph_seed(S, i)``. The op set (``select_opset``) is every
   nnsmith torch op that has a signature entirely within ``dtypes`` (default float32) and is not a "limited domain"
   op (Sqrt, Log2, Pow, Asin, Acos: NaN-prone on randn inputs) unless ``include_ops`` names it, narrowed by
   ``include_ops`` / ``exclude_ops`` (names like ``core.ReLU`` or ``ReLU``).
2. Scale toward ``target_numel``. nnsmith's shapes are tiny by default. Every tensor is capped at
   ``4 * target_numel`` elements (nnsmith's own ``max_elem_per_tensor``), weights are capped (conv kernels <= 7,
   stride <= 4, dilation <= 2, Linear/Conv weights <= ``WEIGHT_CAP`` = 2^20 elements, via nnsmith's
   ``ACTIVATED_PATCH`` hook), and before the graph is made concrete the solver is asked for a solution where the
   placeholders hold at least ``target_numel / 4`` elements, trying in order (``_scale_toward``): (a) every
   placeholder of rank >= 1, each dim <= max(64, 4 * sqrt(target_numel)); (b) every placeholder of rank >= 1; (c)
   the first placeholder only; (d) nnsmith's own solution. Shapes are solved, never rescaled after the fact, so they
   always stay consistent.
3. Emit (graphs/nnsmith_emit.py) one graph output, the one with the most ops behind it (then the most elements,
   then the first), with the ops and inputs it depends on, as a standalone KernelBench file.
4. Check on two draws of ``get_inputs()``: the emitted Model and nnsmith's materialised model
   (``TorchModelCPU.from_gir``, eval mode) loaded with the same weights give the same output within a dtype
   tolerance; the output is floating point, finite, and changes when the inputs do.

Graphs failing a step are skipped and counted by reason (``NNSmithResult.skips``), with per-graph detail in
``NNSmithResult.skipped``.

Reproducibility: the same arguments give the same tasks (same code, same task_ids), in the same process or another
one: each graph gets a fresh z3 context, whose solutions otherwise depend on what it already holds. Generation stops
at a time limit as well as at ``max_nodes``; a graph that hit the time limit could differ between runs, so it is
skipped ("generation timed out"). The Python/NumPy/torch global random states are restored after each graph.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import types
import warnings
from dataclasses import dataclass, field

from graphs.nnsmith_emit import UnsupportedOp, ancestors, emit_graph
from kernelmill.errors import InputError
from kernelmill.schema import Origin, Task, content_hash
from kernelmill.settings import NnsmithSettings  # the library functions' keyword defaults are its defaults

# nnsmith, z3, numpy and torch are imported inside the functions that use them: the CLI imports this
# module (the nnsmith stage) and stays free of them (torch alone takes about 2 s; nnsmith warns on
# import) until the stage runs.

GEN_TIMEOUT_MS = 20_000
WEIGHT_CAP = 1 << 20
TOLERANCE = {"float32": 1e-4, "float64": 1e-7, "float16": 1e-2, "bfloat16": 1e-2}
DEFAULT_DTYPES = ["float32"]
RANK_CHOICES = [1, 2, 3, 4]  # rank of the first placeholder: no scalars, which cannot be scaled
MIN_SHARE_OF_TARGET = 1 / 16  # a task whose largest tensor is smaller than this share is skipped


@dataclass
class NNSmithResult:
    tasks: list[Task]
    skips: dict[str, int]  # reason -> count
    skipped: list[dict] = field(default_factory=list)  # {"index", "graph_seed", "reason", "detail"}
    settings: dict = field(default_factory=dict)

    def yield_table(self) -> str:
        """A printable table: graphs tried, emitted, and each skip reason with its count."""
        total = len(self.tasks) + sum(self.skips.values())
        rows = [("graphs generated", total), ("tasks emitted (equivalence check passed)", len(self.tasks))]
        rows += [(f"skipped: {r}", c) for r, c in sorted(self.skips.items(), key=lambda kv: (-kv[1], kv[0]))]
        rows.append(("yield", f"{len(self.tasks) / total:.0%}" if total else "n/a"))
        w = max(len(r[0]) for r in rows)
        return "\n".join(f"{k.ljust(w)}  {v}" for k, v in rows)


class GraphSkipped(Exception):
    def __init__(self, reason: str, detail: str = ""):
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


def graph_seed(seed: int, index: int) -> int:
    """The nnsmith seed of graph ``index`` of a run with ``seed`` (stable across versions)."""
    return int(content_hash("nnsmith", str(seed), str(index)), 16) % (2**31 - 1)


# ---------------------------------------------------------------------------- op set


def _all_torch_ops():
    from nnsmith.materialize import Model

    return Model.init("torch", backend_target="cpu").operators()


def _matches(op, names: set[str]) -> bool:
    full = op.name().lower()
    return full in names or full.split(".", 1)[-1] in names


def select_opset(include_ops=None, exclude_ops=None, dtypes=None) -> tuple[list, dict]:
    """The nnsmith op classes to generate from, and their dtype signatures narrowed to ``dtypes``.

    Returns (ops, signatures) where signatures[op] = (in_dtypes, out_dtypes). Raises InputError
    for unknown op or dtype names, or when nothing is left."""
    from nnsmith.abstract.dtype import DType

    dtypes = list(dtypes or DEFAULT_DTYPES)
    known_dt = {"float16", "float32", "float64"}
    bad = [d for d in dtypes if d not in known_dt]
    if bad:
        raise InputError("--dtypes", f"unknown or unsupported dtype(s) {bad}; choose from {sorted(known_dt)}")
    allowed = {DType.from_str(d) for d in dtypes}
    every = _all_torch_ops()
    known = {o.name().lower() for o in every} | {o.name().lower().split(".", 1)[-1] for o in every}
    for flag, names in (("--include-ops", include_ops), ("--exclude-ops", exclude_ops)):
        unknown = [n for n in names or [] if n.lower() not in known]
        if unknown:
            raise InputError(flag, f"unknown op(s) {unknown}; known: {', '.join(sorted(o.name() for o in every))}")
    inc = {n.lower() for n in include_ops or []}
    exc = {n.lower() for n in exclude_ops or []}
    ops, sigs = [], {}
    for op in every:
        if inc and not _matches(op, inc):
            continue
        if exc and _matches(op, exc):
            continue
        if op.limit_domain and not (inc and _matches(op, inc)):
            continue  # NaN-prone on randn inputs unless asked for by name
        ins = [c for c in op.in_dtypes if set(c) <= allowed]
        outs = [c for c in op.out_dtypes if set(c) <= allowed]
        if ins and outs:
            ops.append(op)
            sigs[op] = (ins, outs)
    if not ops:
        raise InputError("op selection", f"no nnsmith op left with include={include_ops} exclude={exclude_ops} "
                                         f"dtypes={dtypes}")
    return ops, sigs


@contextlib.contextmanager
def _patched_ops(sigs: dict):
    """Narrow dtype signatures and add size caps on weights, restoring nnsmith's globals after."""
    from nnsmith.abstract import extension
    from nnsmith.abstract.arith import nnsmith_le, nnsmith_mul

    def conv2d(op, _):
        return [nnsmith_le(nnsmith_mul(nnsmith_mul(op.in_channels, op.out_channels),
                                       nnsmith_mul(op.kernel_h_size, op.kernel_w_size)), WEIGHT_CAP),
                nnsmith_le(op.kernel_h_size, 7), nnsmith_le(op.kernel_w_size, 7), nnsmith_le(op.stride, 4),
                nnsmith_le(op.dilation_h, 2), nnsmith_le(op.dilation_w, 2), nnsmith_le(op.padding, 3)]

    def conv1d(op, _):
        return [nnsmith_le(nnsmith_mul(nnsmith_mul(op.in_channels, op.out_channels), op.kernel_size), WEIGHT_CAP),
                nnsmith_le(op.kernel_size, 7), nnsmith_le(op.stride, 4), nnsmith_le(op.dilation, 2),
                nnsmith_le(op.padding, 3)]

    def linear(op, _):
        return [nnsmith_le(nnsmith_mul(op.ifeat, op.ofeat), WEIGHT_CAP)]

    def pool(op, _):
        return [nnsmith_le(op.kernel_h_size, 7), nnsmith_le(op.kernel_w_size, 7), nnsmith_le(op.stride, 4)]

    patches = {"core.NCHWConv2d": conv2d, "core.Conv1d": conv1d, "torch.Linear": linear,
               "core.MaxPool2d": pool, "core.AvgPool2d": pool}
    saved_sigs = {op: (op.in_dtypes, op.out_dtypes) for op in sigs}
    saved_patch = {k: list(v) for k, v in extension.ACTIVATED_PATCH.items()}
    try:
        for op, (ins, outs) in sigs.items():
            op.in_dtypes, op.out_dtypes = ins, outs
        for name, fn in patches.items():
            extension.ACTIVATED_PATCH.setdefault(name, []).append(fn)
        yield
    finally:
        for op, (ins, outs) in saved_sigs.items():
            op.in_dtypes, op.out_dtypes = ins, outs
        extension.ACTIVATED_PATCH.clear()
        extension.ACTIVATED_PATCH.update(saved_patch)


@contextlib.contextmanager
def _preserved_random_state():
    import numpy as np
    import torch

    py, npy, th = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    try:
        yield
    finally:
        random.setstate(py)
        np.random.set_state(npy)
        torch.random.set_rng_state(th)


# ---------------------------------------------------------------------------- generation


def _scale_toward(gen, target_numel: int) -> str:
    """Ask the solver for large placeholders (see module docstring); returns the tier that held."""
    import z3
    from nnsmith.abstract.arith import nnsmith_ge, nnsmith_le

    low = max(1, target_numel // 4)
    dim_cap = max(64, int(4 * math.sqrt(target_numel)))
    phs = [gen.ir.vars[v] for v in gen.placeholders]
    ranked = [t for t in phs if t.ndims >= 1]
    tiers = [
        ("balanced", [nnsmith_ge(t.nelement(), low) for t in ranked]
         + [nnsmith_le(d, dim_cap) for t in ranked for d in t.shape]),
        ("all_placeholders", [nnsmith_ge(t.nelement(), low) for t in ranked]),
        ("first_placeholder", [nnsmith_ge(phs[0].nelement(), low)] if phs and phs[0].ndims >= 1 else []),
    ]
    for name, cons in tiers:
        if cons and gen.check_sat(*cons) == z3.sat:
            return name
    gen.check_sat()
    return "unscaled"


def generate_graph(gseed: int, opset: list, *, max_nodes: int, target_numel: int, dtypes: list[str]):
    """One concrete nnsmith GraphIR and the scaling tier used. Raises GraphSkipped."""
    from nnsmith.abstract.dtype import DType
    import z3
    from nnsmith.graph_gen import SymbolicGen

    # z3's solutions depend on what its global context already holds (term ids, caches), so each
    # graph gets a fresh context: that is what makes a graph the same in any process, at any point.
    z3.z3._main_ctx = None
    try:
        gen = SymbolicGen(opset, gseed, symbolic_init=True, max_elem_per_tensor=4 * target_numel,
                          rank_choices=RANK_CHOICES, dtype_choices=[DType.from_str(d) for d in dtypes])
        gen.abstract_gen(max_node_size=max_nodes, max_gen_millisec=GEN_TIMEOUT_MS)
    except Exception as e:  # nnsmith raises assorted constraint/sanity errors
        raise GraphSkipped("nnsmith generation failed", f"{type(e).__name__}: {e}") from None
    if gen.num_op() < max_nodes:
        raise GraphSkipped("generation timed out", f"{gen.num_op()} of {max_nodes} ops in {GEN_TIMEOUT_MS} ms")
    tier = _scale_toward(gen, target_numel)
    return gen.make_concrete(), tier


def _pick_output(ir) -> str:
    """The graph output the task returns: the leaf with the most ops behind it, then the most elements."""
    leaves = ir.leaf_var()

    def key(v):
        n_ops = sum(1 for a in ancestors(ir, v) if type(_producer(ir, a).iexpr.op).__name__ not in ("Input", "Constant"))
        return (n_ops, math.prod(int(d) for d in ir.vars[v].shape), -leaves.index(v))

    return max(leaves, key=key)


def _producer(ir, var: str):
    inst_id = int(var[1:].split("_")[0])
    return ir.find_inst_by_id(inst_id)


# ---------------------------------------------------------------------------- equivalence


def _load_module(code: str, name: str):
    mod = types.ModuleType(name)
    exec(compile(code, f"<{name}>", "exec", dont_inherit=True), mod.__dict__)
    return mod


def _copy_weights(emitted_model, net, emitted) -> None:
    """Load the emitted Model's parameters and buffers into nnsmith's SymbolNet."""
    import torch

    by_var = {}
    for w in emitted.weights:
        by_var.setdefault(w.var, []).append(w)
    with torch.no_grad():
        for fn, _, outs, _ in net.instructions:
            for w in by_var.get(outs[0], []):
                dst = getattr(fn, w.target)
                src = getattr(emitted_model, w.name)
                if tuple(dst.shape) != tuple(src.shape):
                    raise GraphSkipped("weight shape mismatch", f"{w.name} {tuple(src.shape)} vs {tuple(dst.shape)}")
                dst.copy_(src)


def check_equivalence(ir, emitted, code: str, *, trials: int = 2, seed: int = 0) -> dict:
    """Run the emitted file and nnsmith's materialised model on the same inputs and weights.

    Returns {"max_abs_err", "max_rel_err", "trials"}. Raises GraphSkipped with the reason when
    the outputs differ, are not floating point, not finite, or do not depend on the inputs."""
    import torch
    from nnsmith.materialize.torch import TorchModelCPU

    mod = _load_module(code, "nnsmith_emitted")
    model = mod.Model(*mod.get_init_inputs())
    model.eval()
    net = TorchModelCPU.from_gir(ir).torch_model
    net.eval()
    _copy_weights(model, net, emitted)
    all_inputs = list(ir.input_var())
    out_index = list(net.output_map).index(emitted.output)
    outs, worst_abs, worst_rel = [], 0.0, 0.0
    gen = torch.Generator().manual_seed(seed)
    for trial in range(trials):
        torch.manual_seed(seed * 1000 + trial)
        xs = mod.get_inputs()
        feed = dict(zip(emitted.inputs, xs))
        for v in all_inputs:  # inputs the kept output does not use still feed nnsmith's model
            if v not in feed:
                t = ir.vars[v]
                feed[v] = torch.randn([int(d) for d in t.shape], generator=gen).to(t.dtype.torch())
        with torch.no_grad():
            got = model(*[x.clone() for x in xs])
            ref = net(*[feed[v] for v in all_inputs])[out_index]
        if not isinstance(got, torch.Tensor) or not got.is_floating_point():
            raise GraphSkipped("non-float output", str(getattr(got, "dtype", type(got))))
        if tuple(got.shape) != tuple(ref.shape) or got.dtype != ref.dtype:
            raise GraphSkipped("output shape/dtype differs from nnsmith",
                               f"{tuple(got.shape)} {got.dtype} vs {tuple(ref.shape)} {ref.dtype}")
        if not torch.isfinite(got).all():
            raise GraphSkipped("NaN/inf output", f"on randn inputs, trial {trial}")
        tol = TOLERANCE.get(str(got.dtype).removeprefix("torch."), 1e-4)
        diff = (got.double() - ref.double()).abs()
        abs_err = float(diff.max()) if diff.numel() else 0.0
        rel_err = float((diff / ref.double().abs().clamp_min(1.0)).max()) if diff.numel() else 0.0
        worst_abs, worst_rel = max(worst_abs, abs_err), max(worst_rel, rel_err)
        if not torch.allclose(got, ref, atol=tol, rtol=tol):
            raise GraphSkipped("differs from nnsmith's model", f"max abs err {abs_err:.3g}")
        outs.append(got)
    if trials >= 2 and all(torch.equal(outs[0], o) for o in outs[1:]):
        raise GraphSkipped("output does not depend on inputs", "same output on different inputs")
    return {"max_abs_err": worst_abs, "max_rel_err": worst_rel, "trials": trials}


# ---------------------------------------------------------------------------- tasks


def make_task(ir, *, seed: int, index: int, gseed: int, settings: dict, tier: str) -> Task:
    """Emit and check one graph; the Task (level 0: annotation sets it). Raises GraphSkipped."""
    output = _pick_output(ir)
    kept = ancestors(ir, output)
    if not any(type(i.iexpr.op).__name__ == "Input" for i in ir.insts if i.retvals()[0] in kept):
        raise GraphSkipped("output does not depend on inputs", "no graph input reaches the output")
    largest = max(math.prod(int(d) for d in ir.vars[v].shape) for v in kept)
    if largest < settings["target_numel"] * MIN_SHARE_OF_TARGET:
        raise GraphSkipped("too small for target_numel", f"largest tensor {largest} elements (scaling: {tier})")
    name = f"nnsmith_s{seed}_{index}"
    try:
        emitted = emit_graph(ir, output, weight_seed=gseed,
                             doc=f"NNSmith graph {name} (graph seed {gseed}), written as plain torch calls.")
    except UnsupportedOp as e:
        raise GraphSkipped("unsupported op", str(e)) from None
    try:
        check = check_equivalence(ir, emitted, emitted.code)
    except GraphSkipped:
        raise
    except Exception as e:  # the emitted file or nnsmith's model failed to run
        raise GraphSkipped("emitted model failed to run", f"{type(e).__name__}: {str(e)[:200]}") from None
    origin = Origin(seed=json.dumps({"seed": seed, "index": index, "graph_seed": gseed, **settings}, sort_keys=True),
                    class_name="Model", license="generated")
    return Task.from_code(emitted.code, name=name, source="nnsmith", level=0, origin=origin,
                          annotations={"nnsmith": {"ops": emitted.ops, "scaling": tier, "output": output,
                                                   "equivalence": check,
                                                   "graph": [str(i) for i in ir.insts]}})


def generate_nnsmith_tasks(n: int, seed: int, *, max_nodes: int = NnsmithSettings.max_nodes,
                           target_numel: int = NnsmithSettings.target_numel,
                           include_ops: list[str] | None = None, exclude_ops: list[str] | None = None,
                           dtypes: list[str] | None = None) -> NNSmithResult:
    """``n`` nnsmith graphs as checked KernelBench tasks, and the skip reasons of those that failed.

    Seeded: the same arguments give the same tasks (same task_ids). Every returned task passed
    the equivalence check against nnsmith's materialised model."""
    if n < 0:
        raise InputError("--n", f"must be >= 0, got {n}")
    if max_nodes < 1:
        raise InputError("--max-nodes", f"must be >= 1, got {max_nodes}")
    if target_numel < 1:
        raise InputError("--target-numel", f"must be >= 1, got {target_numel}")
    dtypes = list(dtypes or DEFAULT_DTYPES)
    settings = {"max_nodes": max_nodes, "target_numel": target_numel, "include_ops": sorted(include_ops or []),
                "exclude_ops": sorted(exclude_ops or []), "dtypes": dtypes}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nnsmith warns about pygraphviz on import
        opset, sigs = select_opset(include_ops, exclude_ops, dtypes)
    tasks, skipped, skips = [], [], {}
    seen_ids = set()
    with _patched_ops(sigs):
        for i in range(n):
            gseed = graph_seed(seed, i)
            try:
                with _preserved_random_state(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ir, tier = generate_graph(gseed, opset, max_nodes=max_nodes, target_numel=target_numel,
                                              dtypes=dtypes)
                    task = make_task(ir, seed=seed, index=i, gseed=gseed, settings=settings, tier=tier)
                if task.task_id in seen_ids:
                    raise GraphSkipped("duplicate of an earlier graph", task.task_id)
                seen_ids.add(task.task_id)
                tasks.append(task)
            except GraphSkipped as e:
                skips[e.reason] = skips.get(e.reason, 0) + 1
                skipped.append({"index": i, "graph_seed": gseed, "reason": e.reason, "detail": e.detail})
    return NNSmithResult(tasks=tasks, skips=skips, skipped=skipped, settings={"n": n, "seed": seed, **settings})
