"""The test bed of real model-written KernelBench solutions (issue 22) through the verifier, against each
source's own correctness judgement: a command line over bench/lib/testbed.py and bench/lib/testbed_report.py.
The run with its assertions (nothing that passed before is newly rejected) is `pytest -m gpu
tests/gpu/test_testbed_gpu.py`; this script keeps the options of a manual run and the report-only modes.

    PYTHONPATH=. python bench/bench_testbed_gpu.py --manifest ext/testbed/manifest.jsonl --budget-s 560 --shard 0/3
    PYTHONPATH=. python bench/bench_testbed_gpu.py --manifest ext/testbed/manifest.jsonl --static-only  # no GPU
    PYTHONPATH=. python bench/bench_testbed_gpu.py --report bench/results/testbed_h100_s*.jsonl --classify FILE
    PYTHONPATH=. python bench/bench_testbed_gpu.py --sources technoabsurdist,yenhaohuang --per-problem 1 --shard 0/4
    PYTHONPATH=. python bench/testbed_compare.py --before OLD.jsonl... --after NEW.jsonl...   # two runs compared

Writes under --out, else $OUT, else bench/results/: ``testbed_<name>.jsonl`` (one row per verdict, appended as
it arrives) and ``testbed_<name>.md`` (bench/lib/testbed_report.py ``render``). A watchdog writes what is done
and exits at the budget whatever is running. ``--set KEY=VALUE`` sets any VerifyConfig field; defaults for a
test bed run: ``time_torch_compile=false``, ``timing_trials=5`` (bench/lib/testbed.py RUN_DEFAULTS).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib import testbed as T  # noqa: E402
from bench.lib.testbed_report import NOT_REACHED, load_classes, merge_rows, render  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--manifest", default=str(ROOT / "ext" / "testbed" / "manifest.jsonl"))
    ap.add_argument("--report", nargs="+", metavar="FILE.jsonl", help="only rebuild the markdown from these JSONL files")
    ap.add_argument("--classify", help="JSON / YAML / CSV: id -> class (and note) for the disagreements")
    ap.add_argument("--static-only", action="store_true", help="extraction + static stages only (no compiler, no GPU)")
    ap.add_argument("--budget-s", type=float, default=560)
    ap.add_argument("--shard", default="0/1", help="i/n: every n-th solution starting at i")
    ap.add_argument("--levels", default="")
    ap.add_argument("--sources", default="")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--per-problem", type=int, default=0, help="at most this many solutions per problem (0: all)")
    ap.add_argument("--skip-done", nargs="*", default=[], metavar="FILE.jsonl",
                    help="skip ids that already have a verdict in these files (a second call over the rest)")
    ap.add_argument("--legality", default="", choices=["", "strict", "partial"])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a VerifyConfig field")
    ap.add_argument("--chunk", type=int, default=48, help="solutions per verify call (0: all in one)")
    ap.add_argument("--exec-workers", type=int, default=4)
    ap.add_argument("--compile-workers", type=int, default=0, help="0: the cores")
    ap.add_argument("--name", default="", help="testbed_<name>.{jsonl,md}; default from the device and shard")
    ap.add_argument("--out", default="", help="default $OUT, else bench/results")
    a = ap.parse_args(argv)
    od = Path(a.out or os.environ.get("OUT") or ROOT / "bench" / "results")
    od.mkdir(parents=True, exist_ok=True)
    classes = load_classes(Path(a.classify)) if a.classify else {}

    def write(name: str, rows: list[dict], title: str, header: list[str]) -> None:
        text = render(rows, classes, title, header)
        (od / f"testbed_{name}.md").write_text(text)
        print(text, flush=True)

    if a.report:
        rows = merge_rows(a.report)
        devs = sorted({r.get("device") or "" for r in rows} - {""})
        legal = sorted({r.get("legality") or "" for r in rows} - {""})
        write(a.name or "merged", rows, f"Test bed of model-written KernelBench solutions: {a.name or 'merged'}",
              [f"From {len(a.report)} file(s): " + ", ".join(Path(f).name for f in a.report) +
               f"; {len(rows)} solutions; device: {', '.join(devs) or 'n/a'}; legality: {', '.join(legal) or 'n/a'}."])
        return 0

    t0 = time.time()
    skip = {r["id"] for f in a.skip_done for r in merge_rows([f]) if r["status"] != NOT_REACHED}
    sols = T.select(T.load_manifest(Path(a.manifest)), levels=[int(x) for x in a.levels.split(",") if x],
                    sources=[x for x in a.sources.split(",") if x], shard=a.shard, limit=a.limit, skip_ids=skip,
                    per_problem=a.per_problem)
    shard_tag = "" if a.shard == "0/1" else "_s{}of{}".format(*a.shard.split("/"))
    cfg = T.make_config(a.set, a.legality, a.exec_workers)
    cmd = "PYTHONPATH=. python bench/bench_testbed_gpu.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if a.static_only:
        name = a.name or f"static_cpu{shard_tag}"
        rows = T.run_static(sols)
        log = T.RowLog(od / f"testbed_{name}.jsonl")
        for r in rows:
            log.add(r)
        write(name, rows, "Test bed: extraction and static stages only (no compile, no GPU)",
              [f"Command: `{cmd}`", f"Verifier commit: {T.verifier_commit(ROOT)}; {len(sols)} solutions; "
               f"{time.time() - t0:.0f} s. `static_ok`: passed both stages (went on to compile in a real run); "
               "`static_ok_torch`: passed, with PyTorch compute found (the strict policy rejects it at "
               "the end of a real run, the partial one may pass it)."])
        return 0

    import torch

    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    tag = "h100" if "H100" in dev else "h200" if "H200" in dev else re.sub(r"\W+", "_", dev).strip("_").lower()
    name = a.name or f"{tag}{shard_tag}"
    header = [f"Command: `{cmd}`", f"Device: {dev}; torch {torch.__version__}; verifier commit: "
              f"{T.verifier_commit(ROOT)}; legality: {cfg.legality}; config: "
              + ", ".join(f"{k}={getattr(cfg, k)}" for k in ("trials", "timing_trials", "time_torch_compile", "other_shape"))]

    def finish(rows: list[dict]) -> None:
        left = sum(r["status"] == NOT_REACHED for r in rows)
        write(name, rows, f"Test bed of model-written KernelBench solutions on {dev}",
              header + [f"{len(sols)} solutions in this run; wall {time.time() - t0:.0f} s"
                        + (f"; {left} not reached." if left else ".")])

    def at_budget(rows: list[dict]) -> None:  # the budget is a promise to the caller: exit with what is done
        finish(rows)
        os._exit(0)

    rows = T.run_testbed(sols, cfg, od / f"testbed_{name}.jsonl", budget_s=a.budget_s - (time.time() - t0),
                         chunk=a.chunk, backend="cuda" if dev != "cpu" else "cpu",
                         compile_workers=a.compile_workers or None, log=lambda m: print(m, flush=True),
                         at_budget=at_budget)
    finish(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
