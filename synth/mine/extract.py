"""Cut one nn.Module subclass out of its repository as a self-contained program with ``class Model``.

``extract_module`` collects the dependency closure of one class that synth/mine/discover.py found: the
imports it uses (only of packages that can be imported here), the helper functions, constants and
other classes it reads, its base classes, and, across files of one repository, what it imports
relatively (``from .layers import ConvBNAct``). The class is renamed ``Model``.

What cannot be made self-contained raises :class:`NotSelfContained` with a short reason:
``missing_package`` (an import of something not installed), ``missing_local_module``, ``module_import``
(a whole repository module used as a namespace), ``undefined_name``, ``name_conflict`` (two different
definitions of one name, or a definition named Model / get_inputs / get_init_inputs).

Not guaranteed: the closure follows the per-statement scope analysis of synth/mine/discover.py, so a
global shadowed by a local of the same name somewhere else in the class is missed; the sandboxed run
then fails and the module is counted as not deduced. Nothing here executes the code.
"""

from __future__ import annotations

import builtins
import importlib.util
import sys
from dataclasses import dataclass, field
from functools import lru_cache

from synth.mine.discover import ImportBinding, NotSelfContained, ParsedFile, RepoIndex, TopStmt, parser, walk

BUILTINS = frozenset(dir(builtins)) | {"__file__", "__name__", "__doc__", "__builtins__", "__class__"}
RESERVED = ("Model", "get_inputs", "get_init_inputs")


@lru_cache(maxsize=4096)
def importable(top: str) -> bool:
    """Whether a top-level package can be imported here (found on the path; nothing is imported)."""
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


@dataclass
class ExtractedModule:
    """A self-contained program defining ``class Model`` (no get_inputs / get_init_inputs yet)."""
    path: str
    class_name: str
    program: str
    files_used: list[str]
    statements: list[tuple[str, str]] = field(default_factory=list)  # (path, text) of top-level statements
    # other than def, class and import


class _Closure:
    def __init__(self, index: RepoIndex, taken: set[str] = frozenset()):
        self.index = index
        self.index_names = taken  # names a renamed definition must not take (the files' own names)
        self.done: set[tuple[str, int]] = set()
        self.visiting: set[tuple[str, str]] = set()
        self.defs: list[tuple[ParsedFile | None, TopStmt]] = []  # None: an alias line made here
        self.imports: dict[str, None] = {}
        self.aliases: dict[str, str] = {}
        self.bound: dict[str, tuple[str, str]] = {}   # name -> (file module, text)
        self.future: dict[str, None] = {}
        # file module -> {name in that file: name in the program}: two files that define one helper name
        # differently (``default(val, d)`` and ``default(*args)``) both keep theirs, the later one renamed
        self.renames: dict[str, dict[str, str]] = {}

    def program_name(self, module: str, name: str) -> str:
        return self.renames.get(module, {}).get(name, name)

    def bind(self, name: str, pf: ParsedFile, text: str) -> None:
        prev = self.bound.get(name)
        if prev is not None and prev[1] != text:
            if prev[0] == pf.module or name in RESERVED:
                raise NotSelfContained("name_conflict", f"{name} is defined in {prev[0]} and {pf.module}")
            new = f"{name}_{pf.module.split('.')[-1]}"
            while new in self.bound or new in self.index_names:
                new += "_"
            self.renames.setdefault(pf.module, {})[name] = new
            name = new
        self.bound[name] = (pf.module, text)

    def need(self, pf: ParsedFile, name: str) -> None:
        key = (pf.module, name)
        if key in self.visiting:
            return
        if key in self.index.failed:
            raise self.index.failed[key]
        self.visiting.add(key)
        try:
            self._need(pf, name)
        except NotSelfContained as e:
            if e.reason != "name_conflict":  # a conflict depends on what else was collected; the rest do not
                self.index.failed[key] = e
            raise

    def _need(self, pf: ParsedFile, name: str) -> None:
        idx = pf.symbols.get(name)
        if idx is None:
            self._from_star_or_builtin(pf, name)
            return
        stmt = pf.stmts[idx]
        if stmt.kind == "import":
            for b in stmt.imports[name]:
                self._import(pf, b)
            return
        # what the statement reads when it runs (bases, decorators, defaults) is defined before it; what
        # only its functions read comes after, so a base class that mentions its subclass in a method
        # (AttentionLayers and CrossAttender) still comes first
        eager = stmt.free if stmt.eager is None else stmt.eager
        for n in eager:
            if n not in stmt.binds:
                self.need(pf, n)
        if (pf.module, idx) not in self.done:
            self.done.add((pf.module, idx))
            for b in stmt.binds:
                self.bind(b, pf, stmt.text)
            self.future.update(dict.fromkeys(pf.future_lines))
            self.defs.append((pf, stmt))
        for n in stmt.free:
            if n not in stmt.binds and n not in eager:
                self.need(pf, n)

    def _from_star_or_builtin(self, pf: ParsedFile, name: str) -> None:
        for b in pf.star_imports:
            target = self.index.resolve(pf, b)
            if target is not None and name in target.symbols:
                self.need(target, name)
                return
        if name in BUILTINS:
            return
        for b in pf.star_imports:
            if self.index.resolve(pf, b) is None and b.level == 0 and importable(b.module.split(".")[0]):
                self.imports[b.line] = None  # the name may come from here: trust it, the sandbox checks
                return
        raise NotSelfContained("undefined_name", f"{name} in {pf.path}")

    def _import(self, pf: ParsedFile, b: ImportBinding) -> None:
        target = self.index.resolve(pf, b)
        if target is None and b.level == 0 and importable(b.module.split(".")[0]):
            # `from torch import nn` and `import torch.nn as nn` bind the same thing: emit one of them
            what = "import " + (f"{b.module}.{b.attr}" if b.attr else b.module if " as " in b.line else b.name)
            prev = self.bound.get(b.name)
            if prev is not None and prev[1] != what:
                # torch's einsum in one file, einops' in another: the later file's import gets an alias
                if prev[0] == pf.module or not (b.attr or " as " in b.line) or b.name in RESERVED:
                    raise NotSelfContained("name_conflict", f"{b.name} is imported as two different things")
                if pf.module in self.renames and b.name in self.renames[pf.module]:
                    return
                new = f"{b.name}_{pf.module.split('.')[-1]}"
                while new in self.bound or new in self.index_names:
                    new += "_"
                self.renames.setdefault(pf.module, {})[b.name] = new
                self.bound[new] = (pf.module, what)
                self.imports[(f"from {b.module} import {b.attr}" if b.attr else f"import {b.module}") + f" as {new}"] = None
                return
            if prev is None:
                self.bound[b.name] = (pf.module, what)
                self.imports[b.line] = None
            return
        if target is None:
            if b.level or self.index.resolve_attr_module(pf, b) is not None:
                raise NotSelfContained("missing_local_module", f"{'.' * b.level}{b.module} from {pf.path}")
            raise NotSelfContained("missing_package", b.module.split(".")[0])
        if b.attr is None:
            raise NotSelfContained("module_import", f"import {b.module} in {pf.path}")
        if b.attr not in target.symbols and not target.star_imports:
            if self.index.resolve_attr_module(pf, b) is not None:
                raise NotSelfContained("module_import", f"{b.attr} from {b.module} in {pf.path}")
            raise NotSelfContained("undefined_name", f"{b.attr} in {target.path}")
        self.need(target, b.attr)
        attr = self.program_name(target.module, b.attr)
        if b.name == b.attr and attr != b.attr:  # the definition was renamed: so are this file's uses
            self.renames.setdefault(pf.module, {})[b.name] = attr
        elif b.name != b.attr and b.name not in self.aliases:
            # right after the definition, so the alias exists before anything that uses it is defined
            self.aliases[b.name] = attr
            self.bind(b.name, pf, f"{b.name} = {attr}")
            alias = self.program_name(pf.module, b.name)
            self.defs.append((None, TopStmt(-1, "assign", f"{alias} = {attr}", [alias], [attr])))


def rename_identifier(text: str, old: str, new: str) -> str:
    """``text`` with every reference to the name ``old`` changed to ``new`` (attribute names such as
    ``x.old`` and keyword names such as ``f(old=1)`` are not references and stay)."""
    src = text.encode("utf-8")
    tree = parser().parse(src)
    edits = []
    for n in walk(tree.root_node):
        if n.type == "identifier" and n.text.decode() == old:
            parent = n.parent
            if parent.type == "attribute" and parent.child_by_field_name("attribute") == n:
                continue
            if parent.type == "keyword_argument" and parent.child_by_field_name("name") == n:
                continue
            edits.append((n.start_byte, n.end_byte))
    for start, end in sorted(edits, reverse=True):
        src = src[:start] + new.encode() + src[end:]
    return src.decode("utf-8")


def _rename_class(text: str, old: str, new: str, add_forward: bool) -> str:
    """The class statement with its name (and references to it inside) changed to ``new``."""
    out = rename_identifier(text, old, new)
    if add_forward:
        cls = next(n for n in walk(parser().parse(out.encode()).root_node) if n.type == "class_definition")
        body = cls.child_by_field_name("body")
        first = body.named_children[0] if body.named_children else None
        indent = " " * (first.start_point[1] if first is not None else 4)
        out = out.rstrip() + (f"\n\n{indent}def forward(self, *args, **kwargs):\n"
                              f"{indent}    return super().forward(*args, **kwargs)")
    return out


def extract_module(index: RepoIndex, pf: ParsedFile, class_name: str,
                   extra_needs: list[tuple[ParsedFile, str]] = ()) -> ExtractedModule:
    """The self-contained program of one class (see module docstring); raises NotSelfContained.
    ``extra_needs``: (file, top-level name) pairs the program must define as well, such as the names
    the constructor arguments of a call site read (synth/mine/callsites.py)."""
    c = _Closure(index, set(pf.symbols))
    c.need(pf, class_name)
    for f, name in extra_needs:
        c.need(f, name)
    target_stmt = pf.stmts[pf.classes[class_name].stmt]
    for name in RESERVED:
        owner = c.bound.get(name)
        if owner is not None and not (name == class_name and owner[0] == pf.module):
            raise NotSelfContained("name_conflict", f"the program already defines {name}")
    if "torch" in c.bound and c.bound["torch"][1] != "import torch":
        raise NotSelfContained("name_conflict", "torch is bound to something other than the torch package")
    # torch first (get_inputs needs it), nn next (Model's usual base), then the rest in first-use order
    lines: list[str] = [*c.future, "import torch"]
    if "nn" not in c.bound:
        lines.append("import torch.nn as nn")
    lines += [line for line in c.imports if line != "import torch"]
    body = []
    for f, stmt in c.defs:
        text = stmt.text
        for old, new in (c.renames.get(f.module, {}) if f is not None else {}).items():
            text = rename_identifier(text, old, new)
        if f is pf and stmt is target_stmt:
            body.append(_rename_class(text, class_name, "Model", not pf.classes[class_name].has_own_forward))
            if class_name != "Model" and any(class_name in s.free for f, s in c.defs if s is not target_stmt):
                # right after the class: a subclass defined later in the program (class Encoder(Layers))
                # reads the name when it is defined
                body.append(f"{class_name} = Model")
        else:
            body.append(text)
    program = "\n".join(lines) + "\n\n\n" + "\n\n\n".join(body) + "\n"
    files = sorted({f.path for f, _ in c.defs if f is not None})
    statements = [(f.path, s.text) for f, s in c.defs if f is not None and s.kind not in ("def", "class", "import")]
    return ExtractedModule(pf.path, class_name, program, files, statements)
