"""Stage 1, extract: the candidate program from a model response (or a plain Python file).

``extract_code`` guarantees only that what it returns is the text of one code block (or the whole
input when the input is itself a program, parsing or not); whether that text is a legal candidate is decided by
``check_candidate_shape`` and the static stage.

``ModelNew`` is whatever the module-level name binds when the program has run: ``class ModelNew``, or
``ModelNew = Model`` / ``ModelNew = FastConv`` (the name bound to a class the program defines; real solutions
write it). ``model_new_binding`` resolves it once, for this stage and the static one, which analyses the class
the name binds. ``live_definitions`` says which of the program's functions and classes can run (what ModelNew and
the module-level code name); the static stage reads it too, and this stage uses it for Triton: a ``@triton.jit``
function that live code launches is out of this verifier's scope, one that nothing calls is ignored.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from verifier.front.vendor import expanded, strip_cxx

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
# CommonMark's other fence, read where a response has no backtick fence: a line of three or more tildes (and its info
# string), closed by a line of tildes alone
_TILDE_FENCE = re.compile(r"^[ \t]*~~~+[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:^[ \t]*~~~+[ \t]*$|\Z)",
                          re.DOTALL | re.M)
# where an unfenced program starts after a line of prose: its first import
_FIRST_IMPORT = re.compile(r"^(?:import[ \t]+\w|from[ \t]+[\w.]+[ \t]+import\b)", re.M)
# a block that defines ModelNew: the class, or the module-level name bound to a class
_DEFINES_MODEL_NEW = re.compile(r"^(?:class[ \t]+ModelNew\b|ModelNew[ \t]*(?::[^=\n]*)?=(?!=))", re.M)


# a line only a Python program of this kind starts with: the ModelNew binding, or an import of torch
_PROGRAM_LINE = re.compile(r"^(?:class[ \t]+ModelNew\b|ModelNew[ \t]*(?::[^=\n]*)?=(?!=)|import[ \t]+torch\b|"
                           r"from[ \t]+torch[\w.]*[ \t]+import\b)", re.M)


def parse_program(code: str) -> ast.Module | None:
    """The program's AST, or None when it does not parse (a syntax error, a NUL byte, nesting the parser
    refuses): never an exception."""
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None


def _parses(code: str) -> bool:
    return parse_program(code) is not None


def extract_code(response: str) -> str:
    """The candidate program inside ``response``; "" when there is none.

    Preference: the last fenced block that defines ``ModelNew`` (python-tagged blocks first), then the
    last python-tagged block (tilde fences read where no backtick fence is), then the whole response when it parses
    as Python by itself (a byte-order mark dropped), or from its first import when only prose comes before that, or
    when it does not parse but is a program all the same (a line binds ``ModelNew`` or imports torch): a bare ``.py`` solution with
    a syntax error, or code around a stray fence, is then reported as code that does not parse, with its line,
    not as an answer without code. Prose with no such line gives ""."""
    if not response or not response.strip():
        return ""
    response = response.lstrip("\ufeff")  # a byte-order mark a file's text kept: not the program's
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(response) or _TILDE_FENCE.findall(response)]
    py = [b for lang, b in blocks if lang in ("python", "py", "python3")]
    other = [b for lang, b in blocks if lang not in ("python", "py", "python3")]
    for group in (py, other):
        with_model = [b for b in group if _DEFINES_MODEL_NEW.search(b)]
        if with_model:
            return with_model[-1].strip() + "\n"
    if py:
        return py[-1].strip() + "\n"
    whole = response if response.endswith("\n") else response + "\n"
    if "```" not in response and _parses(response):
        return whole
    first = _FIRST_IMPORT.search(response)
    if "```" not in response and first and first.start() > 0 and _parses(response[first.start():]):
        return whole[first.start():]  # a line of prose ("Here is the code:") before an unfenced program
    if _PROGRAM_LINE.search(response):  # a program that does not parse: the shape check names its syntax error
        return whole
    return ""


@dataclass
class ModelNewBinding:
    """What the module-level name ``ModelNew`` binds once the program has run.

    ``cls``: the module-level class it names (``class ModelNew``, or the class of ``ModelNew = X``), else None;
    ``alias``: "" for ``class ModelNew`` itself, else the name or dotted path it was bound to as written
    (``Model``, ``ref.Model``); ``line``: where the binding is."""
    cls: ast.ClassDef | None
    alias: str
    line: int

    @property
    def reference_model(self) -> bool:
        """Bound to a ``Model`` that is not a class of this program: the reference's, imported (C04)."""
        return self.cls is None and self.alias.split(".")[-1] == "Model"


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def model_new_binding(tree: ast.Module) -> ModelNewBinding | None:
    """Resolve ``ModelNew`` through the module's top-level statements in order (the last binding wins, as it
    does when the module runs): a class definition, ``ModelNew = Name`` (followed through other names bound the
    same way), an import. None when nothing at module level binds it; a binding with neither ``cls`` nor
    ``alias`` when it is bound to something this reading cannot name (a call, a function)."""
    env: dict[str, tuple[ast.ClassDef | None, str]] = {}  # name -> (class of this program, or the dotted path)
    found: ModelNewBinding | None = None

    def bind(name: str, cls: ast.ClassDef | None, path: str, line: int) -> None:
        nonlocal found
        env[name] = (cls, path)
        if name == "ModelNew":
            found = ModelNewBinding(cls, path, line)

    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bind(node.name, node, "", node.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            bind(node.name, None, "", node.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            if value is None:
                continue
            if isinstance(value, ast.Name):
                cls, path = env.get(value.id, (None, value.id))
                cls, path = (cls, value.id) if cls is not None else (None, path)
            elif isinstance(value, ast.Attribute) and _dotted(value):
                cls, path = None, _dotted(value)
            else:
                cls, path = None, ""
            for t in targets:
                if isinstance(t, ast.Name):
                    bind(t.id, cls, path, node.lineno)
                else:  # tuple targets and the like: what they bind is not known here
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            bind(n.id, None, "", node.lineno)
        elif isinstance(node, ast.Import):
            for a in node.names:
                bind(a.asname or a.name.split(".")[0], None, a.name if a.asname else a.name.split(".")[0],
                     node.lineno)
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                bind(a.asname or a.name, None, f"{node.module or ''}.{a.name}".lstrip("."), node.lineno)
    return found


# ---------------------------------------------------------------------------- which code can run

def _class_defs(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


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


def _refs(fn: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)}


def import_names(tree: ast.Module):
    """``canonical(dotted)``: a dotted name spelled through the program's imports (``tl.load`` ->
    ``triton.language.load``, ``jit`` -> ``triton.jit`` after ``from triton import jit``)."""
    aliases: dict[str, str] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(n, ast.ImportFrom) and n.module:
            for a in n.names:
                aliases[a.asname or a.name] = f"{n.module}.{a.name}"

    def canonical(dotted: str) -> str:
        head, _, rest = dotted.partition(".")
        full = aliases.get(head, head)
        return f"{full}.{rest}" if rest else full
    return canonical


def triton_decorator(dec: ast.AST, canonical) -> bool:
    """``@triton.jit``, ``@triton.autotune(...)``, ``@triton.heuristics(...)``: they compile a device function
    when it is first launched and register it nowhere, so the function runs only if live code names it."""
    name = _dotted(dec.func if isinstance(dec, ast.Call) else dec)
    return bool(name) and canonical(name).split(".")[0] == "triton"


def live_definitions(tree: ast.Module, model_new: ast.ClassDef | None, skipped: list[ast.stmt],
                     canonical) -> tuple[set[str] | None, dict[str, list[ast.stmt]]]:
    """(the names of the module-level functions and classes that live code refers to, every such definition by
    name). Live code: ModelNew, its bases, and the module-level code that runs at import (decorators, bases,
    defaults, a class body's statements), and what it names in turn; ``skipped`` (``get_inputs``, ``__main__``
    blocks) is not. Conservative: any mention of a name (a call, an attribute, a decorator, a default value)
    makes it live, and so does a decorator or a metaclass on it (registration at import), except Triton's
    (``triton_decorator``). Without a ModelNew class: None, everything is live."""
    skipped_ids = {id(n) for n in skipped}
    defs: dict[str, list[ast.stmt]] = {}
    roots: list[ast.AST] = []
    forced: set[str] = set()
    for top in tree.body:
        if id(top) in skipped_ids:
            continue
        if isinstance(top, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            defs.setdefault(top.name, []).append(top)
            # what runs when the definition runs: decorators, bases, keywords, defaults, a class body's statements
            roots += top.decorator_list
            if any(not triton_decorator(d, canonical) for d in top.decorator_list) or \
                    (isinstance(top, ast.ClassDef) and top.keywords):
                forced.add(top.name)  # a decorator or a metaclass may register it where forward finds it
            if isinstance(top, ast.ClassDef):
                roots += top.bases + [k.value for k in top.keywords]
                roots += [m for m in top.body if not isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
            else:
                roots += top.args.defaults + [d for d in top.args.kw_defaults if d is not None]
        else:
            roots.append(top)
    if model_new is None:
        return None, defs
    roots.append(model_new)
    live: set[str] = set(forced)
    todo = list(roots) + [d for name in forced for d in defs[name]]
    while todo:
        node = todo.pop()
        for name in _refs(node):
            if name in defs and name not in live:
                live.add(name)
                todo += defs[name]
    live |= {c.name for c in _own_chain(model_new, _class_defs(tree))}
    return live, defs


def live_triton_kernels(tree: ast.Module) -> list[str]:
    """The Triton functions (every decorator Triton's) that live code names (``live_definitions``). A Triton
    function beside the CUDA code that nothing calls never runs."""
    canonical = import_names(tree)
    binding = model_new_binding(tree)
    skipped = [n for n in tree.body if (isinstance(n, ast.FunctionDef) and n.name in ("get_inputs", "get_init_inputs"))
               or _main_guard(n)]
    live, _ = live_definitions(tree, binding.cls if binding is not None else None, skipped, canonical)
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.decorator_list
            and all(triton_decorator(d, canonical) for d in n.decorator_list) and (live is None or n.name in live)]


# ---------------------------------------------------------------------------- what the verifier judges

def _out_of_scope(tree: ast.Module, code: str) -> str:
    """The message for a program this verifier does not judge (a clear extract_error, not a rejection that
    reads like the candidate's fault), or ""."""
    if "load_inline" in code:
        # a Triton function beside the CUDA code is judged by whether live code launches it (one nothing calls
        # never runs)
        launched = live_triton_kernels(tree)
        if launched:
            return ("Triton kernels are not supported by this verifier: it judges CUDA/C++ kernels whose sources are "
                    "passed as strings to torch.utils.cpp_extension.load_inline, and this program's live code "
                    f"launches the Triton function(s) {', '.join(launched)} (@triton.jit); a Triton function that "
                    "nothing calls is ignored")
        return ""
    triton = any(isinstance(n, (ast.Import, ast.ImportFrom)) and any(
        (getattr(n, "module", None) or a.name).split(".")[0] == "triton" or a.name.split(".")[0] == "triton"
        for a in n.names) for n in ast.walk(tree)) or re.search(r"@\s*triton\s*\.\s*(?:jit|autotune)\b", code)
    if triton:
        return ("Triton kernels are not supported by this verifier: it judges CUDA/C++ kernels whose sources are "
                "passed as strings to torch.utils.cpp_extension.load_inline, and this program uses Triton "
                "(import triton, @triton.jit) without any load_inline")
    aliases = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and (n.module or "").endswith("cpp_extension"):
            for a in n.names:
                aliases[a.asname or a.name] = f"{n.module}.{a.name}"
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            name = _dotted(n.func)
            full = aliases.get(name, name)
            if full == "cpp_extension.load" or full.endswith(".cpp_extension.load"):
                return ("CUDA/C++ built from files with torch.utils.cpp_extension.load(...) is not supported by this "
                        "verifier: it judges kernels whose sources are passed as strings to "
                        "torch.utils.cpp_extension.load_inline (the sources must be in the program)")
    return ""


# `__global__` then qualifiers and attributes on either side of `void`, then the kernel's name (as in
# verifier/common/backends.py, which this module does not import: it needs no torch)
_QUALIFIERS = r"(?:(?:static|inline|__noinline__|__forceinline__|__launch_bounds__\s*\([^)]*\)|" \
              r"__cluster_dims__\s*\([^)]*\)|__maxnreg__\s*\([^)]*\))\s+)*"
_GLOBAL_FN = re.compile(r"__global__\s+" + _QUALIFIERS + r"void\s+" + _QUALIFIERS.replace(")\\s+)*", ")\\s*)*")
                        + r"(?!__launch_bounds__|__cluster_dims__|__maxnreg__)(\w+)\s*[(<]")


def _string_text(tree: ast.Module) -> str:
    """Every string constant of the program (its C++/CUDA sources among them) as code: comments removed, and
    string literals inside them blanked unless a literal is exactly a name (what cuModuleGetFunction takes). A
    Python string that is exactly a name stays too."""
    parts = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    return "\n".join(p if re.fullmatch(r"[A-Za-z_]\w*", p) else strip_cxx(p, strings=True, keep_names=True)
                     for p in parts)


def unlaunched_kernels(tree: ast.Module) -> list[str] | None:
    """The ``__global__`` functions of the program's sources when none of them is referenced anywhere but its
    own declaration; [] when some kernel is referenced; None when the kernels cannot all be named (a macro
    writes the declaration, a source built at run time): then nothing is concluded here.

    A reference is any use of the kernel's name: a ``<<<...>>>`` launch, the runtime and driver launch APIs
    (``cudaLaunchKernel((void*)k, ...)``, ``cudaLaunchKernelEx(&cfg, k, ...)`` with cluster attributes,
    ``cudaLaunchCooperativeKernel``, ``cudaGetFuncBySymbol(&f, k)`` then ``cuLaunchKernel(Ex)``), a kernel node
    of a graph (``params.func = (void*)k``, then ``cudaGraphLaunch``), the name passed to
    ``cuModuleGetFunction``; as written, or as the preprocessor expands the program's own macros
    (``NAME##_kernel<<<...>>>``). Whether the kernel really ran is the runtime's question (the profiler)."""
    text = _string_text(tree)
    decls = list(_GLOBAL_FN.finditer(text))
    if not decls or len(decls) != len(re.findall(r"\b__global__\b", text)):
        return None
    names = sorted({m.group(1) for m in decls})
    if _referenced(text, names):
        return []
    # a launch written through the source's own macros (`NAME##_kernel<<<...>>>`, a `#define` naming the kernel):
    # the sources as the preprocessor gives them to the compiler (vendor.expanded), where a macro nothing invokes,
    # or one invoked only under `#if 0`, references nothing. Each string, then all of them in the program's order (a
    # source joined from pieces at run time: `HEADER + BODY`)
    strings = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)),
                     key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
    for source in [*(n.value for n in strings), "\n".join(n.value for n in strings)]:
        out = expanded(source)
        if out and _referenced(strip_cxx(out, strings=True, keep_names=True), names):
            return []
    return names


def _referenced(text: str, names: list[str]) -> bool:
    """Whether one of the kernels ``names`` is named in ``text`` anywhere but a ``__global__`` declaration."""
    declared = {(m.start(1), m.end(1)) for m in _GLOBAL_FN.finditer(text)}
    return any((m.start(), m.end()) not in declared
               for name in names for m in re.finditer(rf"\b{re.escape(name)}\b", text))


def check_candidate_shape(code: str, backend: str) -> list[str]:
    """Problems that stop a candidate at extraction (empty list: it may go on).

    Checks: it parses; ``ModelNew`` bound at module level (a class, or the name bound to a class of the
    program); a ``load_inline`` call; for cuda a ``__global__`` function that something references (a launch
    of any kind, not only ``<<<...>>>``: see ``unlaunched_kernels``). Programs outside what the verifier judges
    (Triton, ``cpp_extension.load`` from files) get one message that says so. It does not check that the launch
    is reachable; the runtime stage does."""
    if not code.strip():
        return ["no code block found in the response (expected a ```python block defining class ModelNew)"]
    tree = parse_program(code)
    if tree is None:
        try:
            ast.parse(code)
        except SyntaxError as e:
            text = (e.text or "").strip()
            at = f" (the line reads: {text[:100]}{'...' if len(text) > 100 else ''})" if text else ""
            return [f"the code does not parse as Python: line {e.lineno}: {e.msg}{at}"]
        except Exception as e:  # noqa: BLE001 - NUL bytes, nesting too deep for the parser
            return [f"the code does not parse as Python: {type(e).__name__}: {e}"]
        return ["the code does not parse as Python"]
    scope = _out_of_scope(tree, code)
    if scope:
        return [scope]
    problems = []
    binding = model_new_binding(tree)
    if binding is None:
        problems.append("no `class ModelNew(nn.Module)` defined at module level")
    elif binding.cls is None and not binding.reference_model:  # bound to the reference Model: the static stage's C04
        what = f"`{binding.alias}`" if binding.alias else "something"
        problems.append(f"`ModelNew` is bound to {what} (line {binding.line}), which is not a class defined in this "
                        "program: define `class ModelNew(nn.Module)` or bind the name to a class of yours")
    if "load_inline" not in code:
        problems.append("no native kernel: the program never calls torch.utils.cpp_extension.load_inline")
    if backend in ("cuda", "musa"):
        if "__global__" not in code:
            problems.append("no `__global__` kernel in the CUDA sources")
        else:
            unused = unlaunched_kernels(tree)
            if unused:
                problems.append(f"a `__global__` kernel is defined but never launched: {', '.join(unused)} is "
                                "referenced nowhere (no <<<...>>>, cudaLaunchKernel*, cuLaunchKernel*, function "
                                "handle or graph node names it)")
    return problems
