"""What the benchmarks share: print a result table and keep it under bench/results (or --out)."""

from __future__ import annotations

from pathlib import Path


def emit(text: str, out_dir: str, filename: str) -> None:
    """Print ``text``; when ``out_dir`` is given, also write it there as ``filename``."""
    print(text, flush=True)
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / filename).write_text(text)
