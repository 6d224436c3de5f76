"""The static stage's reading of a program's structure: which of its functions and classes can run (liveness from
ModelNew, its bases and the module-level code: extract.live_definitions, which the extract stage reads too), which
code only construction reaches (a function construction stores as a value is not: forward may run it), which code
only a backward pass runs (a torch.autograd.Function's ``backward`` that forward does not name), which ``self.X`` of a
class are PyTorch layers (an nn container only when a PyTorch layer is among its members; a class of the program that
inherits a layer without a forward of its own is one), where a class built on a layer reaches the layer's code, and
which except handlers cannot complete without raising.

It reads names, not values: conservative where Python is dynamic (any mention of a name makes it live). Two
readings that go a little further, within one scope at a time, live beside it: what a value is (static_kinds.py,
``Kinds``) and whether a side stream is joined back before the function that uses it returns (static_streams.py,
``side_stream_hits``).
"""

from __future__ import annotations

import ast

from verifier.front.extract import (
    _class_defs,
    _dotted,
    _own_chain,
    _refs,
    live_definitions,
)

# nn classes that hold parameters or modules, or compute nothing in eval mode (a view, the identity)
_NN_NO_COMPUTE = {"Parameter", "ParameterList", "ParameterDict", "Flatten", "Unflatten", "Identity", "Dropout",
                  "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "Module"}
# nn.Module methods that return the module itself: `nn.Linear(...).cuda()` is the layer
_MODULE_RETURNS_SELF = {"cuda", "cpu", "to", "half", "float", "double", "bfloat16", "eval", "train", "requires_grad_",
                        "to_empty", "type", "share_memory", "apply", "zero_grad"}
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
        dead = backward_only_nodes(self.tree, self.classes, self.canonical)
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

    def runs_layer(self, call: ast.AST) -> str:
        """The PyTorch layer whose forward an instance built by ``call`` runs when it is a class of the program
        that inherits one and defines no forward of its own (``class Act(nn.GELU): pass``); "" otherwise."""
        cls = self.classes.get(call.func.id) if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) \
            else None
        if cls is None or own_forward(cls, self.classes):
            return ""
        layers = [full for _, full in layer_bases(cls, self.classes, self.canonical)
                  if full.split(".")[-1] not in _NN_NO_COMPUTE]
        return layers[0] if layers else ""

    def computes(self, call: ast.Call, fn: ast.AST | None) -> bool:
        """Whether an nn construction computes with PyTorch when called: a layer does (not those in
        _NN_NO_COMPUTE), and so does a class of the program that inherits one without a forward of its own
        (``runs_layer``); a container does when a layer is among its members, read from its arguments and, for
        names they use, from what the enclosing function assigns or appends to those names. nn.Module's methods that
        return the module itself (``nn.Linear(...).cuda()``, ``.to(device)``, ``.eval()``) are looked through."""
        while isinstance(call.func, ast.Attribute) and call.func.attr in _MODULE_RETURNS_SELF and \
                isinstance(call.func.value, ast.Call):
            call = call.func.value
        if self.runs_layer(call):
            return True
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
        return any((self.nn_class(n) and self.nn_class(n) not in _NN_NO_COMPUTE | _NN_CONTAINERS) or
                   self.runs_layer(n) for src in sources for n in ast.walk(src))

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
                                if self.computes(node.value, fn):
                                    out.add(t.attr)
                        continue
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                            node.func.attr in ("add_module", "register_module") and len(node.args) == 2 and \
                            isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                        target, value = node.args[0].value, node.args[1]
                    if target and isinstance(value, ast.Call) and self.computes(value, fn):
                        out.add(target)
        return out


# ---- classes of the program built on a PyTorch layer (`class ModelNew(nn.Conv2d)`: its parameters and their
# initialisation), which compute as the layer does unless they define forward themselves
def layer_bases(cls: ast.ClassDef, classes: dict[str, ast.ClassDef], canonical) -> list[tuple[ast.expr, str]]:
    """(base, its canonical name) for each base of ``cls``'s chain that is a PyTorch nn layer (``torch.nn.Conv2d``):
    the classes it takes parameters, initialisation and methods from. Not nn.Module, nor the containers (Sequential,
    ModuleList, ModuleDict: their members are the layers, which a forward of the program's would run)."""
    out = []
    for c in _own_chain(cls, classes):
        for b in c.bases:
            if isinstance(b, ast.Name) and b.id in classes and b.id != "Model":
                continue
            raw = _dotted(b)
            full = canonical(raw) if raw else ""
            if full.startswith("torch.nn.") and full.split(".")[-1] not in {"Module", *_NN_CONTAINERS} and \
                    full.split(".")[2] not in ("init", "functional", "utils", "parameter"):
                out.append((b, full))
    return out


def own_forward(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> bool:
    """``cls`` or a class of the program along its first bases (the front of its method resolution order,
    before any class outside the program) defines ``def forward``: its instances run that, not a layer's."""
    c, seen = cls, set()
    while c is not None and id(c) not in seen:
        seen.add(id(c))
        if any(isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name == "forward" for m in c.body):
            return True
        first = c.bases[0] if c.bases else None
        c = classes.get(first.id) if isinstance(first, ast.Name) and first.id != "Model" else None
    return False


def _layer_methods(full: str) -> set[str]:
    """The attributes the PyTorch nn class ``full`` (``torch.nn.Conv2d``) has beyond nn.Module's
    (``_conv_forward``, ``reset_parameters``); none for a name torch does not have."""
    from torch import nn  # here: the scan's other readings run without torch
    obj = nn
    for part in full.split(".")[2:]:
        obj = getattr(obj, part, None)
    return set(dir(obj)) - set(dir(nn.Module)) if isinstance(obj, type) else set()


def layer_reaches(cls: ast.ClassDef, classes: dict[str, ast.ClassDef], canonical,
                  skip: set[int]) -> list[tuple[ast.AST, str]]:
    """Where ``cls``'s chain, outside the nodes ``skip`` (construction), runs the code of a PyTorch layer it
    inherits: ``Base.X`` for a layer base (``nn.Conv2d.forward(self, x)``; ``__init__`` aside), ``super().X``
    and ``self.X(...)`` for a method the layer defines beyond nn.Module's and the program does not
    (``self._conv_forward(...)``); ``super().forward`` is judged with the reference's. (node, what) each."""
    bases = layer_bases(cls, classes, canonical)
    if not bases:
        return []
    fulls = {full for _, full in bases}
    layer_methods = {m for full in fulls for m in _layer_methods(full)}
    chain = _own_chain(cls, classes)
    own_names = {m.name for c in chain for m in c.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
    # what the program itself puts on the instance (`self.scale = ...`, add_module("proj", ...)); anything else
    # called on it, beyond nn.Module's own methods, is the layer's (a method, or a submodule its __init__ built:
    # nn.MultiheadAttention's out_proj)
    own_names |= {t.attr for c in chain for n in ast.walk(c) for t in ast.walk(n) if isinstance(t, ast.Attribute)
                  and isinstance(t.ctx, ast.Store) and _dotted(t.value) == "self"}
    own_names |= {n.args[0].value for c in chain for n in ast.walk(c) if isinstance(n, ast.Call) and n.args and
                  isinstance(n.func, ast.Attribute) and n.func.attr in ("add_module", "register_module") and
                  isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str)}
    from torch import nn  # here: the scan's other readings run without torch
    module_api = set(dir(nn.Module)) - {"forward", "__call__"}
    out = []
    for c in chain:
        for n in ast.walk(c):
            if id(n) in skip:
                continue
            if isinstance(n, ast.Attribute) and n.attr != "__init__" and _dotted(n.value) and \
                    canonical(_dotted(n.value)) in fulls:
                out.append((n, f"reaches `{_dotted(n)}`, the PyTorch layer it inherits from"))
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                    n.func.attr in layer_methods - own_names and isinstance(n.func.value, ast.Call) and \
                    _dotted(n.func.value.func) == "super":
                out.append((n, f"calls `super().{n.func.attr}`, a method of the PyTorch layer it inherits from"))
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                # self.X(...), self.X.forward(...): X neither the program's nor nn.Module's
                member = n.func.value if n.func.attr in ("forward", "__call__") and \
                    isinstance(n.func.value, ast.Attribute) else n.func
                if isinstance(member, ast.Attribute) and _dotted(member.value) == "self" and \
                        member.attr not in own_names and member.attr not in module_api:
                    what = f"calls `self.{member.attr}`, which the PyTorch layer it inherits from defines or built"
                    out.append((n, what))
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


# the methods of a torch.autograd.Function that only a backward pass (or forward-mode AD) runs
_AUTOGRAD_BACKWARD = {"backward", "vjp", "jvp"}
_AUTOGRAD_FUNCTION = {"torch.autograd.Function", "torch.autograd.function.Function",
                      "torch.autograd.function.InplaceFunction"}


def backward_only_nodes(tree: ast.Module, classes: dict[str, ast.ClassDef], canonical) -> set[int]:
    """Ids of the nodes of the ``backward`` (``vjp``, ``jvp``) of the program's ``torch.autograd.Function``
    classes that nothing a ``forward`` / ``__call__`` reaches names (by name, conservatively: a direct call
    ``Fn.backward(ctx, g)``, ``y.backward()``, ``torch.autograd.backward`` all name it): the verifier runs forward
    only, so PyTorch compute there never stands in for the kernel. Its other rules (files, processes, patching)
    still read them."""
    funcs = _functions_by_name(tree)
    reached = _closure(funcs, {"forward", "__call__"})
    ids: set[int] = set()
    for cls in classes.values():
        chain = _own_chain(cls, classes)
        if not any(canonical(_dotted(b)) in _AUTOGRAD_FUNCTION for c in chain for b in c.bases if _dotted(b)):
            continue
        for f in cls.body:
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name in _AUTOGRAD_BACKWARD and \
                    f.name not in reached:
                ids |= {id(n) for n in ast.walk(f)}
    return ids


def always_raises(try_node: ast.Try, handler: ast.ExceptHandler) -> bool:
    """An except handler of ``try_node`` that cannot complete normally: its last statement is a ``raise`` and nothing
    in it (its nested functions and classes aside) returns, breaks or continues, nor in the try's ``finally`` (which
    would swallow the exception), so every path through it raises out of the try. What it does before (a log line,
    a message built, state set) falls back to nothing: the call fails as it would without the try. A ``raise`` under
    a condition is not this (the handler can end without it)."""
    if not handler.body or not isinstance(handler.body[-1], ast.Raise):
        return False
    todo: list[ast.AST] = [*handler.body, *try_node.finalbody]
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.Return, ast.Break, ast.Continue, ast.Yield, ast.YieldFrom, ast.Await)):
            return False
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(n))
    return True


def stored_functions(tree: ast.Module, funcs: dict[str, list[ast.AST]]) -> set[str]:
    """The names of the program's functions read as values rather than called where they are named (``self.fn =
    self._ref``, ``register_forward_hook(self._hook)``, a decorator): whatever stores them may run them later, from
    forward. One handed to nn.Module's ``apply`` (``self.apply(self._init_weights)``) runs there and then, unless the
    program defines an ``apply`` of its own."""
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    out: set[str] = set()
    for n in ast.walk(tree):
        name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None
        if name not in funcs or not isinstance(n.ctx, ast.Load):
            continue
        p = parents.get(id(n))
        if isinstance(p, ast.Call) and (p.func is n or (isinstance(p.func, ast.Attribute) and p.func.attr == "apply"
                                                         and "apply" not in funcs and n in p.args)):
            continue
        if isinstance(p, ast.Attribute) and p.value is n:
            continue  # an attribute of the function read (`helper.cache_clear`), not the function handed on
        out.add(name)
    return out


def init_only_nodes(tree: ast.Module) -> set[int]:
    """Ids of the nodes in functions that only construction reaches: reachable (by name, conservatively) from
    an ``__init__`` of some class and not from any ``forward`` / ``__call__`` or from a function stored as a value
    (``stored_functions``: ``self.fn = self._ref`` in ``__init__`` runs ``_ref`` from forward). Lambdas and
    functions nested in them are left out (they can be stored and called later, from forward)."""
    funcs = _functions_by_name(tree)
    forward = _closure(funcs, {"forward", "__call__"} | stored_functions(tree, funcs))
    only_init = _closure(funcs, {"__init__"}) - forward - {"get_inputs", "get_init_inputs"}
    ids: set[int] = set()
    for name in only_init:
        for f in funcs[name]:
            nested = {id(n) for g in ast.walk(f) if g is not f and isinstance(g, (ast.Lambda, ast.FunctionDef,
                                                                                 ast.AsyncFunctionDef))
                      for n in ast.walk(g)}
            ids |= {id(n) for n in ast.walk(f)} - nested
    return ids


# a CUDA graph's capture: PyTorch's context manager (``with torch.cuda.graph(g):``) and the graph's own bracket
# (``g.capture_begin()`` ... ``g.capture_end()``)
GRAPH_CAPTURE = frozenset({"torch.cuda.graph", "torch.cuda.graphs.graph"})
# what captures a callable into a graph and returns the callable that replays it
GRAPHED_CALLABLES = frozenset({"torch.cuda.make_graphed_callables", "torch.cuda.graphs.make_graphed_callables"})


def graph_captured_nodes(tree: ast.Module, canonical) -> set[int]:
    """Ids of the nodes a CUDA graph captures: the body of ``with torch.cuda.graph(...)`` (any spelling
    ``canonical`` resolves to it) and the statements between a ``.capture_begin()`` and the next ``.capture_end()``
    of one body. What a capture records runs again at every ``replay()``: written in ``__init__`` it is forward's
    work all the same (a matmul captured at construction and replayed by forward is PyTorch computing the answer),
    never set-up."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.With, ast.AsyncWith)) and any(
                isinstance(item.context_expr, ast.Call)
                and canonical(_dotted(item.context_expr.func)) in GRAPH_CAPTURE for item in node.items):
            ids |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
        for body in (getattr(node, f, None) for f in ("body", "orelse", "finalbody")):
            if not isinstance(body, list):
                continue
            inside = False
            for stmt in body:
                call = stmt.value if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
                method = call.func.attr if call is not None and isinstance(call.func, ast.Attribute) else ""
                if method == "capture_begin":
                    inside = True
                elif method == "capture_end":
                    inside = False
                elif inside:
                    ids |= {id(n) for n in ast.walk(stmt)}
    return ids


def import_time_nodes(tree: ast.Module) -> set[int]:
    """Ids of the nodes that run once, when the program is imported: its module-level statements and class
    bodies, the bodies of the functions and lambdas they define left out (those run when called), and so is a
    generator expression's body (it runs as the generator is consumed, from forward perhaps; its first iterable is
    evaluated at once)."""
    ids: set[int] = set()
    todo: list[ast.AST] = list(tree.body)
    while todo:
        n = todo.pop()
        ids.add(id(n))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            todo.extend(n.decorator_list)  # decorators and defaults run at definition; the body does not
            todo.extend(n.args.defaults + [d for d in n.args.kw_defaults if d is not None])
        elif isinstance(n, ast.Lambda):
            todo.extend(n.args.defaults + [d for d in n.args.kw_defaults if d is not None])
        elif isinstance(n, ast.GeneratorExp):
            todo.append(n.generators[0].iter)
        else:
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
