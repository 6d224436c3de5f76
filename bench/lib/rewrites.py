"""Programs rewritten the ways a mined copy of a benchmark program is (``KINDS``): what decontamination
(curation/decontam.py) must still catch. ``rewrite``: the class, the variables, arguments and ``self.``
attributes renamed, every size (integer constant > 8) changed, methods and module-level functions in reverse
order, docstrings and comments gone, the layout of ``ast.unparse``; ``edit``: the same with what mining adds
(the miner's ``get_inputs`` / ``get_init_inputs``, keyword arguments reordered, an extra statement);
``embed``: inside a larger module (a wrapper class and an unrelated block around it). Used by the recall
benchmark (bench/bench_decontam.py) and the tests."""

from __future__ import annotations

import ast
import random

KEEP = {"forward", "__init__", "get_inputs", "get_init_inputs", "self", "super", "torch", "nn", "F", "math",
        "range", "len", "int", "float", "list", "tuple", "print", "True", "False", "None", "isinstance"}


def rewrite(code: str, seed: int) -> str:
    """``code`` as a mined copy would have it (module docstring); the program's behaviour is kept
    except for the sizes."""
    rng = random.Random(seed)
    tree = ast.parse(code)
    imported = {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    names: dict[str, str] = {}
    words = ["blk", "layer", "unit", "part", "op", "stage", "mod", "net", "val", "buf", "arg", "inp"]

    def new(name: str) -> str:
        if name in KEEP or name in imported or name.startswith("__"):
            return name
        if name not in names:
            w = rng.choice(words)
            names[name] = (w.capitalize() + "Block" if name[:1].isupper() else w) + f"_{len(names)}"
        return names[name]

    builtin = set(dir(__builtins__)) if isinstance(__builtins__, dict) is False else set(__builtins__)

    class Renamer(ast.NodeTransformer):
        def visit_Name(self, node):
            if node.id not in builtin:
                node.id = new(node.id)
            return node

        def visit_arg(self, node):
            node.arg = new(node.arg)
            return self.generic_visit(node)

        def visit_ClassDef(self, node):
            node.name = new(node.name)
            return self.generic_visit(node)

        def visit_FunctionDef(self, node):
            node.name = new(node.name)
            return self.generic_visit(node)

        def visit_Attribute(self, node):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                node.attr = new(node.attr)
            return self.generic_visit(node)

        def visit_keyword(self, node):
            return self.generic_visit(node)  # keyword names are API (dim=, keepdim=)

        def visit_Constant(self, node):
            if type(node.value) is int and node.value > 8:
                node.value = rng.choice([node.value // 2, node.value * 2, node.value + rng.randint(1, 64)])
            return node

    tree = Renamer().visit(tree)

    def drop_docstring(body):
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            return body[1:] or [ast.Pass()]
        return body

    tree.body = drop_docstring(tree.body)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            node.body = drop_docstring(node.body)
        if isinstance(node, ast.ClassDef):
            funcs = [i for i, b in enumerate(node.body) if isinstance(b, ast.FunctionDef)]
            for i, b in zip(funcs, [node.body[i] for i in reversed(funcs)]):
                node.body[i] = b
    funcs = [i for i, b in enumerate(tree.body) if isinstance(b, ast.FunctionDef)]
    for i, b in zip(funcs, [tree.body[i] for i in reversed(funcs)]):
        tree.body[i] = b
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def edit(code: str, seed: int) -> str:
    """``rewrite`` plus what mining adds: ``get_inputs`` / ``get_init_inputs`` replaced by the miner's
    kind (``torch.randn`` of literal shapes, literal constructor arguments), every call's keyword
    arguments in reverse order, and ``x = x.contiguous()`` first in ``forward``."""
    rng = random.Random(seed)
    tree = ast.parse(rewrite(code, seed))

    class Edit(ast.NodeTransformer):
        def visit_Call(self, node):
            node.keywords = node.keywords[::-1]
            return self.generic_visit(node)

    tree = Edit().visit(tree)
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in ("get_inputs", "get_init_inputs"):
            if node.name == "get_inputs":
                shapes = ", ".join(f"torch.randn({rng.randint(2, 64)}, {rng.randint(8, 512)})"
                                   for _ in range(max(1, len(_first_list(node)))))
                node = ast.parse(f"def get_inputs():\n    return [{shapes}]").body[0]
            else:
                args = ", ".join(str(rng.randint(1, 256)) for _ in range(len(_first_list(node))))
                node = ast.parse(f"def get_init_inputs():\n    return [{args}]").body[0]
        elif isinstance(node, ast.ClassDef):
            for m in node.body:
                if isinstance(m, ast.FunctionDef) and m.name == "forward" and len(m.args.args) > 1:
                    x = m.args.args[1].arg
                    m.body.insert(0, ast.parse(f"{x} = {x}.contiguous()").body[0])
        out.append(node)
    tree.body = out
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _first_list(fn: ast.FunctionDef) -> list:
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.List):
            return node.value.elts
    return [None]


EMBED = '''

class FeedForward(nn.Module):

    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        h = self.drop(F.gelu(self.up(self.norm(x))))
        return x + self.drop(self.down(h))


class Wrapped(nn.Module):

    def __init__(self, *args):
        super().__init__()
        self.inner = {cls}(*args)
        self.gate = nn.Parameter(torch.zeros(1))
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, *xs):
        y = self.inner(*xs)
        return y * torch.sigmoid(self.gate) * self.scale + 0.5 * y.mean()
'''


def embed(code: str, seed: int) -> str:
    """``edit`` inside a larger mined module: the problem's class used by a wrapper class, next to
    an unrelated feed-forward block (``import torch.nn.functional as F`` added)."""
    rw = edit(code, seed)
    tree = ast.parse(rw)
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    if not classes:
        return rw
    return "import torch.nn.functional as F\n" + rw + EMBED.format(cls=classes[0])


KINDS = {"rewrite": rewrite, "edited": edit, "embedded": embed}
