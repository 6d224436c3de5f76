"""Verification spread over a Ray cluster: every GPU of the cluster runs verifier calls, CPU nodes
take the CPU work.

:func:`ray_verify_batch` has the signature of ``verifier.api.verify_batch``; the verify stage
(orchestrator/stages.py) imports this module, and ray, only when asked to, and uses it in place of the
local verifier when ``flows.ray_address`` is set (``kernelmill run --ray ADDRESS``), so the stage
(what is verified, how verdicts are written and resumed) stays the same and only where the work
runs changes (datatrove's split between steps and executors).

How the work is placed:
- compilation: every distinct native extension of the batch (the verifier's static stage reads
  the ``load_inline`` arguments; ``verifier.build.spec_key`` dedups them) is built by a Ray task
  that asks for one CPU and no GPU, into the verifier's hash-keyed build root, so compile work
  lands on CPU capacity anywhere in the cluster and never holds a GPU;
- execution: each Ray task verifies a chunk of candidates by calling ``verify_batch`` on its node
  once the chunk's builds are done (Ray passes the compile results as arguments, so it waits for
  them); ``verify_batch`` finds the builds cached and runs each candidate in its own child;
- a chunk of cuda candidates asks for ``num_gpus=1``, so chunks spread over every GPU of the
  cluster, one verifier per GPU at a time; a chunk of cpu candidates asks for one CPU;
- at most ``workers`` chunks are in flight (default: the cluster's GPUs for cuda, CPUs for cpu),
  and verdicts are handed to ``on_verdict`` as each chunk finishes, so the caller can write them.

What it does not do: move build directories between nodes. The compile tasks help the execution
tasks only when the build root (``verify.build_dir``) is on a filesystem every node sees; without
one, a node that finds no build compiles it itself (still once per node: the cache is per build
root). Results come back through Ray's object store; a task whose worker dies is retried by Ray
(``max_retries``) and, failing that, raises here, after the verdicts already handed to
``on_verdict`` were written by the caller.
"""

from __future__ import annotations

import os
import socket
from typing import Callable, Sequence

import ray

from kernelmill.errors import InputError
from verifier.api import VerifyConfig, verify_batch
from verifier.build import build_blocking, spec_key
from verifier.extract import extract_code
from verifier.static import scan

LOCAL_OBJECT_STORE_BYTES = 200 * 1024 * 1024


def connect(address: str = "local", *, num_cpus: int | None = None) -> dict:
    """Join the Ray cluster at ``address`` ("auto", "ray://host:10001", an ip:port), or start a
    local one for ``"local"`` (no dashboard, a small object store). Reuses an existing connection.
    Returns the cluster's resources."""
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
    verdicts = verify_batch(items, config=config, compile_workers=compile_workers)
    return verdicts, {"pid": os.getpid(), "host": socket.gethostname(), "n": len(items),
                      "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


def _compile_spec(build_root: str, spec: dict, timeout_s: float) -> dict:
    """Runs on a Ray worker (one CPU, no GPU): build one extension into the shared build root."""
    try:
        res = build_blocking(build_root, spec, timeout_s)
    except Exception as e:  # noqa: BLE001 - the execution task then builds (and reports) it itself
        return {"key": "", "ok": False, "error": f"{type(e).__name__}: {e}", "pid": os.getpid()}
    return {"key": res.key, "ok": res.ok, "seconds": res.seconds, "cached": res.cached, "pid": os.getpid()}


def extension_specs(items: Sequence[tuple]) -> list[list[dict]]:
    """Per item, the resolved ``load_inline`` argument sets of its candidate (empty when the
    candidate stops before compilation: no code, a static-check failure, unreadable arguments)."""
    out = []
    for _, cand in items:
        try:
            code = extract_code(cand.code or cand.response)
            report = scan(code, cand.backend) if code else None
        except Exception:  # the verifier itself reports what is wrong with this candidate
            report = None
        ok = report is not None and not report.findings
        out.append([e.args for e in report.extensions if e.resolved] if ok else [])
    return out


def _verify_after_builds(items: list, config, compile_workers: int, *builds) -> tuple[list, dict]:
    return _verify_chunk(items, config, compile_workers)


def ray_verify_batch(items: Sequence[tuple], *, config=None, compile_workers: int | None = None,
                     on_verdict: Callable | None = None, address: str = "local", workers: int = 0,
                     chunk: int = 1, stats: dict | None = None) -> list:
    """Verify ``items`` ((Task, Candidate) pairs) on Ray; verdicts in the order of ``items``.

    ``on_verdict(i, verdict)`` is called in the driver as chunks finish (not from Ray workers).
    ``compile_workers`` is accepted for verify_batch's signature; compile parallelism here is the
    cluster's CPUs. ``stats``, when given, receives the workers that ran chunks (host, pid), the
    chunk count, the concurrency, the cluster's resources and the distinct extensions built."""
    items = list(items)
    if not items:
        return []
    resources = connect(address)
    n_gpus, n_cpus = int(resources.get("GPU", 0)), max(1, int(resources.get("CPU", 1)))
    backends = {cand.backend for _, cand in items}
    if "cuda" in backends and n_gpus == 0:
        raise InputError(f"ray cluster {address or 'local'}", "cuda candidates to verify but the cluster has no GPU")
    config = config or VerifyConfig()
    remote = ray.remote(max_retries=2)(_verify_after_builds)
    compile_remote = ray.remote(num_cpus=1, num_gpus=0, max_retries=2)(_compile_spec)

    # Compile phase: one CPU task per distinct extension, submitted all at once.
    build_root = str(config.build_root())
    builds: dict[str, object] = {}
    item_builds: list[list] = []
    for specs in extension_specs(items):
        refs = []
        for spec in specs:
            key = spec_key(spec)
            if key not in builds:
                builds[key] = compile_remote.remote(build_root, spec, config.compile_timeout_s)
            refs.append(builds[key])
        item_builds.append(refs)

    # Chunks are single-backend, so each asks for the one resource it needs.
    chunks = []
    for backend in sorted(backends):
        idx = [i for i, (_, c) in enumerate(items) if c.backend == backend]
        chunks += [(backend, idx[j:j + chunk]) for j in range(0, len(idx), max(1, chunk))]
    limit = workers or max(1, n_gpus if backends == {"cuda"} else n_cpus)

    verdicts: list = [None] * len(items)
    in_flight: dict = {}
    seen_workers: set = set()
    todo = list(chunks)
    while todo or in_flight:
        while todo and len(in_flight) < limit:
            backend, idx = todo.pop(0)
            opts = {"num_gpus": 1, "num_cpus": 1} if backend == "cuda" else {"num_cpus": 1}
            deps = list(dict.fromkeys(r for i in idx for r in item_builds[i]))
            # one compile worker per chunk: its builds are normally done by the compile tasks
            ref = remote.options(**opts).remote([items[i] for i in idx], config, 1, *deps)
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
        compiled = ray.get(list(builds.values()))
        stats.update(workers=sorted(seen_workers), chunks=len(chunks), concurrency=limit,
                     cluster={"CPU": n_cpus, "GPU": n_gpus}, extensions=len(builds),
                     compile_failures=sum(not c["ok"] for c in compiled))
    return verdicts


def make_ray_verify_fn(address: str = "local", workers: int = 0, chunk: int = 1,
                       stats: dict | None = None) -> Callable:
    """``ray_verify_batch`` bound to a cluster, with ``verifier.api.verify_batch``'s signature."""

    def verify_fn(items, *, config=None, compile_workers=None, on_verdict=None):
        return ray_verify_batch(items, config=config, compile_workers=compile_workers, on_verdict=on_verdict,
                                address=address, workers=workers, chunk=chunk, stats=stats)

    return verify_fn
