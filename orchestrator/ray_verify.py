"""Kept for callers not yet moved: the Ray dispatch lives in verifier/ray_pool.py, behind the one entry
(verifier.entry.verify with ``ray=RayTarget(address)``). This module only binds that call to a cluster with
the old ``verify_batch``-like signature; new code calls the entry. To be removed once nothing imports it."""

from __future__ import annotations

from typing import Callable

from verifier.entry import RayTarget, VerifyStats, verify


def make_ray_verify_fn(address: str = "local", workers: int = 0, chunk: int = 1, stats: dict | None = None,
                       max_attempts: int = 3) -> Callable:
    """``verifier.entry.verify`` on the Ray cluster at ``address``; ``stats`` receives the cluster's summary."""
    target = RayTarget(address=address, workers=workers, chunk=chunk, max_attempts=max_attempts)

    def verify_fn(items, *, config=None, compile_workers=None, on_verdict=None):
        run = VerifyStats()
        try:
            return verify(items, config=config, ray=target, on_verdict=on_verdict, stats=run)
        finally:
            if stats is not None and run.ray:
                stats.update(run.ray)

    return verify_fn
