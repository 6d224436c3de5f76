"""The static stage's reading of a program's structure: which of its functions and classes can run (liveness from
ModelNew, its bases and the module-level code: extract.live_definitions, which the extract stage reads too), which
code only construction reaches, and which ``self.X`` of a
class are PyTorch layers (an nn container only when a PyTorch layer is among its members).

It reads names, not values: conservative where Python is dynamic (any mention of a name makes it live). Two
readings go a little further, within one scope at a time: what a value is (``Kinds``: a tensor, a path, another
object, or unknown, from where its name is bound) and whether a side stream is joined back before the function that
uses it returns (``side_stream_hits``); anything they cannot read is unknown, and the rules treat unknown as they
did before.
"""

from __future__ import annotations

import ast

from verifier.front.extract import _class_defs, _dotted, _main_guard, _own_chain, _refs, live_definitions

# nn classes that hold parameters or modules, or compute nothing in eval mode (a view, the identity)
_NN_NO_COMPUTE = {"Parameter", "ParameterList", "ParameterDict", "Flatten", "Unflatten", "Identity", "Dropout",
                  "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "Module"}
# containers: they compute what their members compute (a Sequential of the candidate's own modules runs its kernels)
_NN_CONTAINERS = {"Sequential", "ModuleList", "ModuleDict"}


class _Scope:
    """What the scan knows about the program's structure: which module-level functions and classes can run
    (``dead``: the nodes of those that nothing live names), which ``self.X`` of a class are PyTorch layers."""

    def __init__(self, tree: ast.Module, model_new: ast.ClassDef | None, canonical, skipped: list[ast.stmt]):
        self.tree, self.canonical = tree, canonical
        self.classes = _class_defs(tree)
        self.dead = self._dead_nodes(model_new, skipped)

    # ---- liveness: what ModelNew, its bases, and the module-level code that runs at import name
    def _dead_nodes(self, model_new: ast.ClassDef | None, skipped: list[ast.stmt]) -> set[int]:
        """Ids of the nodes of module-level functions and classes that nothing live refers to by name
        (extract.live_definitions): code that never runs, so not scanned as if forward called it. A dead class's
        methods are dead; its other statements ran at import."""
        self.live, defs = live_definitions(self.tree, model_new, skipped, self.canonical)
        dead: set[int] = set()
        if self.live is None:
            return dead
        for name, nodes in defs.items():
            if name in self.live:
                continue
            for d in nodes:
                if d is model_new:
                    continue
                body = d.body if isinstance(d, ast.ClassDef) else [d]
                for member in body:
                    if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) or not isinstance(d, ast.ClassDef):
                        dead |= {id(n) for n in ast.walk(member)}
        return dead

    # ---- PyTorch layers held by a class
    def nn_class(self, call: ast.AST) -> str:
        """The nn class a call constructs (``nn.Linear(...)`` -> "Linear"), "" when it is not one."""
        if not isinstance(call, ast.Call):
            return ""
        raw = _dotted(call.func)
        full = self.canonical(raw) if raw else ""
        for prefix in ("torch.nn.", "nn."):
            for name in (full, raw):
                if name.startswith(prefix):
                    rest = name[len(prefix):]
                    if rest.split(".")[0] in ("init", "functional", "utils", "parameter"):
                        return ""  # functions and helpers, not a module
                    return rest.split(".")[-1]
        return ""

    def _computes(self, call: ast.Call, fn: ast.AST | None) -> bool:
        """Whether an nn construction computes with PyTorch when called: a layer does (not those in
        _NN_NO_COMPUTE); a container does when a layer is among its members, read from its arguments and, for
        names they use, from what the enclosing function assigns or appends to those names."""
        kind = self.nn_class(call)
        if kind in _NN_NO_COMPUTE or not kind:
            return False
        if kind not in _NN_CONTAINERS:
            return True
        sources: list[ast.AST] = [*call.args, *[k.value for k in call.keywords]]
        names = {n.id for src in sources for n in ast.walk(src) if isinstance(n, ast.Name)}
        if fn is not None:  # layers = [nn.Linear(...)]; layers.append(...); layers += [...]
            for n in ast.walk(fn):
                if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in n.targets):
                    sources.append(n.value)
                elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id in names:
                    sources.append(n.value)
                elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                        isinstance(n.func.value, ast.Name) and n.func.value.id in names and \
                        n.func.attr in ("append", "extend", "insert", "update", "__setitem__"):
                    sources += n.args
                elif isinstance(n, ast.Assign) and any(isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                                                       and t.value.id in names for t in n.targets):
                    sources.append(n.value)
        return any(self.nn_class(n) and self.nn_class(n) not in _NN_NO_COMPUTE | _NN_CONTAINERS
                   for src in sources for n in ast.walk(src))

    def torch_layers(self, cls: ast.ClassDef | None) -> set[str]:
        """Attributes ``self.X`` of ``cls`` (and of the classes of the program it inherits from) assigned a PyTorch
        layer or a container holding one; a container of the program's own modules is not one."""
        out: set[str] = set()
        if cls is None:
            return out
        for c in _own_chain(cls, self.classes):
            for fn in c.body:
                for node in ast.walk(fn):
                    target = value = None
                    if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
                        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                        for t in targets:
                            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                                if self._computes(node.value, fn):
                                    out.add(t.attr)
                        continue
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                            node.func.attr in ("add_module", "register_module") and len(node.args) == 2 and \
                            isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                        target, value = node.args[0].value, node.args[1]
                    if target and isinstance(value, ast.Call) and self._computes(value, fn):
                        out.add(target)
        return out


def _loop_bindings(target: ast.AST, it: ast.AST) -> list[tuple[str, ast.AST]]:
    """(loop variable, what it iterates over) for ``for target in it``, through enumerate / zip / reversed /
    list and the module methods that yield members (children, values, items, named_children...)."""
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.args:
        fn = it.func.id
        if fn == "enumerate":
            return _loop_bindings(target.elts[1], it.args[0]) if isinstance(target, ast.Tuple) and \
                len(target.elts) == 2 else []
        if fn == "zip":
            return [b for t, a in zip(target.elts, it.args) for b in _loop_bindings(t, a)] if \
                isinstance(target, ast.Tuple) and len(target.elts) == len(it.args) else []
        if fn in ("reversed", "list", "iter", "tuple", "sorted"):
            return _loop_bindings(target, it.args[0])
        return []
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute):
        if it.func.attr in ("children", "values", "modules"):
            return _loop_bindings(target, it.func.value)
        if it.func.attr in ("items", "named_children", "named_modules"):
            return _loop_bindings(target.elts[1], it.func.value) if isinstance(target, ast.Tuple) and \
                len(target.elts) == 2 else []
        return []
    if isinstance(it, ast.Subscript):
        return _loop_bindings(target, it.value)
    return [(target.id, it)] if isinstance(target, ast.Name) else []


def _functions_by_name(tree: ast.Module) -> dict[str, list[ast.AST]]:
    """The program's module-level functions and the methods of its classes, by name."""
    funcs: dict[str, list[ast.AST]] = {}
    for top in tree.body:
        members = top.body if isinstance(top, ast.ClassDef) else [top]
        for f in members:
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.setdefault(f.name, []).append(f)
    return funcs


def _closure(funcs: dict[str, list[ast.AST]], roots: set[str]) -> set[str]:
    """The names of the functions reachable from ``roots`` by name (conservatively: any function of that name)."""
    seen, todo = set(), [r for r in roots if r in funcs]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [r for f in funcs[name] for r in _refs(f) if r in funcs and r not in seen]
    return seen


def init_only_nodes(tree: ast.Module) -> set[int]:
    """Ids of the nodes in functions that only construction reaches: reachable (by name, conservatively) from
    an ``__init__`` of some class and not from any ``forward`` / ``__call__``. Lambdas and functions nested in
    them are left out (they can be stored and called later, from forward)."""
    funcs = _functions_by_name(tree)
    forward = _closure(funcs, {"forward", "__call__"})
    only_init = _closure(funcs, {"__init__"}) - forward - {"get_inputs", "get_init_inputs"}
    ids: set[int] = set()
    for name in only_init:
        for f in funcs[name]:
            nested = {id(n) for g in ast.walk(f) if g is not f and isinstance(g, (ast.Lambda, ast.FunctionDef,
                                                                                 ast.AsyncFunctionDef))
                      for n in ast.walk(g)}
            ids |= {id(n) for n in ast.walk(f)} - nested
    return ids


def import_time_nodes(tree: ast.Module) -> set[int]:
    """Ids of the nodes that run once, when the program is imported: its module-level statements and class
    bodies, the bodies of the functions and lambdas they define left out (those run when called)."""
    ids: set[int] = set()
    todo: list[ast.AST] = list(tree.body)
    while todo:
        n = todo.pop()
        ids.add(id(n))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            todo.extend(n.decorator_list)  # decorators and defaults run at definition; the body does not
            todo.extend(n.args.defaults + [d for d in n.args.kw_defaults if d is not None])
        elif not isinstance(n, ast.Lambda):
            todo.extend(ast.iter_child_nodes(n))
    return ids


def forward_nodes(tree: ast.Module) -> dict[int, str]:
    """The nodes of the functions a ``forward`` / ``__call__`` reaches by name (conservatively: every function of
    a name it calls; a lambda bound to a name at module level is one), ``__init__``, get_inputs and get_init_inputs
    aside, each mapped to its function's name: the code that runs on every call of the model, wherever the program
    wrote it (a module-level helper included)."""
    funcs = _functions_by_name(tree)
    for top in tree.body:  # `mm = lambda a, b: ...` at module level: a function by another spelling
        if isinstance(top, ast.Assign) and isinstance(top.value, ast.Lambda):
            for t in top.targets:
                if isinstance(t, ast.Name):
                    funcs.setdefault(t.id, []).append(top.value)
    out: dict[int, str] = {}
    for name in _closure(funcs, {"forward", "__call__"}) - {"__init__", "get_inputs", "get_init_inputs"}:
        for f in funcs[name]:
            out.update({id(n): name for n in ast.walk(f)})
    return out


# ---------------------------------------------------------------------------- what a value is (issue 47)

TENSOR, OTHER, PATH, UNKNOWN = "tensor", "other", "path", "unknown"
# calls whose result is never a tensor: builtins that build containers, strings and numbers, and the standard
# library's containers, queues and locks
_OTHER_BUILTINS = {"list", "dict", "set", "frozenset", "tuple", "str", "int", "float", "bool", "bytes", "bytearray",
                   "sorted", "range", "len", "repr", "enumerate", "zip", "object", "id", "hash", "isinstance",
                   "format", "ord", "chr", "hex", "bin", "oct"}
_OTHER_PREFIXES = ("collections.", "queue.", "itertools.", "re.", "weakref.Weak", "dataclasses.", "string.",
                   "json.", "math.", "time.", "os.")
_OTHER_CALLS = {"threading.Lock", "threading.RLock", "threading.Event", "threading.Condition", "threading.Semaphore",
                "threading.BoundedSemaphore", "threading.local", "contextlib.nullcontext", "functools.partial"}
# torch calls whose result describes, never holds, data
_TORCH_NOT_TENSOR = {"Size", "device", "dtype", "finfo", "iinfo", "no_grad", "inference_mode", "is_tensor", "numel",
                     "get_default_dtype", "is_grad_enabled", "set_grad_enabled", "enable_grad", "Generator"}
# tensor methods and attributes by what they give back
_TENSOR_DESCRIBE = {"size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset", "data_ptr",
                    "element_size", "is_contiguous", "get_device", "item", "tolist", "shape", "device", "dtype",
                    "is_cuda", "ndim", "layout", "requires_grad", "is_leaf", "numpy", "untyped_storage",
                    "storage", "nbytes", "itemsize"}
_TENSOR_ATTRS = {"T", "mT", "H", "mH", "data", "real", "imag", "grad"}
PATH_CLASSES = {"pathlib.Path", "pathlib.PurePath", "pathlib.PosixPath", "pathlib.PurePosixPath",
                "pathlib.WindowsPath", "pathlib.PureWindowsPath"}
# what a path gives back without touching the file system: another path, or its name
_PATH_PURE = {"with_suffix", "with_name", "with_stem", "joinpath", "relative_to", "absolute", "expanduser",
              "resolve", "parent"}
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _join(kinds) -> str:
    got = {k for k in kinds if k is not None}
    return got.pop() if len(got) == 1 else UNKNOWN


class Kinds:
    """What a value is, read from where its name is bound in the same scope (a literal, a constructor of the
    standard library, a torch call, the candidate's own kernel, an input of ``forward``): a tensor, a path, some
    other object, or unknown (a parameter of another function, an element of a list, a name bound in several
    ways). Conservative: any binding it cannot read makes the name unknown."""

    def __init__(self, tree: ast.Module, canonical, own_call, classes: dict[str, ast.ClassDef]):
        self.tree, self.canonical, self.own_call, self.classes = tree, canonical, own_call, classes
        self.parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        self._binds: dict[int, dict[str, list]] = {}  # scope id -> name -> bindings
        self._memo: dict[tuple, str] = {}
        self._busy: set[tuple] = set()
        self._self_binds: dict[int, dict[str, list]] = {}  # class id -> attr -> [(value, scope)]
        self._depth = 0

    # ---- scopes and bindings
    def scope_of(self, node: ast.AST) -> ast.AST:
        p = self.parents.get(id(node))
        while p is not None and not isinstance(p, _SCOPES):
            p = self.parents.get(id(p))
        return p if p is not None else self.tree

    def _scope_nodes(self, scope: ast.AST):
        """The nodes of ``scope`` itself, not of the functions, lambdas and classes nested in it."""
        todo = list(ast.iter_child_nodes(scope))
        while todo:
            n = todo.pop()
            yield n
            if not isinstance(n, (*_SCOPES, ast.ClassDef)):
                todo += list(ast.iter_child_nodes(n))

    def bindings(self, scope: ast.AST) -> dict[str, list]:
        if id(scope) in self._binds:
            return self._binds[id(scope)]
        out: dict[str, list] = {}

        def bind(target, value):
            if isinstance(target, ast.Name):
                out.setdefault(target.id, []).append(value)
            elif isinstance(target, (ast.Tuple, ast.List)):
                vals = value.elts if isinstance(value, (ast.Tuple, ast.List)) and \
                    len(value.elts) == len(target.elts) and not any(isinstance(e, ast.Starred) for e in value.elts) \
                    else [None] * len(target.elts)
                for t, v in zip(target.elts, vals):
                    bind(t.value if isinstance(t, ast.Starred) else t, v)

        if isinstance(scope, _SCOPES):
            a = scope.args
            forward = isinstance(scope, ast.FunctionDef) and scope.name == "forward" and \
                isinstance(self.parents.get(id(scope)), ast.ClassDef)
            params = a.posonlyargs + a.args + a.kwonlyargs
            for i, p in enumerate(params):
                out.setdefault(p.arg, []).append("input" if forward and i > 0 else None)
            if a.vararg:
                out.setdefault(a.vararg.arg, []).append("inputs" if forward else "tuple")
            if a.kwarg:
                out.setdefault(a.kwarg.arg, []).append("tuple")
        for n in self._scope_nodes(scope):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    bind(t, n.value)
            elif isinstance(n, (ast.AnnAssign, ast.NamedExpr)) and n.value is not None:
                bind(n.target, n.value)
            elif isinstance(n, ast.AugAssign):
                bind(n.target, ("aug", n))
            elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
                bind(n.target, None)
            elif isinstance(n, ast.withitem) and n.optional_vars is not None:
                bind(n.optional_vars, None)
            elif isinstance(n, ast.ExceptHandler) and n.name:
                out.setdefault(n.name, []).append(None)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                for al in n.names:
                    out.setdefault(al.asname or al.name.split(".")[0], []).append(None)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.setdefault(n.name, []).append(None)
            elif isinstance(n, (ast.Global, ast.Nonlocal)):
                for name in n.names:
                    out.setdefault(name, []).append(None)
            elif isinstance(n, ast.Delete):
                for t in n.targets:
                    bind(t, None)
        self._binds[id(scope)] = out
        return out

    def _self_bindings(self, cls: ast.ClassDef) -> dict[str, list]:
        if id(cls) in self._self_binds:
            return self._self_binds[id(cls)]
        out: dict[str, list] = {}
        for c in _own_chain(cls, self.classes):
            for n in ast.walk(c):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(
                    n, (ast.AnnAssign, ast.AugAssign, ast.For)) else []
                for t in targets:
                    for sub in ast.walk(t):
                        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and \
                                sub.value.id == "self" and isinstance(sub.ctx, ast.Store):
                            plain = isinstance(n, (ast.Assign, ast.AnnAssign)) and t is sub
                            out.setdefault(sub.attr, []).append((n.value if plain else None, self.scope_of(n)))
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                        n.func.attr in ("register_buffer", "register_parameter") and n.args and \
                        isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str):
                    out.setdefault(n.args[0].value, []).append(("tensor", None))
        self._self_binds[id(cls)] = out
        return out

    # ---- kinds
    def of(self, node: ast.AST) -> str:
        return self._expr(node, self.scope_of(node)) or UNKNOWN

    def _name(self, name: str, scope: ast.AST) -> str:
        while True:
            binds = self.bindings(scope)
            if name in binds:
                key = (id(scope), name)
                if key in self._memo:
                    return self._memo[key]
                if key in self._busy:
                    return None  # a binding that depends on itself: the others decide
                self._busy.add(key)
                try:
                    kind = _join([self._binding(b, scope) for b in binds[name]])
                finally:
                    self._busy.discard(key)
                self._memo[key] = kind
                return kind
            if scope is self.tree:
                return UNKNOWN
            scope = self.scope_of(scope)  # an enclosing function, or the module (a class body is not a scope here)

    def _binding(self, b, scope) -> str | None:
        if b is None:
            return UNKNOWN
        if b == "input":
            return TENSOR
        if b in ("inputs", "tuple"):
            return OTHER
        if isinstance(b, tuple):  # `y += v`: a tensor when v is one; otherwise y's other bindings decide
            return TENSOR if self._expr(b[1].value, scope) == TENSOR else None
        return self._expr(b, scope)

    def _self_attr(self, node: ast.Attribute) -> str:
        scope = self.scope_of(node)
        cls = self.parents.get(id(scope))
        if not isinstance(cls, ast.ClassDef) or not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) or \
                not scope.args.args or scope.args.args[0].arg != "self":
            return UNKNOWN
        binds = self._self_bindings(cls).get(node.attr)
        if not binds:
            return UNKNOWN
        key = (id(cls), "self." + node.attr)
        if key in self._memo:
            return self._memo[key]
        if key in self._busy:
            return None
        self._busy.add(key)
        try:
            kind = _join([TENSOR if v == "tensor" else UNKNOWN if v is None else self._expr(v, s) for v, s in binds])
        finally:
            self._busy.discard(key)
        self._memo[key] = kind
        return kind

    def _expr(self, e: ast.AST, scope: ast.AST) -> str | None:
        self._depth += 1
        try:  # an expression nested deeper than a program needs (a source of 900 concatenated lines) is unknown
            return UNKNOWN if self._depth > 100 else self._expr_kind(e, scope)
        finally:
            self._depth -= 1

    def _expr_kind(self, e: ast.AST, scope: ast.AST) -> str | None:
        if isinstance(e, (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp, ast.SetComp,
                          ast.DictComp, ast.GeneratorExp, ast.JoinedStr)):
            return OTHER
        if isinstance(e, ast.Name):
            return self._name(e.id, scope)
        if isinstance(e, ast.Attribute):
            if isinstance(e.value, ast.Name) and e.value.id == "self":
                return self._self_attr(e)
            full = self.canonical(_dotted(e)) if _dotted(e) else ""
            if full in PATH_CLASSES:
                return UNKNOWN
            base = self._expr(e.value, scope)
            if base == TENSOR:
                return TENSOR if e.attr in _TENSOR_ATTRS else OTHER if e.attr in _TENSOR_DESCRIBE else UNKNOWN
            if base == PATH:
                return PATH if e.attr == "parent" else OTHER if e.attr in ("name", "suffix", "stem", "suffixes",
                                                                           "parts") else UNKNOWN
            return UNKNOWN
        if isinstance(e, ast.Subscript):
            base = self._expr(e.value, scope)
            return TENSOR if base == TENSOR else UNKNOWN
        if isinstance(e, ast.BinOp):
            left, right = self._expr(e.left, scope), self._expr(e.right, scope)
            if isinstance(e.op, ast.Div) and PATH in (left, right):
                return PATH
            if TENSOR in (left, right) or isinstance(e.op, ast.MatMult):
                return TENSOR
            return OTHER if left == right == OTHER else UNKNOWN
        if isinstance(e, ast.UnaryOp):
            return OTHER if isinstance(e.op, ast.Not) else self._expr(e.operand, scope)
        if isinstance(e, ast.Compare):
            sides = [self._expr(x, scope) for x in [e.left, *e.comparators]]
            return TENSOR if TENSOR in sides else OTHER if all(s == OTHER for s in sides) else UNKNOWN
        if isinstance(e, (ast.IfExp, ast.BoolOp)):
            parts = [e.body, e.orelse] if isinstance(e, ast.IfExp) else e.values
            return _join([self._expr(x, scope) for x in parts])
        if isinstance(e, ast.NamedExpr):
            return self._expr(e.value, scope)
        if isinstance(e, ast.Call):
            return self._call(e, scope)
        return UNKNOWN

    def _call(self, e: ast.Call, scope: ast.AST) -> str:
        raw = _dotted(e.func)
        full = self.canonical(raw) if raw else ""
        if self.own_call(e):
            return TENSOR
        if isinstance(e.func, ast.Name) and e.func.id in _OTHER_BUILTINS and full == e.func.id:
            return OTHER
        if full in _OTHER_CALLS or full.startswith(_OTHER_PREFIXES):
            return OTHER
        if full in PATH_CLASSES or full in {f"{c}.{m}" for c in PATH_CLASSES for m in ("cwd", "home")}:
            return PATH
        if full.startswith("torch.nn.functional.") or full == "torch.nn.Parameter":
            return TENSOR
        if full.startswith("torch.") and full.count(".") == 1:
            return OTHER if full[len("torch."):] in _TORCH_NOT_TENSOR else TENSOR
        if isinstance(e.func, ast.Attribute):
            recv = self._expr(e.func.value, scope)
            if recv == TENSOR:
                return OTHER if e.func.attr in _TENSOR_DESCRIBE else TENSOR
            if recv == PATH:
                return PATH if e.func.attr in _PATH_PURE else OTHER if e.func.attr in ("as_posix", "exists",
                                                                                       "is_file", "is_dir") \
                    else UNKNOWN
            if recv == OTHER and e.func.attr in ("copy", "keys", "items", "split", "join", "format", "strip",
                                                 "replace", "lower", "upper"):
                return OTHER
        return UNKNOWN


# ---------------------------------------------------------------------------- side streams (C09)

STREAM_CTORS = {"torch.cuda.Stream", "torch.cuda.streams.Stream", "torch.cuda.ExternalStream",
                "torch.cuda.streams.ExternalStream", "torch.Stream"}
_CURRENT = {"torch.cuda.current_stream", "torch.cuda.default_stream"}
_STREAM_ENTER = {"torch.cuda.stream", "torch.cuda.set_stream", "torch.cuda.StreamContext"}
_SET_STREAM = {"torch.cuda.set_stream"}  # makes the side stream current: waiting on "the current stream" joins nothing
# where a join may sit relative to the work: not in a branch the work is not in
_CONDITIONAL = (ast.If, ast.While, ast.ExceptHandler, ast.IfExp, ast.match_case, ast.BoolOp)


class _Streams:
    """Side streams and whether forward waits for them: PyTorch's documented pattern (a stream that waits for
    the current one, work under ``with torch.cuda.stream(s)``, then ``torch.cuda.current_stream().wait_stream(s)``)
    leaves no work behind when the function returns; a stream never joined back does."""

    def __init__(self, tree: ast.Module, canonical, skip: set[int]):
        self.tree, self.canonical, self.skip = tree, canonical, skip
        self.parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        self.keys: dict[tuple, ast.AST] = {}  # stream key -> its creation
        self.hits: list[tuple[ast.AST, str]] = []

    def _full(self, node: ast.AST) -> str:
        d = _dotted(node)
        return self.canonical(d) if d else ""

    def scope_of(self, node: ast.AST) -> ast.AST:
        p = self.parents.get(id(node))
        while p is not None and not isinstance(p, _SCOPES):
            p = self.parents.get(id(p))
        return p if p is not None else self.tree

    def _own_nodes(self, scope: ast.AST) -> list[ast.AST]:
        out, todo = [], list(ast.iter_child_nodes(scope))
        while todo:
            n = todo.pop()
            if id(n) in self.skip:
                continue
            out.append(n)
            if not isinstance(n, (*_SCOPES, ast.ClassDef)):
                todo += list(ast.iter_child_nodes(n))
        return out

    @staticmethod
    def _target_key(target: ast.AST, scope: ast.AST) -> tuple | None:
        if isinstance(target, ast.Name):
            return (id(scope), target.id)
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
            return ("self", target.attr)
        return None

    def _creations(self) -> None:
        for n in ast.walk(self.tree):
            if id(n) in self.skip or not isinstance(n, (ast.Name, ast.Attribute)) or \
                    self._full(n) not in STREAM_CTORS or isinstance(self.parents.get(id(n)), ast.Attribute):
                continue
            call = self.parents.get(id(n))
            if not (isinstance(call, ast.Call) and call.func is n):
                self.hits.append((n, f"uses `{_dotted(n)}` as a value (a side stream the scan cannot follow)"))
                continue
            holder = self.parents.get(id(call))
            while isinstance(holder, (ast.List, ast.Tuple, ast.ListComp, ast.IfExp)):
                holder = self.parents.get(id(holder))  # a list of streams, or a stream where there is a GPU
            key = None
            if isinstance(holder, (ast.Assign, ast.AnnAssign)):
                targets = holder.targets if isinstance(holder, ast.Assign) else [holder.target]
                if len(targets) == 1:
                    key = self._target_key(targets[0], self.scope_of(holder))
            if key is None:
                self.hits.append((call, f"creates a side stream (`{_dotted(n)}()`) not bound to a name the scan can "
                                        "follow, so it cannot see the stream joined back"))
            else:
                self.keys.setdefault(key, call)

    def resolve(self, e: ast.AST, scope: ast.AST, seen=frozenset()):
        """The stream key ``e`` stands for, "current" for the current or default stream, else None."""
        if isinstance(e, ast.Call) and self._full(e.func) in _CURRENT:
            return "current"
        if isinstance(e, ast.IfExp):  # `self.side if self.side is not None else torch.cuda.current_stream()`
            got = {self.resolve(b, scope, seen) for b in (e.body, e.orelse)
                   if not (isinstance(b, ast.Constant) and b.value is None)}
            keys = got - {"current"}
            return keys.pop() if len(keys) == 1 and None not in keys else "current" if got == {"current"} else None
        if isinstance(e, ast.Subscript):
            return self.resolve(e.value, scope, seen)
        if isinstance(e, ast.Attribute):
            key = self._target_key(e, scope)
            return key if key in self.keys else None
        if not isinstance(e, ast.Name) or (id(scope), e.id) in seen:
            return None
        seen = seen | {(id(scope), e.id)}
        if (id(scope), e.id) in self.keys:
            return (id(scope), e.id)
        found, bound = set(), False
        for n in self._own_nodes(scope):
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == e.id for t in n.targets):
                bound = True
                found.add(self.resolve(n.value, scope, seen))
            elif isinstance(n, (ast.For, ast.comprehension)):
                for name, source in _loop_bindings(n.target, n.iter):
                    if name == e.id:
                        bound = True
                        found.add(self.resolve(source, scope, seen))
                if any(isinstance(t, ast.Name) and t.id == e.id for t in ast.walk(n.target)) and \
                        not any(name == e.id for name, _ in _loop_bindings(n.target, n.iter)):
                    bound = True
                    found.add(None)
        if isinstance(scope, _SCOPES) and any(a.arg == e.id for a in scope.args.posonlyargs + scope.args.args +
                                              scope.args.kwonlyargs + [x for x in (scope.args.vararg,
                                                                                    scope.args.kwarg) if x]):
            bound = True
            found.add(None)
        if bound:
            return found.pop() if len(found) == 1 else None
        return None if scope is self.tree else self.resolve(e, self.scope_of(scope), seen)

    def _binds_only(self, ref: ast.AST) -> bool:
        """``ref`` only names the stream for a name that stands for it: the iterable of a loop (through enumerate,
        zip...), or the value of a plain assignment."""
        p = self.parents.get(id(ref))
        if isinstance(p, ast.Assign) and p.value is ref:
            return True
        node = ref
        while p is not None and not isinstance(p, ast.stmt):
            if isinstance(p, ast.comprehension) and p.iter is node:
                return True
            node, p = p, self.parents.get(id(p))
        return isinstance(p, (ast.For, ast.AsyncFor)) and p.iter is node

    def _stmt(self, node: ast.AST) -> ast.AST:
        while not isinstance(node, ast.stmt):
            node = self.parents[id(node)]
        return node

    def _conditions(self, node: ast.AST, scope: ast.AST) -> set[int]:
        out, p = set(), self.parents.get(id(node))
        while p is not None and p is not scope:
            if isinstance(p, _CONDITIONAL):
                out.add(id(p))
            p = self.parents.get(id(p))
        return out

    def judge(self) -> list[tuple[ast.AST, str]]:
        self._creations()
        used: set = set()
        scopes = [self.tree] + [n for n in ast.walk(self.tree) if isinstance(n, _SCOPES) and id(n) not in self.skip]
        for scope in scopes:
            nodes = self._own_nodes(scope)
            uses: dict[tuple, list[ast.AST]] = {}
            joins: dict[tuple, list[ast.AST]] = {}
            events: dict[str, set] = {}
            made_current: set = set()  # streams made current with set_stream: only a synchronize joins them
            everything: list[ast.AST] = []  # torch.cuda.synchronize(): joins every stream
            for n in nodes:
                if isinstance(n, ast.Call):
                    full = self._full(n.func)
                    if full == "torch.cuda.synchronize":
                        everything.append(n)
                    elif full in _STREAM_ENTER and n.args and not (isinstance(n.args[0], ast.Constant) and
                                                                   n.args[0].value is None):
                        if self.resolve(n.args[0], scope) is None:
                            self.hits.append((n, f"runs work on a stream the scan cannot follow (`{_dotted(n.func)}`"
                                                 " of something not a stream it saw created and joined)"))
                if not isinstance(n, (ast.Name, ast.Attribute)) or isinstance(n.ctx, (ast.Store, ast.Del)):
                    continue
                if isinstance(n, ast.Name) and isinstance(self.parents.get(id(n)), ast.Attribute) and \
                        n.id == "self":
                    continue
                key = self.resolve(n, scope)
                if key is None or key == "current":
                    continue
                used.add(key)
                p, gp = self.parents.get(id(n)), self.parents.get(id(self.parents.get(id(n))))
                if self._binds_only(n):
                    continue  # binds a name to the stream (`for s in self.streams`, `s = self.side`): its uses count
                if isinstance(p, ast.Call) and self._full(p.func) in _SET_STREAM:
                    made_current.add(key)
                if isinstance(p, ast.Call) and n in p.args and isinstance(p.func, ast.Attribute) and \
                        p.func.attr == "wait_stream" and self.resolve(p.func.value, scope) == "current":
                    joins.setdefault(key, []).append(p)
                elif isinstance(p, ast.Attribute) and p.attr == "synchronize" and isinstance(gp, ast.Call) and \
                        gp.func is p:
                    joins.setdefault(key, []).append(gp)
                else:
                    uses.setdefault(key, []).append(n)
                    if isinstance(p, ast.Call) and n in p.args and isinstance(p.func, ast.Attribute) and \
                            p.func.attr == "record" and isinstance(p.func.value, ast.Name):
                        events.setdefault(p.func.value.id, set()).add(key)  # ev.record(s)
                    if isinstance(p, ast.Attribute) and p.attr == "record_event" and isinstance(gp, ast.Call):
                        holder = self.parents.get(id(gp))  # ev = s.record_event()
                        if isinstance(holder, ast.Assign) and len(holder.targets) == 1 and \
                                isinstance(holder.targets[0], ast.Name):
                            events.setdefault(holder.targets[0].id, set()).add(key)
            for n in nodes:  # cur.wait_event(ev) / ev.synchronize() for an event recorded on a side stream
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                    if n.func.attr == "wait_event" and n.args and isinstance(n.args[0], ast.Name) and \
                            self.resolve(n.func.value, scope) == "current":
                        for key in events.get(n.args[0].id, ()):
                            joins.setdefault(key, []).append(n)
                    elif n.func.attr == "synchronize" and isinstance(n.func.value, ast.Name):
                        for key in events.get(n.func.value.id, ()):
                            joins.setdefault(key, []).append(n)
            exits = [n for n in nodes if isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom))]
            for key, refs in uses.items():
                stmts = [self._stmt(r) for r in refs]
                last = max(stmts, key=lambda s: (s.end_lineno, s.end_col_offset))
                first = min(stmts, key=lambda s: (s.lineno, s.col_offset))
                end = (last.end_lineno, last.end_col_offset)
                cond = self._conditions(last, scope)
                ok = False
                waits = [j for j in joins.get(key, []) if key not in made_current or
                         (isinstance(j.func, ast.Attribute) and j.func.attr == "synchronize")]
                for j in waits + everything:
                    at = (j.lineno, j.col_offset)
                    if at > end and self._conditions(j, scope) <= cond and not any(
                            (first.lineno, first.col_offset) <= (x.lineno, x.col_offset) < at for x in exits):
                        ok = True
                        break
                if not ok:
                    name = key[1]
                    self.hits.append((first, f"runs work on the side stream `{name}` and does not join it back "
                                             "before returning (`torch.cuda.current_stream().wait_stream("
                                             f"{name})`, an event the current stream waits for, or "
                                             "`torch.cuda.synchronize()` after the work): the timing would miss "
                                             "that work"))
        for key, call in self.keys.items():
            if key not in used:
                self.hits.append((call, f"creates the side stream `{key[1]}` and never uses it where the scan can "
                                        "see it joined back"))
        return self.hits


def side_stream_hits(tree: ast.Module, canonical, skip: set[int]) -> list[tuple[ast.AST, str]]:
    """C09 findings for side streams: work on a stream that the same function does not join back to the current
    stream before it returns (or a stream the scan cannot follow)."""
    return _Streams(tree, canonical, skip).judge()

