"""What one binding object per declared signature set saves: the mixed batch's candidates built through the
verifier's real compile step (``python -m verifier.build.proc compile``: the object cache, the precompiled header,
the first build variant each), once with binding files compiled as written (``[verify] canonical_binding = false``) and
once in their canonical form (verifier/build/binding.py), each arm with a fresh object cache. On a GPU box:

    PYTHONPATH=. TORCH_CUDA_ARCH_LIST=9.0 python3 bench/bench_binding_share.py --per-task 12 --jobs 16

On a machine without a GPU (torch's CPU build, nvcc present) add ``--cuda-home /usr/local/cuda``: the link then
runs against empty stand-ins for libtorch_cuda and libc10_cuda (nothing is loaded; the compile step's work is the
same). Prints a markdown table (and writes bench/results/binding_share_<device>.md)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import device_name, emit  # noqa: E402
from bench.lib.mixed_batch import mixed_batch  # noqa: E402
from verifier.build import objcache, proc  # noqa: E402
from verifier.build.pch import ensure_pch  # noqa: E402
from verifier.build.steps import write_variant  # noqa: E402
from verifier.common.spec import canonical_spec, spec_key  # noqa: E402
from verifier.build.variants import build_variants  # noqa: E402
from verifier.common.config import VerifyConfig  # noqa: E402
from verifier.front.static import StaticScanError, scan  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def stub_libraries(where: Path) -> Path:
    """Empty shared objects named like torch's CUDA libraries, for a link on a machine whose torch has none."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "empty.c").write_text("int km_empty_stub;\n")
    for lib in ("torch_cuda", "c10_cuda"):
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(where / f"lib{lib}.so"), str(where / "empty.c")],
                       check=True)
    return where


def prepare(items, work: Path, stubs: Path | None) -> list[tuple[str, dict]]:
    """Each candidate's first build variant, written as the verifier writes it (the sources and build.ninja) into
    one directory per arm (``as-written``, ``canonical``): a build's commands name its own directory."""
    out = []
    for _task, cand in items:
        found = [e.args for e in scan(cand.code, "cuda").extensions if e.resolved]
        if not found:
            continue
        spec = canonical_spec(found[0])
        label, kwargs = build_variants(spec)[0]
        if stubs is not None:
            kwargs = dict(kwargs, extra_ldflags=list(kwargs.get("extra_ldflags") or []) + [f"-L{stubs}"])
        dirs = {}
        for arm in ("as-written", "canonical"):
            dirs[arm] = work / cand.candidate_id / f"{label}-{arm}"
            write_variant(spec_key(spec), dirs[arm], kwargs, ensure_pch(spec, VerifyConfig().pch_root()))
        out.append((cand.candidate_id, dirs))
    return out


def compile_arm(built: list[tuple[str, dict]], canonical: bool, jobs: int, work: Path) -> dict:
    """Every candidate's compile step with a fresh object cache; the steps' own CPU seconds (compilers included)."""
    cache = work / ("objects-canonical" if canonical else "objects-as-written")
    env = dict(os.environ, MAX_JOBS="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    step_args = ["--objects", str(cache)] + ([] if canonical else ["--as-written"])

    def one(item):
        cid, dirs = item
        d = dirs["canonical" if canonical else "as-written"]
        r = subprocess.run([sys.executable, "-m", "verifier.build.proc", "compile", str(d), *step_args], env=env,
                           capture_output=True, text=True)
        rep = json.loads((d / proc.COMPILE_REPORT).read_text()) if (d / proc.COMPILE_REPORT).exists() else {}
        return {"candidate": cid, "ok": r.returncode == 0 and rep.get("ok", False), "cpu_s": rep.get("cpu_s", 0.0),
                "reused": rep.get("objects_reused", 0), "canonical": "[binding]" in r.stdout
                or "canonical form was compiled before" in r.stdout, "tail": r.stdout[-600:]}

    t0 = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        rows = list(pool.map(one, built))
    return {"rows": rows, "wall_s": time.perf_counter() - t0,
            "binding_objects": len(list(cache.glob("*.o"))) - len({r["candidate"] for r in rows}) if rows else 0}


def testbed_share(manifest: Path, work: Path) -> str:
    """How often model-written solutions' binding files have a canonical form, and how many distinct binding
    objects they need as written and in that form (per problem: one RL group's answers, one task)."""
    from verifier.build.binding import canonical_binding, names_clear_of

    (work / "idents").mkdir(parents=True, exist_ok=True)

    written, canon, per_problem = set(), set(), {}
    n = have_cuda = has_form = 0
    for line in manifest.read_text().splitlines():
        rec = json.loads(line)
        code = (manifest.parent / rec["solution_file"]).read_text(errors="replace")
        n += 1
        try:
            found = [e.args for e in scan(code, "cuda").extensions if e.resolved]
        except (SyntaxError, StaticScanError):  # a solution that is not Python (the verifier stops it at extract)
            continue
        if not found or not found[0].get("cuda_sources"):
            continue
        spec = canonical_spec(found[0])
        d = work / "testbed" / rec["id"]
        try:
            write_variant(spec_key(spec), d, build_variants(spec)[-1][1], None)
        except Exception:  # noqa: BLE001 - a spec load_inline refuses before its build is not counted
            continue
        have_cuda += 1
        text = (d / "main.cpp").read_text(errors="replace")
        c = canonical_binding(text)
        if c is not None:  # as the compile step decides: no name the included headers use
            idents = objcache.header_identifiers(d, work / "idents", objcache._command(d, "main.o"), d / "main.cpp",
                                                 c.includes)
            c = c if idents and names_clear_of(c, idents) else None
        has_form += c is not None
        written.add(text)
        canon.add(c.text if c else text)
        group = per_problem.setdefault((rec["repo"], rec["level"], rec["problem_id"]), [set(), set()])
        group[0].add(text)
        group[1].add(c.text if c else text)
    multi = {k: v for k, v in per_problem.items() if sum(1 for _ in v[0]) > 0}
    return ("| solutions | with a resolved CUDA load_inline | binding file has a canonical form | distinct binding "
            "files as written | distinct in canonical form | problems | binding objects per problem, as written -> "
            "canonical (sum) |\n|---|---|---|---|---|---|---|\n"
            f"| {n} | {have_cuda} | {has_form} ({has_form / max(have_cuda, 1):.0%}) | {len(written)} | {len(canon)} | "
            f"{len(multi)} | {sum(len(v[0]) for v in multi.values())} -> {sum(len(v[1]) for v in multi.values())} |\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-task", type=int, default=12)
    ap.add_argument("--tasks", default="", help="comma-separated task names of bench/lib/mixed_batch.py (default: all)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--cuda-home", default="", help="where nvcc lives, for a CPU build of torch (cpp_extension's "
                    "CUDA_HOME is None there); the link runs against empty stand-ins for torch's CUDA libraries")
    ap.add_argument("--testbed", default="", help="a test bed manifest (bench/testbed_build.py): count how many "
                    "model-written binding files have a canonical form, instead of compiling the mixed batch")
    a = ap.parse_args()
    stubs = None
    work = Path(tempfile.mkdtemp(prefix="km-binding-share-"))
    if a.cuda_home:
        import torch.utils.cpp_extension as ce
        ce.CUDA_HOME = a.cuda_home
        stubs = stub_libraries(work / "stubs")
    if a.testbed:
        table = testbed_share(Path(a.testbed), work)
        emit(f"# Binding files of model-written solutions with a canonical form\n\nCommand: `PYTHONPATH=. "
             f"TORCH_CUDA_ARCH_LIST=9.0 python3 bench/bench_binding_share.py --testbed {a.testbed}"
             f"{' --cuda-home ' + a.cuda_home if a.cuda_home else ''}`: each solution's unchanged build files as the "
             "verifier writes them (its first resolved CUDA load_inline); \"has a canonical form\": verifier/build/binding.py "
             "gives one and no function name is an identifier of the headers it includes (as the compile step "
             "decides).\n\n" + table, a.out,
             "binding_share_testbed.md")
        return
    items = [it for it in mixed_batch(a.per_task)
             if not a.tasks or it[1].candidate_id.rsplit("-", 1)[0] in a.tasks.split(",")]
    built = prepare(items, work, stubs)
    arms = {}
    for canonical in (False, True):
        arms[canonical] = res = compile_arm(built, canonical, a.jobs, work)
        bad = [r for r in res["rows"] if not r["ok"]]
        for r in bad[:3]:
            print(r["candidate"], "FAILED\n", r["tail"], flush=True)
        print(json.dumps({"canonical": canonical, "wall_s": round(res["wall_s"], 1), "failed": len(bad)}), flush=True)
    lines = ["| binding files | candidates | built | canonical | binding objects compiled | compile CPU s (all) | "
             "per candidate | wall s (jobs) |", "|---|---|---|---|---|---|---|---|"]
    for canonical, res in arms.items():
        rows = res["rows"]
        cpu = sum(r["cpu_s"] for r in rows)
        lines.append(f"| {'canonical form' if canonical else 'as written'} | {len(rows)} | "
                     f"{sum(r['ok'] for r in rows)} | {sum(r['canonical'] for r in rows)} | {res['binding_objects']} | "
                     f"{cpu:.1f} | {cpu / max(len(rows), 1):.2f} | {res['wall_s']:.1f} ({a.jobs}) |")
    text = (f"# One binding object per declared signature set, on {device_name()}\n\nCommand: `PYTHONPATH=. "
            f"python3 bench/bench_binding_share.py --per-task {a.per_task} --jobs {a.jobs}"
            f"{' --tasks ' + a.tasks if a.tasks else ''}{' --cuda-home ' + a.cuda_home if a.cuda_home else ''}`: "
            "each candidate's first build variant through the verifier's compile step (`python -m verifier.build.proc "
            "compile`), the precompiled header on, a fresh object cache per arm. \"compile CPU s\": the steps' own "
            "CPU seconds with their compilers (getrusage).\n\n" + "\n".join(lines) + "\n")
    emit(text, a.out, f"binding_share_{device_name().replace(' ', '_')}.md")


if __name__ == "__main__":
    main()
