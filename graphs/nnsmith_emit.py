"""Emit a concrete NNSmith graph (GraphIR) as a standalone, readable KernelBench file.

The emitted file imports torch only (never nnsmith, never a pickle): ``class Model`` whose
``forward`` is the graph's ops written as plain torch calls, one line per op, in the graph's
order; constants become buffers and op weights (Linear, Conv, PReLU, BatchNorm) become
parameters and buffers initialised deterministically in ``__init__`` from a seeded
``torch.Generator``; ``get_inputs`` returns ``torch.randn`` tensors of the graph's input shapes
and dtypes; ``get_init_inputs`` returns ``[]``.

Each op's emitted call mirrors nnsmith's own torch materialisation
(nnsmith/materialize/torch/forward.py) so the two compute the same thing; graphs/nnsmith_tasks.py
checks that numerically for every emitted task. BatchNorm is emitted in inference form
(``F.batch_norm(..., training=False)``) so the task does not depend on train/eval mode, and the
check runs nnsmith's model in eval mode to match.

Only one graph output is emitted (KernelBench tasks return one tensor): :func:`emit_graph` takes
the output variable to keep and drops the ops and inputs it does not depend on.

Guarantees: same graph, output and weight seed -> byte-identical source. Not guaranteed: every
nnsmith op is supported; :class:`UnsupportedOp` names the ones that are not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# nnsmith DType name -> torch dtype spelled in source
TORCH_DTYPES = {"float16": "torch.float16", "float32": "torch.float32", "float64": "torch.float64",
                "bfloat16": "torch.bfloat16"}

INTERP_MODES = {"NearestInterp": "nearest", "LinearInterp": "linear", "BilinearInterp": "bilinear",
                "BicubicInterp": "bicubic", "TrilinearInterp": "trilinear"}

UNARY_CALLS = {
    "ReLU": "torch.relu({0})", "GELU": "F.gelu({0})", "LeakyReLU": "F.leaky_relu({0}, 0.01)",
    "Sigmoid": "torch.sigmoid({0})", "Sin": "torch.sin({0})", "Cos": "torch.cos({0})",
    "Asin": "torch.asin({0})", "Acos": "torch.acos({0})", "Tan": "torch.tan({0})",
    "Atan": "torch.atan({0})", "Abs": "torch.abs({0})", "Ceil": "torch.ceil({0})",
    "Floor": "torch.floor({0})", "Round": "torch.round({0})", "Sqrt": "torch.sqrt({0})",
    "Log2": "torch.log2({0})", "Neg": "torch.neg({0})", "Flatten": "{0}.flatten()",
}

BINARY_CALLS = {
    "Add": "torch.add({0}, {1})", "Sub": "torch.sub({0}, {1})", "Mul": "torch.mul({0}, {1})",
    "Div": "torch.div({0}, {1})", "Max": "torch.maximum({0}, {1})", "Min": "torch.minimum({0}, {1})",
    "Pow": "torch.pow({0}, {1})", "PTMatMul": "torch.matmul({0}, {1})", "MatMul": "torch.matmul({0}, {1})",
}

REDUCE_METHODS = {"Squeeze": "squeeze", "TorchReduceSum": "sum", "ReduceSum": "sum", "ReduceMin": "min",
                  "ReduceMax": "max", "ReduceMean": "mean"}


class UnsupportedOp(Exception):
    """An op the emitter has no torch spelling for; the message is the op's nnsmith name."""


@dataclass
class Weight:
    """One parameter or buffer of the emitted Model and where it goes in nnsmith's SymbolNet.

    ``target`` is the attribute of nnsmith's per-op module that holds the same tensor ("data"
    for a Constant, "weight", "bias", "running_mean", "running_var")."""
    name: str
    shape: list[int]
    dtype: str
    init: str  # source expression using `g` (the seeded generator)
    kind: str  # "parameter" or "buffer"
    var: str  # the nnsmith variable of the op that owns it
    target: str


@dataclass
class EmittedGraph:
    code: str
    inputs: list[str]  # nnsmith input variables, in forward-argument order
    output: str  # the nnsmith variable returned by forward
    weights: list[Weight] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)  # nnsmith op names, in emitted order


def _shape(t) -> list[int]:
    return [int(d) for d in t.shape]


def _dtype(t) -> str:
    return str(t.dtype)


def _pyname(var: str) -> str:
    # nnsmith variables are "v<inst>_<ret>"; every op here has a single return value
    inst, _, ret = var[1:].partition("_")
    return f"v{inst}" if ret == "0" else f"v{inst}_{ret}"


def _tuple(xs) -> str:
    xs = [int(x) for x in xs]
    return "(" + ", ".join(map(str, xs)) + ("," if len(xs) == 1 else "") + ")"


def _randn(shape, dtype: str, scale: float = 1.0, shift: float = 0.0) -> str:
    expr = f"torch.randn({_tuple(shape)}, generator=g)"
    if scale != 1.0:
        expr += f" * {scale:g}"
    if shift:
        expr = f"{expr} + {shift:g}"
    return f"({expr}).to({TORCH_DTYPES[dtype]})" if dtype != "float32" else expr


def _slice_expr(op, x: str) -> str:
    # same arithmetic as nnsmith's torch forward for Slice
    reg = op.extra_attrs["region"]
    dim_s = int(op.input_like[0].shape[op.extra_attrs["axis"]])
    start, end, step = int(op.start), int(op.end), int(op.step)
    if reg in ("left", "mid"):
        start -= dim_s
    if reg == "left" and end < dim_s and end != op.INT_MAX:
        end -= dim_s
    end_s = "" if end == op.INT_MAX else str(end)
    step_s = "" if step == 1 else f":{step}"
    parts = [":" if i != op.extra_attrs["axis"] else f"{start}:{end_s}{step_s}"
             for i in range(op.extra_attrs["ndims"])]
    return f"{x}[{', '.join(parts)}]"


def _emit_op(op, args: list[str], var: str, weights: list[Weight]) -> str:
    """The torch expression computing ``op`` on the Python names ``args``; appends its weights."""
    kind = type(op).__name__
    out_dtype = _dtype(op.output_like[0]) if op.output_like else "float32"
    p = _pyname(var)

    def weight(suffix, shape, init, target, kind_="parameter"):
        w = Weight(f"{p}_{suffix}", [int(s) for s in shape], out_dtype, init, kind_, var, target)
        weights.append(w)
        return f"self.{w.name}"

    if kind in UNARY_CALLS:
        return UNARY_CALLS[kind].format(*args)
    if kind in BINARY_CALLS:
        if kind == "Div" and not out_dtype.startswith(("float", "bfloat")):
            return f"torch.div({args[0]}, {args[1]}, rounding_mode='floor')"
        return BINARY_CALLS[kind].format(*args)
    if kind == "Constant":
        return weight("const", _shape(op.abs_tensor), _randn(_shape(op.abs_tensor), out_dtype), "data", "buffer")
    if kind == "Clip":
        lo, hi = (-1.5, 1.5) if out_dtype.startswith("float") else (-1, 1)
        return f"torch.clamp({args[0]}, {lo}, {hi})"
    if kind == "PReLU":
        w = weight("weight", [1], f"torch.full((1,), 0.25, dtype={TORCH_DTYPES[out_dtype]})", "weight")
        return f"F.prelu({args[0]}, {w})"
    if kind == "Softmax":
        return f"torch.softmax({args[0]}, dim={int(op.dim)})"
    if kind in ("MaxPool2d", "AvgPool2d"):
        fn = "F.max_pool2d" if kind == "MaxPool2d" else "F.avg_pool2d"
        return (f"{fn}({args[0]}, kernel_size={_tuple([op.kernel_h_size, op.kernel_w_size])}, "
                f"stride={int(op.stride)}, padding={int(op.padding)})")
    if kind == "Slice":
        return _slice_expr(op, args[0])
    if kind in ("ConstPad", "ReplicatePad", "ReflectPad"):
        pads = [int(x) for x in op.padding_list]
        if op.extra_attrs["type"] == "constant":
            return f"F.pad({args[0]}, {pads}, mode='constant', value=0.5)"
        return f"F.pad({args[0]}, {pads}, mode='{op.extra_attrs['type']}')"
    if kind.startswith("ExpandLast"):
        return f"{args[0]}.expand{_tuple(_shape(op.output_like[0]))}"
    if kind == "BatchNorm2d":
        n = int(op.nfeat)
        w = weight("weight", [n], _randn([n], out_dtype, 0.1, 1.0), "weight")
        b = weight("bias", [n], _randn([n], out_dtype, 0.1), "bias")
        m = weight("running_mean", [n], _randn([n], out_dtype, 0.1), "running_mean", "buffer")
        v = weight("running_var", [n], f"(torch.rand(({n},), generator=g) + 0.5).to({TORCH_DTYPES[out_dtype]})",
                   "running_var", "buffer")
        return f"F.batch_norm({args[0]}, {m}, {v}, {w}, {b}, training=False, eps=1e-05)"
    if kind in ("Conv1d", "NCHWConv2d"):
        cin, cout = int(op.in_channels), int(op.out_channels)
        ks = [int(op.kernel_size)] if kind == "Conv1d" else [int(op.kernel_h_size), int(op.kernel_w_size)]
        fan_in = cin * (ks[0] if len(ks) == 1 else ks[0] * ks[1])
        w = weight("weight", [cout, cin, *ks], _randn([cout, cin, *ks], out_dtype, round(fan_in ** -0.5, 6)), "weight")
        b = weight("bias", [cout], _randn([cout], out_dtype, 0.1), "bias")
        if kind == "Conv1d":
            return (f"F.conv1d({args[0]}, {w}, {b}, stride={int(op.stride)}, padding={int(op.padding)}, "
                    f"dilation={int(op.dilation)})")
        return (f"F.conv2d({args[0]}, {w}, {b}, stride={int(op.stride)}, padding={int(op.padding)}, "
                f"dilation={_tuple([op.dilation_h, op.dilation_w])})")
    if kind == "Linear":
        i, o = int(op.ifeat), int(op.ofeat)
        w = weight("weight", [o, i], _randn([o, i], out_dtype, round(i ** -0.5, 6)), "weight")
        b = weight("bias", [o], _randn([o], out_dtype, 0.1), "bias")
        return f"F.linear({args[0]}, {w}, {b})"
    if kind == "Reshape":
        return f"{args[0]}.reshape{_tuple(op.target_shape)}"
    if kind == "Transpose":
        d0, d1 = op._init_swap_dims(op.input_like[0].shape)
        return f"{args[0]}.transpose({int(d0)}, {int(d1)})"
    if kind in INTERP_MODES:
        return f"F.interpolate({args[0]}, size={_tuple(op.size)}, mode='{INTERP_MODES[kind]}')"
    if kind in REDUCE_METHODS:
        method = REDUCE_METHODS[kind]
        d = op.extra_attrs.get("reduce_dim")
        suffix = ".values" if method in ("min", "max") and d is not None else ""
        return f"{args[0]}.{method}({'' if d is None else int(d)}){suffix}"
    if kind in ("Tril", "Triu"):
        return f"{args[0]}.{kind.lower()}({int(op.diagonal)})"
    if kind.startswith("Concat"):
        return f"torch.cat([{', '.join(args)}], dim={int(op.extra_attrs['axis'])})"
    if kind.startswith("Cast"):
        to = str(op.extra_attrs["to"])
        if to not in TORCH_DTYPES:
            raise UnsupportedOp(f"{op.name()} to {to}")
        return f"{args[0]}.to({TORCH_DTYPES[to]})"
    raise UnsupportedOp(op.name())


def ancestors(ir, var: str) -> set[str]:
    """Every variable ``var`` depends on, itself included."""
    producer = {rv: inst for inst in ir.insts for rv in inst.retvals()}
    seen, stack = set(), [var]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        stack.extend(producer[v].iexpr.args)
    return seen


def emit_graph(ir, output: str, *, weight_seed: int, doc: str = "") -> EmittedGraph:
    """KernelBench source computing nnsmith variable ``output`` of the concrete graph ``ir``.

    Ops and inputs ``output`` does not depend on are left out. Raises UnsupportedOp for an op
    with no torch spelling here. The source is deterministic in (ir, output, weight_seed)."""
    keep = ancestors(ir, output)
    insts = [inst for inst in ir.insts if inst.retvals()[0] in keep]
    inputs = [inst.retvals()[0] for inst in insts if type(inst.iexpr.op).__name__ == "Input"]
    names = {v: f"x{i}" for i, v in enumerate(inputs)}
    weights: list[Weight] = []
    body, ops = [], []
    for inst in insts:
        op = inst.iexpr.op
        if type(op).__name__ == "Input":
            continue
        if inst.n_output() != 1:
            raise UnsupportedOp(f"{op.name()} with {inst.n_output()} outputs")
        var = inst.retvals()[0]
        expr = _emit_op(op, [names[a] for a in inst.iexpr.args], var, weights)
        names[var] = _pyname(var)
        ops.append(op.name())
        if type(op).__name__ != "Constant":
            shape = _shape(op.output_like[0])
            body.append(f"        {names[var]} = {expr}  # {op.name()} -> {shape}")
        else:
            body.append(f"        {names[var]} = {expr}")
    body.append(f"        return {names[output]}")

    init = ["    def __init__(self):", "        super().__init__()"]
    if weights:
        init.append(f"        g = torch.Generator().manual_seed({int(weight_seed)})")
    for w in weights:
        if w.kind == "parameter":
            init.append(f"        self.{w.name} = nn.Parameter({w.init})")
        else:
            init.append(f"        self.register_buffer({w.name!r}, {w.init})")

    in_tensors = {inst.retvals()[0]: op_t for inst in insts
                  for op_t in [inst.iexpr.op.output_like[0]] if inst.retvals()[0] in names and
                  type(inst.iexpr.op).__name__ == "Input"}
    get_inputs = []
    for v in inputs:
        t = in_tensors[v]
        dt = _dtype(t)
        extra = "" if dt == "float32" else f", dtype={TORCH_DTYPES[dt]}"
        get_inputs.append(f"torch.randn({_tuple(_shape(t))}{extra})")
    args = ", ".join(names[v] for v in inputs)
    lines = [
        "import torch",
        "import torch.nn as nn",
        "import torch.nn.functional as F",
        "",
        "",
        "class Model(nn.Module):",
        f'    """{doc or "A graph generated by NNSmith, written as plain torch calls."}"""',
        "",
        *init,
        "",
        f"    def forward(self, {args}):",
        *body,
        "",
        "",
        "def get_inputs():",
        f"    return [{', '.join(get_inputs)}]",
        "",
        "",
        "def get_init_inputs():",
        "    return []",
        "",
    ]
    return EmittedGraph(code="\n".join(lines), inputs=inputs, output=output, weights=weights, ops=ops)
