"""The teacher's cuda candidates, one task per op family, through the cuda verifier.

    PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 python bench/bench_teacher_gpu.py [--out bench/results]

Builds the teacher's (bug-free) cuda candidate for every task of bench/lib/teacher_coverage.py (the seed tasks in
data/seed_tasks and one extra task per family the seed set lacks), verifies them all in one
``verifier.engine.verify_batch`` call with backend cuda, prints a table (family, task, status,
max error, runtime, eager and torch.compile speedups) and writes it to
``<out>/teacher_cuda_<device>.md`` with the device named. Needs only torch and this repo's
verifier/ and synth/ teacher modules (no prefect, duckdb or nnsmith), so it runs on a bare GPU box.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

def _fmt(v, spec=".3g"):
    return "-" if v is None else format(v, spec)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--only", default="", help="regex over family names")
    ap.add_argument("--exec-workers", type=int, default=2, help="execution children at a time")
    ap.add_argument("--timing-trials", type=int, default=10)
    args = ap.parse_args(argv)

    import torch

    from kernelmill.schema import Candidate, Task
    from bench.lib.teacher_coverage import family_tasks
    from synth.teacher.writer import TeacherDeclined, write_candidate
    from verifier.engine import VerifyConfig, verify_batch

    items, rows, declined = [], [], []
    for fam, name, code in family_tasks():
        if args.only and not re.search(args.only, fam):
            continue
        task = Task.from_code(code, name=name, source="teacher")
        try:
            cand_code = write_candidate(code, args.backend)
        except TeacherDeclined as e:
            declined.append((fam, str(e)))
            continue
        cand = Candidate(candidate_id=Candidate.make_id(task.task_id, args.backend, cand_code), task_id=task.task_id,
                         backend=args.backend, generator="teacher", code=cand_code)
        items.append((task, cand))
        rows.append((fam, name))
    t0 = time.time()
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    slug = re.sub(r"[^A-Za-z0-9]+", "_", device).strip("_")
    partial = Path(os.environ.get("OUT") or args.out, f"teacher_{args.backend}_{slug}.partial.tsv")
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_text("")

    def on_verdict(i, v):  # a run cut short by a time limit still leaves every verdict it reached
        with open(partial, "a") as f:
            f.write("\t".join(map(str, (rows[i][0], v.status, v.stage_reached, v.max_abs_err, v.runtime_us,
                                         v.eager_us, v.speedup_eager, v.speedup_compile,
                                         " ".join(v.feedback.split())[:300]))) + "\n")

    cfg = VerifyConfig(exec_workers=args.exec_workers, timing_trials=args.timing_trials)
    verdicts = verify_batch(items, config=cfg, on_verdict=on_verdict)
    wall = time.time() - t0
    lines = [f"# Teacher {args.backend} candidates through the verifier", "",
             f"device: {device}; torch {torch.__version__}; {len(items)} tasks, one per op family; "
             f"verify_batch wall time {wall:.0f} s; exec_workers {cfg.exec_workers}, timing_trials "
             f"{cfg.timing_trials}, correctness trials {cfg.trials}", "",
             "| family | task | status | stage | max abs err | runtime us | eager us | speedup eager | speedup compile |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (fam, name), v in zip(rows, verdicts):
        lines.append(f"| {fam} | {name} | {v.status} | {v.stage_reached} | {_fmt(v.max_abs_err)} | "
                     f"{_fmt(v.runtime_us, '.1f')} | {_fmt(v.eager_us, '.1f')} | {_fmt(v.speedup_eager, '.2f')} | "
                     f"{_fmt(v.speedup_compile, '.2f')} |")
    passed = [v for v in verdicts if v.correct]
    sp_e = [v.speedup_eager for v in passed if v.speedup_eager]
    sp_c = [v.speedup_compile for v in passed if v.speedup_compile]
    lines += ["", f"passing: {len(passed)}/{len(verdicts)} ({len(passed) / max(len(verdicts), 1):.0%})",
              f"median speedup vs eager (passing): {statistics.median(sp_e):.2f}" if sp_e else "median speedup vs eager: -",
              f"median speedup vs torch.compile (passing): {statistics.median(sp_c):.2f}" if sp_c else
              "median speedup vs torch.compile: -",
              f"declined: {declined or 'none'}"]
    fails = [(r, v) for r, v in zip(rows, verdicts) if not v.correct]
    if fails:
        lines += ["", "## Failures", ""]
        for (fam, name), v in fails:
            lines += [f"- {fam}: {v.status}: " + " ".join(v.feedback.split())[:600]]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"teacher_{args.backend}_{slug}.md").write_text(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], f"teacher_{args.backend}_{slug}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
