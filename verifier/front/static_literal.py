"""The static stage's reading of constants: Python expressions evaluated without running them (strings, names
bound to constants, ``+``, f-strings, ``str.join``, ``%``- and ``str.format``...), and the ``load_inline`` calls of a
candidate read with them, so that the compile pool can build an extension before anything of the candidate runs.

What it guarantees: a value it returns is exactly what Python computes for that expression; anything it cannot
read exactly (a call, a name bound at run time, a format that would build a huge string) raises
:class:`_Unresolvable` and nothing else, whatever the candidate wrote.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from dataclasses import dataclass, field

from verifier.front.extract import _dotted

LOAD_INLINE_KEYS = ("cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags",
                    "extra_ldflags", "extra_include_paths", "with_cuda", "name")

@dataclass
class ExtensionSpec:
    """The literal arguments of one load_inline call; ``resolved`` False when some could not be read."""
    line: int
    args: dict = field(default_factory=dict)
    resolved: bool = True
    problem: str = ""


class _Unresolvable(Exception):
    pass


# the largest string or sequence a constant expression may build while being read (a source is far smaller)
_MAX_LITERAL = 1 << 24


def _literal(node: ast.AST, env: dict):
    """Evaluate constant strings, names bound to constants, + of strings, lists, tuples, dicts (tuple keys,
    ``**`` unpacking), f-strings of constants and str.join over constants. Anything else raises _Unresolvable,
    and so does anything that fails while being read (never another exception: unusual but valid Python such as
    ``{(1, 2): 3}`` or ``{**A, "b": 2}`` must not stop the scan)."""
    try:
        value = _literal_node(node, env)
    except _Unresolvable:
        raise
    except (RecursionError, MemoryError):
        raise _Unresolvable("expression too deep or too large") from None
    except Exception as e:  # noqa: BLE001 - TypeError, AttributeError, OverflowError...: not a constant we read
        raise _Unresolvable(f"{type(e).__name__}: {e}") from None
    if isinstance(value, (str, list, dict)) and len(value) > _MAX_LITERAL or \
            isinstance(value, int) and value.bit_length() > _MAX_LITERAL // 16:
        raise _Unresolvable("constant too large")
    return value


def _bounded_format(fmt: str, kind: str = "spec", args=()) -> str:
    """``fmt`` when formatting with it cannot build a huge string (a width or precision of millions), else
    _Unresolvable. ``kind``: a format spec (f-string), a ``%`` format or a ``str.format`` template (``args``: its
    arguments, which may be widths of nested fields)."""
    huge = {"spec": r"\d{7,}",
            "percent": r"%[#0\- +]*(?:\*|\d{7,}|\d*\.(?:\*|\d{7,}))",
            "format": r"\{[^{}]*:[^{}]*\d{7,}[^{}]*\}"}[kind]
    if re.search(huge, fmt) or (kind == "format" and "{" in fmt.partition(":")[2] and
                                any(isinstance(a, int) and abs(a) > 10 ** 6 for a in args)):
        raise _Unresolvable("format width too large to read")
    return fmt


def _hashable(value):
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _literal_node(node: ast.AST, env: dict):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise _Unresolvable(node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        out = []
        for e in node.elts:
            if isinstance(e, ast.Starred):
                inner = _literal(e.value, env)
                if not isinstance(inner, (list, tuple, str)):
                    raise _Unresolvable("starred element not a sequence")
                out.extend(inner)
            else:
                out.append(_literal(e, env))
        return out
    if isinstance(node, ast.Dict):
        out_d: dict = {}
        for k, v in zip(node.keys, node.values):
            if k is None:  # {**OTHER, ...}
                inner = _literal(v, env)
                if not isinstance(inner, dict):
                    raise _Unresolvable("** of something not a dict")
                out_d.update(inner)
            else:
                out_d[_hashable(_literal(k, env))] = _literal(v, env)
        return out_d
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        operands = []  # a + b + c + ... is left-nested: read it as a list, not by recursion (long sources)
        while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            operands.append(node.right)
            node = node.left
        operands.append(node)
        acc = _literal(operands[-1], env)
        for o in reversed(operands[:-1]):
            acc = acc + _literal(o, env)
            if isinstance(acc, (str, list)) and len(acc) > _MAX_LITERAL:
                raise _Unresolvable("constant too large")
        return acc
    if isinstance(node, ast.JoinedStr):
        out_s = []
        for v in node.values:
            if isinstance(v, ast.FormattedValue):
                value = _literal(v.value, env)
                if not isinstance(value, (str, int, float, bool)) and value is not None:
                    raise _Unresolvable("f-string of a container")  # a tuple was read as a list: its text differs
                if v.conversion in (ord("r"), ord("s"), ord("a")):
                    value = {ord("r"): repr, ord("s"): str, ord("a"): ascii}[v.conversion](value)
                spec = _bounded_format(_literal(v.format_spec, env)) if v.format_spec is not None else ""
                out_s.append(format(value, spec))
            else:
                out_s.append(_literal(v, env))
        return "".join(out_s)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join"
            and len(node.args) == 1 and not node.keywords):
        sep, items = _literal(node.func.value, env), _literal(node.args[0], env)
        if not isinstance(sep, str) or not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise _Unresolvable("str.join of something not strings")
        return sep.join(items)
    if isinstance(node, ast.Call) and _dotted(node.func) in ("textwrap.dedent", "dedent", "inspect.cleandoc") and \
            len(node.args) == 1 and not node.keywords:
        text = _literal(node.args[0], env)
        if isinstance(text, str):
            return inspect.cleandoc(text) if _dotted(node.func).endswith("cleandoc") else textwrap.dedent(text)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr in ("strip", "lstrip", "rstrip", "replace", "format", "upper", "lower"):
        base = _literal(node.func.value, env)
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise _Unresolvable("starred argument")
        args = [_literal(a, env) for a in node.args]
        kwargs = {k.arg: _literal(k.value, env) for k in node.keywords if k.arg}
        if isinstance(base, str) and len(kwargs) == len(node.keywords) and \
                all(isinstance(a, (str, int, float)) for a in [*args, *kwargs.values()]):
            if node.func.attr == "format":
                _bounded_format(base, "format", [*args, *kwargs.values()])
            if node.func.attr == "replace" and len(args) >= 2 and isinstance(args[0], str) and \
                    isinstance(args[1], str) and args[0] and \
                    len(base) + base.count(args[0]) * max(0, len(args[1]) - len(args[0])) > _MAX_LITERAL:
                raise _Unresolvable("str.replace result too large")
            try:
                return getattr(base, node.func.attr)(*args, **kwargs)
            except (ValueError, IndexError, KeyError, TypeError, AttributeError) as e:
                raise _Unresolvable(f"str.{node.func.attr}: {e}") from None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("str", "int", "float") \
            and len(node.args) == 1 and not node.keywords and not isinstance(node.args[0], ast.Starred):
        value = _literal(node.args[0], env)
        if isinstance(value, (str, int, float)):
            try:
                return {"str": str, "int": int, "float": float}[node.func.id](value)
            except ValueError as e:
                raise _Unresolvable(str(e)) from None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        base, arg = _literal(node.left, env), _literal(node.right, env)
        if isinstance(base, str):
            _bounded_format(base, "percent")
            try:
                return base % (tuple(arg) if isinstance(arg, list) else arg)
            except (ValueError, IndexError, KeyError, TypeError) as e:
                raise _Unresolvable(f"%-format: {e}") from None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        a, b = _literal(node.left, env), _literal(node.right, env)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return a * b
        if isinstance(a, int) and isinstance(b, str):
            a, b = b, a
        if isinstance(a, str) and isinstance(b, int) and not isinstance(b, bool) and len(a) * max(b, 0) <= _MAX_LITERAL:
            return a * b  # "-" * 70 in a generated comment line
    raise _Unresolvable(type(node).__name__)


def _module_constants(tree: ast.Module) -> dict:
    env: dict = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                env[node.targets[0].id] = _literal(node.value, env)
            except _Unresolvable:
                env.pop(node.targets[0].id, None)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            try:
                env[node.target.id] = _literal(node.value, env)
            except _Unresolvable:
                pass
    return env


def _is_load_inline(call: ast.Call) -> bool:
    name = _dotted(call.func)
    return name == "load_inline" or name.endswith(".load_inline")


def resolve_extensions(tree: ast.Module) -> list[ExtensionSpec]:
    """Every load_inline call with its arguments read statically (module-level constants only)."""
    env = _module_constants(tree)
    specs = []
    positional = ("name", "cpp_sources", "cuda_sources")
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _is_load_inline(node)):
            continue
        spec = ExtensionSpec(line=node.lineno)
        given = list(zip(positional, node.args)) + [(kw.arg, kw.value) for kw in node.keywords
                                                      if kw.arg in LOAD_INLINE_KEYS]
        if any(kw.arg is None for kw in node.keywords):
            spec.resolved, spec.problem = False, "load_inline argument not a constant (**kwargs)"
        for key, arg in given:  # each argument on its own: `functions` stays known when a source is not
            try:
                spec.args[key] = _literal(arg, env)
            except _Unresolvable as e:
                spec.resolved = False
                spec.problem = spec.problem or f"load_inline argument not a constant ({e})"
        specs.append(spec)
    return specs


def exported_functions(specs: list[ExtensionSpec]) -> list[str]:
    names: list[str] = []
    for s in specs:
        fns = s.args.get("functions") or []
        if isinstance(fns, str):
            fns = [fns]
        if isinstance(fns, dict):
            names += [str(k) for k in fns]
        elif isinstance(fns, (list, tuple)):
            names += [str(f) for f in fns]
        else:  # not what load_inline takes; the build says so, the scan goes on
            names.append(str(fns))
    return names


# PyTorch's custom-operator API in a candidate's C++: ``TORCH_LIBRARY(ns, m)`` creates the namespace ``ns`` (and
# ``TORCH_LIBRARY_FRAGMENT`` adds to one), ``TORCH_LIBRARY_IMPL(ns, Key, m)`` registers kernels for its operators.
_DEFINE_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*define\b(?:[^\n\\]|\\\n|\\.)*", re.M)
_LIBRARY_MACRO = re.compile(r"\b(TORCH_LIBRARY(?:_FRAGMENT|_IMPL)?)\s*\(\s*(\w+)\s*,")
# namespaces that are PyTorch's whether or not torch can be asked here (aten, prim, the wildcard, the ones torch
# registers itself as it starts)
TORCH_NAMESPACES = frozenset({
    "aten", "prim", "prims", "_", "_c10d_functional", "_c10d_functional_autograd", "_dtensor", "_native",
    "_quantized", "_test", "c10d", "debug_mode_ops", "debugprims", "export", "inductor", "inductor_prims", "mkl",
    "mkldnn", "mkldnn_prepacked", "onednn", "profiler", "quantization", "quantized", "rngprims", "sparse",
    "static_runtime", "symm_mem", "torchvision", "torchaudio", "torchao", "fbgemm", "triton", "higher_order",
    "vllm", "_C", "flash_attn", "xformers"})


def torch_namespaces() -> frozenset[str]:
    """The operator namespaces that are not a candidate's to create: ``TORCH_NAMESPACES`` and every namespace with
    an operator in this process (the verifier's: torch and the libraries it loaded, never a candidate's code)."""
    try:
        import torch

        return TORCH_NAMESPACES | {op.split("::", 1)[0] for op in torch._C._dispatch_get_all_op_names()}
    except Exception:  # noqa: BLE001 - no torch (the scan runs without it): the fixed list
        return TORCH_NAMESPACES


@dataclass
class OperatorLibraries:
    """What a candidate's C++ registers with PyTorch's dispatcher: ``own``, the namespaces it creates that are
    not PyTorch's (its own operators, called as ``torch.ops.<ns>.<op>``); ``foreign``, (macro, namespace) of each
    registration into a namespace that is not its own (a kernel for someone else's operator)."""

    own: set = field(default_factory=set)
    foreign: list = field(default_factory=list)


def operator_libraries(sources: list[str]) -> OperatorLibraries:
    """The ``TORCH_LIBRARY`` blocks of ``sources`` (the C++/CUDA texts of a candidate's extensions, read as
    written and with their own macros expanded, comments and strings removed): its own namespaces and its
    registrations into namespaces it did not create."""
    from verifier.front.vendor import code_text, expanded  # here: the scan of the Python needs neither

    found: list[tuple[str, str]] = []
    for src in sources:
        # as written outside the candidate's own macro definitions (a parameter is no namespace), and expanded
        for text in (_DEFINE_DIRECTIVE.sub(" ", code_text(src)), code_text(expanded(src)) if expanded(src) else ""):
            found += [(m.group(1), m.group(2)) for m in _LIBRARY_MACRO.finditer(text)]
    if not found:
        return OperatorLibraries()
    taken = torch_namespaces()
    own = {ns for macro, ns in found if macro != "TORCH_LIBRARY_IMPL" and ns not in taken}
    foreign = sorted({(macro, ns) for macro, ns in found if ns not in own})
    return OperatorLibraries(own, foreign)


_PY_OPERATOR_APIS = frozenset({"custom_op", "define", "triton_op", "Library"})


def python_operator_namespaces(tree: ast.AST) -> set[str]:
    """The operator namespaces the candidate's Python creates with PyTorch's custom-operator API, written as
    constants: ``torch.library.custom_op("ns::name", ...)`` (a decorator or a call), ``torch.library.define("ns::name",
    ...)``, ``torch.library.Library("ns", "DEF")``; PyTorch's own namespaces left out. What such an operator runs is
    its Python body, which the scans read as any code forward reaches and the monitors watch as it runs."""
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if name not in _PY_OPERATOR_APIS or not node.args:
            continue
        first = node.args[0]
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            continue
        if name == "Library":
            kind = node.args[1] if len(node.args) > 1 else None
            if isinstance(kind, ast.Constant) and kind.value in ("DEF", "FRAGMENT"):
                out.add(first.value.strip())
        elif "::" in first.value:
            out.add(first.value.split("::", 1)[0].strip())
    return {ns for ns in out if ns.isidentifier()} - torch_namespaces()


def extension_sources(specs: list[ExtensionSpec]) -> list[str]:
    """The C++ and CUDA source texts the static stage could read from ``specs``."""
    out = []
    for s in specs:
        for key in ("cpp_sources", "cuda_sources"):
            v = s.args.get(key)
            out += [v] if isinstance(v, str) else [x for x in v if isinstance(x, str)] if isinstance(v, list) else []
    return out
