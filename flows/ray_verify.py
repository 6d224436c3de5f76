"""Verification spread over a Ray cluster: every GPU of the cluster runs verifier calls, CPU nodes
take the CPU work.

:func:`ray_verify_batch` has the signature of ``verifier.api.verify_batch`` and is passed to
``kernelmill.pipeline.stage_verify(verify_fn=...)``, so the stage (what is verified, how verdicts
are written and resumed) stays the same and only where the work runs changes (datatrove's split
between steps and executors).

How the work is placed:
- each Ray task verifies a chunk of candidates by calling ``verify_batch`` on its node, which
  compiles in that node's CPU pool (``compile_workers`` processes) and executes each candidate in
  its own child process;
- a chunk of cuda candidates asks Ray for ``num_gpus=1``, so chunks spread over every GPU of the
  cluster, one verifier per GPU at a time; a chunk of cpu candidates asks for ``num_cpus`` equal
  to its compile workers, so cpu verification spreads over every CPU node;
- at most ``workers`` chunks are in flight (default: the cluster's GPUs for cuda, CPUs for cpu),
  and verdicts are handed to ``on_verdict`` as each chunk finishes, so the caller can write them.

What it does not do: move build directories between nodes. The verifier's hash-keyed build cache
is per node unless its directory is on a shared filesystem, so a source is compiled at most once
per node, not once per cluster. Results come back through Ray's object store; a chunk whose node
dies is resubmitted by Ray (``max_retries``) and, failing that, raises here, after the verdicts
already handed to ``on_verdict`` were written by the caller.
"""

from __future__ import annotations

import os
import socket
from typing import Callable, Sequence

from kernelmill.errors import InputError

LOCAL_OBJECT_STORE_BYTES = 200 * 1024 * 1024


def connect(address: str = "local", *, num_cpus: int | None = None) -> dict:
    """Join the Ray cluster at ``address`` ("auto", "ray://host:10001", an ip:port), or start a
    local one for ``"local"`` (no dashboard, a small object store). Reuses an existing connection.
    Returns the cluster's resources."""
    import ray

    if not ray.is_initialized():
        if address in ("", "local"):
            ray.init(num_cpus=num_cpus or os.cpu_count(), include_dashboard=False,
                     object_store_memory=LOCAL_OBJECT_STORE_BYTES, log_to_driver=False,
                     ignore_reinit_error=True)
        else:
            ray.init(address=address, log_to_driver=False, ignore_reinit_error=True)
    return dict(ray.cluster_resources())


def _verify_chunk(items: list, config, compile_workers: int) -> tuple[list, dict]:
    """Runs on a Ray worker: verify one chunk there; returns the verdicts and where they ran."""
    from verifier.api import verify_batch

    verdicts = verify_batch(items, config=config, compile_workers=compile_workers)
    return verdicts, {"pid": os.getpid(), "host": socket.gethostname(), "n": len(items),
                      "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


def ray_verify_batch(items: Sequence[tuple], *, config=None, compile_workers: int | None = None,
                     on_verdict: Callable | None = None, address: str = "local", workers: int = 0,
                     chunk: int = 1, stats: dict | None = None) -> list:
    """Verify ``items`` ((Task, Candidate) pairs) on Ray; verdicts in the order of ``items``.

    ``on_verdict(i, verdict)`` is called in the driver as chunks finish (not from Ray workers).
    ``stats``, when given, receives the workers that ran chunks (pid, host) and the chunk count."""
    import ray

    items = list(items)
    if not items:
        return []
    resources = connect(address)
    n_gpus, n_cpus = int(resources.get("GPU", 0)), max(1, int(resources.get("CPU", 1)))
    backends = {cand.backend for _, cand in items}
    if "cuda" in backends and n_gpus == 0:
        raise InputError(f"ray cluster {address or 'local'}", "cuda candidates to verify but the cluster has no GPU")
    per_chunk_cpus = max(1, min(compile_workers or 1, n_cpus))
    remote = ray.remote(max_retries=2)(_verify_chunk)

    # Chunks are single-backend, so each asks for the one resource it needs.
    chunks = []
    for backend in sorted(backends):
        idx = [i for i, (_, c) in enumerate(items) if c.backend == backend]
        chunks += [(backend, idx[j:j + chunk]) for j in range(0, len(idx), max(1, chunk))]
    limit = workers or max(1, n_gpus if backends == {"cuda"} else n_cpus // per_chunk_cpus)

    verdicts: list = [None] * len(items)
    in_flight: dict = {}
    seen_workers: set = set()
    todo = list(chunks)
    while todo or in_flight:
        while todo and len(in_flight) < limit:
            backend, idx = todo.pop(0)
            opts = {"num_gpus": 1, "num_cpus": per_chunk_cpus} if backend == "cuda" else {"num_cpus": per_chunk_cpus}
            ref = remote.options(**opts).remote([items[i] for i in idx], config, per_chunk_cpus)
            in_flight[ref] = idx
        done, _ = ray.wait(list(in_flight), num_returns=1)
        for ref in done:
            idx = in_flight.pop(ref)
            chunk_verdicts, where = ray.get(ref)
            seen_workers.add((where["host"], where["pid"]))
            for i, v in zip(idx, chunk_verdicts):
                verdicts[i] = v
                if on_verdict is not None:
                    on_verdict(i, v)
    if stats is not None:
        stats.update(workers=sorted(seen_workers), chunks=len(chunks), concurrency=limit,
                     cluster={"CPU": n_cpus, "GPU": n_gpus})
    return verdicts


def make_ray_verify_fn(address: str = "local", workers: int = 0, chunk: int = 1,
                       stats: dict | None = None) -> Callable:
    """``ray_verify_batch`` bound to a cluster, for ``stage_verify(verify_fn=...)``."""

    def verify_fn(items, *, config=None, compile_workers=None, on_verdict=None):
        return ray_verify_batch(items, config=config, compile_workers=compile_workers, on_verdict=on_verdict,
                                address=address, workers=workers, chunk=chunk, stats=stats)

    return verify_fn
