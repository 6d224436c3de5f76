"""Two runs of the test bed, row by row: what changed between them (bench/lib/testbed_report.py ``compare``).

    PYTHONPATH=. python bench/testbed_compare.py \
        --before bench/results/testbed_h100_s0_d820c29.jsonl bench/results/testbed_h100_s1_66c2d27.jsonl \
        --after  $OUT/testbed_h100_s0of2.jsonl $OUT/testbed_h100_s1of2.jsonl [--out FILE.md]

Each side is one or more JSONL files (shards merged: a verdict beats ``not reached``), matched by solution id.
Prints (and writes with ``--out``) counts, the status transition matrix, passes per source, every changed verdict.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lib.testbed_report import compare, merge_rows, render_compare  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", nargs="+", required=True, metavar="FILE.jsonl")
    ap.add_argument("--after", nargs="+", required=True, metavar="FILE.jsonl")
    ap.add_argument("--out", default="", help="also write the report to this file")
    a = ap.parse_args(argv)
    for f in a.before + a.after:
        if not Path(f).is_file():
            print(f"error: {f}: no such file", file=sys.stderr)
            return 2
    text = render_compare(compare(merge_rows(a.before), merge_rows(a.after)), a.before, a.after)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
