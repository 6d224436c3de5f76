"""The one way into verification. Every caller hands its candidates to :func:`verify`: the verify and repair
stages (orchestrator/stages.py ``verify_items``), the training loop (through those stages) and the RL reward
(train/rollout.py), `kernelmill verify` (:func:`verify_candidate`, a one-item call) and the verifier service
(verifier/serve/service.py). A change to ids, reuse, dispatch or the trust boundary lands here once.

    verify(items, *, config=None, ray=None, compile_workers=None, on_verdict=None, stats=None) -> list[Verdict]
    verify_candidate(reference_code, candidate_text, *, backend, config, task_id, candidate_id) -> Verdict

What one call does with its (Task, Candidate) pairs:

1. extraction (``program_of``): a candidate's program is the verifier's extraction
   (``verifier.front.extract.extract_code``) of its ``code``, else of its ``response``; the whole text where it
   holds no fenced program (the extract stage then records why);
2. identical-code reuse: candidates of one task and backend with the same program are verified once (k samples
   of a confident model repeat themselves); every copy gets that verdict under its own candidate id, so a kernel
   that passes only some of the time gets one verdict for all its copies, not a coin flip each
   (``VerifyStats.reused``);
3. dispatch: the distinct programs run in this process through the local engine (``verifier.engine.verify_batch``:
   one compile pool, ``config.exec_workers`` execution slots), or on a Ray cluster when ``ray`` names one
   (:class:`RayTarget`; verifier/ray_pool.py: compile tasks on CPUs, one execution pool per GPU, lost workers
   retried);
4. streaming: ``on_verdict(i, verdict)`` for every item ``i`` as its program's verdict arrives, one call at a
   time (under a lock: locally from an execution thread, on Ray in the calling thread); what it does with them
   (the verify stage writes them in batches) is the caller's.

Guarantees: one verdict per item, in the order of ``items``, each handed to ``on_verdict`` exactly once; a
failure of the candidate is its verdict, a failure of the verifier on one candidate is that candidate's
``verifier_error``. Raises InputError for the verifier's own inputs (no compiler, an unknown or absent backend,
a Ray cluster without the GPU its candidates need) and ray_pool.RayVerifyError when Ray lost candidates after
every attempt (those get no verdict; the rest were handed out). Not done: reuse across calls (the verify stage
skips candidates with a stored verdict; a caller that wants more keeps its own verdicts).
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Callable, Sequence

from kernelmill.schema import Candidate, Task, Verdict
from verifier import engine
from verifier.common.config import VerifyConfig, resolve_backend
from verifier.front.extract import extract_code

__all__ = ["RayTarget", "VerifyStats", "program_of", "ray_target", "verify", "verify_candidate"]

OnVerdict = Callable[[int, Verdict], None]


@dataclass(frozen=True)
class RayTarget:
    """A Ray cluster to run the programs on: ``address`` is ``local`` (start one in this process), ``auto`` (the
    cluster this machine belongs to), ``ray://host:10001`` or ``ip:port``; ``workers`` chunks in flight (0: the
    cluster's GPUs for cuda, CPUs for cpu), ``chunk`` candidates per Ray task, ``max_attempts`` per chunk."""

    address: str
    workers: int = 0
    chunk: int = 1
    max_attempts: int = 3


def ray_target(address: str, workers: int = 0) -> RayTarget | None:
    """The cluster the ``flows.ray_address`` / ``flows.ray_workers`` settings name; None (this process) for ""."""
    return RayTarget(address=address, workers=workers) if address else None


@dataclass
class VerifyStats:
    """What one :func:`verify` call did; the caller passes one in to read it (also when Ray raised)."""

    candidates: int = 0  # items handed in
    programs: int = 0  # distinct (task, backend, program) verified
    reused: int = 0  # items that got a copy of another item's verdict
    ray: dict | None = None  # ray_pool.RaySummary.as_stats() when the programs ran on Ray
    # kept current while the local engine works (api.verify_batch ``live``: compiled, executing), for progress
    # lines; empty on Ray
    live: dict = dataclasses.field(default_factory=dict)


def program_of(cand: Candidate) -> str:
    """The program the verifier judges for ``cand``: its code (else response) as the extract stage reads it."""
    text = cand.code or cand.response
    try:
        return extract_code(text) or text
    except Exception:  # noqa: BLE001 - an unreadable text is judged (extract_error) as it is
        return text


def verify(items: Sequence[tuple[Task, Candidate]], *, config: VerifyConfig | None = None,
           ray: RayTarget | None = None, compile_workers: int | None = None, on_verdict: OnVerdict | None = None,
           stats: VerifyStats | None = None) -> list[Verdict]:
    """Verify (task, candidate) pairs: identical programs once, locally or on ``ray``, each verdict streamed to
    ``on_verdict(i, verdict)`` (``i`` indexes ``items``) as it arrives. Returns the verdicts in the order of
    ``items``; ``stats``, when given, says how many programs ran and how many items reused a verdict.
    ``compile_workers`` (local only): the compile pool's size, default ``config.compile_workers`` or the cores."""
    items = list(items)
    cfg = config or VerifyConfig()
    stats = stats if stats is not None else VerifyStats()
    groups: dict[tuple, list[int]] = {}
    for i, (task, cand) in enumerate(items):
        groups.setdefault((task.task_id, cand.backend or "cpu", program_of(cand)), []).append(i)
    members = list(groups.values())
    stats.candidates, stats.programs, stats.reused = len(items), len(members), len(items) - len(members)
    out: list[Verdict | None] = [None] * len(items)
    lock = threading.Lock()

    def deliver(k: int, verdict: Verdict) -> None:
        """Program ``k``'s verdict to each of its items (the first keeps the engine's object)."""
        with lock:
            first = members[k][0]
            if out[first] is not None:  # handed out already (an engine that called back and returned it)
                return
            verdict.candidate_id = verdict.candidate_id or items[first][1].candidate_id
            for i in members[k]:
                v = verdict if i == first else dataclasses.replace(verdict, candidate_id=items[i][1].candidate_id)
                out[i] = v
                if on_verdict is not None:
                    on_verdict(i, v)

    if members:
        unique = [items[m[0]] for m in members]
        if ray is None:
            verdicts = _run_local(unique, cfg, compile_workers, deliver, stats.live)
        else:
            verdicts = _run_ray(unique, cfg, ray, deliver, stats)
        for k, v in enumerate(verdicts):
            if v is not None:
                deliver(k, v)
    missing = [items[i][1].candidate_id for i, v in enumerate(out) if v is None]
    if missing:  # the engines return a verdict per program or raise: this is the verifier's own bug
        raise RuntimeError(f"verifier.entry: no verdict came back for {len(missing)} candidate(s): {missing[:5]}")
    return out  # type: ignore[return-value]  (no None left: checked above)


def _run_local(unique: list[tuple[Task, Candidate]], cfg: VerifyConfig, compile_workers: int | None,
               deliver: OnVerdict, live: dict | None = None) -> list[Verdict]:
    """The local engine: this process's compile pool and execution children."""
    return engine.verify_batch(unique, config=cfg, compile_workers=compile_workers, on_verdict=deliver, live=live)


def _run_ray(unique: list[tuple[Task, Candidate]], cfg: VerifyConfig, target: RayTarget, deliver: OnVerdict,
             stats: VerifyStats) -> list[Verdict]:
    """The Ray engine (verifier/ray_pool.py; ray imported only here); the cluster's summary into ``stats``."""
    from verifier.ray_pool import RayVerifyError, verify_on_ray

    try:
        verdicts, summary = verify_on_ray(unique, config=cfg, on_verdict=deliver, address=target.address,
                                          workers=target.workers, chunk=target.chunk,
                                          max_attempts=target.max_attempts)
    except RayVerifyError as e:
        stats.ray = e.summary.as_stats()
        raise
    stats.ray = summary.as_stats() if summary is not None else None
    return verdicts


def verify_candidate(reference_code: str, candidate_text: str, *, backend: str = "cpu",
                     config: VerifyConfig | None = None, task_id: str = "", candidate_id: str = "") -> Verdict:
    """Verify one candidate (a model response or a program) against a task program: a one-item :func:`verify`
    in this process; always returns a Verdict for the candidate.

    Raises InputError only for problems of the verifier's own inputs (a task program that does not run, an
    unknown backend, no compiler)."""
    backend = resolve_backend(backend)
    engine.load_reference(reference_code, task_id or "task")
    task = Task(task_id=task_id, name=task_id or "task", source="", level=0, reference_code=reference_code)
    cand = Candidate(candidate_id=candidate_id, task_id=task_id, backend=backend, generator="",
                     code=candidate_text, response=candidate_text)
    return verify([(task, cand)], config=config, compile_workers=1)[0]
