"""The static stage's reading of what a value is (issue 47): ``Kinds`` says, within one scope at a time, whether a
name holds a tensor, a path, another object (a container, a queue, a lock) or something unknown, from where it is
bound; the rules judge a method's name on its receiver (a queue's ``put`` is not ``Tensor.put``) and a path's
methods as file access. Anything it cannot read is unknown, and the rules treat unknown as they did before.
``own_class`` / ``own_member`` say when a receiver is an instance of the program's own class and a method called on it
is the program's own code (``self.norm(x)`` of its own module is not ``Tensor.norm``).
Imports: the standard library and the extract stage's reading of names and classes.
"""

from __future__ import annotations

import ast

from verifier.front.extract import _dotted, _own_chain

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
                     "get_default_dtype", "is_grad_enabled", "set_grad_enabled", "enable_grad", "Generator",
                     "broadcast_shapes", "result_type", "promote_types", "can_cast", "is_floating_point",
                     "is_complex", "sym_int", "sym_float", "sym_not", "sym_max", "sym_min", "sym_sum", "sym_ite"}
# tensor methods and attributes by what they give back
_TENSOR_DESCRIBE = {"size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset", "data_ptr",
                    "element_size", "is_contiguous", "get_device", "item", "tolist", "shape", "device", "dtype",
                    "is_cuda", "ndim", "layout", "requires_grad", "is_leaf", "numpy", "untyped_storage",
                    "storage", "nbytes", "itemsize", "is_floating_point", "is_complex", "is_signed", "is_pinned",
                    "is_same_size"}
_TENSOR_ATTRS = {"T", "mT", "H", "mH", "data", "real", "imag", "grad"}
PATH_CLASSES = {"pathlib.Path", "pathlib.PurePath", "pathlib.PosixPath", "pathlib.PurePosixPath",
                "pathlib.WindowsPath", "pathlib.PureWindowsPath"}
# what a path gives back without touching the file system: another path, or its name
_PATH_PURE = {"with_suffix", "with_name", "with_stem", "joinpath", "relative_to", "absolute", "expanduser",
              "resolve", "parent"}
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
# torch.nn's namespaces of functions, and its classes whose instances are tensors
_NN_NOT_MODULES = {"functional", "init", "parameter", "utils"}
_NN_TENSORS = {"Parameter", "Buffer", "UninitializedParameter", "UninitializedBuffer"}


# decorators that leave a method the function it defines (a property, or any other, may hand back anything)
_PLAIN_DECORATORS = {"staticmethod", "classmethod", "torch.no_grad", "torch.inference_mode",
                     "torch.autograd.grad_mode.no_grad"}


def _defined(cls: ast.ClassDef) -> set[str]:
    """The names a class body binds with ``def``."""
    return {m.name for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _bound_otherwise(cls: ast.ClassDef) -> set[str]:
    """The names a class body binds other than with ``def`` (``relu = torch.relu``, an import, a loop variable)."""
    out: set[str] = set()
    for m in cls.body:
        if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for n in ast.walk(m):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                out.add(n.id)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                out |= {a.asname or a.name.split(".")[0] for a in n.names}
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(n.name)  # a def under an `if` in the class body
    return out


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
        self._writes: dict | None = None  # attribute name -> values stored (_attribute_writes)

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

    # ---- instances of the program's own classes
    def own_class(self, e: ast.AST) -> ast.ClassDef | None:
        """The program's class ``e`` is an instance of: ``self`` in a method of one, ``Block(...)``, a name or a
        ``self.X`` every binding of which is one of those (of one class); None when it cannot say, or when the class
        takes its methods from a class outside the program that could answer for it (``_own_instances``)."""
        cls = self._own_class(e, self.scope_of(e))
        return cls if cls is not None and self._own_instances(cls) else None

    def _own_class(self, e: ast.AST, scope: ast.AST) -> ast.ClassDef | None:
        key = ("own", id(e))
        if key in self._busy or self._depth > 100:
            return None  # a binding that depends on itself
        self._busy.add(key)
        self._depth += 1
        try:
            return self._own_class_of(e, scope)
        finally:
            self._busy.discard(key)
            self._depth -= 1

    def _own_class_of(self, e: ast.AST, scope: ast.AST) -> ast.ClassDef | None:
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and self.classes.get(e.func.id) is not None and \
                self._name_is_class(e.func.id, scope):
            return self.classes[e.func.id]
        if isinstance(e, ast.Name):
            while scope is not self.tree and e.id not in self.bindings(scope):
                scope = self.scope_of(scope)
            binds = self.bindings(scope).get(e.id, [])
            cls = self.parents.get(id(scope))
            if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) and isinstance(cls, ast.ClassDef) and \
                    self.classes.get(cls.name) is cls and (scope.args.posonlyargs + scope.args.args)[:1] and \
                    (scope.args.posonlyargs + scope.args.args)[0].arg == e.id and len(binds) == 1 and \
                    not any(_dotted(d) in ("staticmethod", "classmethod") for d in scope.decorator_list):
                return cls  # the instance a method is called on
            found = {id(c): c for c in (self._own_class(b, scope) if isinstance(b, ast.AST) else None
                                        for b in binds)}
            return found.popitem()[1] if len(found) == 1 and None not in [*found.values()] else None
        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
            cls = self._own_class(e.value, scope)
            binds = self._self_bindings(cls).get(e.attr) if cls is not None else None
            if not binds:
                return None
            found = {id(c): c for c in (self._own_class(v, s) if isinstance(v, ast.AST) else None for v, s in binds)}
            return found.popitem()[1] if len(found) == 1 and None not in [*found.values()] else None
        return None

    def _name_is_class(self, name: str, scope: ast.AST) -> bool:
        """``name`` read in ``scope`` is the module-level class of that name (no other binding shadows it)."""
        while scope is not self.tree:
            if name in self.bindings(scope):
                return False
            scope = self.scope_of(scope)
        return len(self.bindings(self.tree).get(name, [])) == 1

    def _own_instances(self, cls: ast.ClassDef) -> bool:
        """An instance of ``cls`` is a module or a plain object: every base outside the program is an nn module
        class or object (not a Tensor, whose methods are PyTorch's), and no class of its chain redirects attribute
        lookup (``__getattr__``, ``__getattribute__``) or binds its call to a value (``forward =
        staticmethod(torch.relu)``). Which of its attributes are the program's is ``own_member``'s question."""
        for c in _own_chain(cls, self.classes):
            for b in c.bases:
                inside = isinstance(b, ast.Name) and self.classes.get(b.id) is not None and b.id != "Model"
                full = self.canonical(_dotted(b)) if _dotted(b) else ""
                layer = full.startswith("torch.nn.") and full.split(".")[2] not in _NN_NOT_MODULES and \
                    full.split(".")[-1] not in _NN_TENSORS
                if not inside and not layer and full != "object":
                    return False
            if {"__getattr__", "__getattribute__"} & (_defined(c) | _bound_otherwise(c)) or \
                    not self._only_plain([c], "forward") or not self._only_plain([c], "__call__"):
                return False  # attribute lookup redirected, or a call that runs what a name holds
        return True

    def own_member(self, call: ast.Call) -> bool:
        """``recv.name(...)`` calls the program's own code: ``recv`` is an instance of one of its classes
        (``own_class``) and ``name`` is a method that class's chain defines or an attribute every write of which, in
        the whole program, stores an instance of one of its classes (``self.norm = CudaLayerNorm(...)``); a name also
        written any other way (``self.relu = torch.relu``, ``setattr(self, "relu", ...)``), or a program that writes
        attributes by computed names, is not read as its own."""
        if not isinstance(call.func, ast.Attribute):
            return False
        cls, name = self.own_class(call.func.value), call.func.attr
        if cls is None:
            return False
        writes = self._attribute_writes().get(name, [])
        if self._attribute_writes().get(None):
            return False  # setattr / __dict__ with a name the scan cannot read
        if writes:
            return all(v is not None and self._own_class(v, self.scope_of(v)) is not None and
                       self._own_instances(self._own_class(v, self.scope_of(v))) for v in writes)
        # `self` may be an instance of a subclass of the program's: what any of them binds to the name counts
        family = [k for k in self.classes.values() if any(c is cls for c in _own_chain(k, self.classes))]
        if not all(self._own_instances(k) for k in family):
            return False
        related = {id(c): c for k in family for c in _own_chain(k, self.classes)}.values()
        return self._only_plain(related, name) and any(
            isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name == name
            for c in _own_chain(cls, self.classes) for m in c.body)

    def _only_plain(self, classes, name: str) -> bool:
        """No class of ``classes`` binds ``name`` other than with a ``def`` (``relu = torch.relu`` in a class body),
        and every ``def`` of it keeps the function it defines (no decorator but ``_PLAIN_DECORATORS``: a property,
        or any other, may hand back anything)."""
        for c in classes:
            if name in _bound_otherwise(c):
                return False
            for m in c.body:
                if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name == name and not all(
                        self.canonical(_dotted(d.func if isinstance(d, ast.Call) else d)) in _PLAIN_DECORATORS
                        for d in m.decorator_list):
                    return False
        return True

    def _attribute_writes(self) -> dict:
        """Every value the program stores as an attribute, by the attribute's name (None: a name it computes, or a
        store it cannot read: ``setattr(obj, name, v)``, ``obj.__dict__[...] = v``); a value None when the store
        does not say (a tuple target, an augmented assignment, a delete)."""
        if self._writes is not None:
            return self._writes
        out: dict = {}
        for n in ast.walk(self.tree):
            targets = n.targets if isinstance(n, (ast.Assign, ast.Delete)) else [n.target] if isinstance(
                n, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor, ast.comprehension, ast.NamedExpr)) else \
                [n.optional_vars] if isinstance(n, ast.withitem) and n.optional_vars is not None else []
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                        plain = isinstance(n, (ast.Assign, ast.AnnAssign)) and t is sub
                        out.setdefault(sub.attr, []).append(n.value if plain else None)
                    if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Attribute) and \
                            sub.value.attr == "__dict__":
                        out.setdefault(None, []).append(None)
            if isinstance(n, ast.Call):
                fn = _dotted(n.func).split(".")[-1]
                at = {"setattr": 1, "add_module": 0, "register_module": 0, "register_buffer": 0,
                      "register_parameter": 0}.get(fn)
                if at is not None and len(n.args) > at:
                    key = n.args[at]
                    name = key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
                    out.setdefault(name, []).append(n.args[at + 1] if len(n.args) > at + 1 else None)
            if isinstance(n, ast.Attribute) and n.attr == "__dict__":
                out.setdefault(None, []).append(None)  # a namespace written or read by computed names
        self._writes = out
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

    # ---- Python numbers and sizes; storages
    def number(self, node: ast.AST) -> bool:
        """``node``'s value is a Python number or a tuple of them, read from the tensors' sizes and the literals
        (``x.shape``, ``x.size(1)``, ``x.numel() // x.shape[-1]``, ``len(dims)``, ``256``, a name every binding of
        which is one, ``self.block`` set so in ``__init__``): what Python's operators on it compute is integer
        arithmetic, never a tensor's. Conservative: anything it cannot read (a function's parameter, an element of a
        list, a tensor's values) is not a number."""
        return self._number(node, self.scope_of(node)) is True

    def _number(self, e: ast.AST, scope: ast.AST):
        self._depth += 1
        try:
            return False if self._depth > 100 else self._number_of(e, scope)
        finally:
            self._depth -= 1

    def _numbers(self, exprs, scope) -> bool | None:
        """Every one of ``exprs`` a number (a self-reference, None, decides nothing); False when one is not."""
        got = [self._number(x, scope) for x in exprs]
        return False if False in got or not got else True if True in got else None

    def _number_of(self, e: ast.AST, scope: ast.AST):
        if isinstance(e, ast.Constant):
            return isinstance(e.value, (int, float, complex))  # bool is an int
        if isinstance(e, (ast.Tuple, ast.List)):
            return self._numbers(e.elts, scope) if e.elts else True
        if isinstance(e, ast.Starred):
            return self._number(e.value, scope)
        if isinstance(e, ast.Name):
            key = ("num", e.id)
            while scope is not self.tree and e.id not in self.bindings(scope):
                scope = self.scope_of(scope)
            binds = self.bindings(scope).get(e.id, [])
            mkey = (id(scope),) + key
            if mkey in self._busy:
                return None  # `n = n * 2`: the other bindings decide
            if mkey in self._memo:
                return self._memo[mkey]
            self._busy.add(mkey)
            try:
                got = [self._number(b[1].value, scope) if isinstance(b, tuple) else
                       self._number(b, scope) if isinstance(b, ast.AST) else False for b in binds]
            finally:
                self._busy.discard(mkey)
            out = False if False in got or not got else True if True in got else None
            self._memo[mkey] = out
            return out
        if isinstance(e, ast.Attribute):
            if isinstance(e.value, ast.Name) and e.value.id == "self":
                cls = self.parents.get(id(scope))
                binds = self._self_bindings(cls).get(e.attr) if isinstance(cls, ast.ClassDef) else None
                if not binds:
                    return False
                mkey = ("self-num", id(cls), e.attr)
                if mkey in self._busy:
                    return None
                self._busy.add(mkey)
                try:
                    got = [self._number(v, s) if isinstance(v, ast.AST) else False for v, s in binds]
                finally:
                    self._busy.discard(mkey)
                return False if False in got else True if True in got else None
            return e.attr in ("shape", "ndim") and self._expr(e.value, scope) == TENSOR
        if isinstance(e, ast.Subscript):
            return self._number(e.value, scope)  # an element or a slice of a size
        if isinstance(e, ast.BinOp):
            return self._numbers([e.left, e.right], scope)
        if isinstance(e, ast.UnaryOp):
            return self._number(e.operand, scope)
        if isinstance(e, ast.IfExp):
            return self._numbers([e.body, e.orelse], scope)
        if isinstance(e, ast.Call):
            raw = _dotted(e.func)
            full = self.canonical(raw) if raw else ""
            args = [*e.args, *(k.value for k in e.keywords)]
            if isinstance(e.func, ast.Name) and full == e.func.id:
                if e.func.id in ("len", "int", "float", "bool"):
                    return True  # a Python number whatever it is handed
                if e.func.id in ("min", "max", "sum", "tuple", "list", "divmod", "pow"):
                    return self._numbers(args, scope)
            if full.startswith(("math.", "operator.", "_operator.")) and args:
                return self._numbers(args, scope)
            if full in ("torch.sym_int", "torch.sym_float"):
                return True  # Python's int and float of a size
            if full in ("torch.sym_max", "torch.sym_min", "torch.sym_sum") and args:
                return self._numbers([x for a in args for x in (a.elts if isinstance(a, (ast.List, ast.Tuple))
                                                                   else [a])], scope)
            if full in ("functools.reduce", "itertools.accumulate") and len(args) >= 2:
                return self._numbers(args[1:], scope)
            if isinstance(e.func, ast.Attribute) and e.func.attr in _TENSOR_SIZES and \
                    self._expr(e.func.value, scope) == TENSOR:
                return True
        return False

    def storage(self, node: ast.AST) -> bool:
        """``node`` is a tensor's storage (``x.untyped_storage()``, ``x.storage()``, a name bound only to one): its
        bytes, outside PyTorch's operators."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _STORAGE_CALLS:
            return True
        if isinstance(node, ast.Name):
            scope = self.scope_of(node)
            while scope is not self.tree and node.id not in self.bindings(scope):
                scope = self.scope_of(scope)
            binds = self.bindings(scope).get(node.id, [])
            return any(isinstance(b, ast.Call) and self.storage(b) for b in binds)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            cls = self.parents.get(id(self.scope_of(node)))
            binds = self._self_bindings(cls).get(node.attr, []) if isinstance(cls, ast.ClassDef) else []
            return any(isinstance(v, ast.Call) and self.storage(v) for v, _ in binds)
        return False


# tensor methods that give back a size or a count (a Python int or a tuple of them)
_TENSOR_SIZES = {"size", "numel", "dim", "ndimension", "nelement", "stride", "element_size", "storage_offset",
                 "data_ptr", "get_device"}
# what gives a tensor's storage
_STORAGE_CALLS = {"untyped_storage", "storage", "_typed_storage", "untyped"}
