"""The static stage's reading of reflection: attributes reached by name (``getattr`` / ``hasattr`` / ``setattr`` /
``delattr``) and namespace dicts (``X.__dict__``, ``vars(X)``), judged by what the code does with them and whose
object they are, not by the names it uses.

C11 (monkeypatching) is about writing: replacing, wrapping or deleting an attribute of torch, the verifier, builtins
or any imported module, and writing through a namespace dict (which also bypasses nn.Module's registration, so a
submodule written there is hidden from the runtime checks). Reading is not patching: ``getattr(self.lstm,
"weight_ih_l" + suffix)`` and ``"{eps}".format(**self.__dict__)`` read the candidate's own objects. A module's
attribute reached by a name the scan can read (``getattr(torch, "mat" + "mul")``) is judged as that attribute
(called, it is PyTorch compute, C01); by a name it cannot read, it is a reach into that module's namespace (C11),
and calling it is PyTorch compute as well.

What it does not guarantee: a name built at run time on the candidate's own object could spell a dunder the scan
cannot see (only constant pieces containing ``__`` are caught), and an object reached through a call
(``type(x)``) or a name bound at run time is not followed; the runtime identity checks and the process boundary
(the checks and the reference run where the candidate's code never ran) are the backstop.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

from verifier import cheats
from verifier.front.extract import _dotted
from verifier.front.static_literal import _literal, _Unresolvable
from verifier.front.static_rules import PRIVATE_TORCH_QUERIES, TORCH_BUILDS_CODE

# dunder attributes and names with no reach into other namespaces
DUNDER_OK = {"__init__", "__name__", "__class__", "__doc__", "__qualname__", "__module__", "__version__",
             "__call__", "__len__", "__getitem__", "__setitem__", "__enter__", "__exit__", "__iter__", "__next__",
             "__repr__", "__str__", "__eq__", "__hash__", "__file__", "__annotations__", "__slots__", "__all__",
             "__post_init__", "__contains__", "__bool__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
             "__new__", "__setstate__", "__getstate__"}
# private torch namespaces that reach the dispatcher, the profiler, tracing or compilation: reading them is a
# route to switching the monitors off or to compute that is not the candidate's. Other private helpers are
# plain Python a module may read (nn.init._calculate_fan_in_and_fan_out, nn.modules.utils._pair).
PRIVATE_TORCH_DENIED = ("torch._C", "torch._dynamo", "torch._inductor", "torch._ops", "torch._subclasses",
                        "torch._guards", "torch._functorch", "torch._higher_order_ops", "torch._prims",
                        "torch._refs", "torch._decomp", "torch._library", "torch._logging", "torch._jit_internal",
                        "torch.utils._python_dispatch", "torch.utils._mode_utils", "torch.profiler._",
                        "torch.autograd.profiler", "torch.overrides._", "torch.cuda._")
# what reading a namespace dict looks like: its methods that only read, the builtins that copy or describe it
_DICT_READERS = {"get", "keys", "values", "items", "copy", "__contains__", "__len__", "__iter__", "__getitem__"}
_READ_BUILTINS = {"dict", "list", "tuple", "set", "sorted", "len", "str", "repr", "print", "iter", "any", "all",
                  "enumerate", "frozenset", "format"}


@dataclass
class Hit:
    """One reflection finding, before the scan turns it into a Finding."""
    code: str
    what: str
    torch: bool = False


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def dunder_code(name: str) -> str:
    """The code for touching the dunder ``name``: frames, globals and closures are C15, the rest C11."""
    return cheats.C15 if name.startswith(("__glob", "__code", "__closure", "__self", "__func", "__traceback",
                                          "__frame")) else cheats.C11


def private_torch(full: str) -> bool:
    """A private torch name in a namespace that reaches the dispatcher, the profiler, tracing or compilation
    (PRIVATE_TORCH_DENIED); reading other private helpers is not patching anything (writes are caught apart)."""
    parts = full.split(".")
    if parts[0] != "torch" or not any(p.startswith("_") and not (p.startswith("__") and p.endswith("__"))
                                      for p in parts[1:]) or full[len("torch."):] in PRIVATE_TORCH_QUERIES:
        return False
    return any(full == d or full.startswith(d if d.endswith("_") else d + ".") for d in PRIVATE_TORCH_DENIED)


def foreign_names(tree: ast.Module, imported: set[str]) -> set[str]:
    """Names that stand for something the candidate did not make: every imported name, and every name bound
    (anywhere, conservatively) to a plain reference into one (``F = torch.nn.functional``, ``T = torch.Tensor``).
    A name bound to a call's result (``out = torch.empty(...)``, ``ext = load_inline(...)``) is the candidate's."""
    binds: list[tuple[str, ast.AST]] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign):
            binds += [(t.id, n.value) for t in n.targets if isinstance(t, ast.Name)]
        elif isinstance(n, (ast.AnnAssign, ast.NamedExpr)) and isinstance(n.target, ast.Name) and n.value is not None:
            binds.append((n.target.id, n.value))
    names, grew = set(imported), True
    while grew:
        grew = False
        for name, value in binds:
            head = _dotted(value).split(".")[0]
            if name not in names and head and head in names:
                names.add(name)
                grew = True
    return names


def is_own(node: ast.AST, foreign: set[str]) -> bool:
    """``node`` is one of the candidate's own objects: a name, attribute chain or subscript of one whose root is
    not foreign and that passes through no dunder (``self.__class__``) and no call (``type(x)``, ``super()``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute) and _dunder(node.attr):
            return False
        node = node.value
    return isinstance(node, ast.Name) and node.id not in foreign and not _dunder(node.id) and node.id != "builtins"


def _name_of(arg: ast.AST, env: dict) -> str | None:
    """The attribute name an expression spells, when the scan can read it exactly; else None."""
    try:
        value = _literal(arg, env)
    except _Unresolvable:
        return None
    return value if isinstance(value, str) else None


def _builds_dunder(arg: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and "__" in n.value for n in ast.walk(arg))


def judge_read(recv: ast.AST, name_arg: ast.AST, called: bool, how: str, ctx: "Context") -> list[Hit]:
    """An attribute of ``recv`` read by the name ``name_arg`` spells (``getattr``, ``hasattr``, a namespace dict's
    item); ``called``: the value read is called right there."""
    name = _name_of(name_arg, ctx.env)
    own = is_own(recv, ctx.foreign)
    where = _dotted(recv) or "an object"
    full = f"{ctx.canonical(_dotted(recv))}.{name}" if _dotted(recv) and name is not None else ""
    if name is not None:
        if _dunder(name) and name not in DUNDER_OK:
            return [Hit(dunder_code(name), f"{how} reads `{name}` of `{where}` (interpreter internals)")]
        if own:
            return []
        hits = []
        if name.startswith("_") and not _dunder(name):
            hits.append(Hit(cheats.C11, f"{how} reads the private `{name}` of `{where}`"
                        + (" (torch internals)" if private_torch(full) else "")))
        if called and full and ctx.is_torch_compute(full):
            # torch.compile by name builds code forward runs, wherever it is called (not compute done there)
            hits.append(Hit(cheats.C01, f"{how} calls `{full}` (PyTorch compute by name)",
                            full not in TORCH_BUILDS_CODE))
        return hits
    if own:
        return [Hit(cheats.C11, f"{how} builds a dunder name on `{where}` (interpreter internals)")] \
            if _builds_dunder(name_arg) else []
    hits = [Hit(cheats.C11, f"{how} reads an attribute of `{where}` by a name the scan cannot read (a reach into "
                            "a namespace that is not yours)")]
    if called and ctx.canonical(_dotted(recv)).split(".")[0] == "torch":
        hits.append(Hit(cheats.C01, f"{how} calls an attribute of `{where}` by a computed name (PyTorch compute)",
                        True))
    return hits


def judge_write(recv: ast.AST, name_arg: ast.AST | None, how: str, ctx: "Context") -> list[Hit]:
    """An attribute of ``recv`` written or deleted by name (``setattr``, ``delattr``): a patch unless ``recv`` is the
    candidate's own object and the name is not a dunder."""
    where = _dotted(recv) or "an object the scan cannot name"
    name = _name_of(name_arg, ctx.env) if name_arg is not None else None
    if not is_own(recv, ctx.foreign):
        return [Hit(cheats.C11, f"{how} writes an attribute of `{where}` (patching what is not yours)")]
    if name_arg is None or (name is not None and _dunder(name)) or (name is None and _builds_dunder(name_arg)):
        return [Hit(cheats.C11, f"{how} writes a dunder attribute of `{where}` (interpreter internals)")]
    return []


def namespace_use(node: ast.AST, parents: dict) -> tuple[str, ast.AST | None]:
    """What the code does with the namespace dict ``node`` (``X.__dict__`` or ``vars(X)``): ("read", None),
    ("item", the key) for ``ns[key]`` read, or ("write", None): an item stored or deleted, a mutating method, the
    dict itself replaced, or handed on anywhere the scan cannot follow (a name, an unknown call)."""
    if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
        return "write", None
    p = parents.get(id(node))
    if isinstance(p, ast.Subscript) and p.value is node:
        return ("item", p.slice) if isinstance(p.ctx, ast.Load) else ("write", None)
    if isinstance(p, ast.Attribute) and p.value is node:
        return ("read", None) if p.attr in _DICT_READERS else ("write", None)
    if isinstance(p, ast.keyword) and p.arg is None or isinstance(p, (ast.Starred, ast.FormattedValue)):
        return "read", None
    if isinstance(p, ast.Dict) and any(k is None and v is node for k, v in zip(p.keys, p.values)):
        return "read", None
    if isinstance(p, ast.Compare) and any(c is node for c in p.comparators) and \
            all(isinstance(o, (ast.In, ast.NotIn)) for o in p.ops):
        return "read", None
    if isinstance(p, (ast.For, ast.comprehension)) and p.iter is node:
        return "read", None
    if isinstance(p, ast.Call) and isinstance(p.func, ast.Name) and p.func.id in _READ_BUILTINS and node in p.args:
        return "read", None
    return "write", None


def judge_namespace(node: ast.AST, recv: ast.AST, parents: dict, ctx: "Context") -> list[Hit]:
    """``X.__dict__`` / ``vars(X)`` (``recv`` is X): writing through it is a patch whoever's it is; reading the
    candidate's own is not; an item of a module's read is judged as that attribute read by name."""
    label = f"`{_dotted(recv) or 'an object'}.__dict__`" if isinstance(node, ast.Attribute) else \
        f"`vars({_dotted(recv) or '...'})`"
    use, key = namespace_use(node, parents)
    if use == "write":
        return [Hit(cheats.C11, f"writes through {label} or hands it on (namespaces are written only through "
                                "attributes of your own objects)")]
    if use == "item":
        p = parents.get(id(node))
        call = parents.get(id(p))
        return judge_read(recv, key, isinstance(call, ast.Call) and call.func is p, f"{label}[...]", ctx)
    if is_own(recv, ctx.foreign):
        return []
    return [Hit(cheats.C11, f"reads {label} (the namespace of what is not yours)")]


@dataclass
class Context:
    """What the judgements need from the scan: module constants, the names that are not the candidate's, how to
    spell a dotted name in full, and which torch names compute."""
    env: dict
    foreign: set[str]
    canonical: Callable[[str], str]
    is_torch_compute: Callable[[str], bool]


def judge_call(node: ast.Call, parents: dict, ctx: Context) -> list[Hit] | None:
    """The reflection builtins called by name; None when ``node`` is not one of them."""
    fn = node.func.id if isinstance(node.func, ast.Name) else ""
    args = node.args
    if fn not in ("getattr", "hasattr", "setattr", "delattr", "vars"):
        return None
    if any(isinstance(a, ast.Starred) for a in args) or node.keywords:
        return [Hit(cheats.C11, f"calls `{fn}` with arguments the scan cannot read")]
    if fn == "vars":
        return [Hit(cheats.C15, "calls `vars()` (the caller's local namespace)")] if not args else \
            judge_namespace(node, args[0], parents, ctx)
    if len(args) < 2:
        return []  # a TypeError when it runs
    if fn in ("setattr", "delattr"):
        return judge_write(args[0], args[1], f"`{fn}`", ctx)
    p = parents.get(id(node))
    return judge_read(args[0], args[1], isinstance(p, ast.Call) and p.func is node, f"`{fn}`", ctx)


def judge_store(node: ast.Attribute, ctx: Context) -> Hit | None:
    """An attribute assigned or deleted (``F.relu = fake``, ``del torch.cuda.synchronize``): a patch when its
    object is torch or anything imported, directly or through a name bound to it."""
    dotted = _dotted(node)
    head = dotted.split(".")[0]
    if not dotted or head not in ctx.foreign:
        return None
    full = ctx.canonical(dotted)
    if full.startswith("torch"):
        return Hit(cheats.C11, f"assigns to torch's `{dotted}` (patching torch)")
    return Hit(cheats.C11, f"assigns to `{dotted}`, an attribute of something imported (patching what is not yours)")
