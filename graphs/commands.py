"""CLI for the task sources in graphs/: ``kernelmill load`` and ``kernelmill nnsmith``.

    kernelmill load KBDIR --out DIR          a KernelBench directory -> annotated tasks table
    kernelmill nnsmith --n N --seed S --out DIR [--max-nodes K] [--include-ops A,B]
                       [--exclude-ops A,B] [--dtypes float32,...] [--target-numel T]
                                             N NNSmith graphs -> checked, annotated tasks table,
                                             DIR/nnsmith_skips.json and a printed yield table

Both write through kernelmill.store (atomic, keyed by task_id), so running a command again adds
nothing new, and a task already in DIR is not annotated again.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def _csv(value: str | None) -> list[str] | None:
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    return items or None


def _annotate_and_write(tasks, out: str, cfg: dict, device_spec: str | None) -> tuple[int, list, list]:
    """Annotate the tasks not yet in OUT and write them; (rows written, annotated, failures)."""
    from kernelmill import store
    from synth.annotate import annotate_tasks, order_curriculum

    known = store.stored_ids(out, "tasks") if Path(out, "tasks").is_dir() else set()
    todo = [t for t in tasks if t.task_id not in known]
    ann_cfg = cfg.get("annotate", {})
    annotated, failures = annotate_tasks(todo, device_spec=device_spec or ann_cfg.get("device_spec", "H100-SXM"),
                                         timeout_s=ann_cfg.get("timeout_s", 60),
                                         memory_limit_gb=ann_cfg.get("memory_limit_gb", 16))
    written = store.write_records(out, "tasks", order_curriculum(annotated))
    return written, annotated, failures


def _cmd_load(args) -> int:
    from graphs.kernelbench import load_kernelbench_dir
    from synth.annotate import summary_table

    res = load_kernelbench_dir(args.kbdir, source=args.source, strict=False)
    for e in res.errors:
        print(f"  skipped {e}")
    written, annotated, failures = _annotate_and_write(res.tasks, args.out, args.cfg, args.device_spec)
    print(f"loaded {len(res.tasks)} tasks from {args.kbdir} ({len(res.errors)} files not in KernelBench format); "
          f"annotated {len(annotated)}, wrote {written} new rows to {args.out}/tasks")
    if annotated:
        print(summary_table(annotated))
    for tid, reason in failures:
        print(f"  annotation failed {tid}: {reason}")
    return 1 if res.tasks and not annotated and written == 0 and failures else 0


def _cmd_nnsmith(args) -> int:
    from graphs.nnsmith_tasks import generate_nnsmith_tasks
    from synth.annotate import summary_table

    ncfg = args.cfg.get("nnsmith", {})
    max_nodes = args.max_nodes if args.max_nodes is not None else ncfg.get("max_nodes", 5)
    target = args.target_numel if args.target_numel is not None else ncfg.get("target_numel", 262144)
    t0 = time.time()
    res = generate_nnsmith_tasks(args.n, args.seed, max_nodes=max_nodes, target_numel=target,
                                 include_ops=_csv(args.include_ops), exclude_ops=_csv(args.exclude_ops),
                                 dtypes=_csv(args.dtypes) or ncfg.get("dtypes"))
    t_gen = time.time() - t0
    written, annotated, failures = _annotate_and_write(res.tasks, args.out, args.cfg, args.device_spec)
    t_all = time.time() - t0
    os.makedirs(args.out, exist_ok=True)
    report = {"settings": res.settings, "generated": args.n, "emitted": len(res.tasks), "skips": res.skips,
              "skipped": res.skipped, "annotated": len(annotated), "annotation_failures": failures,
              "written": written, "seconds": {"generate_and_check": round(t_gen, 2), "total": round(t_all, 2)}}
    tmp = Path(args.out, ".nnsmith_skips.json.tmp")
    tmp.write_text(json.dumps(report, indent=2, sort_keys=True))
    os.replace(tmp, Path(args.out, "nnsmith_skips.json"))
    print(res.yield_table())
    print(f"annotated {len(annotated)}, wrote {written} new rows to {args.out}/tasks in {t_all:.1f} s "
          f"(generation + equivalence check {t_gen:.1f} s)")
    if annotated:
        print(summary_table(annotated))
    for s in res.skipped:
        print(f"  skipped graph {s['index']} (graph seed {s['graph_seed']}): {s['reason']}: {s['detail']}")
    for tid, reason in failures:
        print(f"  annotation failed {tid}: {reason}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("load", help="load a KernelBench directory as annotated tasks")
    p.add_argument("kbdir", metavar="KBDIR", help="a KernelBench directory (level1/, level2/, ...)")
    p.add_argument("--out", required=True, help="run directory to write the tasks table into")
    p.add_argument("--source", default="kernelbench", help="source recorded on the tasks (default kernelbench)")
    p.add_argument("--device-spec", default=None, help="device for the roofline floor (default from config)")
    p.set_defaults(handler=_cmd_load)

    p = subparsers.add_parser("nnsmith", help="generate NNSmith graphs as checked, annotated tasks")
    p.add_argument("--n", type=int, required=True, help="graphs to generate")
    p.add_argument("--seed", type=int, default=0, help="run seed (same seed, same tasks)")
    p.add_argument("--out", required=True, help="run directory to write the tasks table and skip report into")
    p.add_argument("--max-nodes", type=int, default=None, help="ops per graph (default from config)")
    p.add_argument("--include-ops", default=None, help="comma-separated nnsmith ops to use only (core.ReLU or ReLU)")
    p.add_argument("--exclude-ops", default=None, help="comma-separated nnsmith ops to leave out")
    p.add_argument("--dtypes", default=None, help="comma-separated dtypes (float32, float16, float64)")
    p.add_argument("--target-numel", type=int, default=None, help="elements per tensor to scale shapes toward")
    p.add_argument("--device-spec", default=None, help="device for the roofline floor (default from config)")
    p.set_defaults(handler=_cmd_nnsmith)
