"""Rebuild the test bed of real model-written KernelBench solutions (issue 22) from fetched mirrors.

    PYTHONPATH=. python bench/testbed_build.py [--out ext/testbed] [--cudal1-gpus h100] [--mirrors /work/.mirror]

The command line of bench/lib/testbed_sources.py (the sources, what is kept and left out, the manifest's fields):
it writes the test bed under ``--out`` (``ext/`` is git-ignored) and prints a table of counts by source, level
and judgement.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.lib.testbed_sources import CUDAL1_GPU, SOURCES, MissingMirror, UnknownSource, build, count_table  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "ext" / "testbed"))
    ap.add_argument("--mirrors", default="/work/.mirror")
    ap.add_argument("--sources", default=",".join(SOURCES), help=f"comma list of {','.join(SOURCES)}")
    ap.add_argument("--cudal1-gpus", default="h100", help=f"comma list of {','.join(CUDAL1_GPU)}")
    ap.add_argument("--include-torch-only", action="store_true",
                    help="keep CUDA-L1's and the forks' codes with no native kernel (the verifier rejects them "
                         "at extraction)")
    a = ap.parse_args(argv)
    try:
        rows, skipped = build(Path(a.out), Path(a.mirrors), a.cudal1_gpus.split(","), a.include_torch_only,
                              a.sources.split(","))
    except (MissingMirror, UnknownSource) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(count_table(rows, skipped, Path(a.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
