"""The trusted harness: every time and every timed output a verdict relies on, measured in THIS process.

This module runs in the verifier's own process, which never imports, loads or runs candidate code. An execution
child (the candidate's, or the reference's) is a compute server: it asks for a *clocked bracket* over the job's
channel (verifier/execute/channel.py) and the harness runs it:

1. the harness draws the bracket's inputs from seeds it never sends (a null bracket: one draw, cloned for its other
   calls, ``_copies``), into memory of its own (private), and
   hands the child the layout of a pool it owns (verifier/common/ipc.py: a shared file on cpu, device memory exported
   by CUDA IPC on cuda): K input sets and K output sets;
2. the child maps the pool and queues its calls: on cuda ``wait(gate word >= n)``, K x (forward, copy of the
   output into the pool's output set k), ``done word = n`` (stream memory operations on flag words of the pool:
   no interprocess event); on cpu it blocks until the harness says go;
3. the harness starts its clock, copies the inputs into the pool (only now can the child see them), flushes the
   last-level cache (cuda), and opens the gate; the clock stops when the child's ``done`` has passed (cuda: the
   harness's own timing events on its own stream, around the cross-process waits; cpu: its perf_counter from go
   to the child's answer);
4. right after, the harness copies every output set out of the pool (a snapshot) and checks each against the
   reference it runs itself on its private inputs (loosely: did the call compute this input's answer); it
   keeps a few (input, output) pairs picked at random after the clock stopped for the full, budgeted check of
   the judge; the pool's outputs are compared with the snapshot again before the next bracket and at the end
   (an output written after ``done`` is work the clock did not see). On cuda the checks of the snapshots are held
   until the child has ended (``DEFER_BYTES`` of inputs and snapshots at most, the rest checked as their bracket
   ends), so that the reference's runs are not inside the child's exclusive hold of the device. These checks are
   verifier/execute/timed_checks.py (``TimedChecks``, mixed into ``Harness``); this module is the clock.

A model's time per call is, on cuda, the bracket's device time minus that of a null bracket of the same K (the
reference's child answering with a fixed output: the input copies, the flush, the output copies and the
cross-process waits), divided by K; on cpu the bracket's host time divided by K, the copies in (a host clock's
noise under load is as large as a small model's work, and subtracting it gave 0 us). Nothing the child does to its own timers, events, reports, RNG or copies of the verifier's modules
changes these figures: the clock, the inputs, the flush, the outputs' copies and the picks are here. How many
brackets a model gets is decided here too (``Harness._enough``): a cap, and an early stop once its time per call is
tight (verifier/execute/brackets.py ``tight``); a child that keeps asking is told "enough". What it measured
(``Clocked``) and the intervals over it are verifier/execute/brackets.py.

Not guaranteed: on cuda a child that records ``done`` before its last writes and has them land between the
harness's end event and its snapshot copy (a context switch of the GPU's time slicing) is not seen by the
snapshot; the late-write check sees writes that land after the snapshot.
Imports: torch, the standard library and the verifier's torch-side modules only.
"""

from __future__ import annotations

import contextlib
import copy
import json
import secrets
import statistics
import time
from pathlib import Path
from typing import Callable

import torch

from verifier.common import ipc
from verifier.common.devlock import device_lock, held_exclusive
from verifier.common.inputs import as_list, nbytes
from verifier.execute.admission import HARNESS_SETS_BYTES
from verifier.execute.locks import bracket_in_flight
from verifier.execute.brackets import LEAST_BRACKETS, TIGHT, Bracket, Clocked, order_interval, tight
from verifier.execute.timed_checks import TimedChecks, inputs_changed

MAX_CALLS = 256  # calls per bracket at most (a short kernel needs many to outweigh the cross-process waits)
SET_BUDGET = HARNESS_SETS_BYTES  # bytes of input + output sets per bracket (x2: private copies)
TARGET_S = {"cuda": 0.02, "cpu": 0.02}  # a bracket's calls last about this long
QUEUE_WAIT_S = 2.0  # cuda: the gate opens this long after the bracket's layout was sent, queued or not ...
# ... or this long for a model whose last LATE_RUN brackets all came late (its forward waits on the host for the
# gate, so it queues nothing until the gate opens: every wait was 2 s of the device held alone for nothing; one
# H200's real batch held it 22-28 s for a task's reference timing, 15 s for a candidate's). Two in a row, not one:
# an honest model late once on a loaded host keeps the full wait (a short one could make each of its brackets late,
# and a late bracket's time counts the host's queuing); a bracket in time gives the full wait back
LATE_QUEUE_WAIT_S = 0.1
LATE_RUN = 2
# A child that found its forward waiting on the host (verifier/child/timing.py ``forward_waits_on_host``: a call
# behind a device-side delay returned only once the delay was over) says so with each bracket, and that label's gate
# opens after LATE_QUEUE_WAIT_S from its first bracket (a task's reference or a candidate that synchronises paid
# LATE_RUN full waits, 4 s of the device held alone, at 4e97331). The hint is the child's, so it is checked: a bracket
# of the label queued in time takes it back for the rest of the job. A false hint only shortens the wait for the
# child's own calls: a bracket it queues late counts its host's queueing in its own time, the slower one.
# A bracket that came late after the full wait with more than one call: its child could not queue them all before the
# gate opened. A forward of many kernels fills the device's launch queue while the gate holds the stream (one H200's
# real batch: a level-3 network of ~150 kernels a call, 14 calls a bracket, ten of eleven brackets late for 2 s each
# and its torch.compile too), so the label's later brackets get this many times fewer calls (``_calls_for``), down
# to one: in time, and timed as the device runs them rather than as the host refills the queue
CALLS_CUT = 4
NULL_SLACK_S = 1e-5  # the null bracket's 95% interval within this (or TIGHT of its time) at both counts: enough ...
# ... or within this share of its one-call time: a time per call is only ever known to NULL_SHIFT (2) one-call nulls
# over its calls (verifier/execute/brackets.py resolution_s), so the null known to a quarter of one adds an eighth
# of that at most. On one H200 its spread was never within 10 us at both counts: 21 brackets every task (fd1dc1d)
NULL_SHARE = 0.25
FLAGS = ipc.ALIGN  # the pool's first bytes: the gate word (offset 0) and the done word (offset 64)
def _plain(x) -> bool:
    """A value that survives JSON unchanged (numbers, strings, None, lists of them)."""
    try:
        return json.loads(json.dumps(x)) == x
    except (TypeError, ValueError):
        return False


class Harness(TimedChecks):
    """The harness side of one job's clocked brackets. ``reference()`` returns the task's reference model
    (built as the child's was: same init seed), ``draw(seed)`` one call's inputs on the device; ``check``
    (the candidate's job) turns on the output checks; ``keep`` is how many (inputs, outputs) pairs to keep for
    the judge's full check, picked uniformly over every timed call. When a model has been timed enough is decided
    here, never by the child: ``brackets`` caps each model's brackets after its probe (the null's at twice that),
    and a model's timing stops sooner once its time per call is tight (``tight``: at least 3 brackets, 95%
    interval within 1%), reduced by ``null`` (the null bracket's seconds by calls, cuda) as the verdict's is; the
    null's once both its counts are known well enough (``_null_tight``). How many calls a bracket holds is decided
    here too (``_calls_for``: about TARGET_S of them, fewer after a late bracket, CALLS_CUT).
    ``lock_path``: the device lock (verifier/common/devlock.py) that the child takes exclusive for its timing phase;
    each bracket clocked while nobody held it exclusive is counted (``Clocked.unlocked``), seen from here."""

    def __init__(self, backend: str, job_dir: Path, reference: Callable[[], object], draw: Callable[[int], list],
                 *, check: bool, keep: int = 0, rng_lock=None, budget_s: float = 10.0, brackets: int | None = None,
                 null: dict[int, float] | None = None, lock_path: str = "", lock_wait_s: float = 30.0,
                 ties: bool = False):
        self.backend, self.job_dir = backend, Path(job_dir)
        self.mark_ties = ties  # the reference's index outputs of a selection are marked (verifier/common/ties.py)
        self.brackets, self._null = brackets, null
        self.lock_path, self.lock_wait_s = lock_path, lock_wait_s
        self.device = "cuda" if backend == "cuda" else "cpu"
        self._reference_factory, self._draw = reference, draw
        self.check, self.keep = check, keep
        self.rng_lock = rng_lock
        self.budget_s = budget_s
        self.result = Clocked(host_clock=self.device == "cpu")
        self._model = None
        self._pool = None
        self._layout: dict | None = None
        self._probe_s: dict[str, float] = {}
        self._reset_checks()
        self._late_runs: dict[str, int] = {}  # label -> its brackets in a row that came late (``queue_wait_s``)
        self._calls_cap: dict[str, int] = {}  # label -> its calls per bracket at most, after a late bracket (CALLS_CUT)
        self._stream = None
        self._flush = None
        self._null_turn = 0
        self._seq = 0
        self._fd_sent = False

    # ---- set-up (first bracket)

    def _model_(self):
        if self._model is None:
            self._model = self._reference_factory()
        return self._model

    def _draw_locked(self, seed: int) -> list:
        """One call's private inputs, drawn under the process's RNG lock where there is one (the global generator:
        a task's plan and a reference's construction seed it too); the wait for the lock is its own part of the
        brackets' seconds (``serve_s["draw_lock_wait"]``: the layout's draw at the first bracket and every call's)."""
        if self.rng_lock is None:
            return self._draw(seed)
        t0 = time.perf_counter()
        with self.rng_lock:
            self._part("draw_lock_wait", time.perf_counter() - t0)
            return self._draw(seed)

    def _set_up(self) -> None:
        inputs = self._draw_locked(secrets.randbelow(2**31 - 1) + 1)
        with torch.no_grad():
            outs = [o for o in as_list(self._model_()(*inputs))]
        ins, off = [], 0

        def place(t: torch.Tensor) -> list:
            nonlocal off
            strides = ipc.kept_strides(t)  # a channels_last or transposed input keeps its layout
            at = [off, list(t.shape), str(t.dtype)] + ([strides] if strides is not None else [])
            off += ipc.aligned((ipc.span(t.shape, strides) if strides is not None else t.numel()) * t.element_size())
            return at

        for x in inputs:
            if isinstance(x, torch.Tensor):
                ins.append(["t", *place(x)])
            elif _plain(x):
                ins.append(["v"])
            else:  # a tuple of dims, a list of tensors, a dtype, a NaN: a tree, its tensors in the pool (common/ipc.py)
                leaves: list = []
                try:
                    tree = ipc.encode_value(x, lambda t: leaves.append(place(t)) or leaves[-1])
                    ins.append(["p", tree, leaves])
                except ipc.Uncarried:  # an object of the task's own kind: the child draws its own
                    ins.append(["child"])
                    self.result.unchecked = True
        outs_l = []
        for j, o in enumerate(outs):  # tensors travel back through the pool; other outputs are not clocked data
            if isinstance(o, torch.Tensor):
                outs_l.append([off, list(o.shape), str(o.dtype), j])
                off += ipc.aligned(o.numel() * o.element_size())
        if not outs_l:
            raise RuntimeError("the reference returns no tensor: its calls cannot be clocked")
        if self.result.unchecked:  # its outputs answer inputs the harness did not write: timed, not checked here,
            self.check = False  # and the judge counts no speedup from such a timing
        stride = max(off, ipc.ALIGN)
        per_set = nbytes(inputs) + nbytes(outs)
        most = max(1, min(MAX_CALLS, SET_BUDGET[self.device] // max(2 * per_set, 1)))
        self._layout = {"inputs": ins, "outputs": outs_l, "stride": stride, "most": most}
        size = FLAGS + stride * most
        if self.device == "cuda":
            self._pool = ipc.CudaPool(size)
            self._stream = torch.cuda.Stream()
            self._unblock = torch.cuda.Stream()
            # this process's own word that holds a bracket's queued device work until all of it is queued
            # (``_clock_cuda``): never in the pool, which the child maps
            self._hold = torch.zeros(ipc.ALIGN // 4, dtype=torch.int32, device="cuda")
            l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 * 2**20) or 50 * 2**20
            self._flush = torch.empty(max(2 * l2, 256 * 2**20) // 4, dtype=torch.int32, device="cuda")
            self._pool_desc = {"fd": True, "bytes": self._pool.nbytes}
            self._tensor = self._pool.tensor
        else:
            path = self.job_dir / "harness_pool.bin"
            self._tensor = ipc.cpu_pool(path, size)
            self._pool_desc = {"file": str(path), "bytes": size}

    def _calls_for(self, label: str) -> int:
        """1 for a label's first bracket (its probe) and for a slow model; else as many as fit the target."""
        most = self._layout["most"]
        if label == "null":  # the null is measured at both counts the models use
            self._null_turn += 1
            return 1 if self._null_turn % 2 else most
        probe = self._probe_s.get(label)
        if probe is None:
            return 1
        return max(1, min(most, int(TARGET_S[self.device] / max(probe, 1e-9)), self._calls_cap.get(label, most)))

    def _hinted(self, label: str) -> bool:
        """Whether ``label``'s child said its forward waits on the host, and no bracket of it took that back."""
        return label in self.result.host_waits and label not in self.result.host_waits_taken_back

    def queue_wait_s(self, label: str) -> float:
        """How long a bracket of ``label`` waits for the child to queue its calls before the gate opens anyway."""
        return LATE_QUEUE_WAIT_S if self._hinted(label) or self._late_runs.get(label, 0) >= LATE_RUN else QUEUE_WAIT_S

    def _hint(self, label: str, host_waits: bool, late: bool | None = None) -> None:
        """The child's hint that ``label`` waits on the host, noted before its bracket; after it (``late`` given), a
        hinted bracket that came in time takes the hint back."""
        if late is None:
            if host_waits and label not in self.result.host_waits:
                self.result.host_waits.append(label)
        elif not late and self._hinted(label):
            self.result.host_waits_taken_back.append(label)

    def _came(self, label: str, calls: int, late: bool, hinted: bool) -> None:
        """After a bracket of ``calls`` calls: the label's run of late brackets (``queue_wait_s``), and its calls per
        bracket cut where a late one had more than its child could queue (CALLS_CUT). Not for a label its child said
        waits on the host (``hinted`` as the bracket began): late by its nature, whatever its calls."""
        self._late_runs[label] = self._late_runs.get(label, 0) + 1 if late else 0
        if late and calls > 1 and not hinted:
            self._calls_cap[label] = max(1, calls // CALLS_CUT)

    def _views(self, k: int) -> tuple[list, list]:
        lay, base = self._layout, FLAGS + k * self._layout["stride"]
        ins = [ipc.view(self._tensor, base + e[1], *e[2:]) if e[0] == "t" else
               [ipc.view(self._tensor, base + a[0], *a[1:]) for a in e[2]] if e[0] == "p" else None
               for e in lay["inputs"]]
        outs = [ipc.view(self._tensor, base + e[0], e[1], e[2]) for e in lay["outputs"]]
        return ins, outs

    # ---- one bracket

    def serve(self, label: str, send: Callable[[dict], None], recv: Callable[[], dict | None],
              host_waits: bool = False) -> None:
        """One bracket over the channel; what it measured goes to ``self.result``. ``host_waits``: the child's hint
        that the label's forward waits on the host (``queue_wait_s``). Raises only on the harness's own failures
        (the caller records them as such)."""
        if self._enough(label):
            send({"enough": True})
            return
        if self._layout is None:
            self._set_up()
        self._late_writes()
        t0 = time.perf_counter()
        calls = self._calls_for(label)
        if label == "null":  # its fixed output ignores the inputs: one draw, copied (``_copies``)
            private = _copies(self._draw_locked(secrets.randbelow(2**31 - 1) + 1), calls)
        else:
            seeds = [secrets.randbelow(2**31 - 1) + 1 for _ in range(calls)]
            private = [self._draw_locked(s) for s in seeds]  # drawn before the clock: the child cannot see them
        values = [[x if e[0] == "v" else self._encoded(x, e) if e[0] == "p" else None
                   for x, e in zip(inp, self._layout["inputs"])] for inp in private]
        views = [self._views(k) for k in range(calls)]
        compare = self.check and label != "null" and label not in self._mutated_labels  # a caught label: once
        t1 = time.perf_counter()
        self._seq += 1
        fds = [self._pool.fd] if isinstance(self._pool, ipc.CudaPool) and not self._fd_sent else None
        self._fd_sent = True
        send({"calls": calls, "stride": self._layout["stride"], "flags": FLAGS, "inputs": self._layout["inputs"],
              "outputs": self._layout["outputs"], "pool": self._pool_desc, "values": values, "seq": self._seq}, fds)
        if self.lock_path and not held_exclusive(self.lock_path):
            self.result.unlocked += 1  # (a timing phase shared with other device work: the verdict says so)
        if self.device == "cuda":
            self._hint(label, host_waits)
            hinted = self._hinted(label)
            gate_wait_s = self.queue_wait_s(label)
            seconds, late, snapshot, changed = self._clock_cuda(private, views, send, recv, compare, gate_wait_s)
            self._hint(label, host_waits, late)
        else:
            hinted, gate_wait_s = False, 0.0
            seconds, late, snapshot, changed = self._clock_cpu(private, views, send, recv, compare)
        self._came(label, calls, late, hinted)
        t2 = time.perf_counter()
        self._part("draw", t1 - t0)
        self._part("clock", t2 - t1)
        if seconds is None:
            return
        if label not in self._probe_s:
            self._probe_s[label] = seconds / calls
        self.result.brackets.append(Bracket(label, calls, seconds, late, gate_wait_s, self._seq))
        self._snapshot = snapshot
        self._note_changed_inputs(label, changed)
        if self.check:
            if not self._defer(label, private, self._snapshot):
                self._check(label, private, self._snapshot)
            if self.result.host_clock and label != "null" and not self.result.problems:
                self._keep_if_fastest(calls, seconds, private, self._snapshot)
        self._part("after", time.perf_counter() - t2)

    def _part(self, name: str, seconds: float) -> None:
        self.result.serve_s[name] = self.result.serve_s.get(name, 0.0) + seconds

    def _enough(self, label: str) -> bool:
        """Whether ``label`` has been timed enough (the child asks until told so)."""
        done = [b for b in self.result.brackets if b.label == label]
        if (len(done) >= 4 and sum(b.seconds for b in done) > self.budget_s) or (self.check and self.result.problems):
            return True  # a slow model has been timed enough; a wrong timed output has decided the verdict
        if self.brackets is not None and len(done) >= 1 + (2 if label == "null" else 1) * self.brackets:
            return True  # its probe and its brackets (the null: one of each count per model bracket)
        if label == "null":
            return self._null_tight()
        return tight(self.result.samples(label, self._null), self.result.host_clock)

    def _null_tight(self) -> bool:
        """Whether the null bracket is known well enough at both of its counts (one call, the most a bracket holds):
        at least LEAST_BRACKETS of each, each count's 95% interval within TIGHT of its time, within NULL_SLACK_S or
        within NULL_SHARE of the one-call null's time (what ``resolution_s`` already allows a time per call).
        What a model's time per call takes from the null is its error over the model's calls: a few microseconds
        over brackets of about TARGET_S (or of the most calls) is below the models' own 1%. On a host clock (cpu) the
        null is not subtracted, so LEAST_BRACKETS of each count are enough (21 took 6.3 s of a cpu task's 6.8 s)."""
        by = self.result.seconds_by_calls("null")
        if len(by) < (1 if self._layout is not None and self._layout["most"] == 1 else 2):
            return False
        if any(len(vals) < LEAST_BRACKETS for vals in by.values()):
            return False
        if self.result.host_clock:  # a host clock's null is reported, never subtracted (``Clocked.samples``)
            return True
        slack = max(NULL_SLACK_S, NULL_SHARE * statistics.median(by[min(by)]))
        for vals in by.values():
            lo, hi = order_interval(vals, least=False)
            if (hi - lo) / 2 > max(TIGHT * statistics.median(vals), slack):
                return False
        return True

    @staticmethod
    def _encoded(x, entry: list) -> object:
        """One call's value of a tree input (``entry``: its layout), its tensors at the layout's places."""
        leaves = iter(entry[2])

        def place(t: torch.Tensor) -> list:
            at = next(leaves, None)
            if at is None or list(t.shape) != at[1] or str(t.dtype) != at[2]:
                raise RuntimeError(f"an input's tensors changed shape between draws: {tuple(t.shape)} {t.dtype}, "
                                   f"laid out as {at}")
            return at
        return ipc.encode_value(x, place)

    def _write_inputs(self, private: list, views: list) -> None:
        for inp, (ins, _) in zip(private, views):
            for x, dst in zip(inp, ins):
                if isinstance(dst, list):  # a tree input: its tensors, in the layout's order
                    for t, d in zip(ipc.value_tensors(x), dst):
                        d.copy_(t)
                elif dst is not None:
                    dst.copy_(x)

    def _clock_cpu(self, private, views, send, recv, compare: bool):
        """The bracket on the host clock: (seconds or None, late, the outputs' snapshot, ``_inputs_changed``'s
        flags, empty unless ``compare``)."""
        msg = recv()
        if not msg or msg.get("op") != "armed":
            raise _ChildGone(f"the child did not arm its bracket: {msg!r}")
        t0 = time.perf_counter()
        self._write_inputs(private, views)
        send({"go": True})
        msg = recv()
        t1 = time.perf_counter()
        if not msg or msg.get("op") != "finished":
            raise _ChildGone(f"the child did not finish its bracket: {msg!r}")
        snapshot = _snapshot(views)  # at once, before the child hears back: what it writes later is a late write
        changed = inputs_changed(private, views) if compare else []
        send({"ok": True})
        if msg.get("error"):
            self.result.problems.append(f"a timed call failed: {str(msg['error'])[:300]}")
            return None, False, [], []
        return t1 - t0, False, snapshot, changed

    def _clock_cuda(self, private, views, send, recv, compare: bool, wait_s: float = QUEUE_WAIT_S):
        """The child has queued ``wait(gate >= seq)``, its calls and ``done = seq`` on its stream (or is still
        queuing: a forward that synchronises the host waits for the gate, which opens after ``wait_s`` anyway, and
        the bracket is late). This stream: start, the inputs copied in, the cache flushed, the gate opened, a wait
        for done, end. All of it up to the gate is queued behind a word of this process's (``_hold``) that is
        written only once it is queued, so the device runs the copies back to back: queued as this process's
        Python issues them, one small copy every 10-20 us of a loaded host, they made the null bracket's part per
        call 23 us on one H200 (97db09e), most of a small kernel's bracket, and its noise the host's. Returns what
        ``_clock_cpu`` does."""
        s, seq = self._stream, self._seq
        gate, done = self._pool.ptr, self._pool.ptr + 64
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.current_stream().synchronize()  # the private inputs are drawn
        t0 = time.perf_counter()
        msg = recv(wait_s)
        self._part("queue", time.perf_counter() - t0)
        late = bool(msg) and msg.get("op") == "timeout"
        # from the first gated work queued to the stream's drain: no cudaFree of this process meanwhile (locks.py)
        with bracket_in_flight():
            try:
                with torch.cuda.stream(s):
                    ipc.wait_value(s, self._hold.data_ptr(), seq)
                    try:
                        start.record(s)
                        self._write_inputs(private, views)
                        self._flush.zero_()
                        ipc.write_value(s, gate, seq)
                    finally:  # (never left holding this stream, whatever raised while queuing)
                        ipc.write_value(self._unblock, self._hold.data_ptr(), seq)
                    ipc.wait_value(s, done, seq)
                    end.record(s)
                    snapshot = _snapshot(views)  # on this stream right after done, outside the clock
                    changed = inputs_changed(private, views) if compare else []  # so are the inputs' comparisons
            except BaseException:  # the harness's own failure (its copies out of device memory): the child's calls,
                with contextlib.suppress(Exception):  # queued behind the gate, run and end instead of waiting for ever
                    self._release(seq)
                raise
            if late:
                msg = recv()
            if not msg or msg.get("op") != "queued":
                self._release(seq)
                raise _ChildGone(f"the child did not queue its bracket: {msg!r}")
            deadline = time.monotonic() + max(60.0, 4 * self.budget_s)
            while not end.query():  # the child's done, or a child that never writes it (then released here)
                if time.monotonic() > deadline:
                    self._release(seq)
                    self.result.problems.append("a timed bracket never reported done")
                    return None, late, [], []
                time.sleep(2e-5)
            s.synchronize()  # the snapshot
            send({"ok": True})
            if msg.get("error"):
                self.result.problems.append(f"a timed call failed: {str(msg['error'])[:300]}")
                return None, late, [], []
            return start.elapsed_time(end) * 1e-3, late, snapshot, changed

    def _release(self, seq: int) -> None:
        """Open the gate and write done from a stream of this process, so that neither side waits for ever."""
        ipc.write_value(self._unblock, self._pool.ptr, seq)
        ipc.write_value(self._unblock, self._pool.ptr + 64, seq)
        self._unblock.synchronize()

    def close(self) -> Clocked:
        """After the child ended: the last late-write check, then the pool is freed and the held brackets are
        checked (a failure of the harness's own there is ``Clocked.error``, the verifier's); its seconds are
        ``Clocked.close_s``."""
        t0 = time.perf_counter()
        try:
            self._late_writes()
        finally:
            if isinstance(self._pool, ipc.CudaPool):
                self._pool.free()
            self._pool = self._tensor = None
        if self._pending:
            # device work of the verifier's, as the judge's: held shared, giving way to a waiting timer between
            # brackets (verifier/common/devlock.py)
            with device_lock(self.lock_path or None) as lock:
                lock.acquire(False, self.lock_wait_s)
                try:
                    self._check_pending(lambda: lock.yield_to_timer(self.lock_wait_s))
                except Exception as e:  # noqa: BLE001 - the reference or a comparison failed: never the candidate's
                    self.result.error = f"{type(e).__name__}: {str(e)[:400]}"
        self._pending, self._pending_bytes = [], 0
        self.result.close_s = time.perf_counter() - t0
        return self.result


def _copies(inputs: list, calls: int) -> list[list]:
    """``calls`` input sets for a null bracket: ``inputs`` and copies of it (its tensors cloned, on their device).
    The null model answers with a fixed output whatever it is given, so its calls need the bytes of a model's inputs
    (what the bracket copies into the pool is the null's part per call), not fresh draws: a draw is the task's
    ``get_inputs`` on the host under the process's RNG lock, and 256 of them a bracket held the device alone for
    seconds where the harness's process was busy (one H200's real batch: a tiny kernel's task spent 3.7 s of its
    reference timing in six null brackets, 0.5 s in its four reference ones). Copies, not the same tensors again:
    each call's copy reads memory of its own, as a model's bracket's does."""
    def again(x):
        return x.clone() if isinstance(x, torch.Tensor) else copy.deepcopy(x)  # (a tree's tensors cloned too)
    return [inputs] + [[again(x) for x in inputs] for _ in range(calls - 1)]


def _snapshot(views: list) -> list[list[torch.Tensor]]:
    """Copies of every output set of a bracket, out of the shared pool into this process's own memory."""
    return [[o.clone() for o in outs] for _, outs in views]


class _ChildGone(RuntimeError):
    """The child stopped answering mid-bracket (it crashed, hung or spoke out of turn): its verdict says so."""
