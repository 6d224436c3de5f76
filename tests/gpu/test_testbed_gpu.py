"""The test bed of model-written KernelBench solutions on cuda (marker gpu): one shard of the test bed through
the verify entry, its verdicts and report written, and compared with a baseline run. Fails when a solution that
passed in the baseline is rejected now (pass -> any other status), or when a solution its source judged correct
gets ``verifier_error``; the failure lists each id with the key feedback line.

Chosen by environment (the run is on the GPU box; ``ext/`` carried; each call must end inside 10 minutes):

    KERNELMILL_TESTBED=ext/testbed/manifest.jsonl     the manifest (bench/testbed_build.py); unset: not collected
    KERNELMILL_TESTBED_SHARD=0/2                      i/n: every n-th solution from i (default 0/1)
    KERNELMILL_TESTBED_SOURCES=technoabsurdist,...    sources (default all)    ..._LEVELS=1,2 (default all)
    KERNELMILL_TESTBED_PER_PROBLEM=1                  at most this many per problem (default 0: all)
    KERNELMILL_TESTBED_LIMIT=0                        the first this many of the shard (default 0: all)
    KERNELMILL_TESTBED_SKIP_DONE=a.jsonl,b.jsonl      ids with a verdict there are skipped (a second call)
    KERNELMILL_TESTBED_SET="trials=7;other_shape=false"  VerifyConfig fields; ..._LEGALITY=strict|partial
    KERNELMILL_TESTBED_BUDGET_S=540                   checked between chunks (..._CHUNK=24 solutions each)
    KERNELMILL_TESTBED_BASELINE=bench/results/testbed_h100_s0_d820c29.jsonl,bench/results/testbed_h100_s1_66c2d27.jsonl
    KERNELMILL_TESTBED_CLASSIFY=bench/results/testbed_classes.csv   classes of the disagreements in the report
    KERNELMILL_TESTBED_OUT=$OUT                       where testbed_<name>.{jsonl,md} go (default $OUT, else
                                                      pytest's tmp dir); ..._NAME (default <device>_s<i>of<n>)

With a baseline, testbed_<name>_compare.md holds the row-by-row comparison (bench/lib/testbed_report.py).
"""

import os
import re
from pathlib import Path

import pytest

from bench.lib import testbed as T
from bench.lib import testbed_report as R

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def env(key: str, default: str = "") -> str:
    return os.environ.get(f"KERNELMILL_TESTBED_{key}", default).strip()


def paths(key: str) -> list[Path]:
    return [Path(p) if Path(p).is_absolute() else ROOT / p for p in re.split(r"[,\s]+", env(key)) if p]


def test_testbed_shard_keeps_every_pass_of_the_baseline(tmp_path):
    manifest = os.environ["KERNELMILL_TESTBED"].strip()  # collected only when it is set (tests/gpu/conftest.py)
    import torch

    dev = torch.cuda.get_device_name(0)
    shard = env("SHARD", "0/1")
    skip = {r["id"] for r in R.merge_rows(paths("SKIP_DONE")) if r["status"] != R.NOT_REACHED}
    sols = T.select(T.load_manifest(Path(manifest) if Path(manifest).is_absolute() else ROOT / manifest),
                    levels=[int(x) for x in env("LEVELS").split(",") if x],
                    sources=[x for x in env("SOURCES").split(",") if x], shard=shard,
                    limit=int(env("LIMIT", "0")), skip_ids=skip, per_problem=int(env("PER_PROBLEM", "0")))
    cfg = T.make_config([s for s in env("SET").split(";") if s.strip()], env("LEGALITY"))
    tag = "h100" if "H100" in dev else "h200" if "H200" in dev else re.sub(r"\W+", "_", dev).strip("_").lower()
    name = env("NAME") or tag + ("" if shard == "0/1" else "_s{}of{}".format(*shard.split("/")))
    out = Path(env("OUT") or os.environ.get("OUT") or tmp_path)
    rows = T.run_testbed(sols, cfg, out / f"testbed_{name}.jsonl", budget_s=float(env("BUDGET_S", "540")),
                         chunk=int(env("CHUNK", "24")), log=lambda m: print(m, flush=True))
    assert sorted(r["id"] for r in rows) == sorted(s.id for s in sols)  # one row per selected solution
    left = sum(r["status"] == R.NOT_REACHED for r in rows)
    header = ["Command: `pytest -m gpu tests/gpu/test_testbed_gpu.py` with "
              + " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("KERNELMILL_TESTBED")),
              f"Device: {dev}; torch {torch.__version__}; verifier commit: {T.verifier_commit(ROOT)}; legality: "
              f"{cfg.legality}; config: " + ", ".join(f"{k}={getattr(cfg, k)}" for k in
                                                      ("trials", "timing_trials", "time_torch_compile", "other_shape")),
              f"{len(sols)} solutions in this run" + (f"; {left} not reached." if left else ".")]
    classes = R.load_classes(paths("CLASSIFY")[0]) if env("CLASSIFY") else {}
    (out / f"testbed_{name}.md").write_text(R.render(rows, classes, f"Test bed of model-written KernelBench "
                                                     f"solutions on {dev}", header))
    baseline = paths("BASELINE")
    before = R.merge_rows(baseline) if baseline else []
    if baseline:
        text = R.render_compare(R.compare(before, rows), baseline, [out / f"testbed_{name}.jsonl"])
        (out / f"testbed_{name}_compare.md").write_text(text)
        print(text)
    bad = R.regressions(before, rows)
    assert not bad, f"{len(bad)} regression(s) against {', '.join(p.name for p in baseline) or 'no baseline'}:\n" + "\n".join(bad)
