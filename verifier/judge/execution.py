"""What executing one candidate leaves for the judge (verifier/judge/verdict.py ``judge``, verifier/judge/trials.py):
how its process ended (``ChildRun``), everything the execution stage hands over with it (``Execution``), and what an
error line of that process or of the verifier's harness says ran out (``memory_error``, ``device_memory_line``)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from verifier.common.backends import device_memory_text
from verifier.common.contract import Job
from verifier.execute.brackets import Clocked
from verifier.execute.channel import Ledger
from verifier.judge.prefetch import ReferencePrefetch


@dataclass
class ChildRun:
    """How the candidate's execution process ended: its exit status (None while it was still running when stopped),
    whether the wall-clock limit stopped it, its log's tail."""

    rc: int | None
    timed_out: bool
    log: str
    limit_s: float = 0.0  # the wall-clock limit it ran under


@dataclass
class Execution:
    """What executing one candidate left for the judge: its job and job directory, how its process ended (``run``),
    what this process handed it and the records it streamed (``ledger``, verifier/execute/channel.py), what the
    harness timed and saw of the timed calls (``clocked``, verifier/execute/harness.py), the device and the poison
    byte of its freed memory, ``knockout``, the knockout run on demand (the partial policy's question,
    verifier/judge/knockout.py; None where there is none), and ``give_way``, called between the judge's pieces of
    device work (each trial's reference runs, each timed call checked in full): where a timer waits for the device,
    the judge's shared hold lets it go first (verifier/common/devlock.py ``yield_to_timer``); ``prefetched``, the
    reference's answers to the trials computed while the child ran them (verifier/judge/prefetch.py), or None."""

    job: Job
    job_dir: Path
    run: ChildRun
    ledger: Ledger
    device: str
    poison: int
    clocked: Clocked = dataclasses.field(default_factory=Clocked)
    knockout: Callable | None = None
    give_way: Callable[[], object] = lambda: None
    prefetched: ReferencePrefetch | None = None  # the reference's answers computed while the child ran
    span: tuple[float, float] = ()  # monotonic: the child's job handed over, and its run returned (its held checks in)
    # host work of the judge's amid its device work (an output file's seal checked and read): the shared hold let go
    # for its length (verifier/common/devlock.py ``aside``), so that no timer waits for it
    aside: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext


def last_line(text: str) -> str:
    """A traceback's or a log's last non-blank line, stripped ('' where there is none): the exception it ended on."""
    return next((ln.strip() for ln in reversed(str(text).splitlines()) if ln.strip()), "")


def memory_error(line: str) -> bool:
    """Whether an exception's line (``"<type>: <message>"``) says memory ran out: the device's (a library's own
    allocation too: cuBLAS's, cuDNN's), or the host's."""
    return device_memory_line(line) or any(s in line for s in ("MemoryError", "bad_alloc", "can't allocate memory"))


def device_memory_line(line: str) -> bool:
    """Whether an exception's line (``"<type>: <message>"``: the candidate process's last line, or the timing
    harness's failure, channel.Ledger.harness_error or Clocked.error) says the device's memory ran out (torch's
    allocator, a CUDA runtime or driver call, a library's own allocation: ``backends.device_memory_text``), not the
    host's."""
    return line.startswith(("OutOfMemoryError", "torch.OutOfMemoryError")) or device_memory_text(line)
