"""The readers of the test bed's sources (issue 22): real model-written KernelBench solutions read from fetched
bare git mirrors, and the writer of the test bed (``build``: manifest.jsonl, problems/, solutions/).
bench/testbed_build.py is its command line; bench/lib/testbed.py reads what it writes.

Nothing fetched is committed: this module is the record of how the set is made. It reads bare git mirrors
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

- ``technoabsurdist``: technoabsurdist/KernelBench (a KernelBench fork; MIT), ``runs/<run>/``: KernelBench's own
  ``generate_samples`` + ``eval_from_generations`` runs on an A100 of gemini-2.5-pro (levels 1-3), Qwen3-Coder-480B
  (levels 1-3) and claude-opus-4.1 (levels 2-3, ``detailed_results.json``), against KernelBench v0.1 (the fork's
  ``KernelBench/level<L>/``, identical to upstream v0.1).
- ``yenhaohuang``: yenhao-huang/KernelBench (a KernelBench fork; MIT), on an RTX 4090: ``runs/ralph_*/results.jsonl``
  (gpt-5.5 through codex, gemma-4-26B-A4B, Qwen3.6-35B-A3B; one sample per problem, judged by KernelBench's eval
  after its static checker) and ``runs/openrouter_deepseek_v4_pro_leaderboard_l<L>/`` (deepseek-v4-pro), against
  the fork's ``KernelBench/level<L>/`` (upstream after v0.1).

The two forks publish both verdicts of their harness: ``correct`` and ``incorrect`` (output mismatch, build
error, illegal address, KernelBench's static checker). A failure that says nothing about the code (no kernel
image for the GPU, out of memory, the evaluator returned nothing, a timeout, no kernel file) is left out, and a
run folder's kernel without a verdict too; ``source_note`` keeps the harness's reason for each ``incorrect``.

Identical (problem, solution) pairs are kept once. Prints a table of counts by source, level and judgement.
"""


from __future__ import annotations

import collections
import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

SOURCES = {
    "cudal1": "deepreinforce-ai/CUDA-L1",
    "kbleaderboard": "anneouyang/KernelBenchLeaderboard",
    "technoabsurdist": "technoabsurdist/KernelBench",
    "yenhaohuang": "yenhao-huang/KernelBench",
}
# KernelBench run folders of the two forks: (folder, layout, model name where the folder does not say it well).
# "eval_results": runs/<run>/eval_results.json + level_<L>_problem_<P>_sample_<S>_kernel.py (KernelBench's scripts);
# "detailed": runs/<run>/detailed_results.json + problem_<P>_kernel.py; "ralph": runs/<run>/results.jsonl.
FORK_RUNS = {
    "technoabsurdist": [
        ("gemini_level1_run", "eval_results", ""), ("gemini_level2_run", "eval_results", ""),
        ("gemini_level3_run", "eval_results", ""), ("qwencoder_level1_run", "eval_results", ""),
        ("qwen3_level1_run", "eval_results", ""), ("qwencoder_level2_run", "eval_results", ""),
        ("qwencoder_level3_run", "eval_results", ""), ("opus4_level2_20250903_065424", "detailed", ""),
        ("opus4_level3_20250903_035524", "detailed", ""),
    ],
    "yenhaohuang": [
        ("ralph_codex_cuda_all", "ralph", "gpt-5.5"), ("ralph_gemma4_cuda_all", "ralph", "gemma-4-26B-A4B"),
        # the folder's config names the model /workspace/llm_model; the run is the Qwen3.6 one (its gpu0 twin names it)
        ("ralph_qwen36_cuda_all_gpu1_server_isolated", "ralph", "Qwen3.6-35B-A3B"),
        ("openrouter_deepseek_v4_pro_leaderboard_l1", "eval_results", "deepseek-v4-pro"),
        ("openrouter_deepseek_v4_pro_leaderboard_l2", "eval_results", "deepseek-v4-pro"),
        ("openrouter_deepseek_v4_pro_leaderboard_l3", "eval_results", "deepseek-v4-pro"),
    ],
}
FORK_LEVELS = (1, 2, 3)
# a harness failure that says nothing about the code: the verdict is left out, not counted as "incorrect"
HARNESS_FAULT = re.compile(r"(?i)no kernel image is available|out of memory|evaluator returned None|timed out|"
                           r"Kernel not found for problem")
CUDAL1_GPU = {"h100": "H100 (CUDA-L1 'h100.json')", "a100": "A100", "l40": "L40", "h20": "H20", "3090": "RTX 3090"}


class MissingMirror(Exception):
    pass


class UnknownSource(Exception):
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
        if not has_native_kernel(code):  # kept: the verifier's extraction rejects it (see testbed_sources.md)
            skipped["kbleaderboard: kept, though no load_inline + __global__"] += 1
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


# ----------------------------------------------------------------------------- KernelBench forks' run folders

def read_blob(gd: Path, commit: str, path: str) -> str:
    """A file at ``commit``, following a symbolic link inside the repository (run folders link kernels)."""
    for _ in range(4):
        entry = git(gd, "ls-tree", commit, "--", path).split()
        if not entry:
            raise FileNotFoundError(f"{path} not at {commit[:12]}")
        if entry[0] != "120000":
            return git_bytes(gd, f"{commit}:{path}")
        target = git_bytes(gd, f"{commit}:{path}").strip()
        path = str(Path(path).parent / target).replace("\\", "/")
        parts: list[str] = []
        for part in path.split("/"):
            parts = parts[:-1] if part == ".." else parts + [part]
        path = "/".join(parts)
    raise FileNotFoundError(f"{path}: symbolic links too deep at {commit[:12]}")


def kb_problem_files(gd: Path, commit: str) -> dict[tuple[int, int], str]:
    """(level, problem id) -> path of the fork's own problem file, ``KernelBench/level<L>/<id>_<Name>.py``."""
    out = {}
    for path in git(gd, "ls-tree", "-r", "--name-only", commit, "--", "KernelBench").splitlines():
        m = re.fullmatch(r"KernelBench/level(\d+)/(\d+)_[^/]*\.py", path)
        if m:
            out[(int(m.group(1)), int(m.group(2)))] = path
    return out


def kb_judgement(result: dict | None) -> tuple[str | None, str]:
    """KernelBench's eval result -> ("correct" | "incorrect" | None, the harness's reason). None: no verdict on
    the code (no result, or a harness failure such as no kernel image for the GPU or out of memory)."""
    if not result:
        return None, "no eval result"
    if result.get("correctness") is True:
        return "correct", ""
    meta = result.get("metadata") or {}
    reason = next((str(meta[k]) for k in ("compilation_error", "runtime_error", "correctness_issue", "cuda_error",
                                          "error", "other_error", "excessive_speedup") if k in meta), str(meta))
    if not result.get("compiled", True) and "compilation_error" not in meta:
        reason = "did not compile: " + reason
    if HARNESS_FAULT.search(reason):
        return None, reason
    return "incorrect", reason.strip()[:300]


def _run_config_model(gd: Path, commit: str, run_dir: str) -> str:
    try:
        text = git_bytes(gd, f"{commit}:{run_dir}/generation_config.yaml")
    except subprocess.CalledProcessError:
        return ""
    m = re.search(r"^model_name:\s*(.+)$", text, re.M)
    return m.group(1).strip().split("/")[-1] if m else ""


def fork_run_items(gd: Path, commit: str, run: str, layout: str):
    """(level, problem id, kernel path, eval result dict or None, model, gpu) for each kernel of one run folder."""
    d = f"runs/{run}"
    if layout == "ralph":
        for line in git_bytes(gd, f"{commit}:{d}/results.jsonl").splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            ev = r.get("eval_result")
            if r.get("status") == "static_failed":  # KernelBench's static checker rejected it: a verdict on the code
                ev = {"correctness": False,
                      "metadata": {"error": "KernelBench static check: " + "; ".join(r.get("static_errors") or [])}}
            elif r.get("status") == "evaluation_error":
                iso = r.get("isolated_eval") or {}
                ev = {"correctness": False, "metadata": {"error": iso.get("error") or r.get("error") or "evaluation error"}}
            gpu = ((ev or {}).get("metadata") or {}).get("hardware") or "RTX 4090 (run config: Ada)"
            yield int(r["level"]), int(r["problem_id"]), r.get("generated_kernel_path"), ev, r.get("model_name", ""), gpu
        return
    if layout == "detailed":
        det = json.loads(git_bytes(gd, f"{commit}:{d}/detailed_results.json"))
        level, model = int(det["run_info"]["level"]), det["run_info"].get("model", "")
        for r in det["results"]:
            ev = r.get("eval_result")
            gpu = ((ev or {}).get("metadata") or {}).get("hardware") or ""
            yield level, int(r["problem_id"]), f"{d}/problem_{r['problem_id']}_kernel.py", ev, model, gpu
        return
    try:
        results = json.loads(git_bytes(gd, f"{commit}:{d}/eval_results.json"))
    except subprocess.CalledProcessError:
        results = {}
    model = _run_config_model(gd, commit, d)
    for path in git(gd, "ls-tree", "--name-only", commit, f"{d}/").splitlines():
        m = re.fullmatch(rf"{re.escape(d)}/level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py", path)
        if not m:
            continue
        ev = results.get(m.group(2))
        if isinstance(ev, list):  # newer KernelBench: a list of samples
            ev = next((e for e in ev if int(e.get("sample_id", 0)) == int(m.group(3))), None)
        elif ev is not None and int(ev.get("sample_id", 0)) != int(m.group(3)):
            ev = None
        gpu = ((ev or {}).get("metadata") or {}).get("hardware") or ""
        yield int(m.group(1)), int(m.group(2)), path, ev, model, gpu


def rows_fork(source: str, gd: Path, commit: str, include_torch_only: bool, skipped: collections.Counter):
    """Rows of one KernelBench fork's run folders (FORK_RUNS), each with the fork's own problem file."""
    problems = kb_problem_files(gd, commit)
    texts: dict[str, str] = {}
    for run, layout, model_name in FORK_RUNS[source]:
        if not git(gd, "ls-tree", commit, f"runs/{run}").strip():
            skipped[f"{source}: run folder runs/{run} not in the mirror"] += 1
            continue
        for level, pid, kpath, ev, model, gpu in fork_run_items(gd, commit, run, layout):
            if level not in FORK_LEVELS:
                continue
            ppath = problems.get((level, pid))
            if not ppath:
                skipped[f"{source}: problem file missing"] += 1
                continue
            judgement, note = kb_judgement(ev)
            if judgement is None:
                skipped[f"{source}: no verdict on the code ({'harness fault' if ev else 'no eval result'})"] += 1
                continue
            try:
                code = read_blob(gd, commit, kpath) if kpath else ""
            except (FileNotFoundError, subprocess.CalledProcessError):
                code = ""
            if not code.strip():
                skipped[f"{source}: kernel file missing"] += 1
                continue
            if not has_native_kernel(code) and not include_torch_only:
                skipped[f"{source}: no load_inline + __global__ ({judgement})"] += 1
                continue
            if ppath not in texts:
                texts[ppath] = git_bytes(gd, f"{commit}:{ppath}")
            yield {
                "source": source, "repo": SOURCES[source], "commit": commit, "path": kpath,
                "path_detail": f"runs/{run} ({layout})", "problem_path": ppath, "level": level, "problem_id": pid,
                "problem_name": Path(ppath).stem, "problem_code": texts[ppath], "solution_code": code,
                "source_judgement": judgement, "source_note": note, "source_speedup": None,
                "source_gpu": gpu, "model": model_name or model or run,
                "has_native_kernel": has_native_kernel(code),
            }


def build(out: Path, mirrors: Path, cudal1_gpus: list[str], include_torch_only: bool,
          sources: list[str]) -> tuple[list[dict], collections.Counter]:
    """Write the test bed under ``out`` (replacing what was there) and return its manifest rows."""
    unknown = sorted(set(sources) - set(SOURCES))
    if unknown:
        raise UnknownSource(f"--sources: unknown source(s) {', '.join(unknown)}; known: {', '.join(SOURCES)}")
    skipped: collections.Counter = collections.Counter()
    raw_rows: list[dict] = []
    if "cudal1" in sources or "kbleaderboard" in sources:
        lb_gd = mirror_dir(mirrors, SOURCES["kbleaderboard"])  # also the problem names for CUDA-L1
        lb_commit = git(lb_gd, "rev-parse", "HEAD").strip()
        names = kb_names(lb_gd, lb_commit)
    if "cudal1" in sources:
        gd = mirror_dir(mirrors, SOURCES["cudal1"])
        raw_rows += rows_cudal1(gd, git(gd, "rev-parse", "HEAD").strip(), cudal1_gpus, names,
                                include_torch_only, skipped)
    if "kbleaderboard" in sources:
        raw_rows += rows_leaderboard(lb_gd, lb_commit, names, skipped)
    for src in FORK_RUNS:
        if src in sources:
            gd = mirror_dir(mirrors, SOURCES[src])
            raw_rows += rows_fork(src, gd, git(gd, "rev-parse", "HEAD").strip(), include_torch_only, skipped)
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
