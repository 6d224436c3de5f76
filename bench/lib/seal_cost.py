"""What a trial output's trip from the child's file to the judge costs the host, by step (verifier/execute/channel.py
``Ledger``): the child's save, the verifier's seal as the record arrives (the child waits for it), and the judge's
check and read. Two ways side by side, on one output of each size written where job directories go (/dev/shm when it
has room): the bytes kept at the seal (``Ledger.seal`` within the keep budget: copied into a memory file of the
verifier's own, which the judge maps, ``Ledger.source`` and ``Ledger.mapped``), and the
streamed sha256 (the seal past the budget, then the hash again and the file read: the way of every file before
1ff3fca). Host work only, no device: the seconds a slot and a child spend per trial on a large-output task.

    python -m bench.lib.seal_cost [--mb 64,256,1024] [--repeat 3] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from verifier.execute.channel import Ledger


def _timed(fn, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return statistics.median(runs)


def _read(t: torch.Tensor) -> None:
    """Every element of a loaded output read once (a mapped load reads its pages only here, as the checks do)."""
    t.sum()


def measure(mb: int, repeat: int, where: Path) -> dict[str, float]:
    """Median seconds of each step for one float32 output of ``mb`` MiB."""
    out = torch.randn(mb * (1 << 20) // 4)
    name = "out_0.pt"
    path = where / name
    row = {"save": _timed(lambda: torch.save(out, path), repeat)}

    def kept() -> Ledger:
        ledger = Ledger()
        ledger.seal(where, name)
        return ledger

    def hashed() -> Ledger:
        ledger = Ledger(keep_left=0)
        ledger.seal(where, name)
        return ledger

    row["seal kept"] = _timed(kept, repeat)
    row["seal hashed"] = _timed(hashed, repeat)
    k, h = kept(), hashed()
    row["judge kept"] = _timed(lambda: (k.unsealed(where, name),
                                        _read(torch.load(k.source(where, name), weights_only=True,
                                                         mmap=k.mapped(name)))), repeat)
    row["judge hashed"] = _timed(lambda: (h.unsealed(where, name),
                                          _read(torch.load(h.source(where, name), weights_only=True))), repeat)
    path.unlink()
    k.close()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", default="64,256,1024")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    shm = Path("/dev/shm")
    where = Path(tempfile.mkdtemp(prefix="km-seal-", dir=shm if shm.is_dir() else None))
    cols = ["save", "seal kept", "seal hashed", "judge kept", "judge hashed"]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [f"# A trial output's host steps, kept bytes against the streamed hash ({os.cpu_count()} cores, "
             f"torch {torch.__version__}, commit {commit or 'unknown'}, in {where.parent})", "",
             f"`python -m bench.lib.seal_cost --mb {a.mb} --repeat {a.repeat}`: median seconds of {a.repeat} runs "
             "of each step.", "",
             "| output MiB | " + " | ".join(cols) + " | seal + judge, kept | seal + judge, hashed |",
             "| ---: | " + " | ".join("---:" for _ in cols) + " | ---: | ---: |"]
    try:
        for mb in (int(x) for x in a.mb.split(",")):
            r = measure(mb, a.repeat, where)
            lines.append(f"| {mb} | " + " | ".join(f"{r[c]:.3f}" for c in cols) +
                         f" | {r['seal kept'] + r['judge kept']:.3f} | {r['seal hashed'] + r['judge hashed']:.3f} |")
    finally:
        for p in where.iterdir():
            p.unlink()
        where.rmdir()
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
