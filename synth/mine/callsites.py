"""Constructor arguments from the repository itself: the calls that build a mined class.

Real code often says how a module is meant to be built: ``def ResNet18(): return ResNet(BasicBlock,
[2, 2, 2, 2])``, ``VGG('VGG16')``, ``EfficientNet(cfg)``. Such arguments are classes of the repository,
configuration dicts and literal lists that no name-based guess finds. :func:`find_call_sites` lists the
calls of one class in the repository (in its own file, and in files that import it by name) and, for
each argument, its source text when every name it reads is defined at the top level of the calling file
(or is a builtin); an argument that reads a local variable (``Attention(dim, heads=heads)`` inside
another module) is left to guessing (None).

synth/mine/extract.py adds the definitions those arguments read to the extracted program, so the
sources are valid there; synth/mine/init_args.py tries the call sites before guessing. Nothing here executes
the code. Not guaranteed: that a top-level name an argument reads is not shadowed by a local of the same
name at the call (the sandboxed constructor call then fails and guessing takes over).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field

from synth.mine.discover import ParsedFile, RepoIndex, _free_names, _text, parser, walk

MAX_SITES = 3  # per class: the first calls in repository order are the canonical ones (factories)


@dataclass
class CallSite:
    """One call ``Class(args, kw=...)``: each value is its source text, or None when it reads locals."""
    path: str
    module: str  # the calling file's dotted module name (its key in RepoIndex.files)
    args: list[str | None] = field(default_factory=list)
    kwargs: dict[str, str | None] = field(default_factory=dict)
    needs: list[str] = field(default_factory=list)  # top-level names of ``path`` the sources read

    def as_job(self) -> dict:
        return {"path": self.path, "args": self.args, "kwargs": self.kwargs}

    @property
    def known(self) -> int:
        return sum(a is not None for a in self.args) + sum(v is not None for v in self.kwargs.values())


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
                if b.attr == class_name and index.resolve(pf, b) is target:
                    names.add(b.name)
    return names


def _local_assignment(ident):
    """The value node of the last plain assignment ``name = value`` to this identifier before it, in the
    body of the function that holds it (``cfg = {...}; return DPN(cfg)``; ``model = TransformerWrapper(...);
    model = AutoregressiveWrapper(model)``), else None."""
    fn = ident.parent
    while fn is not None and fn.type != "function_definition":
        fn = fn.parent
    if fn is None:
        return None
    name, value = _text(ident), None
    for stmt in fn.child_by_field_name("body").named_children:
        if stmt.end_byte > ident.start_byte:  # the statement of the call itself, and what follows
            break
        a = stmt.named_children[0] if stmt.type == "expression_statement" and stmt.named_children else None
        if a is not None and a.type == "assignment":
            left = a.child_by_field_name("left")
            if left is not None and left.type == "identifier" and _text(left) == name:
                value = a.child_by_field_name("right")
    return value


def _value(node, pf: ParsedFile, depth: int = 0) -> tuple[str | None, list[str]]:
    """(source, top-level names it reads) of one argument, or (None, []) when it reads anything else.
    A bare local name assigned once in the calling function stands for its assigned value."""
    if node.type == "identifier" and _text(node) not in pf.symbols and not hasattr(builtins, _text(node)) \
            and depth < 2:
        value = _local_assignment(node)
        return _value(value, pf, depth + 1) if value is not None else (None, [])
    free, _ = _free_names(node)
    needs = []
    for name in free:
        if name in pf.symbols:
            needs.append(name)
        elif not hasattr(builtins, name):
            return None, []
    return _text(node), needs


def _calls_in(index: RepoIndex, f: ParsedFile) -> dict[str, list[CallSite]]:
    """Every call of a plain name in ``f``, by that name; parsed once per file and kept in the index."""
    if f.module not in index.calls:
        by_name: dict[str, list[CallSite]] = {}
        if f.source is not None:
            for n in walk(parser().parse(f.source.encode("utf-8")).root_node):
                fn = n.child_by_field_name("function") if n.type == "call" else None
                if fn is not None and fn.type == "identifier" and _text(fn)[:1].isupper():
                    site = _site(n, f)
                    if site is not None:
                        by_name.setdefault(_text(fn), []).append(site)
        index.calls[f.module] = by_name
    return index.calls[f.module]


def find_call_sites(index: RepoIndex, pf: ParsedFile, class_name: str, limit: int = MAX_SITES) -> list[CallSite]:
    """Calls of ``class_name`` (defined in ``pf``) in the repository, its own file first, then the
    others in path order; calls with ``*args`` / ``**kwargs`` and calls that give no argument are
    skipped. At most ``limit``, those with the most known arguments first."""
    out: list[CallSite] = []
    files = [pf] + sorted((f for f in index.files.values() if f is not pf), key=lambda f: f.path)
    for f in files:
        calls = _calls_in(index, f)
        for name in _names_for(index, pf, class_name, f):
            out += calls.get(name, [])
    out.sort(key=lambda s: -s.known)  # stable: repository order among equals
    return out[:limit]


def _site(call, f: ParsedFile) -> CallSite | None:
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
            src, needs = _value(a.child_by_field_name("value"), f)
            site.kwargs[_text(a.child_by_field_name("name"))] = src
        else:
            if site.kwargs:  # positional after keyword: not valid Python anyway
                return None
            src, needs = _value(a, f)
            site.args.append(src)
        site.needs += [n for n in needs if n not in site.needs]
    return site if site.known else None
