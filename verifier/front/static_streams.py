"""The static stage's reading of side streams (C09): whether work put on a CUDA side stream is joined back to the
current stream before the function that uses it returns (PyTorch's documented pattern: ``s.wait_stream(cur)``,
work, ``cur.wait_stream(s)``), read within one scope at a time; ``side_stream_hits`` lists the side work left
behind. A join it cannot place (in a branch the work is not in) is no join.
Imports: the standard library and the front's scope and value readings (static_scope, static_kinds).
"""

from __future__ import annotations

import ast

from verifier.front.extract import _dotted
from verifier.front.static_kinds import _SCOPES
from verifier.front.static_scope import _loop_bindings

STREAM_CTORS = {"torch.cuda.Stream", "torch.cuda.streams.Stream", "torch.cuda.ExternalStream",
                "torch.cuda.streams.ExternalStream", "torch.Stream"}
_CURRENT = {"torch.cuda.current_stream", "torch.cuda.default_stream"}
_STREAM_ENTER = {"torch.cuda.stream", "torch.cuda.set_stream", "torch.cuda.StreamContext"}
_SET_STREAM = {"torch.cuda.set_stream"}  # makes the side stream current: waiting on "the current stream" joins nothing
# where a join may sit relative to the work: not in a branch the work is not in
_CONDITIONAL = (ast.If, ast.While, ast.ExceptHandler, ast.IfExp, ast.match_case, ast.BoolOp)


class _Streams:
    """Side streams and whether forward waits for them: PyTorch's documented pattern (a stream that waits for
    the current one, work under ``with torch.cuda.stream(s)``, then ``torch.cuda.current_stream().wait_stream(s)``)
    leaves no work behind when the function returns; a stream never joined back does."""

    def __init__(self, tree: ast.Module, canonical, skip: set[int]):
        self.tree, self.canonical, self.skip = tree, canonical, skip
        self.parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        self.keys: dict[tuple, ast.AST] = {}  # stream key -> its creation
        self.hits: list[tuple[ast.AST, str]] = []

    def _full(self, node: ast.AST) -> str:
        d = _dotted(node)
        return self.canonical(d) if d else ""

    def scope_of(self, node: ast.AST) -> ast.AST:
        p = self.parents.get(id(node))
        while p is not None and not isinstance(p, _SCOPES):
            p = self.parents.get(id(p))
        return p if p is not None else self.tree

    def _own_nodes(self, scope: ast.AST) -> list[ast.AST]:
        out, todo = [], list(ast.iter_child_nodes(scope))
        while todo:
            n = todo.pop()
            if id(n) in self.skip:
                continue
            out.append(n)
            if not isinstance(n, (*_SCOPES, ast.ClassDef)):
                todo += list(ast.iter_child_nodes(n))
        return out

    @staticmethod
    def _target_key(target: ast.AST, scope: ast.AST) -> tuple | None:
        if isinstance(target, ast.Name):
            return (id(scope), target.id)
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
            return ("self", target.attr)
        return None

    def _creations(self) -> None:
        for n in ast.walk(self.tree):
            if id(n) in self.skip or not isinstance(n, (ast.Name, ast.Attribute)) or \
                    self._full(n) not in STREAM_CTORS or isinstance(self.parents.get(id(n)), ast.Attribute):
                continue
            call = self.parents.get(id(n))
            if not (isinstance(call, ast.Call) and call.func is n):
                self.hits.append((n, f"uses `{_dotted(n)}` as a value (a side stream the scan cannot follow)"))
                continue
            holder = self.parents.get(id(call))
            while isinstance(holder, (ast.List, ast.Tuple, ast.ListComp, ast.IfExp)):
                holder = self.parents.get(id(holder))  # a list of streams, or a stream where there is a GPU
            key = None
            if isinstance(holder, (ast.Assign, ast.AnnAssign)):
                targets = holder.targets if isinstance(holder, ast.Assign) else [holder.target]
                if len(targets) == 1:
                    key = self._target_key(targets[0], self.scope_of(holder))
            if key is None:
                self.hits.append((call, f"creates a side stream (`{_dotted(n)}()`) not bound to a name the scan can "
                                        "follow, so it cannot see the stream joined back"))
            else:
                self.keys.setdefault(key, call)

    def resolve(self, e: ast.AST, scope: ast.AST, seen=frozenset()):
        """The stream key ``e`` stands for, "current" for the current or default stream, else None."""
        if isinstance(e, ast.Call) and self._full(e.func) in _CURRENT:
            return "current"
        if isinstance(e, ast.IfExp):  # `self.side if self.side is not None else torch.cuda.current_stream()`
            got = {self.resolve(b, scope, seen) for b in (e.body, e.orelse)
                   if not (isinstance(b, ast.Constant) and b.value is None)}
            keys = got - {"current"}
            return keys.pop() if len(keys) == 1 and None not in keys else "current" if got == {"current"} else None
        if isinstance(e, ast.Subscript):
            return self.resolve(e.value, scope, seen)
        if isinstance(e, ast.Attribute):
            key = self._target_key(e, scope)
            return key if key in self.keys else None
        if not isinstance(e, ast.Name) or (id(scope), e.id) in seen:
            return None
        seen = seen | {(id(scope), e.id)}
        if (id(scope), e.id) in self.keys:
            return (id(scope), e.id)
        found, bound = set(), False
        for n in self._own_nodes(scope):
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == e.id for t in n.targets):
                bound = True
                found.add(self.resolve(n.value, scope, seen))
            elif isinstance(n, (ast.For, ast.comprehension)):
                for name, source in _loop_bindings(n.target, n.iter):
                    if name == e.id:
                        bound = True
                        found.add(self.resolve(source, scope, seen))
                if any(isinstance(t, ast.Name) and t.id == e.id for t in ast.walk(n.target)) and \
                        not any(name == e.id for name, _ in _loop_bindings(n.target, n.iter)):
                    bound = True
                    found.add(None)
        if isinstance(scope, _SCOPES) and any(a.arg == e.id for a in scope.args.posonlyargs + scope.args.args +
                                              scope.args.kwonlyargs + [x for x in (scope.args.vararg,
                                                                                    scope.args.kwarg) if x]):
            bound = True
            found.add(None)
        if bound:
            return found.pop() if len(found) == 1 else None
        return None if scope is self.tree else self.resolve(e, self.scope_of(scope), seen)

    def _binds_only(self, ref: ast.AST) -> bool:
        """``ref`` only names the stream for a name that stands for it: the iterable of a loop (through enumerate,
        zip...), or the value of a plain assignment."""
        p = self.parents.get(id(ref))
        if isinstance(p, ast.Assign) and p.value is ref:
            return True
        node = ref
        while p is not None and not isinstance(p, ast.stmt):
            if isinstance(p, ast.comprehension) and p.iter is node:
                return True
            node, p = p, self.parents.get(id(p))
        return isinstance(p, (ast.For, ast.AsyncFor)) and p.iter is node

    def _stmt(self, node: ast.AST) -> ast.AST:
        while not isinstance(node, ast.stmt):
            node = self.parents[id(node)]
        return node

    def _conditions(self, node: ast.AST, scope: ast.AST) -> set[int]:
        out, p = set(), self.parents.get(id(node))
        while p is not None and p is not scope:
            if isinstance(p, _CONDITIONAL):
                out.add(id(p))
            p = self.parents.get(id(p))
        return out

    def judge(self) -> list[tuple[ast.AST, str]]:
        self._creations()
        used: set = set()
        scopes = [self.tree] + [n for n in ast.walk(self.tree) if isinstance(n, _SCOPES) and id(n) not in self.skip]
        for scope in scopes:
            nodes = self._own_nodes(scope)
            uses: dict[tuple, list[ast.AST]] = {}
            joins: dict[tuple, list[ast.AST]] = {}
            events: dict[str, set] = {}
            made_current: set = set()  # streams made current with set_stream: only a synchronize joins them
            everything: list[ast.AST] = []  # torch.cuda.synchronize(): joins every stream
            for n in nodes:
                if isinstance(n, ast.Call):
                    full = self._full(n.func)
                    if full == "torch.cuda.synchronize":
                        everything.append(n)
                    elif full in _STREAM_ENTER and n.args and not (isinstance(n.args[0], ast.Constant) and
                                                                   n.args[0].value is None):
                        if self.resolve(n.args[0], scope) is None:
                            self.hits.append((n, f"runs work on a stream the scan cannot follow (`{_dotted(n.func)}`"
                                                 " of something not a stream it saw created and joined)"))
                if not isinstance(n, (ast.Name, ast.Attribute)) or isinstance(n.ctx, (ast.Store, ast.Del)):
                    continue
                if isinstance(n, ast.Name) and isinstance(self.parents.get(id(n)), ast.Attribute) and \
                        n.id == "self":
                    continue
                key = self.resolve(n, scope)
                if key is None or key == "current":
                    continue
                used.add(key)
                p, gp = self.parents.get(id(n)), self.parents.get(id(self.parents.get(id(n))))
                if self._binds_only(n):
                    continue  # binds a name to the stream (`for s in self.streams`, `s = self.side`): its uses count
                if isinstance(p, ast.Call) and self._full(p.func) in _SET_STREAM:
                    made_current.add(key)
                if isinstance(p, ast.Call) and n in p.args and isinstance(p.func, ast.Attribute) and \
                        p.func.attr == "wait_stream" and self.resolve(p.func.value, scope) == "current":
                    joins.setdefault(key, []).append(p)
                elif isinstance(p, ast.Attribute) and p.attr == "synchronize" and isinstance(gp, ast.Call) and \
                        gp.func is p:
                    joins.setdefault(key, []).append(gp)
                else:
                    uses.setdefault(key, []).append(n)
                    if isinstance(p, ast.Call) and n in p.args and isinstance(p.func, ast.Attribute) and \
                            p.func.attr == "record" and isinstance(p.func.value, ast.Name):
                        events.setdefault(p.func.value.id, set()).add(key)  # ev.record(s)
                    if isinstance(p, ast.Attribute) and p.attr == "record_event" and isinstance(gp, ast.Call):
                        holder = self.parents.get(id(gp))  # ev = s.record_event()
                        if isinstance(holder, ast.Assign) and len(holder.targets) == 1 and \
                                isinstance(holder.targets[0], ast.Name):
                            events.setdefault(holder.targets[0].id, set()).add(key)
            for n in nodes:  # cur.wait_event(ev) / ev.synchronize() for an event recorded on a side stream
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                    if n.func.attr == "wait_event" and n.args and isinstance(n.args[0], ast.Name) and \
                            self.resolve(n.func.value, scope) == "current":
                        for key in events.get(n.args[0].id, ()):
                            joins.setdefault(key, []).append(n)
                    elif n.func.attr == "synchronize" and isinstance(n.func.value, ast.Name):
                        for key in events.get(n.func.value.id, ()):
                            joins.setdefault(key, []).append(n)
            exits = [n for n in nodes if isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom))]
            for key, refs in uses.items():
                stmts = [self._stmt(r) for r in refs]
                last = max(stmts, key=lambda s: (s.end_lineno, s.end_col_offset))
                first = min(stmts, key=lambda s: (s.lineno, s.col_offset))
                end = (last.end_lineno, last.end_col_offset)
                cond = self._conditions(last, scope)
                ok = False
                waits = [j for j in joins.get(key, []) if key not in made_current or
                         (isinstance(j.func, ast.Attribute) and j.func.attr == "synchronize")]
                for j in waits + everything:
                    at = (j.lineno, j.col_offset)
                    if at > end and self._conditions(j, scope) <= cond and not any(
                            (first.lineno, first.col_offset) <= (x.lineno, x.col_offset) < at for x in exits):
                        ok = True
                        break
                if not ok:
                    name = key[1]
                    self.hits.append((first, f"runs work on the side stream `{name}` and does not join it back "
                                             "before returning (`torch.cuda.current_stream().wait_stream("
                                             f"{name})`, an event the current stream waits for, or "
                                             "`torch.cuda.synchronize()` after the work): the timing would miss "
                                             "that work"))
        for key, call in self.keys.items():
            if key not in used:
                self.hits.append((call, f"creates the side stream `{key[1]}` and never uses it where the scan can "
                                        "see it joined back"))
        return self.hits


def side_stream_hits(tree: ast.Module, canonical, skip: set[int]) -> list[tuple[ast.AST, str]]:
    """C09 findings for side streams: work on a stream that the same function does not join back to the current
    stream before it returns (or a stream the scan cannot follow)."""
    return _Streams(tree, canonical, skip).judge()
