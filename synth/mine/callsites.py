"""Constructor arguments from the repository itself: the calls that build a mined class.

Real code often says how a module is meant to be built: ``def ResNet18(): return ResNet(BasicBlock,
[2, 2, 2, 2])``, ``VGG('VGG16')``, ``EfficientNet(cfg)``. Such arguments are classes of the repository,
configuration dicts and literal lists that no name-based guess finds. :func:`find_call_sites` lists the
calls of one class in the repository (in its own file, and in files that import it by name) and, for
each argument, its source text when every name it reads is defined at the top level of the calling file
(or is a builtin); an argument that reads a local variable (``Attention(dim, heads=heads)`` inside
another module) is left to guessing (None).

Wrappers whose argument is another model of the repository (``AutoregressiveWrapper(model)``, which reads
``model.max_seq_len``) are mostly built in tests and scripts: ``model = TransformerWrapper(...)`` on the
line before, at the top level of a script or inside a test function that imports both classes itself
(``from x_transformers import AutoregressiveWrapper``). Such a variable stands for the value assigned to
it last before the call, the class is found through a package's re-export, and a name a function imports
locally is read from the repository file it comes from.

synth/mine/extract.py adds the definitions those arguments read to the extracted program, so the
sources are valid there; synth/mine/init_args.py tries the call sites before guessing. Nothing here executes
the code. Not guaranteed: that a top-level name an argument reads is not shadowed by a local of the same
name at the call (the sandboxed constructor call then fails and guessing takes over).
"""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass, field

from tree_sitter import Node

from synth.mine.discover import (ImportBinding, ParsedFile, RepoIndex, _free_names, _import_bindings, _text,
                                 module_class_kind, parser, walk)

MAX_SITES = 3  # per class: the first calls in repository order are the canonical ones (factories)
MAX_PROVIDER_SITES = 2  # per module-valued parameter: calls of repository classes that can fill it
MAX_CANDIDATE_SITES = 200  # calls of one such class read to pick the smallest


@dataclass
class CallSite:
    """One call ``Class(args, kw=...)``: each value is its source text, or None when it reads locals."""
    path: str
    module: str  # the calling file's dotted module name (its key in RepoIndex.files)
    args: list[str | None] = field(default_factory=list)
    kwargs: dict[str, str | None] = field(default_factory=dict)
    needs: list[tuple[str, str]] = field(default_factory=list)  # (file module, top-level name) the sources read

    def as_job(self) -> dict:
        return {"path": self.path, "args": self.args, "kwargs": self.kwargs}

    @property
    def known(self) -> int:
        return sum(a is not None for a in self.args) + sum(v is not None for v in self.kwargs.values())


@dataclass
class _FileCalls:
    """The calls of one file by callee name, each with its enclosing function (None: the top level),
    and the from-imports each function makes itself."""
    by_name: dict[str, list[tuple[CallSite, int | None]]]
    local_imports: dict[int, list[ImportBinding]]


def _names_class(index: RepoIndex, pf: ParsedFile, b: ImportBinding, target: ParsedFile, class_name: str,
                 depth: int = 0) -> bool:
    """Whether the from-import ``b`` of ``pf`` binds ``target``'s class, directly or through re-exports
    (``from x_transformers import AutoregressiveWrapper``, which the package's __init__ imports)."""
    if b.attr is None:
        return False
    r = index.resolve(pf, b)
    if r is target:
        return b.attr == class_name
    if r is None or depth >= 3 or b.attr not in r.symbols:
        return False
    stmt = r.stmts[r.symbols[b.attr]]
    return stmt.kind == "import" and any(_names_class(index, r, b2, target, class_name, depth + 1)
                                         for b2 in stmt.imports.get(b.attr, []))


def _names_for(index: RepoIndex, target: ParsedFile, class_name: str, pf: ParsedFile) -> set[str]:
    """The names under which ``pf`` refers to ``target``'s class: itself, or its from-import aliases."""
    if pf is target:
        return {class_name}
    names = set()
    for stmt in pf.stmts:
        if stmt.kind != "import":
            continue
        for bindings in stmt.imports.values():
            for b in bindings:
                if _names_class(index, pf, b, target, class_name):
                    names.add(b.name)
    return names


def _enclosing_function(node: Node) -> Node | None:
    fn = node.parent
    while fn is not None and fn.type != "function_definition":
        fn = fn.parent
    return fn


def _local_assignment(ident, top_level: bool = False):
    """The value node of the last plain assignment ``name = value`` to this identifier before it, in the
    body of the function that holds it (``cfg = {...}; return DPN(cfg)``; ``model = TransformerWrapper(...);
    model = AutoregressiveWrapper(model)``), or with ``top_level`` in a script's top level; else None."""
    fn = _enclosing_function(ident)
    if fn is not None:
        body = fn.child_by_field_name("body")
    elif top_level:
        body = ident
        while body.parent is not None:
            body = body.parent
    else:
        return None
    name, value = _text(ident), None
    for stmt in body.named_children:
        if stmt.end_byte > ident.start_byte:  # the statement of the call itself, and what follows
            break
        a = stmt.named_children[0] if stmt.type == "expression_statement" and stmt.named_children else None
        if a is not None and a.type == "assignment":
            left = a.child_by_field_name("left")
            if left is not None and left.type == "identifier" and _text(left) == name:
                value = a.child_by_field_name("right")
    return value


def _value(node, pf: ParsedFile, index: RepoIndex, local: dict[str, ImportBinding],
           depth: int = 0) -> tuple[str | None, list[tuple[str, str]]]:
    """(source, (file module, top-level name) pairs it reads) of one argument, or (None, []) when it
    reads anything else. A bare local name stands for the value assigned to it last in the calling
    function, and a top-level name of a script for the call assigned to it last before the call
    (``model = TransformerWrapper(...)``); a name the function imports itself (``local``) is read from
    the repository file it comes from."""
    if node.type == "identifier" and not hasattr(builtins, _text(node)) and depth < 2 and _text(node) not in local:
        if _text(node) not in pf.symbols:
            value = _local_assignment(node)
            return _value(value, pf, index, local, depth + 1) if value is not None else (None, [])
        if pf.stmts[pf.symbols[_text(node)]].kind == "assign" and _enclosing_function(node) is None:
            value = _local_assignment(node, top_level=True)
            if value is not None and value.type == "call":
                return _value(value, pf, index, local, depth + 1)
    free, _ = _free_names(node)
    needs = []
    for name in free:
        if name in local:
            b = local[name]
            r = index.resolve(pf, b)
            if r is None or b.attr != name or name not in r.symbols:
                return None, []
            needs.append((r.module, name))
        elif name in pf.symbols:
            needs.append((pf.module, name))
        elif not hasattr(builtins, name):
            return None, []
    return _text(node), needs


def _calls_in(index: RepoIndex, f: ParsedFile) -> _FileCalls:
    """Every call of a plain name in ``f``, by that name; parsed once per file and kept in the index."""
    if f.module not in index.calls:
        calls = _FileCalls({}, {})
        if f.source is not None:
            nodes = list(walk(parser().parse(f.source.encode("utf-8")).root_node))
            for n in nodes:
                if n.type == "import_from_statement" and (fn := _enclosing_function(n)) is not None:
                    calls.local_imports.setdefault(fn.start_byte, []).extend(_import_bindings(n))
            for n in nodes:
                fn = n.child_by_field_name("function") if n.type == "call" else None
                if fn is not None and fn.type == "identifier" and _text(fn)[:1].isupper():
                    owner = _enclosing_function(n)
                    key = owner.start_byte if owner is not None else None
                    local = {b.name: b for b in calls.local_imports.get(key, []) if b.name != "*"}
                    site = _site(n, f, index, local)
                    if site is not None:
                        calls.by_name.setdefault(_text(fn), []).append((site, key))
        index.calls[f.module] = calls
    return index.calls[f.module]


def find_call_sites(index: RepoIndex, pf: ParsedFile, class_name: str, limit: int = MAX_SITES) -> list[CallSite]:
    """Calls of ``class_name`` (defined in ``pf``) in the repository, its own file first, then the
    others in path order; calls with ``*args`` / ``**kwargs`` and calls that give no argument are
    skipped. At most ``limit``, those with the most known arguments first."""
    out: list[CallSite] = []
    files = [pf] + sorted((f for f in index.files.values() if f is not pf), key=lambda f: f.path)
    for f in files:
        calls = _calls_in(index, f)
        names = _names_for(index, pf, class_name, f)
        # a test function that imports the class itself: `from x_transformers import AutoregressiveWrapper`
        local = {(key, b.name) for key, bindings in calls.local_imports.items() for b in bindings
                 if _names_class(index, f, b, pf, class_name)}
        for name, sites in calls.by_name.items():
            out += [site for site, key in sites if name in names or (key, name) in local]
    out.sort(key=lambda s: -s.known)  # stable: repository order among equals
    return out[:limit]


def _site(call, f: ParsedFile, index: RepoIndex, local: dict[str, ImportBinding]) -> CallSite | None:
    args = call.child_by_field_name("arguments")
    if args is None or args.type != "argument_list":
        return None
    site = CallSite(f.path, f.module)
    for a in args.named_children:
        if a.type == "comment":
            continue
        if a.type in ("list_splat", "dictionary_splat"):
            return None
        if a.type == "keyword_argument":
            src, needs = _value(a.child_by_field_name("value"), f, index, local)
            site.kwargs[_text(a.child_by_field_name("name"))] = src
        else:
            if site.kwargs:  # positional after keyword: not valid Python anyway
                return None
            src, needs = _value(a, f, index, local)
            site.args.append(src)
        site.needs += [n for n in needs if n not in site.needs]
    return site if site.known else None


# ---------------------------------------------------------------------------- module-valued parameters


def _inits(index: RepoIndex, f: ParsedFile) -> dict[str, Node]:
    """Class name -> its ``__init__`` node, for the classes of ``f`` that define one (parsed once)."""
    if f.module not in index.inits:
        out = {}
        if f.source is not None:
            for n in walk(parser().parse(f.source.encode("utf-8")).root_node):
                if n.type == "class_definition":
                    init = _init_of(n)
                    if init is not None:
                        out.setdefault(_text(n.child_by_field_name("name")), init)
        index.inits[f.module] = out
    return index.inits[f.module]


def _init_of(cls: Node) -> Node | None:
    for stmt in cls.child_by_field_name("body").named_children:
        fn = stmt.child_by_field_name("definition") if stmt.type == "decorated_definition" else stmt
        if fn is not None and fn.type == "function_definition" and _text(fn.child_by_field_name("name")) == "__init__":
            return fn
    return None


def _param_names(fn: Node) -> list[str]:
    out = []
    for p in fn.child_by_field_name("parameters").named_children:
        ident = p if p.type == "identifier" else p.child_by_field_name("name")
        if ident is None and p.named_children and p.named_children[0].type == "identifier":
            ident = p.named_children[0]  # typed_parameter
        if ident is not None and ident.type == "identifier" and _text(ident) != "self":
            out.append(_text(ident))
    return out


def _attributes_read(fn: Node, name: str) -> set[str]:
    """``attr`` of every ``name.attr`` in the function (``net.max_seq_len``, ``model.attn_layers.dim``)."""
    out = set()
    for n in walk(fn):
        if n.type == "attribute":
            obj = n.child_by_field_name("object")
            if obj is not None and obj.type == "identifier" and _text(obj) == name:
                out.add(_text(n.child_by_field_name("attribute")))
    return out


def _attributes_set(fn: Node) -> set[str]:
    """``attr`` of every ``self.attr = ...`` in the function."""
    out = set()
    for n in walk(fn):
        if n.type == "assignment":
            for t in walk(n.child_by_field_name("left")):
                if t.type == "attribute" and _text(t.child_by_field_name("object")) == "self":
                    out.add(_text(t.child_by_field_name("attribute")))
    return out


def _size_hint(site: CallSite) -> int:
    """Sum of the integer literals a call passes: calls with small numbers build small models first."""
    text = " ".join([a or "" for a in site.args] + [v or "" for v in site.kwargs.values()])
    return sum(int(t) for t in re.findall(r"(?<![\w.])\d+(?![\w.])", text))


def provider_sites(index: RepoIndex, pf: ParsedFile, class_name: str) -> list[CallSite]:
    """Calls of ``class_name`` made up from calls of other repository classes, for its constructor
    parameters that take a model: ``AutoregressiveWrapper(net)`` reads ``net.max_seq_len`` and
    ``net.token_emb``; ``TransformerWrapper`` sets both in its ``__init__``, and the repository calls it
    (``TransformerWrapper(num_tokens=256, max_seq_len=32, attn_layers=Decoder(dim=64, depth=2))`` in a
    test), so ``AutoregressiveWrapper(net=TransformerWrapper(...))`` is a call to try. The parameter is
    passed by keyword; the others are left to guessing. Calls with the smallest integer arguments come
    first (a proxy for the smallest model)."""
    init = _inits(index, pf).get(class_name)
    if init is None:
        return []
    wanted = {p: _attributes_read(init, p) for p in _param_names(init)}
    wanted = {p: attrs for p, attrs in wanted.items() if attrs}
    if not wanted:
        return []
    providers: list[tuple[ParsedFile, str, set[str]]] = []
    for f in sorted(index.files.values(), key=lambda f: f.path):
        for name, init_p in _inits(index, f).items():
            if name in f.classes and not (f is pf and name == class_name) \
                    and module_class_kind(index, f, name) == "forward":
                providers.append((f, name, _attributes_set(init_p)))
    per_param = {}
    for param, attrs in wanted.items():
        sites = []
        for f, name, has in providers:
            if attrs <= has:
                sites += [(s, f, name) for s in find_call_sites(index, f, name, limit=MAX_CANDIDATE_SITES)
                          if all(a is not None for a in s.args) and all(v is not None for v in s.kwargs.values())]
        sites.sort(key=lambda x: _size_hint(x[0]))
        if sites:
            per_param[param] = sites[:MAX_PROVIDER_SITES]
    out = []
    for i in range(max((len(v) for v in per_param.values()), default=0)):
        # every model-valued parameter at once (BeliefStateWrapper(forward_decoder, backward_decoder))
        kwargs, needs, path, module = {}, [], None, None
        for param, sites in per_param.items():
            site, f, name = sites[min(i, len(sites) - 1)]
            kwargs[param] = f"{name}(" + ", ".join(site.args + [f"{k}={v}" for k, v in site.kwargs.items()]) + ")"
            needs += [n for n in [(f.module, name)] + site.needs if n not in needs]
            if path not in (None, site.path):
                break  # calls from two files: the literal-statement check reads one calling file
            path, module = site.path, site.module
        else:
            out.append(CallSite(path, module, [], kwargs, needs))
    return out
