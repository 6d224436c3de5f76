"""Load KernelBench-format programs (a file or a directory of level folders) as Task records.

A KernelBench file defines, at module level, ``class Model(nn.Module)``, ``def get_inputs()`` and
``def get_init_inputs()``. A directory may hold ``level1/``, ``level2/``, ... subfolders; the level
is taken from the nearest ``levelN`` folder above a file (0 when there is none, to be set by
annotation).

The check is static (an AST parse): loading never runs the program. Running it, to learn input
shapes and dtypes, is the annotation stage's job (synth/annotate/annotator.py).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from kernelmill.errors import InputError
from kernelmill.schema import Origin, Task

REQUIRED = ("Model", "get_inputs", "get_init_inputs")
_LEVEL_RE = re.compile(r"^level[_-]?(\d+)$", re.IGNORECASE)


class TaskFormatError(InputError):
    """A file that is not a KernelBench-format program; the message names the file and the problem."""

    def __init__(self, path: str | Path, problem: str):
        self.path = str(path)
        super().__init__(path, problem)


def check_kernelbench_source(code: str, path: str | Path = "<string>") -> None:
    """Raise TaskFormatError unless ``code`` is a KernelBench-format program."""
    try:
        tree = ast.parse(code, filename=str(path))
    except SyntaxError as e:
        raise TaskFormatError(path, f"not valid Python (line {e.lineno}: {e.msg})") from None
    found = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            found[node.name] = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    found[t.id] = node
    missing = [n for n in REQUIRED if n not in found]
    if missing:
        raise TaskFormatError(path, "missing " + ", ".join(
            "class Model" if m == "Model" else f"def {m}()" for m in missing) + " at module level")
    model = found["Model"]
    if not isinstance(model, ast.ClassDef):
        raise TaskFormatError(path, "Model is not a class")
    if not any(isinstance(n, ast.FunctionDef) and n.name == "forward" for n in model.body):
        raise TaskFormatError(path, "class Model has no forward method")
    for fn in ("get_inputs", "get_init_inputs"):
        if not isinstance(found[fn], ast.FunctionDef):
            raise TaskFormatError(path, f"{fn} is not a function")


def level_from_path(path: Path) -> int:
    for part in reversed(path.parts[:-1]):
        m = _LEVEL_RE.match(part)
        if m:
            return int(m.group(1))
    return 0


def load_task_file(path: str | Path, *, source: str = "kernelbench", level: int | None = None) -> Task:
    """One KernelBench file as a Task (not yet annotated)."""
    path = Path(path)
    if not path.is_file():
        raise TaskFormatError(path, "no such file")
    try:
        code = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TaskFormatError(path, "not UTF-8 text") from None
    check_kernelbench_source(code, path)
    return Task.from_code(code, name=path.stem, source=source,
                          level=level_from_path(path) if level is None else level,
                          origin=Origin(path=str(path), class_name="Model"))


@dataclass
class LoadResult:
    tasks: list[Task]
    errors: list[TaskFormatError]


def load_kernelbench_dir(root: str | Path, *, source: str = "kernelbench", strict: bool = True) -> LoadResult:
    """Every ``*.py`` file under ``root`` as a Task, sorted by (level, path).

    strict=True raises the first TaskFormatError; strict=False collects errors and goes on.
    Exact duplicates (same normalised reference) collapse to the first file."""
    root = Path(root)
    if not root.is_dir():
        raise TaskFormatError(root, "not a directory")
    tasks: dict[str, Task] = {}
    errors: list[TaskFormatError] = []
    files = sorted(p for p in root.rglob("*.py") if p.name != "__init__.py")
    for f in sorted(files, key=lambda p: (level_from_path(p), str(p))):
        try:
            t = load_task_file(f, source=source)
        except TaskFormatError as e:
            if strict:
                raise
            errors.append(e)
            continue
        t.origin.path = str(f.relative_to(root))
        tasks.setdefault(t.task_id, t)
    return LoadResult(list(tasks.values()), errors)
