"""Stage 2, static legality: an AST scan of the candidate, and the static resolution of its
``load_inline`` calls (so the compile pool can build them before anything of the candidate runs).

What the scan guarantees: every finding names a cheat code (verifier/cheats.py), the line and the
construct; it never fails on the candidate's Python (any internal failure is a :class:`StaticScanError`
for that candidate, a verifier fault). What it does not: Python is dynamic, so ``getattr(torch, "mat" + "mul")``
passes this stage; the runtime dispatch check in the execution child is the backstop for every compute rule here.

What it reads as the candidate's forward: ``ModelNew`` is the class the module-level name binds (``class
ModelNew`` or ``ModelNew = Model``, extract.model_new_binding), with the program's classes it inherits from. The
compute rules (C01, and C04's ``Model(...)``) apply to code that can run: module-level code, ModelNew, and the
functions and classes that live code names (transitively); a class or function nothing names (the reference kept
next to the answer, a test helper, a ``__main__`` block) is not scanned for them. The other rules (reflection,
files, processes...) apply everywhere but ``__main__`` blocks. An nn container (Sequential, ModuleList,
ModuleDict) is PyTorch compute only when a PyTorch layer is among its members.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from verifier import cheats
from verifier.extract import _dotted, model_new_binding

# torch.X / torch.cuda.X / F.X calls that allocate, view, describe or synchronise: never compute.
TORCH_ALLOWED = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "tensor", "as_tensor", "Size", "device", "dtype", "no_grad", "inference_mode", "is_tensor", "numel",
    "get_default_dtype", "is_grad_enabled", "set_grad_enabled", "finfo", "iinfo", "Tensor",
    "cuda.current_stream", "cuda.synchronize", "cuda.current_device", "cuda.is_available", "cuda.device",
    "cuda.get_device_properties", "cuda.device_count", "cuda.get_device_capability", "cuda.default_stream",
    "utils.cpp_extension.load_inline", "cpp_extension.load_inline", "load_inline",
    "nn.Parameter", "nn.Module", "nn.ModuleList", "nn.ParameterList", "nn.init.kaiming_uniform_",
    "nn.init.uniform_", "nn.init.zeros_", "nn.init.ones_", "nn.init.normal_", "nn.init.xavier_uniform_",
    # views and copies that move data without computing on it
    "flatten", "unflatten", "reshape", "squeeze", "unsqueeze", "permute", "transpose", "narrow", "split", "chunk",
    "unbind", "cat", "concat", "concatenate", "stack", "as_strided", "empty_strided",
}
# Tensor methods that allocate, view, convert or describe; any other Tensor method is compute.
TENSOR_METHOD_ALLOWED = {
    "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset", "data_ptr", "element_size",
    "is_contiguous", "contiguous", "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten",
    "squeeze", "unsqueeze", "permute", "transpose", "t", "expand", "expand_as", "narrow", "select", "split",
    "chunk", "unbind", "as_strided", "to", "cuda", "cpu", "float", "half", "bfloat16", "double", "int", "long",
    "bool", "type", "type_as", "detach", "requires_grad_", "new_empty", "new_zeros", "new_ones", "new_full",
    "new_tensor", "empty_like", "zero_", "fill_", "copy_", "clone", "item", "get_device",
    "register_buffer", "register_parameter", "parameters", "buffers", "named_parameters", "children",
    "modules", "state_dict", "load_state_dict", "eval", "train", "apply", "register_module", "add_module", "as_subclass",
}
# Module-level imports and calls that reach outside the sandbox, by cheat code.
IMPORT_CODES = {
    "gc": cheats.C15, "inspect": cheats.C15, "pathlib": cheats.C15, "pickle": cheats.C15, "io": cheats.C15,
    "threading": cheats.C09, "_thread": cheats.C09, "concurrent": cheats.C09, "asyncio": cheats.C09,
    "subprocess": cheats.C17, "socket": cheats.C17, "multiprocessing": cheats.C17, "ctypes": cheats.C17,
    "shutil": cheats.C17, "signal": cheats.C17, "urllib": cheats.C17, "http": cheats.C17, "requests": cheats.C17,
    "resource": cheats.C17, "importlib": cheats.C11, "builtins": cheats.C11, "verifier": cheats.C11,
    "kernelmill": cheats.C11, "random": cheats.C12, "numpy.random": cheats.C12,
    # files and what reads them (expected outputs, the job's seeds)
    "glob": cheats.C15, "fileinput": cheats.C15, "linecache": cheats.C15, "tempfile": cheats.C15,
    "zipfile": cheats.C15, "tarfile": cheats.C15, "sqlite3": cheats.C15, "shelve": cheats.C15, "dbm": cheats.C15,
    "tracemalloc": cheats.C15,
    # the operating system, other processes, raw memory
    "mmap": cheats.C17, "cffi": cheats.C17, "pty": cheats.C17, "fcntl": cheats.C17, "select": cheats.C17,
    "selectors": cheats.C17, "ssl": cheats.C17, "ftplib": cheats.C17, "smtplib": cheats.C17,
    "xmlrpc": cheats.C17, "webbrowser": cheats.C17,
    # code built or run at run time, interpreter hooks
    "marshal": cheats.C11, "types": cheats.C11, "code": cheats.C11, "codeop": cheats.C11, "runpy": cheats.C11,
    "dis": cheats.C11, "copyreg": cheats.C11, "atexit": cheats.C11, "faulthandler": cheats.C11, "site": cheats.C11,
    "sysconfig": cheats.C11, "pydoc": cheats.C11, "pkgutil": cheats.C11, "zipimport": cheats.C11,
}
# sys.X / os.X a kernel may touch; any other is a reach into the interpreter (C11) or the system (C17)
SYS_ALLOWED = {"version", "version_info", "platform", "maxsize", "float_info", "int_info", "byteorder",
               "getrecursionlimit", "hexversion", "implementation"}
OS_ALLOWED = {"environ", "getenv", "path", "cpu_count", "makedirs", "sep", "name", "getpid", "linesep", "pathsep",
              "fspath"}
# dunder attributes and names with no reach into other namespaces
DUNDER_OK = {"__init__", "__name__", "__class__", "__doc__", "__qualname__", "__module__", "__version__",
             "__call__", "__len__", "__getitem__", "__setitem__", "__enter__", "__exit__", "__iter__", "__next__",
             "__repr__", "__str__", "__eq__", "__hash__", "__file__", "__annotations__", "__slots__", "__all__",
             "__post_init__", "__contains__", "__bool__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
             "__new__", "__setstate__", "__getstate__"}
# names that are introspection or code building even when not called directly (``f = getattr; f(...)``)
REFLECTIVE_NAMES = {"eval": cheats.C11, "exec": cheats.C11, "compile": cheats.C11, "__import__": cheats.C11,
                    "setattr": cheats.C11, "delattr": cheats.C11, "globals": cheats.C15, "locals": cheats.C15,
                    "vars": cheats.C15, "breakpoint": cheats.C11, "memoryview": cheats.C15}
# numpy calls allowed in ModelNew's methods: dtypes and scalar helpers (sizes, constants); numpy arrays of the
# inputs are host compute (C01), numpy file reading is C15 wherever it is
NUMPY_FORWARD_OK = {"prod", "ceil", "floor", "sqrt", "log2", "log", "exp", "pi", "e", "inf", "float32", "float16",
                    "float64", "int32", "int64", "int8", "uint8", "bool_", "dtype", "finfo", "iinfo", "isscalar",
                    "round", "abs", "maximum", "minimum", "min", "max", "power", "gcd", "lcm", "sign", "isnan",
                    "isinf", "isfinite", "cbrt", "rsqrt", "nan"}
FILE_READERS = ("numpy.load", "numpy.loadtxt", "numpy.genfromtxt", "numpy.fromfile", "numpy.memmap", "numpy.save",
                "numpy.savez", "numpy.savetxt", "numpy.lib.", "torch.load", "torch.save", "torch.from_file",
                "torch.serialization.", "torch.storage.", "torch.UntypedStorage.from_file")
CALL_CODES = {
    "open": cheats.C15, "sys._getframe": cheats.C15, "globals": cheats.C15, "locals": cheats.C15, "vars": cheats.C15,
    "__import__": cheats.C11, "eval": cheats.C11, "exec": cheats.C11, "compile": cheats.C11, "setattr": cheats.C11,
    "time.sleep": cheats.C17, "os.system": cheats.C17, "os.fork": cheats.C17, "os.popen": cheats.C17,
    "os.kill": cheats.C17, "os.remove": cheats.C17, "os.unlink": cheats.C17, "os.execv": cheats.C17,
    "os.execl": cheats.C17, "os.spawnl": cheats.C17, "os.listdir": cheats.C15, "os.walk": cheats.C15,
    "os.write": cheats.C18, "os.fdopen": cheats.C18, "os.open": cheats.C15, "os.dup2": cheats.C18,
    "torch.manual_seed": cheats.C12, "torch.seed": cheats.C12, "torch.initial_seed": cheats.C12,
    "torch.get_rng_state": cheats.C12, "torch.set_rng_state": cheats.C12, "torch.cuda.manual_seed": cheats.C12,
    "torch.cuda.manual_seed_all": cheats.C12, "torch.random.manual_seed": cheats.C12,
    "torch.cuda.get_rng_state": cheats.C12, "torch.cuda.Stream": cheats.C09, "torch.cuda.stream": cheats.C09,
    "torch.compile": cheats.C01, "torch.jit.script": cheats.C01, "torch.jit.trace": cheats.C01,
}
ATTR_CODES = {"sys.stdout": cheats.C18, "sys.__stdout__": cheats.C18, "sys.modules": cheats.C11,
              "__builtins__": cheats.C11, "__subclasses__": cheats.C15, "__globals__": cheats.C15,
              "f_back": cheats.C15, "f_locals": cheats.C15}
LOAD_INLINE_KEYS = ("cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags",
                    "extra_ldflags", "extra_include_paths", "with_cuda", "name")


@dataclass
class Finding:
    code: str
    line: int
    what: str
    torch: bool = False  # PyTorch compute in forward: only the strict legality policy rejects it

    def __str__(self) -> str:
        return f"line {self.line}: {self.what} [{self.code}]"


@dataclass
class ExtensionSpec:
    """The literal arguments of one load_inline call; ``resolved`` False when some could not be read."""
    line: int
    args: dict = field(default_factory=dict)
    resolved: bool = True
    problem: str = ""


@dataclass
class StaticReport:
    findings: list[Finding] = field(default_factory=list)
    extensions: list[ExtensionSpec] = field(default_factory=list)
    kernel_functions: list[str] = field(default_factory=list)

    @property
    def cheat_codes(self) -> list[str]:
        return sorted({f.code for f in self.findings})

    @property
    def fallback_ops(self) -> list[str]:
        return sorted({f.what.split("`")[1] for f in self.findings if f.code == cheats.C01 and "`" in f.what})


class _Unresolvable(Exception):
    pass


class StaticScanError(Exception):
    """The static stage itself failed on one candidate: a fault of the verifier, not of the candidate. Raised by
    :func:`scan` for any unexpected internal exception, with the candidate's problem described (the exception, the
    place in this module where it was raised); the caller makes it that candidate's ``verifier_error``."""


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


def _class_defs(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


# nn classes that hold parameters or modules, or compute nothing in eval mode (a view, the identity)
_NN_NO_COMPUTE = {"Parameter", "ParameterList", "ParameterDict", "Flatten", "Unflatten", "Identity", "Dropout",
                  "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "Module"}
# containers: they compute what their members compute (a Sequential of the candidate's own modules runs its kernels)
_NN_CONTAINERS = {"Sequential", "ModuleList", "ModuleDict"}


def _main_guard(node: ast.stmt) -> bool:
    """``if __name__ == "__main__":`` (either side): a block that never runs when the verifier imports the program."""
    if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1
            and isinstance(node.test.ops[0], ast.Eq)):
        return False
    sides = [node.test.left, node.test.comparators[0]]
    return any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides) and \
        any(isinstance(x, ast.Constant) and x.value == "__main__" for x in sides)


def _own_chain(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> list[ast.ClassDef]:
    """``cls`` and the classes of the program it inherits from (by name, transitively): their methods are its."""
    chain, todo = [], [cls]
    while todo:
        c = todo.pop(0)
        if any(c is d for d in chain):
            continue
        chain.append(c)
        for base in c.bases:
            if isinstance(base, ast.Name) and base.id in classes and base.id != "Model":
                todo.append(classes[base.id])
    return chain


class _Scope:
    """What the scan knows about the program's structure: which module-level functions and classes can run
    (``dead``: the nodes of those that nothing live names), which ``self.X`` of a class are PyTorch layers."""

    def __init__(self, tree: ast.Module, model_new: ast.ClassDef | None, canonical, skipped: list[ast.stmt]):
        self.tree, self.canonical = tree, canonical
        self.classes = _class_defs(tree)
        self.dead = self._dead_nodes(model_new, skipped)

    # ---- liveness: what ModelNew, its bases, and the module-level code that runs at import name
    def _dead_nodes(self, model_new: ast.ClassDef | None, skipped: list[ast.stmt]) -> set[int]:
        """Ids of the nodes of module-level functions and classes that nothing live refers to by name (a class
        the program defines and never uses, a test helper): code that never runs, so not scanned as if forward
        called it. Conservative: any mention of the name (a call, an attribute, a decorator, a default value)
        makes it live, and so does a decorator or a metaclass on it (registration at import). Without a ModelNew
        class everything is live."""
        if model_new is None:
            return set()
        skipped_ids = {id(n) for n in skipped}
        defs: dict[str, list[ast.stmt]] = {}
        roots: list[ast.AST] = []
        forced: set[str] = set()
        for top in self.tree.body:
            if id(top) in skipped_ids:
                continue
            if isinstance(top, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                defs.setdefault(top.name, []).append(top)
                # what runs when the definition runs: decorators, bases, keywords, defaults, a class body's statements
                roots += top.decorator_list
                if top.decorator_list or (isinstance(top, ast.ClassDef) and top.keywords):
                    forced.add(top.name)  # a decorator or a metaclass may register it where forward finds it
                if isinstance(top, ast.ClassDef):
                    roots += top.bases + [k.value for k in top.keywords]
                    roots += [m for m in top.body if not isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
                else:
                    roots += top.args.defaults + [d for d in top.args.kw_defaults if d is not None]
            else:
                roots.append(top)
        roots.append(model_new)
        live: set[str] = set()
        todo = list(roots) + [d for name in forced for d in defs[name]]
        live |= forced
        while todo:
            node = todo.pop()
            for name in _refs(node):
                if name in defs and name not in live:
                    live.add(name)
                    todo += defs[name]
        live |= {c.name for c in _own_chain(model_new, self.classes)}
        dead: set[int] = set()
        for name, nodes in defs.items():
            if name in live:
                continue
            for d in nodes:
                if d is model_new:
                    continue
                body = d.body if isinstance(d, ast.ClassDef) else [d]
                for member in body:  # a dead class's methods; its other statements ran at import (roots above)
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


def scan(code: str, backend: str = "cpu") -> StaticReport:
    """The static legality report of a candidate program (which must parse).

    Never fails on the candidate's Python: an unexpected exception inside the scan is the verifier's fault and
    comes out as :class:`StaticScanError` naming the exception and where it was raised."""
    try:
        return _scan(code, backend)
    except StaticScanError:
        raise
    except SyntaxError as e:
        raise StaticScanError(f"the static scan was given a program that does not parse (line {e.lineno}: "
                              f"{e.msg}); the extract stage should have stopped it") from e
    except Exception as e:  # noqa: BLE001 - the scan's own fault: one candidate's verifier_error, not a crash
        where = traceback.extract_tb(e.__traceback__)
        last = next((f for f in reversed(where) if f.filename.endswith(("static.py", "extract.py", "vendor.py"))),
                    where[-1] if where else None)
        at = f" at {Path(last.filename).name}:{last.lineno} in {last.name}" if last else ""
        raise StaticScanError(f"the static scan failed on this candidate: {type(e).__name__}: {e}{at}") from e


def _scan(code: str, backend: str = "cpu") -> StaticReport:
    tree = ast.parse(code)
    report = StaticReport()
    report.extensions = resolve_extensions(tree)
    report.kernel_functions = exported_functions(report.extensions)
    kernels = set(report.kernel_functions)
    # Construction may compute with torch (parameter initialisation as nn.Linear.reset_parameters does it,
    # buffers, tables): that runs before any input exists, so it cannot stand in for the kernel; C01 is about
    # what forward computes. init_ids: the nodes of code only construction reaches (init_only_nodes).
    init_ids = init_only_nodes(tree)
    # a block under `if __name__ == "__main__":` never runs when the verifier imports the program (unless the
    # program rebinds __name__, which then keeps it in the scan)
    rebinds_name = any(isinstance(n, ast.Name) and n.id == "__name__" and not isinstance(n.ctx, ast.Load)
                       for n in ast.walk(tree))
    main_blocks = [] if rebinds_name else [n for n in tree.body if _main_guard(n)]
    main_ids = {id(x) for n in main_blocks for x in ast.walk(n)}
    dead: set[int] = set()  # filled once ModelNew is known (_Scope): code that nothing live names

    def add(code_, node, what, torch_compute=False):
        if code_ == cheats.C01 and id(node) in init_ids:
            return
        if code_ in (cheats.C01, cheats.C04) and id(node) in dead:
            return
        report.findings.append(Finding(code_, getattr(node, "lineno", 0), what, torch_compute))

    # aliases: `import torch.nn.functional as F`, `from torch import relu`
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if id(node) in main_ids:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                root = a.name.split(".")[0]
                code_ = IMPORT_CODES.get(a.name) or IMPORT_CODES.get(root)
                if code_:
                    add(code_, node, f"imports `{a.name}`")
        elif isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            code_ = IMPORT_CODES.get(node.module) or IMPORT_CODES.get(root)
            if code_:
                add(code_, node, f"imports from `{node.module}`")
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    def canonical(dotted: str) -> str:
        head, _, rest = dotted.partition(".")
        full = aliases.get(head, head)
        return f"{full}.{rest}" if rest else full

    # what load_inline returned (``ext = load_inline(...)``, ``self.ext = ...``): calls on it are the candidate's
    # own functions, whatever they are called (``ext.mm`` is not ``Tensor.mm``)
    extension_objects = {_dotted(t) for n in ast.walk(tree) if isinstance(n, ast.Assign) and
                         isinstance(n.value, ast.Call) and _is_load_inline(n.value) for t in n.targets} - {""}
    # ModelNew is the class the module-level name binds: `class ModelNew`, or `ModelNew = Model` / `= FastConv`
    binding = model_new_binding(tree)
    model_new = binding.cls if binding is not None else None
    skip_funcs = {"get_inputs", "get_init_inputs"}
    skipped = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name in skip_funcs) or id(n) in main_ids]
    scope_nodes = [n for n in tree.body if not any(n is k for k in skipped)]
    structure = _Scope(tree, model_new, canonical, skipped)
    dead |= structure.dead
    classes = structure.classes
    chain = _own_chain(model_new, classes) if model_new is not None else []
    # the program's own class named Model, bound to ModelNew: `Model` names the candidate's class, not the reference
    own_model = model_new is not None and model_new.name == "Model" and classes.get("Model") is model_new
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    method_ids = {id(n) for c in chain for n in ast.walk(c)}
    model_layers = structure.torch_layers(model_new)
    class_layers = {id(c): structure.torch_layers(c) | model_layers for c in classes.values()}
    enclosing_class: dict[int, set[str]] = {}
    for c in classes.values():
        for n in ast.walk(c):
            enclosing_class[id(n)] = class_layers[id(c)]
    # `for m in self.layers: x = m(x)`: loop variables that stand for a member of a PyTorch container
    loop_layers: dict[int, str] = {}
    for c in classes.values():
        for loop in ast.walk(c):
            if not isinstance(loop, (ast.For, ast.comprehension)):
                continue
            body = loop.body if isinstance(loop, ast.For) else [parents.get(id(loop))]
            for name, source in _loop_bindings(loop.target, loop.iter):
                recv = _dotted(source)
                if not (recv.startswith("self.") and recv.count(".") == 1 and recv[5:] in class_layers[id(c)]):
                    continue
                for stmt in body:
                    for n in ast.walk(stmt):
                        if isinstance(n, ast.Call) and (
                                (isinstance(n.func, ast.Name) and n.func.id == name) or
                                (isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) and
                                 n.func.value.id == name and n.func.attr in ("forward", "__call__"))):
                            loop_layers[id(n)] = f"{recv} (as `{name}`)"
    if binding is not None and binding.reference_model:
        add(cheats.C04, next((n for n in tree.body if getattr(n, "lineno", 0) == binding.line), tree),
            f"`ModelNew` is bound to `{binding.alias}`, the reference `Model`")

    for top in scope_nodes:
        for node in ast.walk(top):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                add(cheats.C01, node, "uses `@` (a PyTorch matmul)", True)
            elif isinstance(node, ast.Name) and node.id in REFLECTIVE_NAMES and not _direct_call(node, parents):
                add(REFLECTIVE_NAMES[node.id], node, f"uses `{node.id}` as a value (reflection)")
            elif isinstance(node, ast.Name) and node.id in ("getattr", "hasattr") and not _direct_call(node, parents):
                add(cheats.C11, node, f"uses `{node.id}` as a value (attribute access by computed name)")
            elif isinstance(node, ast.Name) and _dunder(node.id) and node.id not in DUNDER_OK:
                add(cheats.C11, node, f"uses `{node.id}` (interpreter internals)")
            elif isinstance(node, ast.Attribute) and _dunder(node.attr) and node.attr not in DUNDER_OK and \
                    node.attr != "__dict__" and not any(node.attr == k.split(".")[-1] for k in ATTR_CODES):
                add(cheats.C15 if node.attr.startswith(("__glob", "__code", "__closure", "__self", "__func",
                                                         "__traceback", "__frame")) else cheats.C11,
                    node, f"touches `{_dotted(node) or node.attr}` (interpreter internals)")
            elif isinstance(node, ast.Attribute) and canonical(_dotted(node)).startswith("sys.") and \
                    canonical(_dotted(node)).split(".")[1] not in SYS_ALLOWED and \
                    not any(canonical(_dotted(node)) == k or canonical(_dotted(node)).startswith(k + ".")
                            for k in ATTR_CODES) and \
                    not isinstance(parents.get(id(node)), ast.Attribute):
                full_ = canonical(_dotted(node))
                add(cheats.C15 if full_.split(".")[1] in ("_getframe", "exc_info", "exception", "last_traceback",
                                                          "last_value", "last_exc", "_current_frames")
                    else cheats.C11, node, f"touches `{full_}` (the interpreter's state)")
            elif isinstance(node, ast.Attribute) and canonical(_dotted(node)).startswith("os.") and \
                    canonical(_dotted(node)).split(".")[1] not in OS_ALLOWED and \
                    canonical(_dotted(node)) not in CALL_CODES and not isinstance(parents.get(id(node)), ast.Attribute):
                add(cheats.C17, node, f"touches `{canonical(_dotted(node))}` (the operating system)")
            elif isinstance(node, ast.Attribute) and node.attr == "__dict__":
                add(cheats.C11, node, f"touches `{_dotted(node) or '__dict__'}` (namespaces are not the candidate's)")
            elif isinstance(node, ast.Attribute) and canonical(_dotted(node)).startswith("torch") and \
                    isinstance(node.ctx, (ast.Store, ast.Del)) and not isinstance(parents.get(id(node)), ast.Attribute):
                add(cheats.C11, node, f"assigns to torch's `{_dotted(node)}` (patching torch)")
            elif isinstance(node, ast.Attribute) and _private_torch(canonical(_dotted(node))) and \
                    not isinstance(parents.get(id(node)), ast.Attribute):
                add(cheats.C11, node, f"touches torch internals `{_dotted(node)}`")
            elif isinstance(node, ast.Attribute):
                name = _dotted(node)
                for key, code_ in ATTR_CODES.items():
                    if name == key or name.endswith("." + key) or node.attr == key:
                        add(code_, node, f"touches `{name or node.attr}`")
                        break
            elif isinstance(node, ast.Call):
                raw = _dotted(node.func)
                full = canonical(raw) if raw else ""
                if _is_load_inline(node):
                    continue
                if raw in ("getattr", "hasattr", "delattr") and len(node.args) >= 2 and not (
                        isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                        and not node.args[1].value.startswith("_")):
                    add(cheats.C11, node, f"calls `{raw}` with a computed or private attribute name")
                if full.startswith(FILE_READERS) or full.replace("np.", "numpy.", 1).startswith(FILE_READERS):
                    add(cheats.C15, node, f"calls `{raw}` (reads or writes files)")
                    continue
                if full in ("operator.attrgetter", "operator.methodcaller") and node.args and \
                        not (isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                             and not node.args[0].value.startswith("_")):
                    add(cheats.C11, node, f"calls `{raw}` with a computed or private attribute name")
                if (full.startswith("numpy.") or full.startswith("np.")) and id(node) in method_ids and \
                        full.split(".")[1] not in NUMPY_FORWARD_OK and id(node) not in init_ids:
                    add(cheats.C01, node, f"calls `{raw}` in ModelNew (host compute with numpy, not your kernel)")
                if full in CALL_CODES or raw in CALL_CODES:
                    add(CALL_CODES.get(full) or CALL_CODES[raw], node, f"calls `{raw}`")
                    if (CALL_CODES.get(full) or CALL_CODES[raw]) != cheats.C01:
                        continue
                if _is_torch_compute(full):
                    add(cheats.C01, node, f"calls `{raw}` (PyTorch compute)", True)
                elif isinstance(node.func, ast.Attribute):
                    meth = node.func.attr
                    recv = _dotted(node.func.value)
                    if meth in kernels or recv in extension_objects:
                        continue
                    if recv.startswith("self.") and recv.count(".") == 1 and \
                            recv[5:] in enclosing_class.get(id(node), model_layers) and meth in ("forward", "__call__"):
                        add(cheats.C01, node, f"calls the forward of nn submodule `{recv}`", True)
                    elif meth in _TENSOR_COMPUTE and not recv.startswith(("torch", "np", "math", "os", "sys")):
                        add(cheats.C01, node, f"calls tensor method `.{meth}()` (PyTorch compute)", True)
                elif isinstance(node.func, ast.Name):
                    fn = node.func.id
                    if fn in CALL_CODES:
                        add(CALL_CODES[fn], node, f"calls `{fn}()`")
                    elif fn == "Model" and not own_model:
                        add(cheats.C04, node, "constructs the reference `Model`")
                layers = enclosing_class.get(id(node), model_layers)
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

    if model_new is not None:
        for c in chain:
            who = "ModelNew" if c is model_new else f"`{c.name}`, a base of ModelNew,"
            for base in c.bases:
                b = _dotted(base)
                if not b or (isinstance(base, ast.Name) and base.id in classes and base.id != "Model"):
                    continue  # a class of the program: its own bases are judged in turn (chain)
                if b.split(".")[-1] not in ("Module",):
                    add(cheats.C04, base, f"{who} inherits from `{b}` instead of nn.Module")
            # super().forward reaches the program's own base class only when that is what the class derives from
            own_super = bool(c.bases) and isinstance(c.bases[0], ast.Name) and c.bases[0].id in classes and \
                c.bases[0].id != "Model"
            for node in ast.walk(c):
                if isinstance(node, ast.Name) and node.id == "Model" and not own_model:
                    add(cheats.C04, node, "refers to the reference `Model`")
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        node.func.attr in ("forward", "__call__") and isinstance(node.func.value, ast.Call) and \
                        _dotted(node.func.value.func) == "super" and not own_super:
                    add(cheats.C04, node, "calls `super().forward`")
                elif isinstance(node, ast.Try):
                    for h in node.handlers:
                        if not all(isinstance(s, (ast.Raise, ast.Pass)) for s in h.body) or \
                                any(isinstance(s, ast.Pass) for s in h.body):
                            add(cheats.C03, h, "a try/except in ModelNew whose handler does more than re-raise "
                                                "(a fallback path)")
        used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | \
               {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        if kernels and not (kernels & used):
            add(cheats.C02, model_new, "none of the compiled kernel functions "
                                       f"({', '.join(sorted(kernels))}) is ever called")
    # one finding per (code, line, what)
    seen, unique = set(), []
    for f in report.findings:
        if (f.code, f.line, f.what) not in seen:
            seen.add((f.code, f.line, f.what))
            unique.append(f)
    report.findings = unique
    return report


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _direct_call(node: ast.Name, parents: dict) -> bool:
    """``node`` is the function of a call (``getattr(...)``), not a value passed around (``f = getattr``)."""
    p = parents.get(id(node))
    return isinstance(p, ast.Call) and p.func is node


# private torch namespaces that reach the dispatcher, the profiler, tracing or compilation: reading them is a
# route to switching the monitors off or to compute that is not the candidate's. Other private helpers are
# plain Python a module may read (nn.init._calculate_fan_in_and_fan_out, nn.modules.utils._pair).
PRIVATE_TORCH_DENIED = ("torch._C", "torch._dynamo", "torch._inductor", "torch._ops", "torch._subclasses",
                        "torch._guards", "torch._functorch", "torch._higher_order_ops", "torch._prims",
                        "torch._refs", "torch._decomp", "torch._library", "torch._logging", "torch._jit_internal",
                        "torch.utils._python_dispatch", "torch.utils._mode_utils", "torch.profiler._",
                        "torch.autograd.profiler", "torch.overrides._", "torch.cuda._")


def _private_torch(full: str) -> bool:
    """A private torch name in a namespace that reaches the dispatcher, the profiler, tracing or compilation
    (PRIVATE_TORCH_DENIED); reading other private helpers is not patching anything (writes are caught apart)."""
    parts = full.split(".")
    if parts[0] != "torch" or not any(p.startswith("_") and not (p.startswith("__") and p.endswith("__"))
                                      for p in parts[1:]):
        return False
    return any(full == d or full.startswith(d if d.endswith("_") else d + ".") for d in PRIVATE_TORCH_DENIED)


def _refs(fn: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)}


def init_only_nodes(tree: ast.Module) -> set[int]:
    """Ids of the nodes in functions that only construction reaches: reachable (by name, conservatively) from
    an ``__init__`` of some class and not from any ``forward`` / ``__call__``. Lambdas and functions nested in
    them are left out (they can be stored and called later, from forward)."""
    funcs: dict[str, list[ast.AST]] = {}
    for top in tree.body:
        members = top.body if isinstance(top, ast.ClassDef) else [top]
        for f in members:
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                funcs.setdefault(f.name, []).append(f)

    def closure(roots: set[str]) -> set[str]:
        seen, todo = set(), [r for r in roots if r in funcs]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            todo += [r for f in funcs[name] for r in _refs(f) if r in funcs and r not in seen]
        return seen

    forward = closure({"forward", "__call__"})
    only_init = closure({"__init__"}) - forward - {"get_inputs", "get_init_inputs"}
    ids: set[int] = set()
    for name in only_init:
        for f in funcs[name]:
            nested = {id(n) for g in ast.walk(f) if g is not f and isinstance(g, (ast.Lambda, ast.FunctionDef,
                                                                                 ast.AsyncFunctionDef))
                      for n in ast.walk(g)}
            ids |= {id(n) for n in ast.walk(f)} - nested
    return ids


def _is_torch_compute(full: str) -> bool:
    """True for torch.* / F.* calls that compute (everything outside the allocation/view allowlist)."""
    if full.startswith("torch.nn.functional."):
        return True
    if not full.startswith("torch."):
        return False
    rest = full[len("torch."):]
    if rest in TORCH_ALLOWED or rest.startswith(("cuda.", "utils.", "nn.init.")):
        return False
    if rest.startswith("nn."):
        return False  # constructing a layer to hold parameters is honest; calling it is caught below
    return True


def _tensor_compute_methods() -> frozenset[str]:
    try:  # torch here: the scan itself runs without it (the teacher and curation import this module)
        import torch
        names = {n for n in dir(torch.Tensor) if not n.startswith("_")}
    except Exception:  # pragma: no cover - torch is always there in practice
        names = set()
    benign = {"split", "index", "count", "copy", "sort", "get", "add", "format", "join", "items", "keys",
              "values", "append", "extend", "pop", "update", "strip", "replace", "real", "imag", "data",
              "shape", "device", "dtype", "grad", "is_cuda", "layout", "names", "T", "H", "mT", "mH"}
    return frozenset(names - TENSOR_METHOD_ALLOWED - benign)


_TENSOR_COMPUTE = _tensor_compute_methods()
