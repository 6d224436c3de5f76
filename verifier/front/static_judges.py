"""The static scan's rules (verifier/front/static.py ``scan``), applied to a :class:`~verifier.front.static_program.Program`:
:func:`judge_node` for every node live code reaches (names, attributes, calls, ``@``), :func:`judge_program` for what
is judged over the whole program once (side streams, the uses of modules judged by use, and ModelNew as a whole:
verifier/front/static_model.py).
Each rule records a finding through ``Program.add``, which names its cheat code, line and construct."""

from __future__ import annotations

import ast

from verifier import cheats
from verifier.front.extract import _dotted
from verifier.front.static_kinds import OTHER, PATH, TENSOR
from verifier.front.static_literal import (
    _is_load_inline,
)
from verifier.front.static_model import judge_model_new
from verifier.front.static_program import Program, is_torch_compute
from verifier.front.static_rules import (
    _JUDGED_WHY,
    ATTR_CODES,
    CALL_CODES,
    FILE_READERS,
    NUMPY_FORWARD_OK,
    OS_ALLOWED,
    PATH_IO,
    REFLECTIVE_NAMES,
    SYS_ALLOWED,
    SYS_FRAMES,
    TENSOR_METHOD_ALLOWED,
    USE_JUDGED,
)
from verifier.front.static_scope import (
    GRAPHED_CALLABLES,
)
from verifier.front.static_streams import side_stream_hits
from verifier.front.static_tamper import (
    DUNDER_OK,
    _dunder,
    dunder_code,
    judge_call,
    judge_namespace,
    judge_store,
    private_torch,
)


def judge_node(prog: Program, node: ast.AST) -> None:
    """Every rule that judges one node of live code."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        prog.add(cheats.C01, node, "uses `@` (a PyTorch matmul)", True)
    elif isinstance(node, ast.Name):
        _judge_name(prog, node)
    elif isinstance(node, ast.Attribute):
        _judge_attribute(prog, node)
    elif isinstance(node, ast.Call):
        _judge_call(prog, node)
    if isinstance(node, (ast.Name, ast.Call)) and _storage_handed_on(prog, node):
        prog.add(cheats.C01, node, "reads a tensor's storage as a value (`bytes(s)`, `s[i]`, iterated or handed to "
                                   "a function: its bytes handled outside PyTorch's operators and your kernels)", True)


def _storage_handed_on(prog: Program, node: ast.AST) -> bool:
    """``node`` is a tensor's storage (``x.untyped_storage()``, a name bound to one) used otherwise than through its
    methods and attributes (judged in ``_judge_call``), bound to a name, compared, deleted or measured (``len``):
    indexed, iterated,
    converted (``bytes``, ``list``) or handed to a function, its bytes read where no rule sees them."""
    if isinstance(node, ast.Name):
        names = prog.__dict__.setdefault("_storage_names", {
            t.id for n in ast.walk(prog.tree) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.NamedExpr))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)
            and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Attribute)
            and n.value.func.attr in ("untyped_storage", "storage", "_typed_storage", "untyped")})
        if node.id not in names or not isinstance(node.ctx, ast.Load):
            return False
    elif not (isinstance(node.func, ast.Attribute) and node.func.attr in ("untyped_storage", "storage",
                                                                          "_typed_storage", "untyped")):
        return False
    parent = prog.parents.get(id(node))
    if isinstance(parent, (ast.Attribute, ast.Compare, ast.Delete, ast.Expr)) or \
            (isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and parent.value is node) or \
            (isinstance(parent, ast.Call) and _dotted(parent.func) in ("len", "id", "isinstance", "type")):
        return False
    return prog.kinds.storage(node)


# the operator module's spellings of `@`: on tensors a PyTorch matmul whoever calls them
MATMUL_FUNCTIONS = ("operator.matmul", "operator.imatmul", "operator.__matmul__", "operator.__imatmul__")


def compute_function(full: str) -> bool:
    """``full`` (a canonical dotted name) is a function that computes: the operator module's matmul, or a torch /
    torch.nn.functional name ``is_torch_compute`` counts that names a callable that is not a class (so no dtype,
    layout or type: ``torch.float32`` and ``torch.Tensor`` are values, not compute)."""
    if full in MATMUL_FUNCTIONS:
        return True
    if not is_torch_compute(full):
        return False
    import torch

    obj = torch
    for part in full.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return False
    return callable(obj) and not isinstance(obj, type)


def judge_program(prog: Program) -> None:
    """The rules judged once over the whole program, after every node."""
    _judge_side_streams(prog)
    _judge_module_uses(prog)
    if prog.model_new is not None:
        judge_model_new(prog)


def _judge_name(prog: Program, node: ast.Name) -> None:
    """A name: reflection used as a value, interpreter internals, the interpreter's state imported by name."""
    add, parents, aliases = prog.add, prog.parents, prog.aliases
    if node.id in REFLECTIVE_NAMES and not _direct_call(node, parents):
        add(REFLECTIVE_NAMES[node.id], node, f"uses `{node.id}` as a value (reflection)")
    elif node.id in ("getattr", "hasattr") and not _direct_call(node, parents):
        add(cheats.C11, node, f"uses `{node.id}` as a value (attribute access by computed name)")
    elif _dunder(node.id) and node.id not in DUNDER_OK:
        add(cheats.C11, node, f"uses `{node.id}` (interpreter internals)")
    elif isinstance(node.ctx, ast.Load) and \
            aliases.get(node.id, "").startswith("sys.") and aliases[node.id].split(".")[1] not in SYS_ALLOWED:
        full_ = aliases[node.id]  # `from sys import settrace`: the same reach as sys.settrace
        add(ATTR_CODES.get(full_) or (cheats.C15 if full_.split(".")[1] in SYS_FRAMES else cheats.C11), node,
            f"uses `{full_}` (the interpreter's state)")


def _judge_attribute(prog: Program, node: ast.Attribute) -> None:
    """An attribute: interpreter internals, the interpreter's and the operating system's state, namespaces and
    stores judged by whose object they touch (static_tamper), files through a path, torch internals; a PyTorch
    compute function handed on as a value."""
    add, parents, canonical, reflect, path_io = prog.add, prog.parents, prog.canonical, prog.reflect, prog.path_io
    parent = parents.get(id(node))
    compared = isinstance(parent, ast.Compare) or (isinstance(parent, (ast.Tuple, ast.List, ast.Set)) and
                                                   isinstance(parents.get(id(parent)), ast.Compare))
    if isinstance(node.ctx, ast.Load) and not isinstance(parent, ast.Attribute) and not compared and \
            not (isinstance(parent, ast.Call) and parent.func is node) and \
            compute_function(canonical(_dotted(node))):
        # `ext.tile(torch.matmul, a, b)`, `operator.matmul`: a function that computes, handed to code that calls it
        # where no call of it shows here (the extension's C++, on a thread of its own)
        # (an initialiser handed on, `functools.partial(nn.init.normal_, std=0.02)`, runs where construction runs)
        add(cheats.C01, node, f"hands `{_dotted(node)}` on as a value (PyTorch compute, run wherever it is called)",
            True, handed_on=not canonical(_dotted(node)).startswith("torch.nn.init."))
    recv = _dotted(node.value)
    if isinstance(node.ctx, ast.Load) and node.attr in ("forward", "__call__") and \
            not (isinstance(parent, ast.Call) and parent.func is node) and recv.startswith("self.") and \
            recv.count(".") == 1 and recv[5:] in prog.enclosing_class.get(id(node), prog.model_layers):
        # `self.impl = self.lin.forward` (then `self.impl(x)` in forward): the layer's PyTorch forward handed on
        prog.forward_fns.setdefault(id(node), "a layer's forward handed on")  # never construction's set-up
        add(cheats.C01, node, f"hands the nn submodule's `{recv}.{node.attr}` on as a value (its PyTorch forward, "
                              "run wherever it is called)", True, handed_on=True)
    if _dunder(node.attr) and node.attr not in DUNDER_OK and \
            node.attr != "__dict__" and not any(node.attr == k.split(".")[-1] for k in ATTR_CODES):
        add(dunder_code(node.attr), node, f"touches `{_dotted(node) or node.attr}` (interpreter internals)")
    elif canonical(_dotted(node)).startswith("sys.") and \
            canonical(_dotted(node)).split(".")[1] not in SYS_ALLOWED and \
            not any(canonical(_dotted(node)) == k or canonical(_dotted(node)).startswith(k + ".")
                    for k in ATTR_CODES) and \
            not isinstance(parents.get(id(node)), ast.Attribute):
        full_ = canonical(_dotted(node))
        add(cheats.C15 if full_.split(".")[1] in SYS_FRAMES else cheats.C11, node,
            f"touches `{full_}` (the interpreter's state)")
    elif canonical(_dotted(node)).startswith("os.") and \
            canonical(_dotted(node)).split(".")[1] not in OS_ALLOWED and \
            canonical(_dotted(node)) not in CALL_CODES and not isinstance(parents.get(id(node)), ast.Attribute):
        add(cheats.C17, node, f"touches `{canonical(_dotted(node))}` (the operating system)")
    elif node.attr == "__dict__":
        for hit in judge_namespace(node, node.value, parents, reflect):
            add(hit.code, node, hit.what, hit.torch)
    elif isinstance(node.ctx, (ast.Store, ast.Del)) and \
            judge_store(node, reflect) is not None:
        hit = judge_store(node, reflect)
        add(hit.code, node, hit.what)
    elif node.attr in PATH_IO and isinstance(node.ctx, ast.Load) and \
            path_io(node):
        add(PATH_IO[node.attr], node, f"`{_dotted(node) or node.attr}` "
            f"{'reads' if PATH_IO[node.attr] == cheats.C15 else 'writes or removes'} files through a path")
    elif private_torch(canonical(_dotted(node))) and \
            not isinstance(parents.get(id(node)), ast.Attribute):
        add(cheats.C11, node, f"touches torch internals `{_dotted(node)}`")
    else:
        name = _dotted(node)
        for key, code_ in ATTR_CODES.items():
            if name == key or name.endswith("." + key) or node.attr == key:
                add(code_, node, f"touches `{name or node.attr}`")
                break


def _judge_getattr_value(prog: Program, node: ast.Call) -> None:
    """``getattr(torch, "relu")`` read as a value, not called there (``self.op = getattr(F, "gelu")`` in ``__init__``,
    then ``self.op(x)`` in forward): a PyTorch compute function handed on, as ``torch.relu`` written as a value is
    (``_judge_attribute``), wherever it is read; called at once it is judge_read's."""
    parent = prog.parents.get(id(node))
    if not (isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2) or \
            (isinstance(parent, ast.Call) and parent.func is node) or not _dotted(node.args[0]) or \
            not (isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
        return
    full = prog.canonical(f"{_dotted(node.args[0])}.{node.args[1].value}")
    if compute_function(full):
        prog.add(cheats.C01, node, f"reads `{full}` with `getattr` as a value (PyTorch compute, run wherever it is "
                                   "called)", True, handed_on=True)


def _judge_graphed(prog: Program, node: ast.Call, layers: set[str]) -> None:
    """``torch.cuda.make_graphed_callables(what, samples)``: ``what`` (a callable, or a tuple of them) is captured into
    a CUDA graph that the returned callable replays, from forward: a PyTorch layer of the class (``self.lin``), one
    constructed there (``nn.Linear(...)``) or a PyTorch compute function handed to it is forward's PyTorch compute
    wherever the call is written (docs/ANTI_CHEAT.md class 113). A function of the program's own is judged by its
    body as a stored function is; the candidate's own extension function is its own work."""
    first = node.args[0]
    for arg in (first.elts if isinstance(first, (ast.Tuple, ast.List)) else [first]):
        dotted = _dotted(arg)
        full = prog.canonical(dotted) if dotted else ""
        if dotted.startswith("self.") and dotted.count(".") == 1 and dotted[5:] in layers:
            what = f"the nn submodule `{dotted}`"
        elif isinstance(arg, ast.Call) and prog.structure.computes(arg, None):
            # a PyTorch layer constructed there (`nn.Linear(...).cuda()`, a container holding one), read as the
            # class's own layers are (a container of the program's own modules is not one)
            what = f"the PyTorch layer `{ast.unparse(arg)[:80]}`"
        elif full and is_torch_compute(full):
            what = f"`{full}`"
        else:
            continue
        prog.forward_fns.setdefault(id(node), "a CUDA graph forward replays")  # never construction's set-up
        prog.add(cheats.C01, node, f"hands {what} to `torch.cuda.make_graphed_callables`: the graph it captures is "
                                   "replayed from forward (PyTorch's computation, not your kernel)", True)


def _judge_call(prog: Program, node: ast.Call) -> None:
    """A call: reflection judged by what it does, files, host compute with numpy, the calls of CALL_CODES, PyTorch
    compute (functions, tensor methods, nn submodules and containers), the reference Model constructed."""
    add, parents, canonical, reflect, kinds = prog.add, prog.parents, prog.canonical, prog.reflect, prog.kinds
    kernels, extension_objects = prog.kernels, prog.extension_objects
    method_ids, init_ids = prog.method_ids, prog.init_ids
    enclosing_class, model_layers, own_model, loop_layers = (prog.enclosing_class, prog.model_layers, prog.own_model,
                                                             prog.loop_layers)
    raw = _dotted(node.func)
    full = canonical(raw) if raw else ""
    if _is_load_inline(node) or prog.own_operator(node.func):
        return
    hits = judge_call(node, parents, reflect)
    if hits is not None:  # getattr / hasattr / setattr / delattr / vars: judged by what they do
        for hit in hits:
            add(hit.code, node, hit.what, hit.torch)
        _judge_getattr_value(prog, node)
        return
    if full.startswith(FILE_READERS) or full.replace("np.", "numpy.", 1).startswith(FILE_READERS):
        add(cheats.C15, node, f"calls `{raw}` (reads or writes files)")
        return
    if full in ("operator.attrgetter", "operator.methodcaller") and node.args and \
            not (isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                 and not node.args[0].value.startswith("_")):
        add(cheats.C11, node, f"calls `{raw}` with a computed or private attribute name")
    if (full.startswith("numpy.") or full.startswith("np.")) and \
            (id(node) in method_ids or id(node) in prog.forward_fns) and \
            full.split(".")[1] not in NUMPY_FORWARD_OK and id(node) not in init_ids:
        where = "in ModelNew" if id(node) in method_ids else f"in `{prog.forward_fns[id(node)]}`, which forward calls"
        add(cheats.C01, node, f"calls `{raw}` {where} (host compute with numpy, not your kernel)")
    if full in MATMUL_FUNCTIONS:
        add(cheats.C01, node, f"calls `{raw}` (a PyTorch matmul, as `@`)", True)
        return
    if _operator_function(full):
        # Python's operators computing whatever their operands' types compute: on sizes and literals integer
        # arithmetic (`operator.mul(x.shape[0], x.shape[1])`, `operator.floordiv(x.numel(), self.hidden)`), on a
        # tensor PyTorch's. A call is judged PyTorch compute where an operand is a tensor (or a literal container of
        # one), or, but for a comparison (of dtypes, devices, flags: `operator.eq(x.dtype, torch.float32)`), where
        # none is a size or a number (`operator.mul(a, b)` on values the scan cannot place)
        args, fn = _call_args(node), _operator_function(full)
        if fn in OPERATOR_ARITHMETIC and (any(_holds_tensor(kinds, a) for a in args) or
                                          (fn not in OPERATOR_COMPARISONS and not any(kinds.number(a) for a in args))):
            add(cheats.C01, node, f"calls `{raw}` on a value that is not a size or a number (Python's operator on a "
                                  "tensor is PyTorch compute)", True)
        return
    if full in SYM_FUNCTIONS:
        # torch's symbolic-size helpers (``torch.sym_int(n * 1.5)``, ``torch.sym_max(1, x.shape[0])``) are Python's
        # int, float, max, min, not, if-else and sum where no size is symbolic: on sizes and numbers integer
        # arithmetic, on a tensor PyTorch's (``torch.sym_sum([y, x])`` adds the tensors). Judged as the operator
        # module's functions are: C01 where an operand is a tensor (or a literal container of one), or where none of
        # a max, min or sum's operands is a size or a number
        args = [leaf for a in _call_args(node) for leaf in _leaves(a)]
        if any(_holds_tensor(kinds, a) for a in args) or \
                (full in SYM_ARITHMETIC and not any(kinds.number(a) for a in args)):
            add(cheats.C01, node, f"calls `{raw}` on a value that is not a size or a number (on a tensor it is "
                                  "PyTorch compute)", True)
        return
    if full in ("functools.reduce", "itertools.accumulate", "map", "itertools.starmap") and node.args and \
            _operator_function(canonical(_dotted(node.args[0]))) in OPERATOR_ARITHMETIC and \
            any(_holds_tensor(kinds, a) for a in _call_args(node)[1:]):
        # `functools.reduce(operator.mul, shape, 1)` multiplies sizes (a helper's `shape` included); over tensors
        # (`[a, b]`, a tensor's rows) it is PyTorch's arithmetic
        add(cheats.C01, node, f"calls `{raw}` with `{_dotted(node.args[0])}` over tensors (Python's operator on a "
                              "tensor is PyTorch compute)", True)
        return
    if isinstance(node.func, ast.Attribute) and node.func.attr not in STORAGE_QUERIES and \
            kinds.storage(node.func.value):
        # a tensor's storage: its size and address are queries; its bytes read into Python, copied or written
        # (`tolist`, `cpu`, `copy_`, `fill_`) are data handled outside PyTorch's ops and your kernels
        add(cheats.C01, node, f"calls `.{node.func.attr}()` on a tensor's storage (its bytes handled outside "
                              "PyTorch's operators and your kernels)", True)
        return
    if full in CALL_CODES or raw in CALL_CODES:
        add(CALL_CODES.get(full) or CALL_CODES[raw], node, f"calls `{raw}`")
        if (CALL_CODES.get(full) or CALL_CODES[raw]) != cheats.C01:
            return
    if is_torch_compute(full) and not _constant_pad(full, node) and full not in DROPOUT_CALLS:
        add(cheats.C01, node, f"calls `{raw}` (PyTorch compute)", True)
    elif isinstance(node.func, ast.Attribute):
        meth = node.func.attr
        recv = _dotted(node.func.value)
        if meth in kernels or recv in extension_objects:
            return
        if recv.startswith("self.") and recv.count(".") == 1 and \
                recv[5:] in enclosing_class.get(id(node), model_layers) and meth in ("forward", "__call__"):
            add(cheats.C01, node, f"calls the forward of nn submodule `{recv}`", True)
        elif meth in _TENSOR_COMPUTE and not prog.module_receiver(recv) and not kinds.own_member(node):
            # judged on the receiver: a queue's put, a set's add, a list's sort are not PyTorch; a
            # receiver the scan cannot place is a tensor unless the name is a container's as well; the program's
            # own method or module (`self.norm(x)`, `self.relu(x)` of its own classes) is its own code, judged where
            # it is defined
            kind = kinds.of(node.func.value)
            if kind == TENSOR or (kind not in (OTHER, PATH) and meth not in _CONTAINER_METHODS):
                add(cheats.C01, node, f"calls tensor method `.{meth}()` (PyTorch compute)", True)
                if meth == "numpy" and (id(node) in method_ids or id(node) in prog.forward_fns) and \
                        id(node) not in init_ids:
                    # the tensor's data handed to numpy on every call: compute on the host that neither PyTorch's
                    # monitors nor your kernels account for (so it is never "a path that did not run")
                    add(cheats.C01, node, f"hands `{recv or 'a tensor'}` to numpy in forward (host compute outside "
                                          "PyTorch and your kernels)")
    elif isinstance(node.func, ast.Name):
        fn = node.func.id
        if fn in CALL_CODES:
            add(CALL_CODES[fn], node, f"calls `{fn}()`")
        elif fn == "Model" and not own_model:
            add(cheats.C04, node, "constructs the reference `Model`")
    layers = enclosing_class.get(id(node), model_layers)
    if full in GRAPHED_CALLABLES and node.args:
        _judge_graphed(prog, node, layers)
    if (isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self" and node.func.attr in layers):
        add(cheats.C01, node, f"calls nn submodule `self.{node.func.attr}` (its PyTorch forward)", True)
    member = node.func.value if (isinstance(node.func, ast.Attribute) and
                                 node.func.attr in ("forward", "__call__")) else node.func
    if isinstance(member, ast.Subscript) and _dotted(member.value).startswith("self.") and \
            _dotted(member.value).count(".") == 1 and _dotted(member.value)[5:] in layers:
        add(cheats.C01, node, f"calls a member of the nn container `{_dotted(member.value)}` "
                              "(its PyTorch forward)", True)
    if id(node) in loop_layers:
        add(cheats.C01, node, f"calls a member of the nn container {loop_layers[id(node)]} "
                              "(its PyTorch forward)", True)


def _judge_side_streams(prog: Program) -> None:
    """Side streams: work on one must be joined back to the current stream before the function returns (C09)."""
    add, tree, canonical, main_ids = prog.add, prog.tree, prog.canonical, prog.main_ids
    for node, what in side_stream_hits(tree, canonical, main_ids):
        add(cheats.C09, node, what)


def _judge_module_uses(prog: Program) -> None:
    """threading, shutil, pathlib, tempfile, site (USE_JUDGED): judged by what the code uses of them."""
    add, tree, main_ids, judged, parents = prog.add, prog.tree, prog.main_ids, prog.judged, prog.parents
    for alias, (module, imported) in judged.items():
        code_, allowed = USE_JUDGED[module]
        refs = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == alias and id(n) not in main_ids
                and isinstance(n.ctx, ast.Load)]
        for n in refs:
            p = parents.get(id(n))
            member = p.attr if isinstance(p, ast.Attribute) and p.value is n else None
            if member not in allowed:
                add(code_, n, (f"uses `{module}.{member}`" if member else f"uses `{module}` as a value") +
                    _JUDGED_WHY[code_])
        if not refs:
            add(code_, imported, f"imports `{module}` and uses nothing of it the scan can judge")


# the operator module's functions that compute with their operands' own arithmetic (a tensor's is PyTorch's):
# arithmetic, comparisons, bitwise operations, their in-place and dunder spellings; its other functions (``index``,
# ``getitem``, ``itemgetter``, ``truth``) compute nothing of their own
OPERATOR_ARITHMETIC = frozenset({
    *(f"{p}{n}" for n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "lshift", "rshift", "and_",
                          "or_", "xor", "concat", "matmul") for p in ("", "i")),
    "neg", "pos", "abs", "invert", "inv", "lt", "le", "eq", "ne", "ge", "gt", "div", "idiv"})
OPERATOR_COMPARISONS = frozenset({"lt", "le", "eq", "ne", "ge", "gt"})


def _operator_function(full: str) -> str:
    """The name of the operator module's function ``full`` (a canonical dotted name: ``operator.mul``,
    ``_operator.__mul__``, ``mul`` imported from operator) with its dunder spelling read as the plain one; ""
    when it is no such function."""
    head, _, name = full.partition(".")
    if head not in ("operator", "_operator") or not name or "." in name:
        return ""
    if name.startswith("__") and name.endswith("__") and len(name) > 4:
        name = name[2:-2]
        name = f"{name}_" if name in ("and", "or") else name
    return name


# torch's helpers for symbolic sizes: Python's own int, float, not, max, min, if-else and sum on plain values
SYM_FUNCTIONS = frozenset({"torch.sym_int", "torch.sym_float", "torch.sym_not", "torch.sym_max", "torch.sym_min",
                           "torch.sym_ite", "torch.sym_sum"})
SYM_ARITHMETIC = frozenset({"torch.sym_max", "torch.sym_min", "torch.sym_sum"})


def _leaves(e: ast.AST) -> list[ast.AST]:
    """The elements of a literal list, tuple or set (``torch.sym_sum([a, b])``), else ``e`` itself."""
    if isinstance(e, (ast.List, ast.Tuple, ast.Set)):
        return [x.value if isinstance(x, ast.Starred) else x for x in e.elts]
    return [e]


def _holds_tensor(kinds, e: ast.AST) -> bool:
    """``e`` is a tensor or a literal container of one (``[a, b]``, ``(x, x.t())``, ``[t for t in ts]`` of tensors)."""
    if isinstance(e, (ast.List, ast.Tuple, ast.Set)):
        return any(_holds_tensor(kinds, x.value if isinstance(x, ast.Starred) else x) for x in e.elts)
    if isinstance(e, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
        return kinds.of(e.elt) == TENSOR
    return kinds.of(e) == TENSOR


def _call_args(node: ast.Call) -> list[ast.AST]:
    return [*node.args, *(k.value for k in node.keywords)]


# a storage's methods that only say where and how large it is
STORAGE_QUERIES = frozenset({"data_ptr", "nbytes", "size", "element_size", "is_cuda", "is_pinned", "is_shared",
                             "is_sparse", "device", "dtype", "resize_", "untyped", "__len__", "get_device"})


def _direct_call(node: ast.Name, parents: dict) -> bool:
    """``node`` is the function of a call (``getattr(...)``), not a value passed around (``f = getattr``)."""
    p = parents.get(id(node))
    return isinstance(p, ast.Call) and p.func is node


# dropout by its functional names, as nn.Dropout is by its module (static_scope ``_NN_NO_COMPUTE``) and aten::dropout by
# its op (verifier/common/ops.py): with p = 0 or outside training it returns its input; with p > 0 in training the
# ops it runs (bernoulli_, mul) are outside the runtime allowlist, so the monitors judge what it computed
DROPOUT_CALLS = {f"torch.nn.functional.{n}" for n in ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
                                                      "feature_alpha_dropout")} | {"torch.dropout", "torch.alpha_dropout",
                                                                                  "torch.feature_dropout"}


def _constant_pad(full: str, node: ast.Call) -> bool:
    """``F.pad(x, pad)`` with a constant fill (the default mode): a new tensor holding x and the fill, data moved
    and nothing computed, as ``torch.cat`` with a filled block (common to align a kernel's rows); the other modes
    (reflect, replicate, circular) stay compute here, as their own ops (reflection_pad*, replication_pad*) do in
    the runtime allowlist (verifier/common/ops.py), which has ``constant_pad_nd`` and the composite ``pad``."""
    if full == "torch.constant_pad_nd":
        return True
    if full != "torch.nn.functional.pad":
        return False
    mode = next((k.value for k in node.keywords if k.arg == "mode"), node.args[2] if len(node.args) > 2 else None)
    return mode is None or (isinstance(mode, ast.Constant) and mode.value == "constant")




def _tensor_compute_methods() -> frozenset[str]:
    try:  # torch here: the scan itself runs without it (the teacher and curation import this module)
        import torch
        names = {n for n in dir(torch.Tensor) if not n.startswith("_")}
    except Exception:  # pragma: no cover - torch is always there in practice
        names = set()
    # attributes, not methods: never called
    attributes = {"real", "imag", "data", "shape", "device", "dtype", "grad", "is_cuda", "layout", "names", "T", "H",
                  "mT", "mH"}
    return frozenset(names - TENSOR_METHOD_ALLOWED - attributes)


_TENSOR_COMPUTE = _tensor_compute_methods()
# tensor methods that are also the methods of Python's containers (a set's add, a list's sort and index, a dict's
# values): on a receiver the scan cannot place they are read as the container's; on a tensor they are compute
_CONTAINER_METHODS = frozenset({"add", "index", "sort", "values", "count", "copy"})
