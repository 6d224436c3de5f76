"""The reference's answers to a candidate's trials, computed while the candidate's child runs them.

The judge compares each trial's output with the reference run here on the trial's inputs, in fp32 and in float64
(verifier/judge/trials.py ``check_trials``). Those inputs are known as soon as the verifier hands the trial's seed
out (verifier/execute/channel.py ``Driver``), so the runs need not wait for the child to end: a thread of the slot's
process draws them and runs the references in trial order while the child computes, under the device lock held
shared and giving way to a waiting timer between trials, as the judge's own runs are. The judge then takes what is
ready and runs the rest itself, on the same reference models, in the same order.

What it keeps is bounded (``budget_bytes``: the judge's share of the job's admitted memory, which is idle while the
child runs): where the next trial's inputs and answers do not fit, or a run fails, it stops and the judge computes from
that trial on, so every trial's reference still runs once, in order (a reference with state, a batch norm's running
statistics, sees the calls it would have seen).

Enters: the task plan, the job, the seeds as they are handed out. Leaves: per trial (inputs, fp32 answers, float64
answers or None) and the reference models. Imports: torch, verifier/common, verifier/execute (the lock),
verifier/judge.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

import torch

from verifier.common.config import VerifyConfig
from verifier.common.contract import Job
from verifier.common.inputs import nbytes
from verifier.common.ties import reference_outputs
from verifier.execute.locks import device_work, lock_wait_s
from verifier.judge.outputs import reference64_judged, reference_cpu, reference_models

PREFETCH_MIN_BYTES = 256 << 20  # held at least this much where the judge's share is smaller


@dataclass
class Answers:
    """The reference's answers to one trial, computed here before the judge asked."""

    inputs: list
    refs: list
    refs64: list | None
    pooled: list | None = None  # the RefStats to judge them by (``reference64_judged``)


class ReferencePrefetch:
    """Runs the reference on each trial's inputs as its seed is handed out (``seed``, from the Driver's thread: it
    only queues), on a thread of its own; ``close`` waits for it (the child has ended) and ``take`` hands the judge a
    trial's answers, or None where the judge runs them itself."""

    def __init__(self, plan, job: Job, device: str, cfg: VerifyConfig, backend: str, budget_bytes: int):
        self.plan, self.job, self.device, self.cfg, self.backend = plan, job, device, cfg, backend
        self.budget = max(int(budget_bytes), PREFETCH_MIN_BYTES)
        self.model = self.model64 = None
        self.failed = ""  # the first run that raised (the judge meets it again itself)
        self._ready: dict[int, Answers] = {}
        self._held = 0
        self._queue: queue.Queue = queue.Queue()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="km-reference-prefetch", daemon=True)
        self._thread.start()

    def seed(self, i: int, seed: int) -> None:
        self._queue.put((i, seed))

    def close(self, timeout_s: float | None = None) -> None:
        """No more seeds: wait for the runs queued so far."""
        self._queue.put(None)
        self._thread.join(timeout_s)
        self._stopped = True  # where the wait timed out: the thread skips what is still queued (take hands nothing)

    def take(self, i: int) -> Answers | None:
        if self._thread.is_alive():  # not waited for (close timed out): nothing is handed over
            return None
        return self._ready.pop(i, None)

    def models(self) -> tuple:
        """(fp32 model, float64 model or None) once built here, the judge's to reuse; (None, None) otherwise."""
        return (self.model, self.model64) if self.model is not None and not self._thread.is_alive() else (None, None)

    def _run(self) -> None:
        expected = 0
        while (item := self._queue.get()) is not None:
            i, seed = item
            if self._stopped or self.failed or i != expected:
                continue  # a stop, a gap: the judge computes from here on, in order
            try:
                if not self._answer(i, seed):
                    self._stopped = True
                    continue
            except Exception as e:  # noqa: BLE001 - the judge runs it again and meets the failure itself
                self.failed = f"{type(e).__name__}: {str(e)[:300]}"
                continue
            expected += 1

    def _answer(self, i: int, seed: int) -> bool:
        """Trial ``i``'s answers, kept where they fit; False when they do not (nothing of trial ``i`` ran)."""
        job = self.job
        # constructed on the cpu before the hold: only its copy to the device is device work
        cpu = reference_cpu(self.plan, job, self.cfg) if self.model is None else None
        with device_work(self.cfg, self.backend) as lock:
            if self.model is None:
                self.model, self.model64 = reference_models(self.plan, job, self.device, self.cfg, cpu)
            inputs = self.plan.draw_trial(job, i, self.device, seed)
            # what it keeps (the inputs, the fp32 answers, the float64 ones: twice their size) and, while it runs,
            # the float64 copy of the inputs: the answers by the plan's largest outputs, before they exist
            size = nbytes(inputs)
            if self._held + (size + self.plan.largest_output_bytes()) * (3 if self.model64 is not None else 1) \
                    > self.budget:
                return False
            with torch.no_grad():
                refs = reference_outputs(self.model, inputs, self.plan.selects)
            lock.yield_to_timer(lock_wait_s(self.cfg))
            refs64, pooled = reference64_judged(self.model64, inputs, self.plan.selects, self.plan.pooled,
                                                bool(job.other_shape_at(i)))
            self._held += size + nbytes(refs) + (nbytes(refs64) if refs64 else 0)
            self._ready[i] = Answers(inputs, refs, refs64, pooled)
        return True
