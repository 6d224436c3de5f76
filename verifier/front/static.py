"""Stage 2, static legality: an AST scan of the candidate, and the static resolution of its
``load_inline`` calls (so the compile pool can build them before anything of the candidate runs).

What the scan guarantees: every finding names a cheat code (verifier/cheats.py), the line and the
construct; it never fails on the candidate's Python (any internal failure is a :class:`StaticScanError`
for that candidate, a verifier fault). What it does not: Python is dynamic, so compute reached through a name
bound at run time (``f = getattr(torch, name)`` called later) passes this stage; the runtime dispatch check in the
execution child is the backstop for every compute rule here. Reflection (``getattr``/``setattr``, ``__dict__``,
``vars``) is judged by what it does and on whose object (verifier/front/static_tamper.py): writes to what is not the
candidate's are C11, reads of its own objects are not findings.

What it reads as the candidate's forward: ``ModelNew`` is the class the module-level name binds (``class
ModelNew`` or ``ModelNew = Model``, extract.model_new_binding), with the program's classes it inherits from. The
compute rules (C01, and C04's ``Model(...)``) apply to code that can run: module-level code, ModelNew, and the
functions and classes that live code names (transitively); a class or function nothing names (the reference kept
next to the answer, a test helper, a ``__main__`` block) is not scanned for them. The other rules (reflection,
files, processes...) apply everywhere but ``__main__`` blocks. An nn container (Sequential, ModuleList,
ModuleDict) is PyTorch compute only when a PyTorch layer is among its members.

Rules judge what the code does, not what it imports (issue 47): threading, shutil, pathlib, tempfile and site are
judged by the names used of them (``USE_JUDGED``: a lock, ``shutil.which``, a path's name, a temporary directory for
the build are honest; a thread, ``rmtree``, a file read or written through a path, a temporary file are not); a
try/except handler that calls the candidate's own kernels and nothing of PyTorch or the reference is not a fallback;
a side stream joined back to the current stream before the function returns is not side work
(static_streams.side_stream_hits); a tensor method's name is judged on its receiver (static_kinds.Kinds: a queue's
``put`` is not ``Tensor.put``); reading sys (``sys.stderr``, ``sys.executable``) is not patching it.
"""

from __future__ import annotations

import ast
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from verifier import cheats
from verifier.front.extract import _dotted, _main_guard, _own_chain, model_new_binding
from verifier.front.static_kinds import OTHER, PATH, PATH_CLASSES, TENSOR, Kinds
from verifier.front.static_literal import (
    ExtensionSpec,
    _is_load_inline,
    _module_constants,
    exported_functions,
    extension_sources,
    operator_libraries,
    resolve_extensions,
)
from verifier.front.static_rules import (
    _JUDGED_WHY,
    ATTR_CODES,
    CALL_CODES,
    FILE_READERS,
    IMPORT_CODES,
    NUMPY_FORWARD_OK,
    OS_ALLOWED,
    PATH_IO,
    PATH_IO_ANY,
    REFLECTIVE_NAMES,
    SYS_ALLOWED,
    SYS_FRAMES,
    TENSOR_METHOD_ALLOWED,
    TORCH_ALLOWED,
    USE_JUDGED,
)
from verifier.front.static_scope import (
    _loop_bindings,
    _Scope,
    always_raises,
    forward_nodes,
    import_time_nodes,
    init_only_nodes,
    layer_bases,
    layer_reaches,
    own_forward,
)
from verifier.front.static_streams import side_stream_hits
from verifier.front.static_tamper import (
    DUNDER_OK,
    Context,
    _dunder,
    dunder_code,
    foreign_names,
    judge_call,
    judge_namespace,
    judge_store,
    private_torch,
)


@dataclass
class Finding:
    code: str
    line: int
    what: str
    torch: bool = False  # PyTorch compute in forward: only the strict legality policy rejects it

    def __str__(self) -> str:
        return f"line {self.line}: {self.what} [{self.code}]"


@dataclass
class StaticReport:
    findings: list[Finding] = field(default_factory=list)
    extensions: list[ExtensionSpec] = field(default_factory=list)
    kernel_functions: list[str] = field(default_factory=list)
    # namespaces the candidate's C++ creates with TORCH_LIBRARY (its own operators, torch.ops.<ns>.<op>)
    operator_namespaces: list[str] = field(default_factory=list)

    @property
    def cheat_codes(self) -> list[str]:
        return sorted({f.code for f in self.findings})

    @property
    def fallback_ops(self) -> list[str]:
        return sorted({f.what.split("`")[1] for f in self.findings if f.code == cheats.C01 and "`" in f.what})


class StaticScanError(Exception):
    """The static stage itself failed on one candidate: a fault of the verifier, not of the candidate. Raised by
    :func:`scan` for any unexpected internal exception, with the candidate's problem described (the exception, the
    place in this module where it was raised); the caller makes it that candidate's ``verifier_error``."""


@cheats.check(cheats.C01, cheats.C02, cheats.C03, cheats.C04, cheats.C09, cheats.C11, cheats.C12, cheats.C15, cheats.C17, cheats.C18, where="front")
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
        front = Path(__file__).resolve().parent  # the innermost frame in the front's own modules, whichever
        last = next((f for f in reversed(where) if Path(f.filename).resolve().parent == front),
                    where[-1] if where else None)
        at = f" at {Path(last.filename).name}:{last.lineno} in {last.name}" if last else ""
        raise StaticScanError(f"the static scan failed on this candidate: {type(e).__name__}: {e}{at}") from e


class _Program:
    """What the scan knows of a program before it judges any node: its tree and extensions, the nodes only
    construction reaches (``init_ids``) or that never run (``main_ids``, ``dead``), its imports and aliases, the
    objects load_inline returned, ModelNew and its classes, the nn layers they hold, what each receiver is
    (``kinds``). ``add`` records a finding (dropping PyTorch compute that only construction runs or that nothing
    live names); the judging functions below read the rest."""

    def __init__(self, code: str) -> None:
        tree = ast.parse(code)
        report = StaticReport()
        report.extensions = resolve_extensions(tree)
        report.kernel_functions = exported_functions(report.extensions)
        kernels = set(report.kernel_functions)
        # PyTorch's custom-operator API: the namespaces the candidate's C++ creates are its own (a call of
        # torch.ops.<ns>.<op> is a call of its extension); a registration into any other namespace is judged below
        self.libraries = operator_libraries(extension_sources(report.extensions))
        report.operator_namespaces = sorted(self.libraries.own)
        # Construction may compute with torch (parameter initialisation as nn.Linear.reset_parameters does it,
        # buffers, tables): that runs before any input exists, so it cannot stand in for the kernel; C01 is about
        # what forward computes. init_ids: the nodes of code only construction reaches (init_only_nodes).
        init_ids = init_only_nodes(tree)
        self.import_ids = import_time_nodes(tree)  # what runs once, at import
        # what every call of the model runs, wherever it is written (a module-level helper forward calls included)
        self.forward_fns = forward_nodes(tree)
        # a block under `if __name__ == "__main__":` never runs when the verifier imports the program (unless the
        # program rebinds __name__, which then keeps it in the scan)
        rebinds_name = any(isinstance(n, ast.Name) and n.id == "__name__" and not isinstance(n.ctx, ast.Load)
                           for n in ast.walk(tree))
        main_blocks = [] if rebinds_name else [n for n in tree.body if _main_guard(n)]
        main_ids = {id(x) for n in main_blocks for x in ast.walk(n)}
        dead: set[int] = set()  # filled once ModelNew is known (_Scope): code that nothing live names

        compute_ids: set[int] = set()  # nodes found computing with PyTorch or the reference, wherever they are

        self.tree, self.report, self.kernels, self.init_ids, self.main_ids = tree, report, kernels, init_ids, main_ids
        self.dead, self.compute_ids = dead, compute_ids
        add = self.add
        # aliases: `import torch.nn.functional as F`, `from torch import relu`
        aliases: dict[str, str] = {}
        judged: dict[str, tuple[str, ast.AST]] = {}  # a name bound to a USE_JUDGED module -> (module, its import)
        for node in ast.walk(tree):
            if id(node) in main_ids:
                continue
            if isinstance(node, ast.Import):
                for a in node.names:
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                    root = a.name.split(".")[0]
                    if root in USE_JUDGED:
                        judged[a.asname or root] = (root, node)  # judged by its uses, below
                        continue
                    code_ = IMPORT_CODES.get(a.name) or IMPORT_CODES.get(root)
                    if code_:
                        add(code_, node, f"imports `{a.name}`")
            elif isinstance(node, ast.ImportFrom) and node.module:
                root = node.module.split(".")[0]
                if root in USE_JUDGED:
                    code_, allowed = USE_JUDGED[root]
                    for a in node.names:
                        if node.module != root or a.name not in allowed:
                            add(code_, node, f"imports `{a.name}` from `{node.module}`")
                else:
                    code_ = IMPORT_CODES.get(node.module) or IMPORT_CODES.get(root)
                    if code_:
                        add(code_, node, f"imports from `{node.module}`")
                for a in node.names:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"

        self.aliases, self.judged = aliases, judged
        canonical = self.canonical
        # what load_inline returned (``ext = load_inline(...)``, ``self.ext = ...``): calls on it are the candidate's
        # own functions, whatever they are called (``ext.mm`` is not ``Tensor.mm``)
        extension_objects = {_dotted(t) for n in ast.walk(tree) if isinstance(n, ast.Assign) and
                             isinstance(n.value, ast.Call) and _is_load_inline(n.value) for t in n.targets} - {""}
        grew = True
        while grew:  # and what is bound to one (`self.ext = ext`)
            before = len(extension_objects)
            extension_objects |= {_dotted(t) for n in ast.walk(tree) if isinstance(n, ast.Assign) and
                                  _dotted(n.value) in extension_objects for t in n.targets} - {""}
            grew = len(extension_objects) > before

        self.extension_objects = extension_objects
        self.operator_aliases: dict[str, str] = {}
        self._operator_aliases()
        own_call = self.own_call
        # ModelNew is the class the module-level name binds: `class ModelNew`, or `ModelNew = Model` / `= FastConv`
        binding = model_new_binding(tree)
        model_new = binding.cls if binding is not None else None
        skip_funcs = {"get_inputs", "get_init_inputs"}
        skipped = [n for n in tree.body
                   if (isinstance(n, ast.FunctionDef) and n.name in skip_funcs) or id(n) in main_ids]
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
        # reflection is judged by what it does and on whose object (static_tamper): writes to what is not the
        # candidate's are patches, reads of its own objects are not
        reflect = Context(_module_constants(tree), foreign_names(tree, set(aliases)), canonical, _is_torch_compute)
        # what a receiver is (a tensor, a path, a queue...), from where its name is bound: a method is judged on it
        kinds = Kinds(tree, canonical, own_call, classes)

        self.binding, self.model_new, self.scope_nodes, self.classes, self.chain = \
            binding, model_new, scope_nodes, classes, chain
        self.own_model, self.parents, self.method_ids, self.model_layers = own_model, parents, method_ids, model_layers
        self.enclosing_class, self.loop_layers, self.reflect, self.kinds = enclosing_class, loop_layers, reflect, kinds


    def add(self, code_, node, what, torch_compute=False) -> None:
        if code_ in (cheats.C01, cheats.C04):
            self.compute_ids.add(id(node))
        if code_ == cheats.C01 and id(node) in self.init_ids:
            return
        # seeding or reading the generators while the program is imported or ModelNew is constructed (weights
        # drawn as the reference draws them, `torch.manual_seed(42)` at the top of the file or copied from its
        # __init__) predicts nothing: no trial seed exists in the child before construction is over (ANTI_CHEAT
        # 12, 20), and every input is drawn from one it gets later, the generators seeded again for each draw
        if code_ == cheats.C12 and (id(node) in self.init_ids or id(node) in self.import_ids):
            return
        if code_ in (cheats.C01, cheats.C04) and id(node) in self.dead:
            return
        self.report.findings.append(Finding(code_, getattr(node, "lineno", 0), what, torch_compute))


    def canonical(self, dotted: str) -> str:
        head, _, rest = dotted.partition(".")
        full = self.aliases.get(head, head)
        return f"{full}.{rest}" if rest else full


    def own_call(self, call: ast.AST) -> bool:
        """A call of one of the candidate's own compiled functions (``ext.relu(x)``, ``self.ext.fast(x)``) or
        operators (``torch.ops.<its namespace>.relu(x)``)."""
        return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and \
            (_dotted(call.func.value) in self.extension_objects or self.own_operator(call.func) or
             (call.func.attr in self.kernels and _dotted(call.func.value) not in ("", "torch")))


    def own_operator(self, node: ast.AST) -> bool:
        """``torch.ops.<ns>.<op>`` (an overload after it or not) where the candidate's C++ creates ``ns``
        (``TORCH_LIBRARY``, a namespace that is not PyTorch's): one of its own operators, written out or through a
        name bound to its namespace or operator (``OPS = torch.ops.myops``, ``self.op = torch.ops.myops.relu``)."""
        return self._own_operator_path(_dotted(node), 4)

    def _own_operator_path(self, dotted: str, least: int) -> bool:
        if not dotted or not self.libraries.own:
            return False
        for name, path in self.operator_aliases.items():
            if dotted == name or dotted.startswith(name + "."):
                dotted = path + dotted[len(name):]
                break
        parts = self.canonical(dotted).split(".")
        return least <= len(parts) <= 5 and parts[:2] == ["torch", "ops"] and parts[2] in self.libraries.own

    def _operator_aliases(self) -> dict[str, str]:
        """Names bound to one of the candidate's own operator namespaces or operators (``OPS = torch.ops.myops``,
        ``self.op = torch.ops.myops.relu``) and to nothing else anywhere in the program: a name also bound to
        something else (a parameter, a loop variable, another value) is not read as the operator, wherever it is."""
        aliases: dict[str, str] = {}
        self.operator_aliases = aliases
        if not self.libraries.own:
            return aliases
        bound: dict[str, int] = {}  # every binding of each name, whatever binds it
        for n in ast.walk(self.tree):
            targets: list = []
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
                targets = [n.target]
            elif isinstance(n, ast.withitem) and n.optional_vars is not None:
                targets = [n.optional_vars]
            elif isinstance(n, ast.arg):
                bound[n.arg] = bound.get(n.arg, 0) + 1
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                for a in n.names:
                    name = a.asname or a.name.split(".")[0]
                    bound[name] = bound.get(name, 0) + 1
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound[n.name] = bound.get(n.name, 0) + 1
            elif isinstance(n, ast.NamedExpr):
                targets = [n.target]
            for t in targets:
                for e in ast.walk(t):
                    if isinstance(e, (ast.Name, ast.Attribute)) and _dotted(e) and \
                            isinstance(getattr(e, "ctx", None), (ast.Store, ast.Del)):
                        bound[_dotted(e)] = bound.get(_dotted(e), 0) + 1
        grew = True
        while grew:
            grew = False
            for n in ast.walk(self.tree):
                if isinstance(n, ast.Assign) and self._own_operator_path(_dotted(n.value), 3):
                    value = _dotted(n.value)
                    for name, path in aliases.items():
                        if value == name or value.startswith(name + "."):
                            value = path + value[len(name):]
                            break
                    for t in n.targets:
                        d = _dotted(t)
                        if d and d not in aliases and bound.get(d, 0) == sum(
                                1 for a in ast.walk(self.tree) if isinstance(a, ast.Assign) and
                                any(_dotted(x) == d for x in a.targets) and
                                self._own_operator_path(_dotted(a.value), 3)):
                            aliases[d] = self.canonical(value)
                            grew = True
        return aliases


    def path_io(self, node: ast.Attribute) -> bool:
        """``recv.read_text`` and the like: files read or written through a path object."""
        recv = _dotted(node.value)
        if recv in self.extension_objects or node.attr in self.kernels:
            return False
        return node.attr in PATH_IO_ANY or self.canonical(recv) in PATH_CLASSES or self.kinds.of(node.value) == PATH


def _scan(code: str, backend: str = "cpu") -> StaticReport:
    """The findings of every rule over the program (``_Program`` learns what the rules need first), one per
    (code, line, what)."""
    prog = _Program(code)
    binding, tree = prog.binding, prog.tree
    if binding is not None and binding.reference_model:
        prog.add(cheats.C04, next((n for n in tree.body if getattr(n, "lineno", 0) == binding.line), tree),
                 f"`ModelNew` is bound to `{binding.alias}`, the reference `Model`")
    for macro, ns in prog.libraries.foreign:
        where = next((n for n in ast.walk(tree) if isinstance(n, ast.Call) and _is_load_inline(n)), tree)
        prog.add(cheats.C11, where, f"the C++ registers `{macro}({ns}, ...)`: operators or kernels in a "
                 "namespace it does not create (PyTorch's or another library's operators are not yours to "
                 "register into; create your own with TORCH_LIBRARY)")
    for top in prog.scope_nodes:
        for node in ast.walk(top):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                prog.add(cheats.C01, node, "uses `@` (a PyTorch matmul)", True)
            elif isinstance(node, ast.Name):
                _judge_name(prog, node)
            elif isinstance(node, ast.Attribute):
                _judge_attribute(prog, node)
            elif isinstance(node, ast.Call):
                _judge_call(prog, node)
    _judge_side_streams(prog)
    _judge_module_uses(prog)
    if prog.model_new is not None:
        _judge_model_new(prog)
    report = prog.report
    # one finding per (code, line, what)
    seen, unique = set(), []
    for f in report.findings:
        if (f.code, f.line, f.what) not in seen:
            seen.add((f.code, f.line, f.what))
            unique.append(f)
    report.findings = unique
    return report


def _judge_name(prog: _Program, node: ast.Name) -> None:
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


def _judge_attribute(prog: _Program, node: ast.Attribute) -> None:
    """An attribute: interpreter internals, the interpreter's and the operating system's state, namespaces and
    stores judged by whose object they touch (static_tamper), files through a path, torch internals."""
    add, parents, canonical, reflect, path_io = prog.add, prog.parents, prog.canonical, prog.reflect, prog.path_io
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


def _judge_call(prog: _Program, node: ast.Call) -> None:
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
    if full in CALL_CODES or raw in CALL_CODES:
        add(CALL_CODES.get(full) or CALL_CODES[raw], node, f"calls `{raw}`")
        if (CALL_CODES.get(full) or CALL_CODES[raw]) != cheats.C01:
            return
    if _is_torch_compute(full) and not _constant_pad(full, node):
        add(cheats.C01, node, f"calls `{raw}` (PyTorch compute)", True)
    elif isinstance(node.func, ast.Attribute):
        meth = node.func.attr
        recv = _dotted(node.func.value)
        if meth in kernels or recv in extension_objects:
            return
        if recv.startswith("self.") and recv.count(".") == 1 and \
                recv[5:] in enclosing_class.get(id(node), model_layers) and meth in ("forward", "__call__"):
            add(cheats.C01, node, f"calls the forward of nn submodule `{recv}`", True)
        elif meth in _TENSOR_COMPUTE and not recv.startswith(("torch", "np", "math", "os", "sys")) and \
                not kinds.own_member(node):
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


def _judge_side_streams(prog: _Program) -> None:
    """Side streams: work on one must be joined back to the current stream before the function returns (C09)."""
    add, tree, canonical, main_ids = prog.add, prog.tree, prog.canonical, prog.main_ids
    for node, what in side_stream_hits(tree, canonical, main_ids):
        add(cheats.C09, node, what)


def _judge_module_uses(prog: _Program) -> None:
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


def _judge_model_new(prog: _Program) -> None:
    """ModelNew itself: its bases (C04), the reference Model named or its forward reached through super()
    (C04), try/except handlers that fall back to PyTorch or do more than re-raise (C03, judged by what the handler
    reaches through the program's own functions and methods), compiled kernels never called (C02)."""
    add, tree, chain, model_new, classes = prog.add, prog.tree, prog.chain, prog.model_new, prog.classes
    own_model, compute_ids, own_call, kinds, kernels = (prog.own_model, prog.compute_ids, prog.own_call, prog.kinds,
                                                        prog.kernels)
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    methods = {m.name: m for c in chain for m in c.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def reach(body: list[ast.stmt], seen: set | None = None) -> tuple[bool, bool]:
        """(calls one of the candidate's own kernels, computes with PyTorch or the reference): what ``body`` does,
        through the methods of ModelNew and the program's functions it calls, by name."""
        seen = set() if seen is None else seen
        own = foreign = False
        for stmt in body:
            for n in ast.walk(stmt):
                if id(n) in compute_ids or (isinstance(n, ast.Name) and n.id == "Model" and not own_model):
                    foreign = True
                if not isinstance(n, ast.Call):
                    continue
                if own_call(n) and kinds.of(n.func.value) != TENSOR:
                    own = True
                callee = None
                if isinstance(n.func, ast.Attribute) and _dotted(n.func.value) == "self":
                    callee = methods.get(n.func.attr)
                elif isinstance(n.func, ast.Name):
                    callee = functions.get(n.func.id)
                if callee is not None and id(callee) not in seen:
                    seen.add(id(callee))
                    o, f = reach(callee.body, seen)
                    own, foreign = own or o, foreign or f
        return own, foreign

    def kernel_path(body: list[ast.stmt], seen: set | None = None) -> bool:
        """``body`` builds or calls the candidate's kernels (``load_inline``, one of its functions or operators),
        itself or through the methods and functions it calls by name (``self.m()``, ``f()``, ``Helper.m()`` of a
        class of the program)."""
        seen = set() if seen is None else seen
        for stmt in body:
            for n in ast.walk(stmt):
                if not isinstance(n, ast.Call):
                    continue
                if _is_load_inline(n) or own_call(n):
                    return True
                callee = None
                if isinstance(n.func, ast.Name):
                    callee = functions.get(n.func.id)
                elif isinstance(n.func, ast.Attribute) and _dotted(n.func.value) == "self":
                    callee = methods.get(n.func.attr)
                elif isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) and \
                        n.func.value.id in classes:
                    callee = next((m for c in _own_chain(classes[n.func.value.id], classes) for m in c.body
                                   if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and
                                   m.name == n.func.attr), None)
                if callee is not None and id(callee) not in seen:
                    seen.add(id(callee))
                    if kernel_path(callee.body, seen):
                        return True
        return False

    # a PyTorch layer as a base (`class ModelNew(nn.Conv2d)`: its parameters and their initialisation) is honest
    # when ModelNew defines the forward that runs and reaches none of the layer's code (static_scope.layer_reaches)
    layers = {id(b): full for b, full in layer_bases(model_new, classes, prog.canonical)}
    own_fwd = own_forward(model_new, classes)
    for node, what in layer_reaches(model_new, classes, prog.canonical, prog.init_ids):
        add(cheats.C04, node, f"ModelNew {what} (the layer's code is PyTorch's computation, not your kernel)")
    for c in chain:
        who = "ModelNew" if c is model_new else f"`{c.name}`, a base of ModelNew,"
        for base in c.bases:
            b = _dotted(base)
            if not b or (isinstance(base, ast.Name) and base.id in classes and base.id != "Model"):
                continue  # a class of the program: its own bases are judged in turn (chain)
            if id(base) in layers and not own_fwd:
                add(cheats.C04, base, f"{who} inherits from the PyTorch layer `{b}` and defines no forward of its "
                                      "own: its forward is the layer's (PyTorch's computation)")
            elif b.split(".")[-1] not in ("Module",) and id(base) not in layers:
                add(cheats.C04, base, f"{who} inherits from `{b}` instead of nn.Module")
        # super().forward reaches the program's own base class only when that is what the class derives from
        own_super = bool(c.bases) and isinstance(c.bases[0], ast.Name) and c.bases[0].id in classes and \
            c.bases[0].id != "Model"
        # super().__call__ is nn.Module's call (it runs this class's own forward) unless a base is the reference
        from_model = any(_dotted(b).split(".")[-1] == "Model" and not own_model
                         for cc in _own_chain(c, classes) for b in cc.bases)
        for node in ast.walk(c):
            if isinstance(node, ast.Name) and node.id == "Model" and not own_model:
                add(cheats.C04, node, "refers to the reference `Model`")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("forward", "__call__") and isinstance(node.func.value, ast.Call) and \
                    _dotted(node.func.value.func) == "super" and not own_super and \
                    (node.func.attr == "forward" or from_model):
                add(cheats.C04, node, f"calls `super().{node.func.attr}`")
    for c in chain:
        for node in ast.walk(c):
            # a try only construction runs that guards no build or call of the candidate's kernels (a default when
            # a device query fails) is no fallback: construction computes no output. One guarding the build is the
            # classic fallback (`except: self.impl = self._pytorch_forward`) and is judged as forward's
            if isinstance(node, ast.Try) and not (id(node) in prog.init_ids and not kernel_path(node.body)):
                for h in node.handlers:
                    own, foreign = reach(h.body)
                    if always_raises(node, h) and not foreign:
                        continue  # the call fails as it would without the try: a fallback to nothing
                    if foreign:
                        add(cheats.C03, h, "a try/except in ModelNew whose handler computes with PyTorch or the "
                                            "reference (a fallback path)")
                    elif not own:
                        add(cheats.C03, h, "a try/except in ModelNew whose handler does more than re-raise "
                                            "and calls none of your own kernels (a fallback path)")
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | \
           {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    # a kernel looked up by name (`getattr(ext, "relu")`, `operator.attrgetter("relu")`) is referenced too; a name
    # computed at run time (`getattr(ext, name)`) leaves the question to the runtime count of the extension's calls
    dynamic = False
    for n in ast.walk(tree):
        fn = _dotted(n.func).split(".")[-1] if isinstance(n, ast.Call) else ""
        if fn in ("getattr", "attrgetter", "methodcaller"):
            for a in n.args[1:2] if fn == "getattr" else n.args[:1]:
                if isinstance(a, ast.Constant) and isinstance(a.value, str):
                    used.add(a.value)
                else:
                    dynamic = True
    own_operators = any(isinstance(n, ast.Attribute) and prog.own_operator(n) for n in ast.walk(tree))
    if kernels and not (kernels & used) and not dynamic and not own_operators:
        add(cheats.C02, model_new, "none of the compiled kernel functions "
                                   f"({', '.join(sorted(kernels))}) is ever called")


def _direct_call(node: ast.Name, parents: dict) -> bool:
    """``node`` is the function of a call (``getattr(...)``), not a value passed around (``f = getattr``)."""
    p = parents.get(id(node))
    return isinstance(p, ast.Call) and p.func is node


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
    # attributes, not methods: never called
    attributes = {"real", "imag", "data", "shape", "device", "dtype", "grad", "is_cuda", "layout", "names", "T", "H",
                  "mT", "mH"}
    return frozenset(names - TENSOR_METHOD_ALLOWED - attributes)


_TENSOR_COMPUTE = _tensor_compute_methods()
# tensor methods that are also the methods of Python's containers (a set's add, a list's sort and index, a dict's
# values): on a receiver the scan cannot place they are read as the container's; on a tensor they are compute
_CONTAINER_METHODS = frozenset({"add", "index", "sort", "values", "count", "copy"})
