"""Stage 3 build variants: which sources take the fast paths, that the unchanged build always comes last; the
build steps (verifier/build/proc.py) run without torch, a module that does not
import fails its build, and the candidate code the import check runs cannot write the object cache or the PCH.
The precompiled header itself (made, used, never waited for): tests/test_verifier_pch.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from verifier.build.pch import ensure_pch
from verifier.build.pool import build_blocking, objects_root
from verifier.build.result import first_errors
from verifier.build.steps import TORCH_FIRST, library_dirs
from verifier.common.spec import canonical_spec, spec_key
from verifier.build.variants import (
    FALLBACK_OFF,
    build_variants,
    failed_targets,
    variant_failure_is_final,
)
from verifier.common.backends import own_kernel_renames, rename_kernels
from verifier.common.config import VerifyConfig

ROOT = Path(__file__).resolve().parent.parent
HOST = VerifyConfig().host()  # the suite's host settings (the run's pch_dir: conftest)

TORCH_FREE_CU = "__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\nvoid launch(float* y) { k<<<1, 32>>>(y); }"
TORCH_CU = "#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { return x; }"


def _spec(cuda, cpp="void launch(float* y);"):
    return canonical_spec({"cpp_sources": cpp, "cuda_sources": cuda, "functions": ["launch"]})


def test_torch_free_cuda_source_builds_bare_first():
    v = build_variants(_spec(TORCH_FREE_CU))
    assert [label for label, _ in v] == ["bare", "full"]
    bare = v[0][1]
    assert bare["no_implicit_headers"] is True
    assert bare["cpp_sources"][0] == "#include <torch/extension.h>"
    built = rename_kernels(TORCH_FREE_CU, own_kernel_renames(_spec(TORCH_FREE_CU)))  # kernels as kmown_<name>
    assert built != TORCH_FREE_CU and built.count("\n") == TORCH_FREE_CU.count("\n")
    assert "#include <cuda.h>" in bare["cuda_sources"][0] and built in bare["cuda_sources"]
    # load_inline puts three header lines before the full build's CUDA source: the bare build has three too,
    # so compiler messages name the same line numbers
    assert bare["cuda_sources"][0].count("\n") == 2 and "torch/types.h" not in bare["cuda_sources"][0].replace(
        "torch/types.h not included", "")
    assert v[1][1]["cuda_sources"] == [built] and "no_implicit_headers" not in v[1][1]


def test_bare_variant_declares_the_standard_names_a_torch_free_source_uses(tmp_path):
    """load_inline's torch/types.h declares std::runtime_error, std::string, printf...: a torch-free source using them
    compiles in the full build, so its bare variant includes their headers (only those used) and keeps the full
    build's line numbers in compiler messages. Real nvcc compiles of the bare CUDA file."""
    import re
    import shutil

    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.fail("nvcc not found: the bare variant is compiled here")
    throws = ("__global__ void k(float* y) { y[0] = fminf(1.f, FLT_MAX) + (INT_MAX > 0) + (float)M_PI * 0.f; }\n"
              "void launch(float* y) { k<<<1, 1>>>(y); cudaError_t e = cudaGetLastError();\n"
              "    if (e != cudaSuccess) throw std::runtime_error(std::string(\"k: \") + cudaGetErrorString(e)); }\n")
    broken = throws.replace("y[0] = fminf(1.f, FLT_MAX) + (INT_MAX > 0) + (float)M_PI * 0.f;", "y[0] = undeclared_w;")
    lines = {}
    for name, src in (("throws", throws), ("broken", broken), ("plain", TORCH_FREE_CU)):
        bare = dict(build_variants(_spec(src)))["bare"]
        cu = tmp_path / f"{name}.cu"
        cu.write_text("\n".join(bare["cuda_sources"]))  # as load_inline joins them
        r = subprocess.run([nvcc, "-c", "-std=c++17", "-arch=sm_90", str(cu), "-o", str(tmp_path / f"{name}.o")],
                           capture_output=True, text=True)
        lines[name] = (r.returncode, r.stdout + r.stderr, bare["cuda_sources"][0])
    assert lines["throws"][0] == 0, lines["throws"][1]
    for header in ("stdexcept", "string", "cfloat", "climits", "cmath"):  # FLT_MAX, INT_MAX, M_PI: torch declares them
        assert f"<{header}>" in lines["throws"][2], header
    assert "<stdexcept>" not in lines["plain"][2]  # nothing it does not use
    # the undeclared name is on the source's line 1: line 4 of the full build's file, and of the bare one's
    assert lines["broken"][0] != 0 and re.search(r"broken\.cu\(4\): error", lines["broken"][1]), lines["broken"][1]


def test_without_no_implicit_headers_there_is_no_bare_variant():
    assert [label for label, _ in build_variants(_spec(TORCH_FREE_CU), bare_ok=False)] == ["full"]


@pytest.mark.parametrize("snippet", ["at::Tensor t;", "c10::Half h;", "TORCH_CHECK(true);", "C10_CUDA_KERNEL_LAUNCH_CHECK();",
                                     "#include <ATen/cuda/CUDAContext.h>", "PYBIND11_MODULE(m, x) {}"])
def test_any_torch_name_keeps_the_implicit_headers(snippet):
    labels = [label for label, _ in build_variants(_spec(TORCH_FREE_CU + "\n" + snippet))]
    assert "bare" not in labels and labels[-1] == "full"


def test_extension_h_include_is_dropped_in_the_slim_and_light_variants_only():
    v = build_variants(_spec(TORCH_CU))
    # a failed slim build goes straight to the full one (light would fail as slim did: the fault is the source's)
    assert [label for label, _ in v] == ["slim", "full"]
    assert "torch/extension.h" not in v[0][1]["cuda_sources"][0] and "torch::Tensor f" in v[0][1]["cuda_sources"][0]
    assert v[1][1]["cuda_sources"] == [TORCH_CU]
    # a source slim refuses (torch::tensor is not exact under the slim prelude) is built light first
    refused = TORCH_CU.replace("return x;", "return torch::tensor(1.0f);")
    v = build_variants(_spec(refused))
    assert [label for label, _ in v] == ["light", "full"]
    assert "torch/extension.h" not in v[0][1]["cuda_sources"][0] and "torch::tensor" in v[0][1]["cuda_sources"][0]


KB_CU = """#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void k(const float* x, float* y, long n) { long i = blockIdx.x * 256L + threadIdx.x; if (i < n) y[i] = x[i]; }
torch::Tensor f(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32");
    auto y = torch::empty_like(x);
    auto z = torch::zeros({x.size(0)}, x.options().dtype(at::ScalarType::Float));
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "k", [&] { k<<<1, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), x.numel()); });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}"""


def test_slim_prelude_names_exactly_the_headers_the_source_needs():
    variants = build_variants(_spec(KB_CU))
    assert [label for label, _ in variants] == ["split", "split_ext", "slim", "full"]  # tests/test_verifier_split.py
    label, kw = variants[2]
    assert kw["no_implicit_headers"] is True
    assert kw["cpp_sources"][0] == "#include <torch/extension.h>"  # the binding file is unchanged otherwise
    src = kw["cuda_sources"][0]
    head, _, body = src.partition("// ---- the candidate's source")
    for inc in ("ATen/core/Tensor.h", "ATen/ops/empty_like.h", "ATen/ops/zeros.h", "ATen/Dispatch.h",
                "c10/cuda/CUDAException.h"):
        assert f"#include <{inc}>" in head
    assert "torch/types.h" not in src and "ATen/ATen.h" not in src and "torch/extension.h" not in src
    assert "#include <ATen/cuda/CUDAContext.h>" in body  # the source's own include stays
    assert "using namespace at;" in head and "kFloat32" in head
    assert body.rstrip().endswith("return y;\n}")  # the candidate's code follows, unchanged


@pytest.mark.parametrize("snippet", [
    "auto s = at::cuda::getCurrentCUDAStream();",  # the CUDA context header is not included by the source
    "auto t = torch::not_an_op(x);",                # no ATen/ops header by that name
    "torch::nn::Linear l(1, 1);",                  # the C++ frontend
    "auto g = torch::autograd::grad({x}, {x});",
    "py::object o;",
    "AT_CUDA_CHECK(cudaGetLastError());",           # a macro outside the short list
    "using namespace torch; auto y = empty_like(x);",  # unqualified names: their headers are unknown
])
def test_sources_outside_the_known_subset_skip_slim(snippet):
    cu = TORCH_CU.replace("return x; }", snippet + " return x; }")
    labels = [label for label, _ in build_variants(_spec(cu))]
    assert labels == ["light", "full"], (snippet, labels)


@pytest.mark.skipif(not Path("/usr/local/cuda/bin/nvcc").exists() and not os.environ.get("CUDA_HOME"),
                    reason="load_inline writes a CUDA build's files only where it finds nvcc")
def test_each_variant_writes_the_binding_file_load_inline_writes_for_the_spec(tmp_path, monkeypatch):
    """Variants are written one after another from one spec (slim, then light, then full when each fails): each
    variant's main.cpp has one module definition, and the full build's is the file load_inline writes for the
    spec alone. (load_inline appends to the lists it is given: the full build after a failed light one got a
    second PYBIND11_MODULE and failed to compile, an honest kernel turned into a compile error.)"""
    import torch.utils.cpp_extension as ce

    from verifier.build.pch import write_build_files
    from verifier.build.steps import write_variant

    monkeypatch.setattr(ce, "CUDA_HOME", ce.CUDA_HOME or os.environ.get("CUDA_HOME") or "/usr/local/cuda")
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    cu = ("#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n"
          "torch::Tensor f(torch::Tensor x) { auto s = at::cuda::getCurrentCUDAStream(); return x.sin(); }")
    spec = canonical_spec({"cpp_sources": "torch::Tensor f(torch::Tensor x);", "cuda_sources": cu, "functions": ["f"]})
    variants = build_variants(spec)
    assert [label for label, _ in variants] == ["slim", "full"]
    for label, kwargs in variants:
        write_variant(spec_key(spec), tmp_path / label, kwargs, None)
        main = (tmp_path / label / "main.cpp").read_text()
        assert main.count("PYBIND11_MODULE") == 1 and main.count("m.def(") == 1, (label, main)
    write_build_files(tmp_path / "alone", "km_ext", **build_variants(spec)[-1][1])
    assert (tmp_path / "full" / "main.cpp").read_text() == (tmp_path / "alone" / "main.cpp").read_text()


def test_cpp_only_spec_is_cut_and_then_built_unchanged():
    """A C++-only spec: its code in a host unit of its own and its binding file the declarations (split_cpp,
    tests/test_verifier_split.py), then the spec unchanged."""
    spec = canonical_spec({"cpp_sources": "int f() { return 1; }", "functions": ["f"]})
    v = build_variants(spec)
    assert [label for label, _ in v] == ["split_cpp", "full"] and v[-1][1]["cpp_sources"] == spec["cpp_sources"]
    assert v[0][1]["cpp_sources"] == ["int f();"]


def test_two_compile_pools_in_one_process_build_with_their_own_host_settings_at_once(tmp_path, monkeypatch):
    """Host settings travel with what starts the processes, not in a process-wide global (issue 48): two compile
    pools of one process, made with different HostSettings and building at the same time, each start their build
    step with their own settings: the binding's form (``canonical_binding``: ``--as-written``) and, where bubblewrap
    runs, their own bwrap binary and supervisor process limit (``sandbox_procs`` on its argv). The steps are not
    started: their command lines are recorded, each pool's step waiting until the other's is recorded too."""
    import dataclasses
    import threading
    import types

    from verifier.build import steps
    from verifier.build.pool import CompilePool
    from verifier.common import sandbox

    real = sandbox.bwrap_path(HOST)
    hosts = {}
    for name, procs, canonical in (("a", 64, True), ("b", 200, False)):
        bwrap = ""
        if real:  # one binary under two names: a command names the one its host settings name
            (tmp_path / f"bwrap-{name}").symlink_to(real)
            bwrap = str(tmp_path / f"bwrap-{name}")
        hosts[name] = dataclasses.replace(HOST, pch_dir="", canonical_binding=canonical, sandbox_procs=procs,
                                          bwrap=bwrap)
    boxed = all(sandbox.enabled(h) for h in hosts.values())
    started: dict[str, list[str]] = {}
    both = threading.Barrier(2, timeout=120)

    def popen(cmd, **_kw):
        which = "a" if any(str(c).startswith(f"{tmp_path / 'a'}{os.sep}") for c in cmd) else "b"
        started[which] = [str(c) for c in cmd]
        both.wait()  # the other pool's step is being started now too
        raise OSError("not started (test)")

    monkeypatch.setattr(steps, "subprocess", types.SimpleNamespace(
        Popen=popen, STDOUT=subprocess.STDOUT, TimeoutExpired=subprocess.TimeoutExpired))
    spec = {"cpp_sources": "int64_t km_hosts() { return 1; }", "functions": ["km_hosts"]}
    with CompilePool(tmp_path / "a", workers=1, host=hosts["a"]) as pa, \
            CompilePool(tmp_path / "b", workers=1, host=hosts["b"]) as pb:
        fa, fb = pa.submit(spec), pb.submit(spec)
        results = fa.result(timeout=300), fb.result(timeout=300)
    assert all("not started (test)" in r.verifier_error for r in results), [r.verifier_error for r in results]
    a, b = started["a"], started["b"]
    assert "compile" in a and "compile" in b, (a, b)
    assert "--as-written" not in a and "--as-written" in b, (a, b)
    if boxed:
        assert a[0] == hosts["a"].bwrap and b[0] == hosts["b"].bwrap, (a[0], b[0])
        assert a[a.index("--supervise") + 2] == "64" and b[b.index("--supervise") + 2] == "200", (a, b)


# ninja output as torch's verbose build writes it (one job: main.o, then the CUDA object, then the link)
MAIN_FAILED = """[1/3] c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=km_x -c main.cpp -o main.o
FAILED: main.o
c++ -MMD -MF main.o.d -c /b/bare/main.cpp -o main.o
/b/bare/main.cpp:7:3: error: 'lauch' was not declared in this scope
ninja: build stopped: subcommand failed.
"""
CUDA_FAILED = """[1/3] c++ -c main.cpp -o main.o
[2/3] /usr/local/cuda/bin/nvcc -c cuda.cu -o cuda.cuda.o
FAILED: cuda.cuda.o
/b/bare/cuda.cu(9): error: identifier "w" is undefined
ninja: build stopped: subcommand failed.
"""
LINK_FAILED = """[3/3] c++ main.o cuda.cuda.o -shared -o km_x.so
FAILED: km_x.so
/usr/bin/ld: main.o: undefined reference to `launch(float*)'
"""


def test_failed_targets_reads_ninja_failures():
    assert failed_targets(MAIN_FAILED) == ["main.o"]
    assert failed_targets(CUDA_FAILED) == ["cuda.cuda.o"]
    assert failed_targets(LINK_FAILED) == ["km_x.so"]
    assert failed_targets("error: something before ninja ran") == []


@pytest.mark.parametrize("label", ["bare", "slim", "light"])
@pytest.mark.parametrize("log", [MAIN_FAILED, LINK_FAILED])
def test_binding_file_or_link_failure_of_a_fast_variant_is_final(label, log):
    # main.cpp and the link are the full build's byte for byte: rebuilding could only repeat the error
    for fallback in (True, False):
        final, why = variant_failure_is_final(label, log, fallback)
        assert final and "byte-identical" in why and why != FALLBACK_OFF


def test_cuda_object_failure_falls_back_unless_the_bare_contract_is_asked_for():
    assert variant_failure_is_final("bare", CUDA_FAILED, True) == (False, "")
    assert variant_failure_is_final("bare", CUDA_FAILED, False) == (True, FALLBACK_OFF)
    for label in ("slim", "light"):  # their headers are the verifier's guess: never final on the CUDA object
        assert variant_failure_is_final(label, CUDA_FAILED, False) == (False, "")
    # a failure whose log names no ninja target (the build never ran) is not final either
    assert variant_failure_is_final("bare", "RuntimeError: no shared object", True) == (False, "")


def test_a_result_that_skipped_the_full_build_is_reused_only_without_the_fallback(tmp_path):
    args = {"cpp_sources": "int three() { return 3; }", "functions": ["three"]}
    key_dir = tmp_path / spec_key(args)
    key_dir.mkdir()
    (key_dir / "result.json").write_text(json.dumps({"key": spec_key(args), "ok": False, "seconds": 1.0,
                                                     "variant": "", "fallback_skipped": True}))
    (key_dir / "build.log").write_text("cuda.cu(3): error: bare build failed")
    cached = build_blocking(tmp_path, args, 600, full_fallback=False, host=HOST)
    assert cached.cached and not cached.ok and cached.fallback_skipped and "bare build failed" in cached.log
    rebuilt = build_blocking(tmp_path, args, 600, full_fallback=True, host=HOST)  # wants the full build: it runs
    assert rebuilt.ok and not rebuilt.cached and not rebuilt.fallback_skipped, rebuilt.log[-2000:]
    assert build_blocking(tmp_path, args, 600, full_fallback=True, host=HOST).cached


def test_objects_are_compiled_once_and_shared_by_content(tmp_path):
    """Two specs whose binding file is the same (they differ in link flags only) compile it once: the second
    build takes the object from the build root's cache and still links and runs; a spec with an include
    path of its own is never cached (its objects could depend on files outside the key)."""
    import torch

    from verifier.child.loading import load_so

    import dataclasses

    host = dataclasses.replace(HOST, split_build=False)  # the unchanged build's two objects (split_cpp: its own test)
    src = "#include <torch/extension.h>\ntorch::Tensor thrice(torch::Tensor x) { return x.mul(3); }"
    # the header of these flags made first, waited for: a build that comes while it is made in the background goes
    # without it (verifier/build/pch.py), and its objects are keyed apart from those of a build that uses it
    assert ensure_pch(canonical_spec({"cpp_sources": src, "functions": ["thrice"]}), Path(host.pch_dir)) is not None
    a = build_blocking(tmp_path, {"cpp_sources": src, "functions": ["thrice"]}, 600, host=host)
    assert a.ok and a.objects_reused == 0, a.log[-2000:]
    assert TORCH_FIRST not in a.log  # the import check passed without torch's import
    # the check, run again by hand: the module imports (PyInit runs) in a process that never imports torch
    r, mods = _step_imports(["check", a.so_path, f"km_{a.key}", str(tmp_path / "check.json")], tmp_path)
    assert r.returncode == 0 and json.loads((tmp_path / "check.json").read_text())["ok"], r.stderr[-2000:]
    assert "torch" not in mods and "verifier.build.proc" not in mods and "verifier.build.objcache" in mods, sorted(mods)
    cached = sorted(objects_root(tmp_path).glob("*.o"))
    assert len(cached) == 1
    b = build_blocking(tmp_path, {"cpp_sources": src, "functions": ["thrice"], "extra_ldflags": ["-lgomp"]}, 600,
                       host=host)
    assert b.ok and b.key != a.key and b.objects_reused == 1, b.log[-2000:]
    assert "compiled before" in b.log and sorted(objects_root(tmp_path).glob("*.o")) == cached
    # the compilers' CPU seconds are measured (bench_verifier's compile CPU row): compiling the binding file
    # costs seconds, linking the cached object a fraction of it
    assert a.cpu_s > 1.0 and b.cpu_s < a.cpu_s, (a.cpu_s, b.cpu_s)
    assert build_blocking(tmp_path, {"cpp_sources": src, "functions": ["thrice"]}, 600,
                          host=host).cpu_s == a.cpu_s  # stored
    for res in (a, b):  # both in one process: each is loaded under its own name
        assert torch.equal(load_so(f"km_{res.key}", res.so_path).thrice(torch.ones(2)), torch.full((2,), 3.0))
    c = build_blocking(tmp_path, {"cpp_sources": src, "functions": ["thrice"], "extra_include_paths": [str(tmp_path)]},
                       600, host=host)
    assert c.ok and c.objects_reused == 0 and sorted(objects_root(tmp_path).glob("*.o")) == cached


def test_a_failed_compile_reads_like_ninja_and_caches_nothing(tmp_path):
    res = build_blocking(tmp_path, {"cpp_sources": "int broken( { return 1; }", "functions": ["broken"]}, 600,
                         host=HOST)
    assert not res.ok
    assert failed_targets(res.log) == ["main.o"], res.log[-2000:]
    assert list(objects_root(tmp_path).glob("*.o")) == []


def test_old_torch_dispatch_spelling_builds_as_that_torch_read_it(tmp_path):
    """A kernel written for an older torch passes ``x.type()`` to AT_DISPATCH (published model answers do);
    today's headers reject it ("no suitable conversion function from DeprecatedTypeProperties"), so the
    build reads it as ``x.scalar_type()``, which is what it meant: the honest kernel builds and runs, the
    log says what was read differently, and ``.type()`` anywhere else is left alone."""
    import torch

    from verifier.child.loading import load_so
    from verifier.common.spec import compat_source

    src = """#include <torch/extension.h>
torch::Tensor twice_old(torch::Tensor x) {
  auto y = torch::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.type(), "twice_old", ([&] {
    const auto* a = x.data_ptr<scalar_t>();
    auto* b = y.data_ptr<scalar_t>();
    for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] * 2;
  }));
  return y;
}"""
    res = build_blocking(tmp_path, {"cpp_sources": src, "functions": ["twice_old"]}, 600, host=HOST)
    assert res.ok, res.log[-3000:]
    assert "torch API compatibility: 1 AT_DISPATCH argument" in res.log
    mod = load_so(f"km_{res.key}", res.so_path)
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(37, dtype=dtype)
        assert torch.equal(mod.twice_old(x), x * 2)
    assert compat_source("AT_DISPATCH_FLOATING_TYPES_AND(at::kHalf, in->w.type(), \"f\", [&] {")[1] == 1
    assert compat_source("auto t = x.type(); AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), \"f\"") == (
        "auto t = x.type(); AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), \"f\"", 0)


def test_build_process_runs_with_one_openmp_thread(tmp_path):
    """Nothing in a build computes: its steps (the import check imports torch where a module needs it) run with
    OMP_NUM_THREADS=1, which cut torch's import from 6.5-7.5 to 4.9 CPU-s on the 16-core GPU box. The built
    module's static initialiser (candidate code, run by the import check) prints what it sees to the build log."""
    src = """#include <torch/extension.h>
#include <cstdio>
#include <cstdlib>
static int seen = (std::printf("omp threads in the build: %s\\n", std::getenv("OMP_NUM_THREADS") ?
                               std::getenv("OMP_NUM_THREADS") : "unset"), std::fflush(stdout), 0);
torch::Tensor same(torch::Tensor x) { return x; }"""
    res = build_blocking(tmp_path, {"cpp_sources": src, "functions": ["same"]}, 600, host=HOST)
    assert res.ok, res.log[-3000:]
    assert "omp threads in the build: 1" in res.log, res.log[-3000:]


def _step_imports(argv: list[str], tmp_path) -> tuple[subprocess.CompletedProcess, set[str]]:
    """``python -m verifier.build.proc ARGV`` with the environment a build gives its steps (unsandboxed here), and
    the modules it imported (``-X importtime``)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), LD_LIBRARY_PATH=os.pathsep.join(library_dirs()))
    if argv[0] == "compile":
        argv = [*argv, "--objects", str(objects_root(tmp_path))]
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "verifier.build.proc", *argv], env=env,
                       capture_output=True, text=True, timeout=300)
    mods = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    return r, {m.split(".")[0] for m in mods} | mods


def test_a_module_that_does_not_import_fails_its_build_and_no_step_imports_torch(tmp_path, with_pch):
    """A source that compiles and links but names a function nothing defines: the import check's dlopen fails
    (undefined symbol), so the build fails with that import error in its log, as load_inline's import did.
    Both steps, run again by hand, never import torch (the compile step relinks from the object cache)."""
    # with_pch: the -O2 PCH of the suite's fixtures (bench/lib/fixtures.py), which test_cpu_build_uses_the_precompiled_header uses too
    src = ("#include <torch/extension.h>\nint64_t km_helper(int64_t x);  // declared, defined nowhere\n"
           "int64_t calls_helper(int64_t x) { return km_helper(x); }")
    import dataclasses

    res = build_blocking(tmp_path, {"cpp_sources": src, "functions": ["calls_helper"], "extra_cflags": ["-O2"]}, 600,
                         host=dataclasses.replace(with_pch.host(), split_build=False))  # the unchanged build's steps
    assert not res.ok and res.variant == "" and not res.so_path, res.log[-3000:]
    assert failed_targets(res.log) == [] and "[2/2]" in res.log, res.log[-3000:]  # it compiled and linked
    assert "ImportError" in res.log and "undefined symbol" in res.log and "km_helper" in res.log, res.log[-3000:]
    assert "failed to import" in res.log and "undefined symbol" in first_errors(res.log)
    assert json.loads((tmp_path / res.key / "result.json").read_text())["ok"] is False
    assert len(list(objects_root(tmp_path).glob("*.o"))) == 1  # the object compiled fine: it is cached
    full = tmp_path / res.key / "full"
    r, mods = _step_imports(["compile", str(full)], tmp_path)
    assert r.returncode == 0 and "compiled before" in r.stdout and (full / "km_ext.so").is_file(), r.stdout[-2000:]
    assert json.loads((full / "compile.json").read_text())["objects_reused"] == 1
    assert "torch" not in mods, sorted(mods)
    r, mods = _step_imports(["check", str(full / "km_ext.so"), f"km_{res.key}", str(tmp_path / "c.json")], tmp_path)
    assert r.returncode == 1 and "undefined symbol" in r.stderr and "torch" not in mods, (r.stderr[-2000:], mods)
    assert json.loads((tmp_path / "c.json").read_text())["ok"] is False


def test_static_initialiser_cannot_write_the_object_cache_or_the_pch(tmp_path, with_pch):
    """The import check runs the candidate's static initialisers; it used to run in the build's sandbox, which
    could write the build root's object cache and the precompiled-header cache, so a candidate could replace an
    object or the PCH that later builds use (or plant a reference timing in prep/ that later processes read). Now neither is in its view: the writes fail (the sandbox may also
    record the attempt) and nothing appears there, while the compile step did fill the object cache."""
    from verifier.common import sandbox

    host = with_pch.host()
    if not sandbox.enabled(host):
        pytest.skip(f"no sandbox here: {sandbox.status(host).get('reason')}")
    pch_dir = ensure_pch(canonical_spec({"cpp_sources": "", "extra_cflags": ["-O2"]}), with_pch.pch_root())  # its
    assert pch_dir is not None
    objects = objects_root(tmp_path)
    objects.mkdir(parents=True)
    prep = tmp_path / "prep"  # the reference timings later processes read (verifier/judge/prep_cache.py)
    prep.mkdir()
    planted = [objects / f"km-planted-{os.getpid()}.o", pch_dir / "torch" / f"km-planted-{os.getpid()}.h",
               prep / f"km-planted-{os.getpid()}.json"]
    writes = "".join(f'w("{p}"); ' for p in planted)
    src = ("#include <torch/extension.h>\n#include <cstdio>\n"
           "static void w(const char* p) { FILE* f = std::fopen(p, \"w\"); if (f) { std::fputs(\"x\", f);"
           " std::fclose(f); } std::printf(\"planting %s: %s\\n\", p, f ? \"written\" : \"refused\");"
           " std::fflush(stdout); }\n"
           f"static int km_init = [] {{ {writes}return 0; }}();\n"
           "torch::Tensor same(torch::Tensor x) { return x; }")
    try:
        res = build_blocking(tmp_path, {"cpp_sources": src, "functions": ["same"], "extra_cflags": ["-O2"]}, 600,
                             host=host)
        assert [p for p in planted if p.exists()] == []
    finally:
        for p in planted:
            p.unlink(missing_ok=True)
    assert res.log.count(": refused") == len(planted), res.log[-3000:]  # the initialiser ran, and was refused
    findings = sandbox.escape_findings(tmp_path / res.key)
    assert res.ok == (not findings), (res.log[-3000:], findings)
    assert res.pch or findings, res.log[-3000:]
    assert len(list(objects.glob("*.o"))) == 1  # the compile step wrote the cache (main.o): only that


def test_the_timeout_covers_the_whole_build(tmp_path):
    res = build_blocking(tmp_path, {"cpp_sources": "int64_t one() { return 1; }", "functions": ["one"]}, 1, host=HOST)
    assert not res.ok and "[verifier] compilation timed out after 1 s and was killed" in res.log, res.log[-2000:]
    assert not any(p.suffix == ".so" for p in (tmp_path / res.key).rglob("*")), "the build was not stopped"


def test_a_failure_of_the_verifiers_own_build_code_is_a_verifier_error_not_a_compile_error(tmp_path):
    """An exception in the verifier's build code (c2aa163's precompiled-header bug: every cuda build failed) is the
    verifier's fault: the candidate gets verifier_error, and nothing is cached as its failed build."""
    from unittest import mock

    from bench.lib import fixtures as fx
    from verifier.build import steps as build_mod
    from verifier.engine import VerifyConfig
    from verifier.entry import verify_candidate

    cfg = VerifyConfig(build_dir=str(tmp_path), time_torch_compile=False, timing_trials=3)
    with mock.patch.object(build_mod.Build, "run", side_effect=NameError("name 'sig' is not defined")):
        v = verify_candidate(fx.RELU_TASK, fx.HONEST_RELU, backend="cpu", config=cfg)
    assert v.status == "verifier_error" and "not a compile error of your code" in v.feedback, (v.status, v.feedback)
    assert not list(tmp_path.glob("*/result.json"))

