"""The teacher's one catalogue of planted bugs: each a mistake a kernel writer makes, with the explanation a repair
turn gives for it and where it is planted.

Two teachers plant them:
    writer   synth/teacher/writer.py (lowering-based, ``bug=`` of write_candidate): planted in the lowered program,
             only in a kernel where the bug changes the result on the task's own shapes (``writer.bug_sites``)
    compact  bench/lib/teacher_compact.py answers (the procedural task families): a one-line text edit of the answer
             (``plant_bug``), used by the repair warm start (bench/lib/teacher_warm_start.py)

Each kind has one entry (``BUGS``): a kind both teachers plant would be one entry with both ways of planting.
Not guaranteed: that the verifier detects a planted bug (a race may happen to give the right answer; a launch
rounded down changes nothing when the size is a multiple of the block).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Callable

_OP_LINE = re.compile(r"\n[ \t]+v = [^\n]*;")  # one op of a compact answer's fused chain (the load is "float v = ...")


def _drop_last_op(code: str) -> str:
    ops = list(_OP_LINE.finditer(code))
    return code[:ops[-1].start()] + code[ops[-1].end():] if ops else code


@dataclass(frozen=True)
class Bug:
    """One kind of planted bug: what the fix explains, and how a compact answer gets it (None: not planted in
    compact answers; the writer plants every kind whose ``writer`` is True)."""

    explanation: str
    writer: bool = False
    compact: Callable[[str], str] | None = None


BUGS: dict[str, Bug] = {
    "off_by_one": Bug("a loop bound (or the thread guard) stopped one element short, so the last element of "
                      "each line was never computed; the bound is now the full extent", writer=True),
    "missing_bounds_check": Bug("the kernel read past the end of its data (a guard / tail check was missing), "
                                "picking up neighbouring or out-of-range values; the bounds checks are restored",
                                writer=True),
    "wrong_stride": Bug("an operand was indexed with the wrong stride (a broadcast operand read as if it had "
                        "the output's shape, or a matrix read transposed); indices now use the real strides",
                        writer=True),
    "missing_sync": Bug("a barrier / accumulator reset was missing, so partial results raced or leaked between "
                        "outputs; the __syncthreads() (cuda) or per-output reset (cpu) is back", writer=True),
    "forbidden_fallback": Bug("the forward fell back to PyTorch compute, which the rules forbid; the fallback "
                              "is removed and every result comes from the custom kernels", writer=True),
    "dropped_op": Bug("one op of the fused chain was left out, so every value missed that step; the chain now "
                      "has every op of the reference, in order", compact=_drop_last_op),
    "launch_floor": Bug("the grid size was rounded down, so the last partial block was never launched and the "
                        "tail of the data never computed; the block count now rounds up",
                        compact=lambda c: re.sub(r"\(\((n|rows) \+ 255\) / 256\)", r"(\1 / 256)", c, count=1)),
    "mean_divisor": Bug("the mean divided by the wrong extent (the row count, not the row length); it now "
                        "divides by the number of values it summed",
                        compact=lambda c: c.replace("acc / cols", "acc / rows", 1)),
}

WRITER_BUGS = tuple(k for k, b in BUGS.items() if b.writer)  # the writer's kinds, in the order it chooses among them
COMPACT_BUGS = tuple(k for k, b in BUGS.items() if b.compact)


def explain(kind: str) -> str:
    """What a repair turn says was wrong for a planted ``kind`` (a generic diagnosis for an unknown one)."""
    bug = BUGS.get(kind)
    return bug.explanation if bug else ("I re-derived every index and bound from the shapes and rewrote the kernel "
                                        "without shortcuts")


def plant_bug(answer: str, key: str) -> tuple[str, str]:
    """(kind, the answer with it) for one of the COMPACT_BUGS that changes ``answer`` (a compact teacher answer,
    fenced or not), chosen by a hash of ``key``: the same key gives the same bug. ("", answer) when none fits."""
    fits = [(k, bugged) for k in COMPACT_BUGS if (bugged := BUGS[k].compact(answer)) != answer]
    if not fits:
        return "", answer
    return fits[int(hashlib.sha256(key.encode()).hexdigest(), 16) % len(fits)]
