"""The static scan's judges of ModelNew as a whole (verifier/front/static_judges.py ``judge_program`` calls
:func:`judge_model_new` once, after every node is judged): its bases and the reference ``Model`` it names or reaches
through ``super()`` (C04), try/except handlers that fall back to PyTorch or do more than re-raise (C03), compiled
kernel functions nothing calls (C02). The per-node rules are static_judges'.
Imports: the standard library and the front's program, scope and value readings.
"""

from __future__ import annotations

import ast

from verifier import cheats
from verifier.front.extract import _dotted, _own_chain
from verifier.front.static_kinds import TENSOR
from verifier.front.static_literal import _is_load_inline
from verifier.front.static_program import Program
from verifier.front.static_scope import always_raises, layer_bases, layer_reaches, own_forward


def judge_model_new(prog: Program) -> None:
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
