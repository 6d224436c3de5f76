"""Stage 1, extract: the candidate program from a model response (or a plain Python file).

``extract_code`` guarantees only that what it returns is the text of one code block (or the whole
input when the input is itself a program); whether that text is a legal candidate is decided by
``check_candidate_shape`` and the static stage.
"""

from __future__ import annotations

import ast
import re

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
        return True
    except SyntaxError:
        return False


def extract_code(response: str) -> str:
    """The candidate program inside ``response``; "" when there is none.

    Preference: the last fenced block that defines ``ModelNew`` (python-tagged blocks first), then the
    last python-tagged block, then the whole response when it parses as Python by itself."""
    if not response or not response.strip():
        return ""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(response)]
    py = [b for lang, b in blocks if lang in ("python", "py", "python3")]
    other = [b for lang, b in blocks if lang not in ("python", "py", "python3")]
    for group in (py, other):
        with_model = [b for b in group if "class ModelNew" in b]
        if with_model:
            return with_model[-1].strip() + "\n"
    if py:
        return py[-1].strip() + "\n"
    if "```" not in response and _parses(response):
        return response if response.endswith("\n") else response + "\n"
    return ""


def check_candidate_shape(code: str, backend: str) -> list[str]:
    """Problems that stop a candidate at extraction (empty list: it may go on).

    Checks: it parses; ``class ModelNew`` at module level; a ``load_inline`` call; for cuda a
    ``__global__`` function and a ``<<<`` launch somewhere in the program text. It does not check
    that the launch is reachable; the runtime stage does."""
    if not code.strip():
        return ["no code block found in the response (expected a ```python block defining class ModelNew)"]
    try:
        tree = ast.parse(code)
    except SyntaxError as e:
        return [f"the code does not parse as Python: line {e.lineno}: {e.msg}"]
    problems = []
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        problems.append("no `class ModelNew(nn.Module)` defined at module level")
    if "load_inline" not in code:
        problems.append("no native kernel: the program never calls torch.utils.cpp_extension.load_inline")
    if backend in ("cuda", "musa"):
        if "__global__" not in code:
            problems.append("no `__global__` kernel in the CUDA sources")
        elif "<<<" not in code:
            problems.append("a `__global__` kernel is defined but never launched with <<<...>>>")
    return problems
