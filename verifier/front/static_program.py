"""The program the static scan judges (verifier/front/static.py ``scan``): :class:`Program` learns, before any node
is judged, what the rules need (the tree and its extensions, what only construction or nothing runs, imports and
aliases, ModelNew and its classes, the nn layers they hold, what each receiver is), and holds the report the rules
fill (:class:`StaticReport` of :class:`Finding`). The rules themselves are verifier/front/static_judges.py."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field

from verifier import cheats
from verifier.front.extract import _dotted, _main_guard, _own_chain, model_new_binding
from verifier.front.static_kinds import PATH, PATH_CLASSES, Kinds
from verifier.front.static_literal import (
    ExtensionSpec,
    _is_load_inline,
    _module_constants,
    exported_functions,
    extension_sources,
    operator_libraries,
    python_operator_namespaces,
    resolve_extensions,
)
from verifier.front.static_rules import (
    BACKEND_QUERIES,
    IMPORT_CODES,
    PATH_IO_ANY,
    TENSOR_METHOD_ALLOWED,
    TORCH_ALLOWED,
    USE_JUDGED,
)
from verifier.front.static_scope import (
    _loop_bindings,
    _Scope,
    forward_nodes,
    graph_captured_nodes,
    import_time_nodes,
    init_only_nodes,
)
from verifier.front.static_tamper import (
    Context,
    foreign_names,
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



# the allowed Tensor methods that may be called through their class too (``torch.Tensor.view(x, n, -1)``); the
# storage's, whose use is judged on the storage a method call returns, only as methods
UNBOUND_ALLOWED = TENSOR_METHOD_ALLOWED - {"untyped_storage", "storage"}


def is_torch_compute(full: str) -> bool:
    """True for torch.* / F.* calls that compute (everything outside the allocation/view/query allowlist)."""
    if full.startswith("torch.nn.functional."):
        return True
    if not full.startswith("torch."):
        return False
    rest = full[len("torch."):]
    # torch.library registers operators (a candidate's own, whose kernels are judged as they run): no compute
    if rest in TORCH_ALLOWED or rest.startswith(("cuda.", "utils.", "nn.init.", "library.")):
        return False
    parts = rest.split(".")
    if len(parts) == 2 and parts[0] == "Tensor" and parts[1] in UNBOUND_ALLOWED:
        return False  # a method called through its class (`torch.Tensor.contiguous(x)`): judged as `x.contiguous()`
    if len(parts) == 3 and parts[0] == "backends" and parts[2] in BACKEND_QUERIES:
        return False  # torch.backends.cudnn.is_available(): what the build has, nothing computed
    if rest.startswith("nn."):
        return False  # constructing a layer to hold parameters is honest; calling it is caught below
    return True


class Program:
    """What the scan knows of a program before it judges any node: its tree and extensions, the nodes only
    construction reaches (``init_ids``), that run once at import (``import_ids``) or that never run (``main_ids``,
    ``dead``), its imports and aliases, the objects load_inline returned, ModelNew and its classes, the nn layers
    they hold, what each receiver is (``kinds``). ``add`` records a finding (dropping PyTorch compute that only
    construction or the import runs, or that nothing live names); the judging functions below read the rest."""

    def __init__(self, code: str) -> None:
        tree = ast.parse(code)
        report = StaticReport()
        report.extensions = resolve_extensions(tree)
        report.kernel_functions = exported_functions(report.extensions)
        kernels = set(report.kernel_functions)
        # PyTorch's custom-operator API: the namespaces the candidate's C++ creates are its own (a call of
        # torch.ops.<ns>.<op> is a call of its extension); a registration into any other namespace is judged below
        self.libraries = operator_libraries(extension_sources(report.extensions))
        self.libraries.own |= python_operator_namespaces(tree)  # and those its Python creates (torch.library)
        report.operator_namespaces = sorted(self.libraries.own)
        # Construction and the import may compute with torch (parameter initialisation as
        # nn.Linear.reset_parameters does it, buffers, a module-level table): that runs before any input exists, so
        # it cannot stand in for the kernel; C01 is about what forward computes. init_ids: the nodes of code only
        # construction reaches (init_only_nodes); import_ids: what runs once, at import (module-level statements and
        # class bodies, not the functions and lambdas they define, nor a generator's lazy body)
        init_ids = init_only_nodes(tree)
        self.import_ids = import_time_nodes(tree)
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
        # what a CUDA graph captures runs again at each replay: forward's work wherever it is written (construction
        # capturing `self.y = self.x @ self.w.t()` for forward to replay is PyTorch computing the answer)
        for n in graph_captured_nodes(tree, canonical):
            self.init_ids.discard(n)
            self.import_ids.discard(n)
            self.forward_fns.setdefault(n, "a CUDA graph forward replays")
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
        reflect = Context(_module_constants(tree), foreign_names(tree, set(aliases)), canonical, is_torch_compute)
        # what a receiver is (a tensor, a path, a queue...), from where its name is bound: a method is judged on it
        kinds = Kinds(tree, canonical, own_call, classes)

        self.binding, self.model_new, self.scope_nodes, self.classes, self.chain = \
            binding, model_new, scope_nodes, classes, chain
        self.structure = structure  # the program's classes and what their nn constructions compute (static_scope)
        self.own_model, self.parents, self.method_ids, self.model_layers = own_model, parents, method_ids, model_layers
        self.enclosing_class, self.loop_layers, self.reflect, self.kinds = enclosing_class, loop_layers, reflect, kinds


    def add(self, code_, node, what, torch_compute=False, handed_on=False) -> None:
        if code_ in (cheats.C01, cheats.C04):
            self.compute_ids.add(id(node))
        # PyTorch compute that only construction or the import runs is set-up, not forward's work (above); what
        # builds code forward then runs (torch.compile, torch.jit.script: CALL_CODES, not torch_compute) is not
        # set-up, and neither is anything forward reaches (a default or decorator of a helper forward calls), nor a
        # compute function handed on as a value (``f = torch.compiler.allow_in_graph(torch.relu)`` at the top of the
        # file): naming it computes nothing then, its only use is a call later, wherever ``f`` goes
        if code_ == cheats.C01 and torch_compute and not handed_on and \
                (id(node) in self.init_ids or id(node) in self.import_ids) and id(node) not in self.forward_fns:
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


    def module_receiver(self, recv: str) -> bool:
        """``recv`` (a method call's receiver, dotted) is a module the program imports and never rebinds
        (``math.floor``, ``itertools.repeat``, ``np.prod``, ``os.path.split``): the call is that module's function,
        not a Tensor method of the same name. Torch's modules are judged by their canonical name before this, and
        ``operator``'s functions are Python's operators on whatever they are handed, so they are not modules here.
        A receiver only named like a module (``torch_out``, ``npx``) is not one."""
        root = recv.split(".")[0]
        if not root or root not in self.aliases or root in self._bound_names:
            return False
        return self.aliases[root].split(".")[0] not in ("operator", "_operator")

    @functools.cached_property
    def _bound_names(self) -> frozenset:
        names = {n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
        for n in ast.walk(self.tree):
            if isinstance(n, ast.arg):
                names.add(n.arg)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)
        return frozenset(names)

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

