"""Probes inside an execution child: launch-inclusive times and the C09 idle gap, one call at a time.

These are first signals only, reported by a process the candidate controls. The times a verdict reports are
measured by the harness in the verifier's process (verifier/execute/harness.py), never here.
Imports: torch and the standard library only.
"""

from __future__ import annotations

import torch


def clone(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, (list, tuple)):
        return type(obj)(clone(o) for o in obj)
    return obj


def plain_cpu(out):
    if isinstance(out, torch.Tensor):
        return out.detach().to("cpu").clone()
    return [plain_cpu(t) for t in out]


def probe_calls(backend, fn, seeds: list[int], draw, n: int) -> tuple[list[float], list[float]]:
    """``n`` calls one at a time: launch-inclusive time (host call start to every stream idle) and the
    device idle-minus-end gap (cuda: work left running after the timed stream's end event, C09)."""
    launch, gaps = [], []
    for i in range(n):
        inputs = draw(seeds[i % len(seeds)])
        backend.flush_cache()
        backend.synchronize()
        out, us, idle_us, wall_us = backend.probe_call(lambda: fn(*inputs))
        launch.append(round(wall_us, 3))
        gaps.append(round(idle_us - us, 3))
        del out, inputs
    return launch, gaps
