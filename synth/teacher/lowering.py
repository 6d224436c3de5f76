"""The teacher's front end: trace a KernelBench reference to aten ops and lower it to a kernel plan.

``lower_reference(code)`` runs the reference's ``get_init_inputs()`` / ``get_inputs()``, builds ``Model`` and traces
``forward`` with ``make_fx`` on fake tensors (no real compute), parameters and buffers lifted to graph inputs so each
one is known by its state-dict name. The aten graph is then lowered to a :class:`Program`, a list of :class:`Step`
(one native kernel each, except the metadata-only ``view`` steps):

    pointwise   a fused run of elementwise ops with broadcasting (one expression DAG per kernel)
    reduce      sum / mean / amax / amin over a run of adjacent dims, keepdim or not
    softmax     softmax or log_softmax along one dim
    layernorm   layer norm over the trailing dims, optional affine
    matmul      mm / addmm / bmm (linear layers arrive as t + addmm), alpha/beta, bias broadcast
    view        view / reshape / permute / transpose / unsqueeze / squeeze / expand / slice (metadata)

Fusion rule: an elementwise node is materialised only when the graph returns it or a non-elementwise node (or a
view) consumes it; otherwise it is inlined into every elementwise consumer. Broadcasting is transitive, so inlined
leaves are indexed directly against the fused kernel's output shape.

Guarantees: the plan's kernels are written with runtime sizes, so the same rank with other sizes computes correctly
(a view keeps its traced shape except the leading dim, which follows the runtime size; an unflatten takes its
leading dims from the graph input they came from). Not guaranteed: constants that came from ``__init__`` arguments
(eps, a scale) are baked in as traced; float32 only; a single tensor output. Anything else raises
:class:`Unsupported`, which the teacher turns into a decline.
"""

from __future__ import annotations

import ast
import inspect
import math
import operator
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

# torch is imported inside the functions that trace: the CLI imports this module (through the generate
# stage) and stays free of torch (about 2 s to import) until a stage runs the teacher.


class Unsupported(Exception):
    """The reference uses something the teacher cannot lower (the message says what)."""


@dataclass
class Step:
    kind: str  # pointwise | reduce | softmax | layernorm | matmul | view
    out: str
    args: dict = field(default_factory=dict)


@dataclass
class Program:
    forward_params: list[str]  # ModelNew.forward's parameter names (same as Model.forward)
    init_source: str  # ModelNew.__init__ (Model's __init__, re-homed)
    prelude_source: str  # imports and constants the __init__ may need
    arg_names: list[str]  # C++ wrapper parameters, in order
    arg_exprs: list[str]  # the Python expression passed for each (x, self.linear.weight)
    steps: list[Step]
    output: str
    shapes: dict[str, tuple]
    op_histogram: dict[str, int]
    input_shapes: list[tuple]

    def kernels(self) -> list[Step]:
        return [s for s in self.steps if s.kind != "view"]


# ---------------------------------------------------------------------------- elementwise table
# C expression templates; {0}, {1} are operands, other names come from the op's scalar arguments.

UNARY = {
    "relu": "fmaxf({0}, 0.0f)",
    "sigmoid": "(1.0f / (1.0f + expf(-({0}))))",
    "tanh": "tanhf({0})",
    "exp": "expf({0})",
    "log": "logf({0})",
    "log1p": "log1pf({0})",
    "expm1": "expm1f({0})",
    "sqrt": "sqrtf({0})",
    "rsqrt": "(1.0f / sqrtf({0}))",
    "abs": "fabsf({0})",
    "neg": "(-({0}))",
    "reciprocal": "(1.0f / ({0}))",
    "sin": "sinf({0})",
    "cos": "cosf({0})",
    "erf": "erff({0})",
    "floor": "floorf({0})",
    "ceil": "ceilf({0})",
    "square": "(({0}) * ({0}))",
    "silu": "(({0}) / (1.0f + expf(-({0}))))",
    "mish": "(({0}) * tanhf(log1pf(expf({0}))))",
    "hardsigmoid": "fminf(fmaxf(({0}) / 6.0f + 0.5f, 0.0f), 1.0f)",
    "hardswish": "(({0}) * fminf(fmaxf(({0}) + 3.0f, 0.0f), 6.0f) / 6.0f)",
    "relu6": "fminf(fmaxf({0}, 0.0f), 6.0f)",
    "selu": "(1.0507009873554805f * (({0}) > 0.0f ? ({0}) : 1.6732632423543772f * expm1f({0})))",
    "clone": "({0})",
    "_to_copy": "({0})",
}
BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
BINARY_FN = {"maximum": "fmaxf({0}, {1})", "minimum": "fminf({0}, {1})", "pow": "powf({0}, {1})",
             "atan2": "atan2f({0}, {1})"}
VIEW_OPS = {"view", "_unsafe_view", "reshape", "t", "transpose", "permute", "unsqueeze", "squeeze",
            "expand", "alias", "detach", "slice", "lift_fresh_copy", "flatten"}
REDUCE_OPS = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min", "max": "max", "min": "min"}


def c_float(v) -> str:
    v = float(v)
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    if math.isnan(v):
        return "NAN"
    return f"{v!r}f" if ("e" in repr(v) or "." in repr(v)) else f"{v!r}.0f"


def _op_name(target) -> tuple[str, str]:
    """('relu', 'default') for aten.relu.default; ('getitem', '') for operator.getitem."""
    if target is operator.getitem:
        return "getitem", ""
    s = str(target)
    if s.startswith("aten."):
        parts = s.split(".")
        return parts[1], parts[2] if len(parts) > 2 else "default"
    raise Unsupported(f"non-aten call {s}")


def _shape(node) -> tuple:
    val = node.meta.get("val")
    if val is None or not hasattr(val, "shape"):
        raise Unsupported(f"node {node.name} has no tensor value")
    import torch

    if val.dtype != torch.float32:
        raise Unsupported(f"dtype {val.dtype} (the teacher writes float32 kernels only)")
    return tuple(int(d) for d in val.shape)


# ---------------------------------------------------------------------------- tracing


def _init_source(code: str) -> tuple[str, str]:
    """Model.__init__ re-homed for ModelNew, and the module-level imports/constants it may use."""
    tree = ast.parse(code)
    prelude, init = [], None
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            prelude.append(ast.unparse(node))
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets) \
                and isinstance(node.value, (ast.Constant, ast.Tuple, ast.List, ast.BinOp, ast.UnaryOp)):
            prelude.append(ast.unparse(node))
        elif isinstance(node, ast.ClassDef) and node.name == "Model":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    init = item
    if init is None:
        init_src = "def __init__(self):\n    super().__init__()"
    else:
        # super(Model, self) would name the reference class; super() works in ModelNew too
        for n in ast.walk(init):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "super":
                n.args = []
        init_src = ast.unparse(init)
    return init_src, "\n".join(prelude)


def _param_expr(name: str) -> str:
    parts = name.split(".")
    if all(p.isidentifier() for p in parts):
        return "self." + name
    return f"self.get_parameter({name!r})"


@lru_cache(maxsize=256)
def lower_reference(code: str) -> Program:
    """Trace and lower one KernelBench reference program (cached by its text).

    Raises Unsupported for anything outside the teacher's op families, and ValueError when the
    reference itself does not run."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    ns: dict = {"__name__": "kernelmill_reference"}
    try:
        exec(compile(code, "<reference>", "exec", dont_inherit=True), ns)
        torch.manual_seed(0)
        init_inputs = list(ns["get_init_inputs"]())
        model = ns["Model"](*init_inputs).eval()
        inputs = list(ns["get_inputs"]())
    except Exception as e:  # a reference that does not run is bad input, not an unsupported op
        raise ValueError(f"reference does not run: {type(e).__name__}: {e}") from None
    if not all(isinstance(x, torch.Tensor) for x in inputs):
        raise Unsupported("non-tensor forward inputs")
    params = list(model.named_parameters()) + list(model.named_buffers())
    names = [n for n, _ in params]

    def fn(*args):
        state = dict(zip(names, args[: len(names)]))
        return torch.func.functional_call(model, state, tuple(args[len(names):]))

    with torch.no_grad():
        try:
            gm = make_fx(fn, tracing_mode="fake")(*[t for _, t in params], *inputs)
        except Exception as e:
            raise Unsupported(f"tracing failed: {type(e).__name__}: {str(e)[:200]}") from None

    sig = inspect.signature(ns["Model"].forward)
    fwd_params = [p for p in sig.parameters if p != "self"]
    if any(sig.parameters[p].kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
           for p in fwd_params):
        raise Unsupported("forward takes *args/**kwargs")
    if len(fwd_params) != len(inputs):
        raise Unsupported("forward's parameters do not match get_inputs()")
    init_src, prelude = _init_source(code)
    return _lower_graph(gm.graph, names, fwd_params, init_src, prelude, [tuple(x.shape) for x in inputs])


# ---------------------------------------------------------------------------- lowering


def _lower_graph(graph, param_names, fwd_params, init_src, prelude, input_shapes) -> Program:
    nodes = list(graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    outputs = [n for n in nodes if n.op == "output"]
    out_args = outputs[0].args[0]
    out_node = out_args[0] if isinstance(out_args, (tuple, list)) else out_args
    if isinstance(out_args, (tuple, list)) and len(out_args) != 1:
        raise Unsupported("more than one output")
    if not hasattr(out_node, "op"):
        raise Unsupported("output is not a tensor")

    hist: Counter = Counter()
    shapes: dict[str, tuple] = {}
    arg_names, arg_exprs = [], []
    for i, ph in enumerate(placeholders):
        shapes[ph.name] = _shape(ph)
        if i < len(param_names):
            if not ph.users:
                continue  # a parameter forward never reads
            arg_exprs.append(_param_expr(param_names[i]))
        else:
            arg_exprs.append(fwd_params[i - len(param_names)])
        arg_names.append(ph.name)

    def is_pointwise(n) -> bool:
        if n.op != "call_function":
            return False
        name, _ = _op_name(n.target)
        return name in UNARY or name in BINARY or name in BINARY_FN or name in (
            "gelu", "leaky_relu", "hardtanh", "clamp", "clamp_min", "clamp_max", "elu", "softplus", "rsub")

    def materialised(n) -> bool:
        return n is out_node or any(not is_pointwise(u) for u in n.users)

    steps: list[Step] = []
    for n in nodes:
        if n.op != "call_function":
            continue
        name, overload = _op_name(n.target)
        if name == "getitem":
            src = n.args[0]
            if src.op == "call_function" and _op_name(src.target)[0] == "native_layer_norm":
                if n.args[1] == 0:
                    shapes[n.name] = _shape(n)
                    steps.append(Step("view", n.name, {"op": "alias", "src": src.name}))
                elif n.users:
                    raise Unsupported("layer norm's mean/rstd outputs are used")
                continue
            raise Unsupported("getitem on a multi-output op")
        hist[name] += 1
        if name == "native_layer_norm":
            x, norm_shape, w, b, eps = n.args[:5]
            shapes[n.name] = tuple(_shape(x))
            steps.append(Step("layernorm", n.name, {"x": x.name, "w": w.name if w is not None else None,
                                                     "b": b.name if b is not None else None,
                                                     "norm_ndim": len(norm_shape), "eps": float(eps)}))
            continue
        shapes[n.name] = _shape(n)
        if is_pointwise(n):
            if materialised(n):
                steps.append(_fuse_pointwise(n, is_pointwise, materialised, shapes))
        elif name in VIEW_OPS:
            steps.append(_view_step(n, name, overload, shapes))
        elif name in REDUCE_OPS:
            steps.append(_reduce_step(n, name, shapes))
        elif name in ("_softmax", "_log_softmax", "softmax", "log_softmax"):
            x, dim = n.args[0], n.args[1]
            rank = len(shapes[x.name])
            steps.append(Step("softmax", n.name, {"x": x.name, "dim": dim % max(rank, 1),
                                                   "log": "log" in name}))
        elif name in ("mm", "addmm", "bmm", "baddbmm"):
            steps.append(_matmul_step(n, name, shapes))
        else:
            raise Unsupported(f"aten.{name}.{overload}")
    if out_node.op == "placeholder":
        raise Unsupported("the output is an input")
    return Program(forward_params=fwd_params, init_source=init_src, prelude_source=prelude,
                   arg_names=arg_names, arg_exprs=arg_exprs, steps=steps, output=out_node.name,
                   shapes=shapes, op_histogram=dict(hist), input_shapes=input_shapes)


def _fuse_pointwise(root, is_pointwise, materialised, shapes) -> Step:
    """One kernel computing ``root`` with every non-materialised elementwise ancestor inlined."""
    leaves: list[str] = []
    body: list[str] = []
    done: dict[str, str] = {}

    def operand(a) -> str:
        if hasattr(a, "op"):
            if a.name in done:
                return done[a.name]
            if is_pointwise(a) and not materialised(a):
                return visit(a)  # inline: recompute it here rather than round-trip memory
            if a.name not in leaves:
                leaves.append(a.name)
            return f"L{leaves.index(a.name)}"
        if isinstance(a, bool):
            return "1.0f" if a else "0.0f"
        if isinstance(a, (int, float)):
            return c_float(a)
        raise Unsupported(f"operand {a!r}")

    def visit(n) -> str:
        if n.name in done:
            return done[n.name]
        name, overload = _op_name(n.target)
        ops = [operand(a) for a in n.args]
        kw = n.kwargs
        if name in UNARY:
            if name == "_to_copy" and kw.get("dtype") not in (None,) and str(kw.get("dtype")) != "torch.float32":
                raise Unsupported("dtype conversion")
            expr = UNARY[name].format(ops[0])
        elif name in BINARY:
            if kw.get("rounding_mode"):
                raise Unsupported("division rounding mode")
            b = ops[1]
            alpha = kw.get("alpha", n.args[2] if len(n.args) > 2 else 1)
            if alpha != 1:
                b = f"({c_float(alpha)} * {b})"
            expr = f"({ops[0]} {BINARY[name]} {b})"
        elif name == "rsub":
            alpha = kw.get("alpha", 1)
            expr = f"({ops[1]} - {c_float(alpha)} * {ops[0]})"
        elif name in BINARY_FN:
            if name == "pow" and not hasattr(n.args[1], "op") and float(n.args[1]) == 2.0:
                expr = f"({ops[0]} * {ops[0]})"
            else:
                expr = BINARY_FN[name].format(ops[0], ops[1])
        elif name == "gelu":
            x = ops[0]
            if kw.get("approximate", n.args[1] if len(n.args) > 1 else "none") == "tanh":
                expr = f"(0.5f * {x} * (1.0f + tanhf(0.7978845608028654f * ({x} + 0.044715f * {x} * {x} * {x}))))"
            else:
                expr = f"(0.5f * {x} * (1.0f + erff({x} * 0.7071067811865476f)))"
        elif name == "leaky_relu":
            slope = n.args[1] if len(n.args) > 1 else kw.get("negative_slope", 0.01)
            expr = f"({ops[0]} > 0.0f ? {ops[0]} : {c_float(slope)} * {ops[0]})"
        elif name in ("hardtanh", "clamp", "clamp_min", "clamp_max"):
            if name == "hardtanh":
                lo, hi = (list(n.args[1:3]) + [-1.0, 1.0][len(n.args) - 1:])[:2]
            elif name == "clamp":
                lo = n.args[1] if len(n.args) > 1 else kw.get("min")
                hi = n.args[2] if len(n.args) > 2 else kw.get("max")
            else:
                lo, hi = (n.args[1], None) if name == "clamp_min" else (None, n.args[1])
            if hasattr(lo, "op") or hasattr(hi, "op"):
                raise Unsupported("clamp with tensor bounds")
            expr = ops[0]
            if lo is not None:
                expr = f"fmaxf({expr}, {c_float(lo)})"
            if hi is not None:
                expr = f"fminf({expr}, {c_float(hi)})"
        elif name == "elu":
            alpha = n.args[1] if len(n.args) > 1 else 1.0
            scale = n.args[2] if len(n.args) > 2 else 1.0
            in_scale = n.args[3] if len(n.args) > 3 else 1.0
            x = ops[0]
            expr = (f"({c_float(scale)} * ({x} > 0.0f ? {x} : {c_float(alpha)} * "
                    f"expm1f({c_float(in_scale)} * {x})))")
        elif name == "softplus":
            beta = float(n.args[1]) if len(n.args) > 1 else 1.0
            thr = float(n.args[2]) if len(n.args) > 2 else 20.0
            x = ops[0]
            expr = (f"({c_float(beta)} * {x} > {c_float(thr)} ? {x} : "
                    f"log1pf(expf({c_float(beta)} * {x})) / {c_float(beta)})")
        else:
            raise Unsupported(f"aten.{name}.{overload}")
        var = f"t{len(body)}"
        body.append(f"float {var} = {expr};")
        done[n.name] = var
        return var

    result = visit(root)
    if not leaves:
        raise Unsupported("an elementwise kernel with no tensor input")
    return Step("pointwise", root.name, {"leaves": leaves, "body": body, "result": result,
                                          "rank": len(shapes[root.name])})


def _view_step(n, name, overload, shapes) -> Step:
    src = n.args[0]
    rank = len(shapes[src.name])
    out_shape = shapes[n.name]
    if name in ("alias", "detach", "lift_fresh_copy"):
        return Step("view", n.name, {"op": "alias", "src": src.name})
    if name in ("view", "_unsafe_view", "reshape", "flatten"):
        shape = list(out_shape)
        if shape and len(shapes[src.name]) > 0:
            shape[0] = -1  # the leading (batch) dim follows the runtime size
        if len(out_shape) > len(shapes[src.name]):
            # an unflatten (linear on 3-D input: view -> mm -> view back): take the leading dims at
            # runtime from the graph input they came from
            for name, shp in shapes.items():
                if name.startswith("arg") and len(shp) >= len(out_shape) and \
                        tuple(shp[:len(out_shape) - 1]) == tuple(out_shape[:-1]):
                    shape = [f"v_{name}.sz[{d}]" for d in range(len(out_shape) - 1)] + [out_shape[-1]]
                    break
        return Step("view", n.name, {"op": "view", "src": src.name, "shape": shape})
    if name == "t":
        perm = [1, 0] if rank == 2 else list(range(rank))
        return Step("view", n.name, {"op": "permute", "src": src.name, "perm": perm})
    if name == "transpose":
        d0, d1 = n.args[1] % rank, n.args[2] % rank
        perm = list(range(rank))
        perm[d0], perm[d1] = perm[d1], perm[d0]
        return Step("view", n.name, {"op": "permute", "src": src.name, "perm": perm})
    if name == "permute":
        return Step("view", n.name, {"op": "permute", "src": src.name, "perm": [d % rank for d in n.args[1]]})
    if name == "unsqueeze":
        return Step("view", n.name, {"op": "unsqueeze", "src": src.name, "dim": n.args[1] % (rank + 1)})
    if name == "squeeze":
        dims = n.args[1] if len(n.args) > 1 else [d for d, s in enumerate(shapes[src.name]) if s == 1]
        dims = [dims] if isinstance(dims, int) else list(dims)
        dims = sorted({d % rank for d in dims if shapes[src.name][d % rank] == 1}, reverse=True)
        return Step("view", n.name, {"op": "squeeze", "src": src.name, "dims": dims})
    if name == "expand":
        sizes = [int(s) for s in n.args[1]]
        return Step("view", n.name, {"op": "expand", "src": src.name, "shape": sizes})
    if name == "slice":
        dim = (n.args[1] if len(n.args) > 1 else 0) % rank
        start = n.args[2] if len(n.args) > 2 and n.args[2] is not None else 0
        end = n.args[3] if len(n.args) > 3 and n.args[3] is not None else 2**62
        step = n.args[4] if len(n.args) > 4 else 1
        return Step("view", n.name, {"op": "slice", "src": src.name, "dim": dim, "start": int(start),
                                     "end": int(min(end, 2**62)), "step": int(step)})
    raise Unsupported(f"aten.{name}.{overload}")


def _reduce_step(n, name, shapes) -> Step:
    x = n.args[0]
    rank = len(shapes[x.name])
    if name in ("max", "min") and len(n.args) > 1:
        raise Unsupported(f"aten.{name} with indices")
    dims = n.args[1] if len(n.args) > 1 and n.args[1] is not None else n.kwargs.get("dim")
    keepdim = bool(n.args[2]) if len(n.args) > 2 else bool(n.kwargs.get("keepdim", False))
    if n.kwargs.get("dtype") is not None:
        raise Unsupported("reduction with dtype")
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        dims = list(range(rank))
    dims = sorted({d % rank for d in ([dims] if isinstance(dims, int) else dims)}) if rank else []
    if dims and dims != list(range(dims[0], dims[-1] + 1)):
        raise Unsupported("reduction over non-adjacent dims")
    d0, d1 = (dims[0], dims[-1]) if dims else (0, -1)
    return Step("reduce", n.name, {"x": x.name, "op": REDUCE_OPS[name], "mean": name == "mean",
                                    "d0": d0, "d1": d1, "keepdim": keepdim, "rank": rank})


def _matmul_step(n, name, shapes) -> Step:
    if name == "mm":
        a, b, bias, beta, alpha = n.args[0], n.args[1], None, 1.0, 1.0
    elif name == "bmm":
        a, b, bias, beta, alpha = n.args[0], n.args[1], None, 1.0, 1.0
    else:
        bias, a, b = n.args[:3]
        beta = n.kwargs.get("beta", 1.0)
        alpha = n.kwargs.get("alpha", 1.0)
        if name == "baddbmm":
            raise Unsupported("aten.baddbmm")
    for t in (a, b):
        if len(shapes[t.name]) not in (2, 3):
            raise Unsupported("matmul operand rank")
    if bias is not None and len(shapes[bias.name]) > 2:
        raise Unsupported("addmm bias rank")
    return Step("matmul", n.name, {"a": a.name, "b": b.name, "bias": bias.name if bias is not None else None,
                                    "alpha": float(alpha), "beta": float(beta),
                                    "batched": name == "bmm",
                                    "m": shapes[n.name][-2], "n": shapes[n.name][-1],
                                    "k": shapes[a.name][-1]})
