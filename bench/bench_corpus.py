"""Corpus write and read throughput for sft rows (the largest corpus rows: whole dialogues).

    python bench/bench_corpus.py [--rows 20000] [--out bench/results/curation_cpu.md]

Writes ``rows`` synthetic SFTRow records (3-5 messages of 0.5-3 KB each) as a corpus snapshot with
curation.corpus.write_snapshot (zstd, sharded, atomic), re-writes it unchanged (idempotent: a
digest check only), then reads it back three ways: pyarrow (all columns), kernelmill.store
(records), DuckDB (an aggregate over the messages). Reports rows/s and MB/s (uncompressed Arrow
bytes per second; on-disk size shown).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def make_rows(n: int, seed: int = 0) -> list:
    from kernelmill.schema import Message, SFTRow

    rng = random.Random(seed)
    words = "kernel thread block warp shared memory float index stride launch grid tensor output input".split()
    text = lambda k: " ".join(rng.choice(words) for _ in range(k))  # noqa: E731
    rows = []
    for i in range(n):
        msgs = [Message("user", text(rng.randint(80, 400)))]
        for _ in range(rng.randint(1, 2)):
            msgs += [Message("assistant", "```python\n" + text(rng.randint(150, 500)) + "\n```"),
                     Message("user", text(rng.randint(20, 80)))]
        msgs.append(Message("assistant", "```python\n" + text(rng.randint(150, 500)) + "\n```"))
        rows.append(SFTRow(id=f"s{i:08d}", task_id=f"t{i % 997:05d}", messages=msgs, source="seed", generator="teacher",
                           backend="cuda", level=1 + i % 4, num_turns=len(msgs) // 2, final_reward=2.0,
                           speedup_eager=rng.uniform(0.5, 3)))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "curation_cpu.md"))
    args = ap.parse_args(argv)

    import pyarrow as pa
    import pyarrow.parquet as pq

    from curation.corpus import snapshot_files, write_snapshot
    from curation.query import connect
    from kernelmill import store
    from kernelmill.schema import to_table

    rows = make_rows(args.rows)
    arrow_mb = to_table(rows).nbytes / 1e6
    load0 = os.getloadavg()[0]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        assert write_snapshot(tmp, "sft", rows)
        results.append(("write snapshot (zstd, sharded, atomic)", time.perf_counter() - t0))
        t0 = time.perf_counter()
        assert not write_snapshot(tmp, "sft", rows)
        results.append(("re-write unchanged (idempotent no-op)", time.perf_counter() - t0))
        files = snapshot_files(Path(tmp), "sft")
        disk_mb = sum(f.stat().st_size for f in files) / 1e6
        t0 = time.perf_counter()
        t = pa.concat_tables([pq.read_table(f) for f in files])
        assert t.num_rows == args.rows
        results.append(("read pyarrow (all columns)", time.perf_counter() - t0))
        t0 = time.perf_counter()
        assert len(store.read_records(tmp, "sft")) == args.rows
        results.append(("read kernelmill.store records", time.perf_counter() - t0))
        t0 = time.perf_counter()
        con = connect(tmp)
        n = con.sql("SELECT count(*), sum(len(messages)), avg(speedup_eager) FROM sft").fetchall()[0][0]
        assert n == args.rows
        results.append(("DuckDB aggregate over sft view", time.perf_counter() - t0))
    lines = [f"## Corpus I/O: {args.rows:,} sft rows ({arrow_mb:.1f} MB Arrow, {disk_mb:.1f} MB on disk in "
             f"{len(files)} shard(s), zstd); load average at start {load0:.1f}", "",
             "| operation | seconds | rows/s | MB/s (Arrow) |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {name} | {s:.2f} | {args.rows / s:,.0f} | {arrow_mb / s:,.1f} |" for name, s in results]
    text = "\n".join(lines)
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        old = out.read_text() if out.is_file() else ""
        marker, end = "<!-- corpus -->", "<!-- /corpus -->"
        if marker in old:
            old = old.split(marker)[0] + old.split(end)[-1].lstrip("\n")
        out.write_text(old.rstrip("\n") + ("\n\n" if old.strip() else "") + f"{marker}\n{text}\n{end}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
