"""Rebuild the test bed of real model-written KernelBench solutions (issue 22) from fetched mirrors.

    PYTHONPATH=. python bench/testbed_build.py [--out ext/testbed] [--cudal1-gpus h100] [--mirrors /work/.mirror]

Nothing fetched is committed: this script is the record of how the set is made. It reads bare git mirrors
(made by the search tool's ``fetch github:OWNER/NAME``, laid out as ``<mirrors>/OWNER+NAME/repo``) with
``git show``, and writes under ``--out`` (``ext/`` is git-ignored):

- ``manifest.jsonl``: one row per solution: id, source, source repo + commit + path, level, problem id and
  name, the problem file and solution file (paths relative to the manifest), the source's own correctness
  judgement (``correct`` / ``incorrect``), its speedup where it gives one, the GPU it ran on, the model;
- ``problems/<source>/l<L>_p<ID>.py``: each source's own problem file (the KernelBench version it ran
  against: problem files change between versions), never another source's;
- ``solutions/<id>.py``: the solution code as published.

Sources (both publish only solutions their own harness judged correct; neither publishes its failures):

- ``cudal1``: deepreinforce-ai/CUDA-L1, ``optimized_cuda_code/<gpu>.json`` (JSON lines; MIT). Each row
  holds KernelBench's ``ref_code`` it ran against and CUDA-L1's ``custom_code`` (None where RL found
  nothing faster), judged correct by CUDA-L1's eval (eval/eval_cuda.py) and faster by ``score_default``.
  Most of its codes are PyTorch rewrites with no native kernel; only those with a ``load_inline`` and a
  ``__global__`` are kept unless ``--include-torch-only`` (the verifier rejects the rest at extraction by
  design, which says nothing about its precision).
- ``kbleaderboard``: anneouyang/KernelBenchLeaderboard ("Kernelsseum", the KernelBench authors' page of
  the best correct solutions per problem, measured on an L40S): ``docs/assets/raw_data.json`` (code,
  model, ``torch_speedup``) and ``docs/assets/problems/l<L>_p<ID>.py`` (KernelBench v0 problem files).
  The repository has no license file: the code is used for evaluation here and never redistributed.

Identical (problem, solution) pairs are kept once. Prints a table of counts by source, level and judgement.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SOURCES = {
    "cudal1": "deepreinforce-ai/CUDA-L1",
    "kbleaderboard": "anneouyang/KernelBenchLeaderboard",
}
CUDAL1_GPU = {"h100": "H100 (CUDA-L1 'h100.json')", "a100": "A100", "l40": "L40", "h20": "H20", "3090": "RTX 3090"}


class MissingMirror(Exception):
    pass


def mirror_dir(mirrors: Path, repo: str) -> Path:
    d = mirrors / repo.replace("/", "+") / "repo"
    if not (d / "HEAD").exists():
        raise MissingMirror(f"no mirror of {repo} at {d}: run the search tool's `fetch github:{repo}` first")
    return d


def git(gd: Path, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={gd}", *args], check=True, capture_output=True, text=True).stdout


def git_bytes(gd: Path, rev_path: str) -> str:
    return subprocess.run(["git", f"--git-dir={gd}", "show", rev_path], check=True,
                          capture_output=True).stdout.decode("utf-8", "replace")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def has_native_kernel(code: str) -> bool:
    return "load_inline" in code and "__global__" in code


def kb_names(lb_gd: Path, commit: str) -> dict[tuple[int, int], str]:
    """(level, problem id) -> KernelBench problem name, from the leaderboard's data.json keys
    ("Level 1: 1_Square_matrix_multiplication_")."""
    names = {}
    for key in json.loads(git_bytes(lb_gd, f"{commit}:docs/assets/data.json")):
        m = re.match(r"Level (\d+): (\d+)_(.*)", key)
        if m:
            names[(int(m.group(1)), int(m.group(2)))] = f"{m.group(2)}_{m.group(3)}"
    return names


def rows_cudal1(gd: Path, commit: str, gpus: list[str], names: dict, include_torch_only: bool, skipped: collections.Counter):
    for gpu in gpus:
        path = f"optimized_cuda_code/{gpu}.json"
        for line in git_bytes(gd, f"{commit}:{path}").splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            level, pid = int(r["level_id"]), int(r["task_id"])
            code = r.get("custom_code")
            if not code:
                skipped["cudal1: custom_code None (no faster code found)"] += 1
                continue
            if not has_native_kernel(code) and not include_torch_only:
                skipped["cudal1: no load_inline + __global__ (PyTorch rewrite)"] += 1
                continue
            score = r.get("score_default")
            yield {
                "source": "cudal1", "repo": SOURCES["cudal1"], "commit": commit, "path": path,
                "path_detail": f"line with level_id={level} task_id={pid}", "level": level, "problem_id": pid,
                "problem_name": names.get((level, pid), f"{pid}"), "problem_code": r["ref_code"],
                "solution_code": code, "source_judgement": "correct",
                "source_speedup": float(score) if score not in (None, "") else None,
                "source_gpu": CUDAL1_GPU.get(gpu, gpu), "model": "CUDA-L1",
                "has_native_kernel": has_native_kernel(code),
            }


def rows_leaderboard(gd: Path, commit: str, names: dict, skipped: collections.Counter):
    raw = json.loads(git_bytes(gd, f"{commit}:docs/assets/raw_data.json"))
    problems: dict[str, str] = {}
    for r in raw:
        # raw_data.json numbers problems from 0 within a level; the problem files (and KernelBench) from 1: the
        # solution with problem_id 16 solves l1_p17.py (17_Matmul_with_transposed_B). Checked by hand on the
        # kernels' names (id 25 is a GELU kernel, file 26 is GELU) after a GPU run paired them off by one.
        level, pid = int(r["level"]), int(r["problem_id"]) + 1
        ppath = f"docs/assets/problems/l{level}_p{pid}.py"
        if ppath not in problems:
            try:
                problems[ppath] = git_bytes(gd, f"{commit}:{ppath}")
            except subprocess.CalledProcessError:
                problems[ppath] = ""
        if not problems[ppath]:
            skipped["kbleaderboard: problem file missing"] += 1
            continue
        code = r["code"]
        if not has_native_kernel(code):
            skipped["kbleaderboard: no load_inline + __global__"] += 1
        sp = r.get("torch_speedup")
        yield {
            "source": "kbleaderboard", "repo": SOURCES["kbleaderboard"], "commit": commit,
            "path": f"docs/assets/solutions/{r['file']}.py", "path_detail": "docs/assets/raw_data.json",
            "problem_path": ppath, "level": level, "problem_id": pid,
            "problem_name": names.get((level, pid), f"{pid}"), "problem_code": problems[ppath],
            "solution_code": code, "source_judgement": "correct",
            "source_speedup": float(sp) if sp not in (None, "") else None,
            "source_gpu": "L40S", "model": r.get("display_name") or r.get("model") or "",
            "has_native_kernel": has_native_kernel(code),
        }


def build(out: Path, mirrors: Path, cudal1_gpus: list[str], include_torch_only: bool,
          sources: list[str]) -> list[dict]:
    """Write the test bed under ``out`` (replacing what was there) and return its manifest rows."""
    skipped: collections.Counter = collections.Counter()
    lb_gd = mirror_dir(mirrors, SOURCES["kbleaderboard"])  # also the problem names for CUDA-L1
    lb_commit = git(lb_gd, "rev-parse", "HEAD").strip()
    names = kb_names(lb_gd, lb_commit)
    raw_rows = []
    if "cudal1" in sources:
        gd = mirror_dir(mirrors, SOURCES["cudal1"])
        raw_rows += rows_cudal1(gd, git(gd, "rev-parse", "HEAD").strip(), cudal1_gpus, names,
                                include_torch_only, skipped)
    if "kbleaderboard" in sources:
        raw_rows += rows_leaderboard(lb_gd, lb_commit, names, skipped)
    if out.exists():
        for sub in ("problems", "solutions"):
            shutil.rmtree(out / sub, ignore_errors=True)
    (out / "solutions").mkdir(parents=True, exist_ok=True)
    seen, rows = set(), []
    for r in raw_rows:
        key = (sha(r["problem_code"]), sha(r["solution_code"]))
        if key in seen:
            skipped[f"{r['source']}: duplicate (problem, solution)"] += 1
            continue
        seen.add(key)
        model = re.sub(r"[^A-Za-z0-9.]+", "-", r["model"]).strip("-").lower()
        r["id"] = f"{r['source']}-l{r['level']}-p{r['problem_id']}-{model}-{key[1][:8]}"
        pdir = out / "problems" / r["source"]
        pdir.mkdir(parents=True, exist_ok=True)
        pname = f"l{r['level']}_p{r['problem_id']}_{key[0][:8]}.py"  # hash: CUDA-L1 GPUs may differ in ref_code
        (pdir / pname).write_text(r.pop("problem_code"))
        (out / "solutions" / f"{r['id']}.py").write_text(r.pop("solution_code"))
        r["problem_file"] = f"problems/{r['source']}/{pname}"
        r["solution_file"] = f"solutions/{r['id']}.py"
        r["problem_sha256"], r["solution_sha256"] = key
        rows.append(r)
    rows.sort(key=lambda r: (r["source"], r["level"], r["problem_id"], r["id"]))
    with open(out / "manifest.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    (out / "skipped.json").write_text(json.dumps(dict(skipped), indent=1, sort_keys=True))
    return rows, skipped


def count_table(rows: list[dict], skipped: collections.Counter, out: Path) -> str:
    c = collections.Counter((r["source"], r["level"], r["source_judgement"]) for r in rows)
    lines = ["| source | level | source judgement | solutions | distinct problems |", "| --- | --- | --- | --- | --- |"]
    for (s, lv, j), n in sorted(c.items()):
        probs = {r["problem_id"] for r in rows if (r["source"], r["level"], r["source_judgement"]) == (s, lv, j)}
        lines.append(f"| {s} | {lv} | {j} | {n} | {len(probs)} |")
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    lines += [f"| **all** | | | **{len(rows)}** | {len({(r['source'], r['level'], r['problem_id']) for r in rows})} |",
              "", f"written to {out} ({size / 2**20:.1f} MiB)", "", "left out:"]
    lines += [f"- {k}: {n}" for k, n in sorted(skipped.items())] or ["- nothing"]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "ext" / "testbed"))
    ap.add_argument("--mirrors", default="/work/.mirror")
    ap.add_argument("--sources", default="cudal1,kbleaderboard")
    ap.add_argument("--cudal1-gpus", default="h100", help=f"comma list of {','.join(CUDAL1_GPU)}")
    ap.add_argument("--include-torch-only", action="store_true",
                    help="keep CUDA-L1 codes with no native kernel (the verifier rejects them at extraction)")
    a = ap.parse_args(argv)
    try:
        rows, skipped = build(Path(a.out), Path(a.mirrors), a.cudal1_gpus.split(","), a.include_torch_only,
                              a.sources.split(","))
    except MissingMirror as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(count_table(rows, skipped, Path(a.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
