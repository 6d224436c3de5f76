"""Other valid shapes of a task, for the extra-shape trial (verifier/common/inputs.py draws them).

An extra-shape trial (C14, hard-coded shapes) must feed inputs the task itself could produce: the task's
get_inputs, run with its size constants changed, so whatever get_inputs guarantees (square, symmetric,
positive, one N for every dimension) still holds. A size constant is a module-level int (or tuple of
ints), written as a literal or as a constant integer expression (``2048 * 2``, ``4 * 1024``, ``1 << 12``),
that get_inputs reads, directly or through other constants, and that neither get_init_inputs nor the Model
class reads (those fix the weights the candidate was built with, or are axes); a constant derived from
others (``K = N // 2``) is never replaced: it follows the constants it is derived from, as the task derives
it. A size written inside get_inputs is one too: an int literal or a constant expression given to a tensor
factory as a size (``torch.randn(batch, 4 * 256)``), or bound to a local name that sizes use (``n = 1 << 10``).
A changed constant is replaced whole (the expression by its new value). Every constant of the same value gets
the same new value (equal sizes stay equal: square stays square), about 3/2 of the old one, keeping its
power-of-two factor up to 32 and its other small factors (3, 9, 5, 25, 7) where a step of about 3/2 allows
(``other_size``: 1000 -> 1400, 3072 -> 4608); a later variant keeps every small factor whatever the step
(``other_size_keeping_all``: 96 -> 192), for a task that needs one the first dropped.
A size below ``MIN_SIZE`` (8), named or written, stays put: 3 channels of an RGB image, 2 of a pair, 4 of a box are
what the task means, and a kernel may rely on them as on anything the task guarantees (changed, an honest
``TORCH_CHECK(img.size(1) == 3)`` was C14: docs/ANTI_CHEAT.md class 61); the larger sizes still change.

Imports: the standard library.
"""

from __future__ import annotations

import ast
import json
import math
import types
from dataclasses import dataclass, field

_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
        ast.LShift: lambda a, b: a << b if 0 <= b <= 62 else None,
        ast.RShift: lambda a, b: a >> b if 0 <= b <= 62 else None,
        ast.Pow: lambda a, b: a ** b if 0 <= b <= 62 and abs(a) <= 1 << 16 else None}


def const_int(node: ast.AST) -> int | None:
    """The value of a constant integer expression (int literals with + - * // % << >> ** and unary + -), or None
    (a name, a float, a call: not a constant size)."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = const_int(node.operand)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        a, b = const_int(node.left), const_int(node.right)
        if a is None or b is None or (isinstance(node.op, (ast.FloorDiv, ast.Mod)) and b == 0):
            return None
        v = _OPS[type(node.op)](a, b)
        return v if v is not None and abs(v) < 1 << 62 else None
    return None


def _parse_sizes(program_text: str) -> ast.Module:
    """The task program's tree with its module-level assignments one name each, as the size constants are read and
    rewritten: ``batch_size, dim = 64, 4000`` (a tuple or list of names from one of values), ``N: int = 4096`` (an
    annotated name) and ``M = N = 1024`` (a chain) become ``NAME = value`` statements in their order, so a size
    written either way is changed on the extra-shape trial as one on a line of its own is
    (docs/ANTI_CHEAT.md class 26). The same bindings: each value is evaluated once, as the original statement did."""
    tree = ast.parse(program_text)
    body = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and node.simple and isinstance(node.target, ast.Name) and node.value:
            node = ast.copy_location(ast.Assign(targets=[node.target], value=node.value), node)
        pairs = _one_name_each(node)
        body += [ast.copy_location(ast.Assign(targets=[t], value=v), node) for t, v in pairs] if pairs else [node]
    tree.body = body
    return ast.fix_missing_locations(tree)


def _one_name_each(node: ast.AST) -> list[tuple[ast.Name, ast.AST]]:
    """(name, value) for each name an assignment of constant ints binds where it binds several at once (a tuple or
    list of names from one of as many constant ints, a chain of names), else []."""
    if not isinstance(node, ast.Assign):
        return []
    if len(node.targets) > 1:
        chain = all(isinstance(t, ast.Name) for t in node.targets) and const_int(node.value) is not None
        return [(t, node.value) for t in node.targets] if chain else []
    names, values = node.targets[0], node.value
    if not (isinstance(names, (ast.Tuple, ast.List)) and isinstance(values, (ast.Tuple, ast.List))):
        return []
    if len(names.elts) != len(values.elts) or not all(isinstance(t, ast.Name) for t in names.elts):
        return []
    if not all(const_int(v) is not None for v in values.elts):
        return []
    return list(zip(names.elts, values.elts))


def _module_ints(tree: ast.Module) -> dict[str, ast.AST]:
    """Module-level ``NAME = <constant int expression, or tuple/list of them>`` assignments (the value nodes);
    a value that reads other names is derived, not listed."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            v = node.value
            elts = v.elts if isinstance(v, (ast.Tuple, ast.List)) else [v]
            if elts and all(const_int(e) is not None for e in elts):
                out[node.targets[0].id] = v
    return out


def _values(node: ast.AST) -> int | list[int]:
    if isinstance(node, (ast.Tuple, ast.List)):
        return [const_int(e) for e in node.elts]
    return const_int(node)


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _reach(start: set[str], deps: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), list(start)
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo += list(deps.get(n, ()))
    return seen


def size_constants(program_text: str) -> tuple[list[str], list[int]]:
    """The task's size constants: module-level names, and the values of the sizes written inside get_inputs
    (see above)."""
    try:
        tree = _parse_sizes(program_text)
    except SyntaxError:
        return [], []
    deps: dict[str, set[str]] = {}
    funcs: dict[str, ast.AST] = {}
    classes: list[ast.AST] = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        deps.setdefault(n.id, set()).update(_names_in(node.value))
        elif isinstance(node, ast.FunctionDef):
            funcs[node.name] = node
            deps.setdefault(node.name, set()).update(_names_in(node))
        elif isinstance(node, ast.ClassDef):
            classes.append(node)
    if "get_inputs" not in funcs:
        return [], []
    used = _reach(_names_in(funcs["get_inputs"]), deps)
    fixed = _reach(set().union(*[_names_in(c) for c in classes],
                               _names_in(funcs["get_init_inputs"]) if "get_init_inputs" in funcs else set()), deps)
    ints = _module_ints(tree)
    bound_names = _reach(_randint_bound_names(tree), deps)
    names = [n for n in ints if n in used and n not in fixed and n not in bound_names]
    literals = sorted({v for _, v in _size_nodes(funcs["get_inputs"])})
    return names, literals


MIN_SIZE = 8  # sizes below this stay put on the extra shape (the section's comment above)

_FACTORIES = {"randn", "rand", "zeros", "ones", "empty", "full", "randint", "randperm", "eye", "arange", "normal",
              "rand_like", "Tensor", "FloatTensor"}


def _call_name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _size_args(call: ast.Call) -> list[ast.AST]:
    """The arguments of a tensor factory call that are its sizes (each element of a tuple / list of sizes)."""
    name = _call_name(call)
    args = list(call.args)
    if name == "randint":
        args = [a for a in args if isinstance(a, (ast.Tuple, ast.List))]
    elif name == "full":
        args = args[:1]
    args += [k.value for k in call.keywords if k.arg == "size"]
    out = []
    for a in args:
        out += a.elts if isinstance(a, (ast.Tuple, ast.List)) else [a]
    return out


def _bounds(func: ast.AST) -> set[int]:
    """randint's value bounds written as constants inside ``func`` (index ranges, not sizes)."""
    out = set()
    for call in ast.walk(func):
        if isinstance(call, ast.Call) and _call_name(call) == "randint":
            for a in list(call.args) + [k.value for k in call.keywords if k.arg in ("low", "high")]:
                if not isinstance(a, (ast.Tuple, ast.List)) and const_int(a) is not None:
                    out.add(const_int(a))
    return out


def _size_nodes(func: ast.AST) -> list[tuple[ast.AST, int]]:
    """The size constants written inside get_inputs, as (node, value): constant int expressions (a literal, or
    ``4 * 256``) given to a tensor factory as a size, or bound to a local name that a factory's sizes read
    (``n = 1 << 10``); a value that is also one of randint's bounds stays put (an index range, not a size), and so
    does one below ``MIN_SIZE``."""
    calls = [c for c in ast.walk(func) if isinstance(c, ast.Call) and _call_name(c) in _FACTORIES]
    direct = [a for c in calls for a in _size_args(c)]
    size_names = set().union(*[_names_in(a) for a in direct]) if direct else set()
    local = [st.value for st in ast.walk(func) if isinstance(st, ast.Assign) and len(st.targets) == 1
             and isinstance(st.targets[0], ast.Name) and st.targets[0].id in size_names]
    bounds = _bounds(func)
    out, seen = [], set()
    for node in direct + local:
        v = const_int(node)
        if v is not None and v >= MIN_SIZE and v not in bounds and id(node) not in seen:
            seen.add(id(node))
            out.append((node, v))
    return out


def _randint_bound_names(tree: ast.AST) -> set[str]:
    """Names used as randint's value range anywhere: index ranges, not sizes (changing one alone would
    make indices the model's fixed tables cannot take)."""
    out = set()
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and _call_name(call) == "randint":
            for a in call.args:
                if not isinstance(a, (ast.Tuple, ast.List)):
                    out |= _names_in(a)
            for k in call.keywords:
                if k.arg in ("low", "high"):
                    out |= _names_in(k.value)
    return out


KEPT_FACTORS = 32 * 9 * 25 * 7  # the small factors a changed size keeps where it can (2^5, 3^2, 5^2, 7)


def other_size(v: int, ratio: tuple[int, int] = (3, 2)) -> int:
    """About 3/2 of ``v``, a multiple of its power-of-two factor up to 32 and of as many of its other small
    factors (3, 9, 5, 25, 7: its gcd with KEPT_FACTORS) as a step of about 3/2 allows (the largest such divisor
    ``g`` for which rounding 3/2 of ``v`` down to a multiple of ``g`` still grows it), or ``v`` plus its
    power-of-two factor. A size divisible by 3, 10 or 96 stays so; 224 becomes 320, not 448. Larger, not
    smaller: a kernel written for the benchmark size then leaves part of the output unwritten (wrong, C14)
    instead of writing past a smaller buffer."""
    two = math.gcd(v, 32) or 1
    kept = math.gcd(v, KEPT_FACTORS) or 1
    for g in sorted((d for d in range(two, kept + 1, two) if kept % d == 0), reverse=True):
        new = (v * ratio[0] // ratio[1]) // g * g
        if new > v:
            return new
    return v + two


def other_size_keeping_all(v: int, ratio: tuple[int, int] = (3, 2)) -> int:
    """About 3/2 of ``v`` (or ``v`` plus it), a multiple of all of its small factors (its gcd with KEPT_FACTORS):
    96 becomes 192, 224 448. The fallback variant for a task whose sizes must keep a factor ``other_size`` drops
    (a size divisible by 96 that the task also needs divisible by 3)."""
    g = math.gcd(v, KEPT_FACTORS) or 1
    new = (v * ratio[0] // ratio[1]) // g * g
    return new if new > v else v + g


@dataclass
class SizeChange:
    """Which size constants an extra-shape trial changes, and to what (travels to the child as JSON)."""

    names: dict = field(default_factory=dict)  # module-level name -> new value (an int or a list of ints)
    literals: dict = field(default_factory=dict)  # str(old size inside get_inputs) -> new value

    def to_json(self) -> str:
        return json.dumps({"names": self.names, "literals": self.literals}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "SizeChange":
        d = json.loads(text)
        return cls(names=dict(d.get("names", {})), literals=dict(d.get("literals", {})))

    def describe(self) -> str:
        parts = [f"{k} = {v}" for k, v in self.names.items()] + [f"{k} -> {v}" for k, v in self.literals.items()]
        return ", ".join(parts)


# the steps an extra shape may take, one drawn at random per plan (verifier/judge/plan.py): a kernel special-cased for one
# fixed function of the task's sizes (384 -> 576) meets another
SIZE_RATIOS = ((5, 4), (3, 2), (7, 4), (2, 1))


def size_changes(program_text: str, ratio: tuple[int, int] = (3, 2)) -> list[SizeChange]:
    """The extra-shape variants to try, in order: every size constant changed at once, then each alone (the
    caller keeps the first the reference accepts); then the same with every small factor kept
    (``other_size_keeping_all``) where that differs (a task that needs a factor the first step dropped)."""
    names, literals = size_constants(program_text)
    if not names and not literals:
        return []
    tree = _parse_sizes(program_text)
    ints = _module_ints(tree)

    def new_value(node, size):
        v = _values(node)
        if isinstance(v, list):
            return [size(e) if e >= MIN_SIZE else e for e in v]
        return size(v) if v >= MIN_SIZE else v

    out = []
    for base in (other_size, other_size_keeping_all):
        size = (lambda v, base=base: base(v, ratio))
        every_name = {n: new_value(ints[n], size) for n in names}
        every_name = {n: v for n, v in every_name.items() if v != _values(ints[n])}
        every_lit = {str(v): size(v) for v in literals}
        variants = [SizeChange(every_name, every_lit)] if (every_name or every_lit) else []
        if len(every_name) + len(every_lit) > 1:
            variants += [SizeChange({n: v}, {}) for n, v in every_name.items()]
            variants += [SizeChange({}, {k: v}) for k, v in every_lit.items()]
        out += [c for c in variants if c not in out]
    return out


class _Replace(ast.NodeTransformer):
    """Replaces the nodes whose ids are keys of ``new`` by int constants."""

    def __init__(self, new: dict[int, int]):
        self.new = new

    def visit(self, node):
        if id(node) in self.new:
            return ast.copy_location(ast.Constant(int(self.new[id(node)])), node)
        return super().visit(node)


class _Rewrite(ast.NodeTransformer):
    def __init__(self, change: SizeChange):
        self.change = change

    def visit_Module(self, node):
        for k, stmt in enumerate(node.body):
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                    and stmt.targets[0].id in self.change.names:
                v = self.change.names[stmt.targets[0].id]
                stmt.value = (ast.Tuple(elts=[ast.Constant(int(x)) for x in v], ctx=ast.Load())
                              if isinstance(v, list) else ast.Constant(int(v)))
            elif isinstance(stmt, ast.FunctionDef) and stmt.name == "get_inputs" and self.change.literals:
                new = {id(n): self.change.literals[str(v)] for n, v in _size_nodes(stmt)
                       if str(v) in self.change.literals}
                node.body[k] = _Replace(new).visit(stmt)
        return node


def variant_program(program_text: str, change: SizeChange) -> str:
    """The task program with its size constants changed."""
    tree = _Rewrite(change).visit(_parse_sizes(program_text))
    return ast.unparse(ast.fix_missing_locations(tree))


_VARIANTS: dict[tuple[str, str], object] = {}


def variant_get_inputs(program_text: str, change_json: str):
    """get_inputs of the task program with the size change applied (the program run once per process)."""
    key = (program_text, change_json)
    if key not in _VARIANTS:
        mod = types.ModuleType("km_reference_variant")
        exec(compile(variant_program(program_text, SizeChange.from_json(change_json)), "<reference variant>", "exec",
                     dont_inherit=True), mod.__dict__)
        _VARIANTS[key] = mod.get_inputs
    return _VARIANTS[key]
