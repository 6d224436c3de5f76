"""What the benchmarks share: print a result table and keep it under bench/results (or --out)."""

from __future__ import annotations

import re
from pathlib import Path


def emit(text: str, out_dir: str, filename: str) -> None:
    """Print ``text``; when ``out_dir`` is given, also write it there as ``filename``."""
    print(text, flush=True)
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / filename).write_text(text)


def device_name() -> str:
    """The first GPU's name, or "cpu" without one (torch imported here: the CPU-side commands do not need it)."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def default_results(prefix: str) -> str:
    """bench/results/<prefix>_<device tag>.md: h100 / h200, or the device's name in word characters."""
    dev = device_name().lower()
    tag = "h100" if "h100" in dev else "h200" if "h200" in dev else re.sub(r"\W+", "_", dev)
    return str(Path(__file__).resolve().parent / "results" / f"{prefix}_{tag}.md")
