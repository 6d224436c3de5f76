"""Find nn.Module subclasses in the files of a repository with tree-sitter.

``parse_file`` turns one file into its top-level statements, each with the names it binds and the
module-level names it reads (a light scope analysis over the tree-sitter tree: parameters, assignment
targets, loop variables, ``as`` names, comprehension variables and nested imports are local).
:class:`RepoIndex` holds the parsed files of one repository by dotted module name and resolves imports
between them. ``find_module_classes`` lists the classes whose bases lead to ``torch.nn`` (directly,
through a class in the same repository, or through ``from torch.nn import ...``). synth/mine/extract.py
then cuts each class out as a self-contained program.

Errors: :class:`FileSyntaxError` (a file that is not valid Python) and :class:`NotSelfContained`
(raised by synth/mine/extract.py; defined here because :class:`RepoIndex` caches it per repository).

Not guaranteed: the scope analysis is per statement, not per function, so a global shadowed by a
local of the same name somewhere else in the class is missed. Nothing here executes the code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tree_sitter_python
from tree_sitter import Language, Node, Parser

_LANGUAGE = Language(tree_sitter_python.language())
# torch.nn classes that are not computations by themselves (no forward of their own).
_NO_FORWARD_BASES = {"Module", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"}


def parser() -> Parser:
    return Parser(_LANGUAGE)


class NotSelfContained(Exception):
    def __init__(self, reason: str, detail: str = ""):
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


class FileSyntaxError(Exception):
    """tree-sitter found an error node: the file is not valid Python."""


@dataclass
class ImportBinding:
    name: str                 # the name the statement binds
    module: str               # dotted module (without leading dots)
    level: int                # relative-import level (0: absolute)
    attr: str | None          # from-import attribute; None for ``import a.b``
    line: str                 # the single-name import line to emit (absolute imports only)


@dataclass
class TopStmt:
    index: int
    kind: str                 # import | def | class | assign | block | other
    text: str
    binds: list[str]
    free: list[str]           # module-level names read, in first-use order
    imports: dict[str, list[ImportBinding]] = field(default_factory=dict)
    eager: list[str] | None = None  # the names read when the statement runs (None: all of ``free``)


@dataclass
class ClassInfo:
    name: str
    stmt: int
    bases: list[str]
    has_own_forward: bool
    line: int


@dataclass
class ParsedFile:
    path: str
    module: str
    is_package: bool
    stmts: list[TopStmt]
    symbols: dict[str, int]
    classes: dict[str, ClassInfo]
    star_imports: list[ImportBinding]
    future_lines: list[str]
    source: str | None = None  # the file's text (synth/mine/callsites.py reads its calls)


# ---------------------------------------------------------------------------- scope analysis


def _text(n: Node) -> str:
    return n.text.decode("utf-8")


def _import_bindings(node: Node) -> list[ImportBinding]:
    out: list[ImportBinding] = []
    if node.type == "import_statement":
        for c in node.children_by_field_name("name"):
            if c.type == "aliased_import":
                mod = _text(c.child_by_field_name("name"))
                alias = _text(c.child_by_field_name("alias"))
                out.append(ImportBinding(alias, mod, 0, None, f"import {mod} as {alias}"))
            else:
                mod = _text(c)
                out.append(ImportBinding(mod.split(".")[0], mod, 0, None, f"import {mod}"))
    elif node.type == "import_from_statement":
        mnode = node.child_by_field_name("module_name")
        level, mod = 0, ""
        if mnode.type == "relative_import":
            for c in mnode.children:
                if c.type == "import_prefix":
                    level = len(_text(c).strip())
                elif c.type == "dotted_name":
                    mod = _text(c)
        else:
            mod = _text(mnode)
        for c in node.children_by_field_name("name"):
            if c.type == "aliased_import":
                attr = _text(c.child_by_field_name("name"))
                alias = _text(c.child_by_field_name("alias"))
            else:
                attr = alias = _text(c)
            line = f"from {mod} import {attr}" + (f" as {alias}" if alias != attr else "")
            out.append(ImportBinding(alias, mod, level, attr, line))
        if any(c.type == "wildcard_import" for c in node.children):
            out.append(ImportBinding("*", mod, level, "*", f"from {mod} import *"))
    return out


class _Scope:
    """Names read (in order) and names bound anywhere inside one statement."""

    def __init__(self, lazy_annotations: bool = False) -> None:
        # ``from __future__ import annotations``: annotations are strings, never evaluated, so the names
        # they mention are not needed (``cache: LayerIntermediates | None`` with no import of it)
        self.lazy_annotations = lazy_annotations
        self.refs: list[str] = []
        self.deferred: list[str] = []  # read only when a function runs, not when the statement does
        self.bound: set[str] = set()
        self.declared: set[str] = set()  # ``global`` / ``nonlocal`` names: bound outside this scope

    def child(self) -> "_Scope":
        return _Scope(self.lazy_annotations)

    def annotation(self, n: Node | None) -> None:
        if n is not None and not self.lazy_annotations:
            self.scan(n)

    def take_free(self, inner: "_Scope", deferred: bool) -> None:
        """The names a nested scope reads and does not bind itself are read here (``deferred``: when
        the nested scope is a function body, which runs later)."""
        free = [r for r in inner.refs if r not in inner.bound or r in inner.declared]
        (self.deferred if deferred else self.refs).extend(free)
        self.deferred += [r for r in inner.deferred if r not in inner.bound or r in inner.declared]

    def scan(self, n: Node, class_body: bool = False) -> None:
        t = n.type
        if t == "identifier":
            self.refs.append(_text(n))
        elif t in ("import_statement", "import_from_statement", "future_import_statement"):
            if not class_body:
                self.bound.update(b.name for b in _import_bindings(n))
        elif t == "function_definition":
            if not class_body:
                self.bound.add(_text(n.child_by_field_name("name")))
            # a function is its own scope: its parameters and locals do not hide globals elsewhere in
            # the statement (``def _make_layers(self, cfg)`` beside a method that reads the global cfg)
            inner = self.child()
            inner.params(n.child_by_field_name("parameters"), outer=self)
            self.annotation(n.child_by_field_name("return_type"))
            inner.scan(n.child_by_field_name("body"))
            self.take_free(inner, deferred=True)
        elif t in ("list_comprehension", "set_comprehension", "dictionary_comprehension", "generator_expression"):
            inner = self.child()
            for c in n.children:
                inner.scan(c)
            self.take_free(inner, deferred=False)
        elif t in ("global_statement", "nonlocal_statement"):
            self.declared.update(_text(c) for c in n.named_children if c.type == "identifier")
        elif t == "class_definition":
            if not class_body:
                self.bound.add(_text(n.child_by_field_name("name")))
            sup = n.child_by_field_name("superclasses")
            if sup is not None:
                self.scan(sup)
            # names bound in a class body are visible to later statements of that body, not to methods
            class_local: set[str] = set()
            for c in n.child_by_field_name("body").children:
                d = c.child_by_field_name("definition") if c.type == "decorated_definition" else c
                if d is not None and d.type == "function_definition":
                    t = self.child()
                    t.scan(c, class_body=True)  # decorators such as @codebook.setter read class-body names
                    self.refs += [r for r in t.refs if r not in class_local]
                    self.deferred += t.deferred
                    class_local.add(_text(d.child_by_field_name("name")))
                    continue
                t = self.child()
                t.scan(c)
                self.refs += [r for r in t.refs if r not in class_local and r not in t.bound]
                self.deferred += [r for r in t.deferred if r not in t.bound]
                class_local |= t.bound
        elif t == "lambda":
            inner = self.child()
            p = n.child_by_field_name("parameters")
            if p is not None:
                inner.params(p, outer=self)
            inner.scan(n.child_by_field_name("body"))
            self.take_free(inner, deferred=True)
        elif t in ("assignment", "augmented_assignment"):
            self.target(n.child_by_field_name("left"), bind=not class_body)
            self.annotation(n.child_by_field_name("type"))
            c = n.child_by_field_name("right")
            if c is not None:
                self.scan(c)
        elif t in ("for_statement", "for_in_clause"):
            self.target(n.child_by_field_name("left"), bind=True)
            for c in n.children:
                if c != n.child_by_field_name("left"):
                    self.scan(c)
        elif t == "as_pattern":
            for c in n.children:
                if c.type == "as_pattern_target":
                    self.target(c, bind=True)
                else:
                    self.scan(c)
        elif t == "named_expression":
            self.bound.add(_text(n.child_by_field_name("name")))
            self.scan(n.child_by_field_name("value"))
        elif t == "keyword_argument":
            self.scan(n.child_by_field_name("value"))
        elif t == "attribute":
            self.scan(n.child_by_field_name("object"))
        else:
            keep = class_body and t in ("block", "expression_statement", "decorated_definition")
            for c in n.children:
                self.scan(c, class_body=keep)

    def target(self, n: Node, bind: bool) -> None:
        t = n.type
        if t == "identifier":
            if bind:
                self.bound.add(_text(n))
        elif t in ("pattern_list", "tuple_pattern", "list_pattern", "tuple", "list", "parenthesized_expression",
                   "list_splat_pattern", "as_pattern_target", "expression_list"):
            for c in n.children:
                self.target(c, bind)
        else:
            self.scan(n)

    def params(self, p: Node, outer: "_Scope | None" = None) -> None:
        """Bind the parameters here; their defaults and annotations are read in ``outer`` (when the
        function is defined)."""
        outer = outer or self
        for c in p.children:
            t = c.type
            if t == "identifier":
                self.bound.add(_text(c))
            elif t in ("list_splat_pattern", "dictionary_splat_pattern"):
                for g in c.children:
                    if g.type == "identifier":
                        self.bound.add(_text(g))
            elif t in ("default_parameter", "typed_default_parameter"):
                self.target(c.child_by_field_name("name"), bind=True)
                outer.annotation(c.child_by_field_name("type"))
                v = c.child_by_field_name("value")
                if v is not None:
                    outer.scan(v)
            elif t == "typed_parameter":
                for g in c.children:
                    if g.type == "type":
                        outer.annotation(g)
                    else:
                        self.target(g, bind=True)
            elif t == "tuple_pattern":
                self.target(c, bind=True)


def _free_names(n: Node) -> tuple[list[str], set[str]]:
    free, _, bound = _scope_names(n)
    return free, bound


def _scope_names(n: Node, lazy_annotations: bool = False) -> tuple[list[str], list[str], set[str]]:
    """(names read, of those the ones read when the statement itself runs, names bound) of one
    statement; a name read only inside a function body is read later, when the function is called."""
    s = _Scope(lazy_annotations)
    s.scan(n)
    eager = list(dict.fromkeys(r for r in s.refs if r not in s.bound))
    free = list(dict.fromkeys(r for r in s.refs + s.deferred if r not in s.bound))
    return free, eager, s.bound


def _is_main_guard(n: Node) -> bool:
    if n.type != "if_statement":
        return False
    cond = n.child_by_field_name("condition")
    return cond is not None and "__name__" in _text(cond)


# ---------------------------------------------------------------------------- files


def module_name_of(path: str) -> tuple[str, bool]:
    """Dotted module name of a repository path and whether it is a package ``__init__``."""
    parts = path[:-3].split("/") if path.endswith(".py") else path.split("/")
    if parts and parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def parse_file(path: str, text: str) -> ParsedFile:
    """Top-level statements, symbols and classes of one file; FileSyntaxError when it does not parse."""
    tree = parser().parse(text.encode("utf-8"))
    root = tree.root_node
    if root.has_error:
        bad = next((n for n in walk(root) if n.type == "ERROR" or n.is_missing), root)
        raise FileSyntaxError(f"{path}: syntax error near line {bad.start_point[0] + 1}")
    module, is_pkg = module_name_of(path)
    stmts: list[TopStmt] = []
    symbols: dict[str, int] = {}
    classes: dict[str, ClassInfo] = {}
    stars: list[ImportBinding] = []
    future: list[str] = []
    for node in root.children:
        t = node.type
        if t == "comment" or not node.is_named:
            continue
        if t == "future_import_statement":
            future.append(_text(node))
            continue
        idx = len(stmts)
        if t in ("import_statement", "import_from_statement"):
            bindings = _import_bindings(node)
            imports: dict[str, list[ImportBinding]] = {}
            for b in bindings:
                if b.name == "*":
                    stars.append(b)
                else:
                    imports.setdefault(b.name, []).append(b)
            stmt = TopStmt(idx, "import", _text(node), list(imports), [], imports)
        else:
            free, eager, bound = _scope_names(node, "annotations" in " ".join(future))
            definition = node.child_by_field_name("definition") if t == "decorated_definition" else node
            if definition is not None and definition.type in ("function_definition", "class_definition"):
                name = _text(definition.child_by_field_name("name"))
                kind = "class" if definition.type == "class_definition" else "def"
                binds = [name]
                if kind == "class":
                    classes[name] = _class_info(definition, idx)
            elif t == "expression_statement" and node.named_children and node.named_children[0].type in (
                    "assignment", "augmented_assignment"):
                kind, binds = "assign", sorted(bound)
            elif t in ("if_statement", "try_statement", "with_statement", "for_statement") and not _is_main_guard(node):
                kind, binds = "block", sorted(bound)
            else:
                kind, binds = "other", []
            stmt = TopStmt(idx, kind, _text(node), binds, free, eager=eager)
        stmts.append(stmt)
        for b in stmt.binds:
            symbols[b] = idx
    return ParsedFile(path, module, is_pkg, stmts, symbols, classes, stars, future, text)


def walk(n: Node):
    """Every node of the tree under ``n``, ``n`` first, in source order."""
    yield n
    for c in n.children:
        yield from walk(c)


def _class_info(node: Node, idx: int) -> ClassInfo:
    bases = []
    sup = node.child_by_field_name("superclasses")
    if sup is not None:
        for c in sup.named_children:
            if c.type == "keyword_argument" or c.type == "comment":
                continue
            bases.append(_text(c.child_by_field_name("value") if c.type == "subscript" else c))
    body = node.child_by_field_name("body")
    own_forward = any(
        (s.type == "function_definition" and _text(s.child_by_field_name("name")) == "forward")
        or (s.type == "decorated_definition" and s.child_by_field_name("definition").type == "function_definition"
            and _text(s.child_by_field_name("definition").child_by_field_name("name")) == "forward")
        for s in body.named_children)
    return ClassInfo(_text(node.child_by_field_name("name")), idx, bases, own_forward, node.start_point[0] + 1)


# ---------------------------------------------------------------------------- repository index


class RepoIndex:
    """The parsed files of one repository, addressable by dotted module name."""

    def __init__(self, files: list[ParsedFile]):
        self.files = {f.module: f for f in files}
        # (module, name) -> why it cannot be made self-contained; shared by every class of the repository
        # so that a big helper that fails (a decorator module, say) is explored once, not once per class
        self.failed: dict[tuple[str, str], NotSelfContained] = {}
        self.calls: dict = {}  # module -> the file's calls (synth/mine/callsites.py)
        self.inits: dict = {}  # module -> class -> its __init__ node (synth/mine/callsites.py)

    def resolve(self, pf: ParsedFile, b: ImportBinding) -> ParsedFile | None:
        """The repository file an import refers to, or None when it is not in the repository."""
        if b.level:
            pkg = pf.module.split(".") if pf.is_package else pf.module.split(".")[:-1]
            if b.level > 1:
                pkg = pkg[: len(pkg) - (b.level - 1)]
            name = ".".join([*pkg, b.module] if b.module else pkg)
            return self.files.get(name)
        if b.module in self.files:
            return self.files[b.module]
        tail = "." + b.module
        hits = [f for m, f in self.files.items() if m.endswith(tail)]
        return hits[0] if len(hits) == 1 else None

    def resolve_attr_module(self, pf: ParsedFile, b: ImportBinding) -> ParsedFile | None:
        """``from pkg import layers`` where layers is itself a repository module."""
        sub = ImportBinding(b.name, f"{b.module}.{b.attr}" if b.module else b.attr or "", b.level, None, "")
        return self.resolve(pf, sub)


def _is_torch_nn_base(base: str) -> str | None:
    """The torch.nn class name a base expression names (nn.Linear -> Linear), else None."""
    for prefix in ("torch.nn.modules.module.", "torch.nn.", "nn."):
        if base.startswith(prefix):
            rest = base[len(prefix):]
            if rest[:1].isupper() and "." not in rest:
                return rest
    return None


def module_class_kind(index: RepoIndex, pf: ParsedFile, name: str, _seen: frozenset = frozenset()) -> str | None:
    """"forward" if class ``name`` of ``pf`` is an nn.Module subclass with a forward, "module" if it is
    one without any forward, None if it is not an nn.Module subclass (as far as the sources show)."""
    key = (pf.module, name)
    if key in _seen:
        return None
    seen = _seen | {key}
    info = pf.classes.get(name)
    if info is None:
        return None
    best: str | None = None
    for base in info.bases:
        kind = _base_kind(index, pf, base, seen)
        if kind == "forward":
            best = "forward"
        elif kind == "module" and best is None:
            best = "module"
    if best is not None and info.has_own_forward:
        return "forward"
    return best


def _base_kind(index: RepoIndex, pf: ParsedFile, base: str, seen: frozenset) -> str | None:
    nn_name = _is_torch_nn_base(base)
    if nn_name is not None:
        return "module" if nn_name in _NO_FORWARD_BASES else "forward"
    if "." in base:
        return None
    if base in pf.classes:
        return module_class_kind(index, pf, base, seen)
    idx = pf.symbols.get(base)
    if idx is None or pf.stmts[idx].kind != "import":
        return None
    for b in pf.stmts[idx].imports.get(base, []):
        if b.level == 0 and b.module.startswith("torch.nn") and b.attr:
            return "module" if b.attr in _NO_FORWARD_BASES else "forward"
        target = index.resolve(pf, b)
        if target is not None and b.attr:
            return _local_attr_kind(index, target, b.attr, seen)
    return None


def _local_attr_kind(index: RepoIndex, pf: ParsedFile, attr: str, seen: frozenset) -> str | None:
    if attr in pf.classes:
        return module_class_kind(index, pf, attr, seen)
    idx = pf.symbols.get(attr)
    if idx is not None and pf.stmts[idx].kind == "import":
        for b in pf.stmts[idx].imports.get(attr, []):
            target = index.resolve(pf, b)
            if target is not None and b.attr:
                return _local_attr_kind(index, target, b.attr, seen)
    return None


@dataclass
class FoundModule:
    path: str
    class_name: str
    line: int
    has_forward: bool


def find_module_classes(index: RepoIndex, pf: ParsedFile) -> list[FoundModule]:
    """Every nn.Module subclass defined at the top level of ``pf``, in source order."""
    out = []
    for name, info in pf.classes.items():
        kind = module_class_kind(index, pf, name)
        if kind is not None:
            out.append(FoundModule(pf.path, name, info.line, kind == "forward"))
    return sorted(out, key=lambda m: m.line)
