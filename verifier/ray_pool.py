"""The Ray engine of the one entry into verification (verifier/entry.py): every GPU of a cluster runs its own
verifier pool, CPU capacity anywhere takes the compile work.

``verifier.entry.verify(items, ray=RayTarget(address))`` hands its distinct programs to :func:`verify_on_ray`
(identical code was already folded by the entry, which also hands each verdict to its copies). This module imports
ray, and is imported, only when a caller names a cluster (the verify stage's ``flows.ray_address``, ``kernelmill run
--ray ADDRESS``); nothing but the entry calls it (tests/test_one_entry.py). What is verified and how verdicts are
written stays the caller's; only where the work runs changes (datatrove's split between steps and executors).

How the work is placed:
- compilation: every distinct native extension of the batch (the verifier's static stage reads the
  ``load_inline`` arguments; ``spec_key`` dedups them) is built by a Ray task that asks for one CPU and no GPU,
  into the verifier's hash-keyed build root, so compile work lands on every core of the cluster and never holds a
  GPU;
- execution: the candidates are cut into chunks of one backend; each chunk is one Ray task that calls the local
  engine (``verifier.engine.verify_batch``) on its node once the chunk's builds are done (Ray passes the compile
  results as arguments, so it waits for them). A cuda chunk asks for ``num_gpus=1``: Ray pins it to one GPU (it
  sets ``CUDA_VISIBLE_DEVICES``) and never gives that GPU to a second chunk while it runs, so each GPU has one
  execution pool (``[verify] exec_workers`` slots). A cpu chunk asks for one CPU;
- at most ``workers`` chunks are in flight (default: the cluster's GPUs for cuda, CPUs for cpu).

What a lost worker costs: nothing but time. A chunk's verdicts come back together when the chunk's task returns,
and only then are they handed to ``on_verdict``: a chunk whose Ray worker dies (killed, OOM, its GPU gone with its
node) has handed out nothing, and is submitted again (Ray's own task retries are off so that every retry is one
this module counts: ``RaySummary.retries``, with each failed attempt in ``RaySummary.failures``). Ray places the new
attempt wherever a GPU (or CPU) is free. Every candidate is handed out once: a verdict for a candidate already
judged is dropped and counted (``duplicates_dropped``; 0 unless Ray returned one chunk twice). A failure of the
verifier or of Ray is never turned into a candidate's verdict: a chunk that fails ``max_attempts`` times leaves its
candidates unjudged, the other chunks finish, and then :class:`RayVerifyError` names them (the caller has written
what was handed out; a resumed stage verifies the rest).

What it does not do: move build directories between nodes. The compile tasks help the execution tasks only when
the build root (``verify.build_dir``) is on a filesystem every node sees; without one, a node that finds no build
compiles it itself (still once per node: the cache is per build root). It does not avoid a GPU that keeps failing
(a retry goes where Ray finds room, which may be the same GPU), and a chunk waits for as long as the cluster has no
GPU for it (Ray's infeasible-task warning), not bounded here.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

import ray

from kernelmill.errors import InputError
from verifier.build.pool import build_blocking
from verifier.common.spec import spec_key
from verifier.common.config import usable_cores
from verifier.engine import VerifyConfig, build_host, verify_batch
from verifier.front.extract import extract_code
from verifier.front.static import scan

LOCAL_OBJECT_STORE_BYTES = 200 * 1024 * 1024
# NVLink multicast stays off in every process a cluster started here runs (the project's
# GPU boxes share NVSwitch multicast state between tenants).
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
DEFAULT_MAX_ATTEMPTS = 3


@dataclass
class ChunkRun:
    """One chunk attempt that came back with verdicts: where it ran and when."""

    chunk: int
    attempt: int
    candidates: int
    host: str
    node_id: str
    pid: int
    gpus: str  # CUDA_VISIBLE_DEVICES Ray gave the task ("" for a cpu chunk)
    started: float  # time.time() on the worker
    ended: float


@dataclass
class ChunkFailure:
    """One chunk attempt that did not come back: its worker died, Ray lost it, or the verifier raised."""

    chunk: int
    attempt: int
    error: str
    candidate_ids: list[str]
    retried: bool


@dataclass
class RaySummary:
    """What a :func:`verify_on_ray` call did; ``as_stats()`` is what ``VerifyStats.ray`` holds."""

    cluster: dict
    concurrency: int
    chunks: int
    extensions: int = 0
    compile_failures: int = 0
    judged: int = 0
    retries: int = 0
    duplicates_dropped: int = 0
    runs: list[ChunkRun] = field(default_factory=list)
    failures: list[ChunkFailure] = field(default_factory=list)
    unjudged: list[str] = field(default_factory=list)

    @property
    def workers(self) -> list[tuple[str, int]]:
        return sorted({(r.host, r.pid) for r in self.runs})

    def as_stats(self, shown: int = 20) -> dict:
        """The summary kept small enough for a Prefect table artifact whatever the batch size: chunk
        counts per worker and GPU instead of every chunk, the first ``shown`` failures and unjudged ids."""
        placed: dict[str, int] = {}
        for r in self.runs:
            key = f"{r.host}/gpu:{r.gpus}" if r.gpus else f"{r.host}/cpu"
            placed[key] = placed.get(key, 0) + 1
        return {"cluster": self.cluster, "concurrency": self.concurrency, "chunks": self.chunks,
                "extensions": self.extensions, "compile_failures": self.compile_failures, "judged": self.judged,
                "retries": self.retries, "duplicates_dropped": self.duplicates_dropped,
                "workers": self.workers, "chunks_by_device": placed,
                "failures": [dataclasses.asdict(f) for f in self.failures[:shown]],
                # where each retried chunk finally ran (a failure says where it did not)
                "retry_runs": [{"chunk": r.chunk, "attempt": r.attempt, "host": r.host, "pid": r.pid}
                               for r in self.runs if r.attempt > 1][:shown],
                "unjudged": len(self.unjudged), "unjudged_ids": self.unjudged[:shown]}


class RayVerifyError(RuntimeError):
    """Some candidates are left unjudged after every attempt; ``summary`` says which and why."""

    def __init__(self, summary: RaySummary):
        self.summary = summary
        last = {f.chunk: f.error for f in summary.failures}
        shown = ", ".join(summary.unjudged[:5]) + (" ..." if len(summary.unjudged) > 5 else "")
        super().__init__(f"ray verify: {len(summary.unjudged)} candidate(s) unjudged after "
                         f"{max((f.attempt for f in summary.failures), default=0)} attempts ({shown}); "
                         f"last errors: {sorted(set(last.values()))[:3]}")


def connect(address: str = "local", *, num_cpus: int | None = None) -> dict:
    """Join the Ray cluster at ``address`` ("auto", "ray://host:10001", an ip:port), or start a
    local one for ``"local"`` (no dashboard, a small object store). Reuses an existing connection.
    Every worker of this job gets :data:`NO_MULTICAST_ENV` (runtime_env); a local cluster's own
    processes get it too (set in this process's environment before they start).
    Returns the cluster's resources."""
    if not ray.is_initialized():
        runtime_env = {"env_vars": dict(NO_MULTICAST_ENV)}
        if address in ("", "local"):
            for k, v in NO_MULTICAST_ENV.items():
                os.environ.setdefault(k, v)
            ray.init(num_cpus=num_cpus or usable_cores(), include_dashboard=False,
                     object_store_memory=LOCAL_OBJECT_STORE_BYTES, log_to_driver=False,
                     ignore_reinit_error=True, runtime_env=runtime_env)
        else:
            ray.init(address=address, log_to_driver=False, ignore_reinit_error=True, runtime_env=runtime_env)
    return dict(ray.cluster_resources())


def _verify_chunk(items: list, config, compile_workers: int) -> tuple[list, dict]:
    """Runs on a Ray worker: verify one chunk there; returns the verdicts and where they ran."""
    started = time.time()
    verdicts = verify_batch(items, config=config, compile_workers=compile_workers)
    return verdicts, {"pid": os.getpid(), "host": socket.gethostname(), "n": len(items),
                      "node_id": ray.get_runtime_context().get_node_id(),
                      "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""), "started": started, "ended": time.time()}


def _compile_spec(build_root: str, spec: dict, timeout_s: float, config: VerifyConfig) -> dict:
    """Runs on a Ray worker (one CPU, no GPU): build one extension into the shared build root with the host settings
    of the batch's ``config``, read on the worker (its default precompiled-header cache is under the worker's home),
    as the execution tasks' verify_batch reads them."""
    try:
        res = build_blocking(build_root, spec, timeout_s, host=build_host(config))
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


def _chunk_problem(items: Sequence[tuple], idx: list[int], verdicts: list) -> str:
    """Why a chunk's returned verdicts cannot be handed out ("" when they can)."""
    if len(verdicts) != len(idx):
        return f"{len(verdicts)} verdicts for {len(idx)} candidates"
    for i, v in zip(idx, verdicts):
        want = items[i][1].candidate_id
        if v is None or (v.candidate_id and want and v.candidate_id != want):
            return f"verdict for {getattr(v, 'candidate_id', None)!r} in the place of candidate {want!r}"
    return ""


def verify_on_ray(items: Sequence[tuple], *, config=None, on_verdict: Callable | None = None,
                  address: str = "local", workers: int = 0, chunk: int = 1,
                  max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> tuple[list, RaySummary | None]:
    """Verify ``items`` ((Task, Candidate) pairs) on Ray: (verdicts in the order of ``items``, what
    ran where); no summary (None) for no items.

    Guarantees: ``on_verdict(i, verdict)`` is called in the driver (not from Ray workers) exactly
    once per item that gets a verdict, when that item's chunk has come back whole; a chunk whose
    attempt fails (worker killed, node lost, verifier raised) is submitted again, up to
    ``max_attempts`` attempts per chunk. If a chunk is still failing then, the other chunks finish
    and :class:`RayVerifyError` is raised naming its candidates; no verdict is made up for them."""
    items = list(items)
    if not items:
        return [], None
    if chunk < 1:
        raise InputError(f"chunk={chunk}", "a chunk holds at least one candidate")
    if max_attempts < 1:
        raise InputError(f"max_attempts={max_attempts}", "at least one attempt per chunk")
    resources = connect(address)
    n_gpus, n_cpus = int(resources.get("GPU", 0)), max(1, int(resources.get("CPU", 1)))
    backends = {cand.backend for _, cand in items}
    if "cuda" in backends and n_gpus == 0:
        raise InputError(f"ray cluster {address or 'local'}", "cuda candidates to verify but the cluster has no GPU")
    config = config or VerifyConfig()
    # max_retries=0: a chunk is retried by the loop below, where each retry is counted and reported
    remote = ray.remote(max_retries=0)(_verify_after_builds)
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
                builds[key] = compile_remote.remote(build_root, spec, config.compile_timeout_s, config)
            refs.append(builds[key])
        item_builds.append(refs)

    # Chunks are single-backend, so each asks for the one resource it needs.
    chunks: list[tuple[str, list[int]]] = []
    for backend in sorted(backends):
        idx = [i for i, (_, c) in enumerate(items) if c.backend == backend]
        chunks += [(backend, idx[j:j + chunk]) for j in range(0, len(idx), chunk)]
    limit = workers or max(1, n_gpus if backends == {"cuda"} else n_cpus)
    summary = RaySummary(cluster={"CPU": n_cpus, "GPU": n_gpus}, concurrency=limit, chunks=len(chunks),
                         extensions=len(builds))

    verdicts: list = [None] * len(items)
    judged = [False] * len(items)
    attempts = [0] * len(chunks)
    in_flight: dict = {}
    lost: list[int] = []
    todo = deque(range(len(chunks)))
    while todo or in_flight:
        while todo and len(in_flight) < limit:
            c = todo.popleft()
            backend, idx = chunks[c]
            attempts[c] += 1
            opts = {"num_gpus": 1, "num_cpus": 1} if backend == "cuda" else {"num_cpus": 1}
            # a retry does not wait on compile results again: the builds are in the build root by
            # then, or the chunk builds them itself (a lost compile result must not fail it again)
            deps = list(dict.fromkeys(r for i in idx for r in item_builds[i])) if attempts[c] == 1 else []
            # one compile worker per chunk: its builds are normally done by the compile tasks
            ref = remote.options(**opts).remote([items[i] for i in idx], config, 1, *deps)
            in_flight[ref] = c
        done, _ = ray.wait(list(in_flight), num_returns=1)
        for ref in done:
            c = in_flight.pop(ref)
            idx = chunks[c][1]
            try:
                chunk_verdicts, where = ray.get(ref)
                problem = _chunk_problem(items, idx, chunk_verdicts)
            except ray.exceptions.RayError as e:
                problem = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
            if problem:
                retry = attempts[c] < max_attempts
                summary.failures.append(ChunkFailure(chunk=c, attempt=attempts[c], error=problem, retried=retry,
                                                     candidate_ids=[items[i][1].candidate_id for i in idx]))
                if retry:
                    summary.retries += 1
                    todo.append(c)
                else:
                    lost.append(c)
                continue
            summary.runs.append(ChunkRun(chunk=c, attempt=attempts[c], candidates=len(idx), host=where["host"],
                                         node_id=where["node_id"], pid=where["pid"], gpus=where["gpus"],
                                         started=where["started"], ended=where["ended"]))
            for i, v in zip(idx, chunk_verdicts):
                if judged[i]:
                    summary.duplicates_dropped += 1
                    continue
                judged[i] = True
                verdicts[i] = v
                summary.judged += 1
                if on_verdict is not None:
                    on_verdict(i, v)
    compiled = _gather_quietly(list(builds.values()))
    summary.compile_failures = sum(not c.get("ok") for c in compiled)
    summary.unjudged = [items[i][1].candidate_id for c in lost for i in chunks[c][1]]
    if summary.unjudged:
        raise RayVerifyError(summary)
    return verdicts, summary


def _gather_quietly(refs: list) -> list[dict]:
    """The compile tasks' results; one whose worker was lost counts as a failed build."""
    out = []
    for r in refs:
        try:
            out.append(ray.get(r))
        except ray.exceptions.RayError as e:
            out.append({"ok": False, "error": type(e).__name__})
    return out
