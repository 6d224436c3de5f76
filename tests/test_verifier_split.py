"""The split build variant (verifier/build/split.py): a CUDA source's host code compiled by the C++ compiler against
the precompiled header, its device code by nvcc without torch, launches through launchers. What is cut where, what
keeps a source whole (each refusal: anything whose meaning a cut could change), the flags that keep it whole, that a
failed split build is never the answer, and real compiles of both parts (nvcc and g++; the link needs a CUDA torch)."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from verifier.build.steps import add_host_unit, write_variant
from verifier.common.spec import canonical_spec, spec_key
from verifier.build.split import HOST_FILE, HOST_OBJECT, declarations_only, split_refusal, split_source
from verifier.build.variants import build_variants, variant_failure_is_final
from verifier.build.slim import SLIM_HEAD, SLIM_HEADER, slim_source
from verifier.common.backends import own_kernel_renames, rename_kernels

KB = """#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#define BLOCK 256
const float kScale = 0.5f;
struct Params { int n; float alpha; };
__device__ __forceinline__ float act(float v) { return v > 0.f ? v : 0.f; }
__host__ __device__ inline int cdiv(int a, int b) { return (a + b - 1) / b; }
__global__ void __launch_bounds__(BLOCK) relu_kernel(const float* __restrict__ x, float* __restrict__ y, Params p) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) y[i] = act(x[i]) * p.alpha * kScale;
}
__global__ void fill_kernel(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 1.0f; }
torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor: \\"<<<\\" {;}");
    auto y = torch::empty_like(x);
    int n = x.numel();
    Params p{n, 2.0f};
    relu_kernel<<<cdiv(n, BLOCK), BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(),
        y.data_ptr<float>(), p);
    if (n < 0) fill_kernel<<<dim3(1, 1), dim3(32)>>>(y.data_ptr<float>(), n);
    return y;
}
"""


def _spec(cu=KB, cpp="torch::Tensor forward(torch::Tensor x);", **flags):
    return canonical_spec({"cpp_sources": cpp, "cuda_sources": cu, "functions": ["forward"], **flags})


def test_a_kernelbench_source_is_cut_into_a_torch_free_device_part_and_a_host_part():
    s = split_source(KB)
    assert s is not None and s.kernels == ("relu_kernel", "fill_kernel")
    # device side: kernels, device helpers, what both use; no torch; one launcher per kernel
    for part in ("__global__ void __launch_bounds__(BLOCK) relu_kernel", "__device__ __forceinline__ float act",
                 "struct Params", "#define BLOCK 256", "const float kScale", "inline int cdiv"):
        assert part in s.device, part
    assert not re.search(r"torch|TORCH_|at::|ATen", s.device)
    assert ("void km_launch_relu_kernel(dim3 km_grid, dim3 km_block, size_t km_shmem, cudaStream_t km_stream, "
            "const float* __restrict__ x, float* __restrict__ y, Params p) {\n  relu_kernel<<<km_grid, km_block, "
            "km_shmem, km_stream>>>(x, y, p);") in s.device
    # host side: torch, the host function, launches through the launchers (the string's <<< is left alone)
    assert "#include <ATen/cuda/CUDAContext.h>" in s.host and "torch::Tensor forward" in s.host
    assert "__global__" not in s.host and "act(" not in s.host
    assert ("km_launch_relu_kernel(cdiv(n, BLOCK), BLOCK, 0, at::cuda::getCurrentCUDAStream(), x.data_ptr<float>(),"
            in s.host)
    assert "km_launch_fill_kernel(dim3(1, 1), dim3(32), 0, nullptr, y.data_ptr<float>(), n)" in s.host
    assert '\\"<<<\\" {;}' in s.host and s.host.count("<<<") == 1  # only the string's
    # the launcher is declared where its kernel was, after the types its parameters use
    assert s.host.index("struct Params") < s.host.index("void km_launch_relu_kernel(") < s.host.index("forward(")
    assert "#define __CUDA_NO_HALF_OPERATORS__ 1" in s.host and "#include <cuda_runtime.h>" in s.host
    assert s.host_unit.startswith("#include <torch/extension.h>\n")


@pytest.mark.parametrize("change, why", [
    (("__global__ void fill_kernel(float* y, int n)", "template <typename T> __global__ void fill_kernel(T* y, int n)"),
     "a templated kernel"),
    (("fill_kernel<<<", "fill_kernel<float><<<"), "a templated kernel launch"),
    (("return y;", "cudaFuncSetAttribute(relu_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 0); return y;"),
     "names a device-side symbol (relu_kernel)"),
    (("const float kScale = 0.5f;", "__constant__ float kScale = 0.5f;"), ""),  # the device reads it: still split
    (("return y;", "float h = 2; cudaMemcpyToSymbol(kConst, &h, 4); return y;"),
     "names a device-side symbol (kConst)"),
    (("return y;", "\n#ifdef __CUDACC__\n return x;\n#endif\n return y;"), "tests __CUDACC__"),
    (("return y;", "if (__LINE__ > 1000) return x; return y;"), "tests __CUDACC__ or __CUDA_ARCH__"),
    (("struct Params", "namespace { struct Q {}; }\nstruct Params"), "a namespace"),
    (("#define BLOCK 256", "#define BLOCK 256\n#define LAUNCH(n) fill_kernel<<<1, 32>>>(nullptr, n)"),
     "a macro that launches"),
    (("struct Params", "#ifdef FAST\nint fast = 1;\n#endif\nstruct Params"), "conditional compilation"),
    (("y[i] = 1.0f;", "y[i] = static_cast<float>(c10::Half(1.0f));"), "device code that names torch"),
    (("float* y, int n)", "float* y, int n = 4)"), "default"),
    (("return y;", 'auto s = R"(x)"; return y;'), "a raw string"),
    (("return y;", "py::print(1); return y;"), ""),  # extension.h is included: py:: is there in both builds
])
def test_what_a_cut_could_change_keeps_the_source_whole(change, why):
    src = KB.replace(*change)
    if "kConst" in change[1]:
        src = "__constant__ float kConst;\n" + src
    assert src != KB
    got = split_refusal(src)
    assert (why in got and got) if why else got == "", (change, got)


def test_python_names_without_extension_h_are_not_split():
    src = KB.replace("#include <torch/extension.h>\n", "").replace("return y;", "py::print(1); return y;")
    assert "pybind11 or Python" in split_refusal(src)


def test_sources_without_a_launch_or_kernel_are_not_split():
    assert split_refusal("#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { return x; }") == "no kernel"
    assert "no launch" in split_refusal("__global__ void k(float* y) {}\ntorch::Tensor f(torch::Tensor x) "
                                        "{ return x; }")


@pytest.mark.parametrize("flags, split", [
    ({}, True),
    ({"extra_cuda_cflags": ["-O3", "--use_fast_math", "-Xptxas=-v", ""]}, True),
    ({"extra_cflags": ["-O3", ""]}, True),
    ({"extra_cuda_cflags": ["-DBLOCK=128"]}, False),          # would reach the host code in nvcc's build only
    ({"extra_cuda_cflags": ["-Xcompiler", "-ffast-math"]}, False),
    ({"extra_cflags": ["-ffast-math"]}, False),               # would reach host code the CUDA build compiled without
    ({"extra_cflags": ["-DFOO"]}, False),
])
def test_flags_that_reach_host_code_keep_the_source_whole(flags, split):
    labels = [label for label, _ in build_variants(_spec(**flags))]
    assert labels == (["split", "split_ext", "slim", "full"] if split else ["slim", "full"]), (flags, labels)


def test_the_host_part_joins_the_binding_file_only_after_declarations():
    spec = _spec()
    v = dict(build_variants(spec))
    # (the built kernels are renamed kmown_<name>, verifier/common/backends.py; the split cuts that source)
    built = rename_kernels(KB, own_kernel_renames(spec))
    ext = v["split_ext"]
    assert "host_source" not in ext and ext["cpp_sources"][-1] == split_source(built).host
    assert ext["cpp_sources"][0] == "#include <torch/extension.h>" and ext["no_implicit_headers"]
    assert "torch" not in ext["cuda_sources"][1] and "km_launch_kmown_relu_kernel" in ext["cuda_sources"][1]
    # tried before it: the host part in a unit of its own under slim's headers, the binding file the spec's own
    first = v["split"]
    assert first["host_source"] == slim_source(split_source(built).host)
    assert "#include <ATen/core/Tensor.h>" in first["host_source"] and "torch/extension.h" not in first["host_source"]
    assert first["cpp_sources"] == ["#include <torch/extension.h>", spec["cpp_sources"][0]]
    assert first["cuda_sources"] == ext["cuda_sources"]
    # a macro or a using in the binding's own sources could change the host part's meaning: a unit of its own
    for cpp in ("#define float double\ntorch::Tensor forward(torch::Tensor x);",
                "using namespace torch;\nTensor forward(Tensor x);",
                "#include <cuda_fp16.h>\ntorch::Tensor forward(torch::Tensor x);"):
        assert not declarations_only([cpp])
        kw = dict(build_variants(_spec(cpp=cpp)))["split_ext"]
        assert kw["host_source"].startswith("#include <torch/extension.h>\n") and kw["cpp_sources"][-1] == cpp
    assert declarations_only(["#include <vector>\n#pragma once\ntorch::Tensor forward(torch::Tensor x, int k);"])


def test_what_links_only_in_one_file_is_not_merged_or_not_split():
    """The full build's binding file reaches the CUDA file's host functions by linking: an exported function the
    binding never declares, or one defined inline or static, fails there. Merged into the binding file it would be
    found, and the split would pass what fails as written: such a host part gets a unit of its own, and an exported
    inline or static definition is not split at all."""
    undeclared = dict(build_variants(_spec(cpp="int unrelated(int);")))["split_ext"]
    assert "host_source" in undeclared and undeclared["cpp_sources"][-1] == "int unrelated(int);"
    for word in ("inline", "static"):
        src = KB.replace("torch::Tensor forward(", f"{word} torch::Tensor forward(")
        assert "exported function defined inline" in split_refusal(src, frozenset({"forward"}))
        assert split_refusal(src) == ""  # not exported: a helper may be inline
        assert [label for label, _ in build_variants(_spec(cu=src))] == ["slim", "full"]


def test_character_literals_after_a_prefix_are_literals_and_digit_separators_are_not():
    src = KB.replace("return y;", "char c = u8'{'; wchar_t w = L'}'; long big = 1'000'000 + 0xFF'FF; return y;")
    s = split_source(src)
    assert s is not None and "u8'{'" in s.host and "L'}'" in s.host and "1'000'000 + 0xFF'FF" in s.host


def test_a_type_with_device_only_members_stays_on_the_device_side():
    acc = "struct Acc { __device__ float one() const { return 1.f; } };\n"
    s = split_source(KB.replace("struct Params", acc + "struct Params"))
    assert s is not None and "struct Acc" in s.device and "struct Acc" not in s.host
    assert "host code names a device-side symbol (Acc)" in split_refusal(
        KB.replace("struct Params", acc + "struct Params").replace("return y;", "Acc a; return y;"))


def test_a_failed_split_build_is_never_the_answer():
    for log in ("FAILED: main.o\nerror", "FAILED: km_host.o\n", "FAILED: km_ext.so\nundefined", "FAILED: cuda.cuda.o"):
        for label in ("split", "split_ext"):
            assert variant_failure_is_final(label, log, True) == (False, "")
            assert variant_failure_is_final(label, log, False) == (False, "")


@pytest.mark.skipif(not Path("/usr/local/cuda/bin/nvcc").exists() and not os.environ.get("CUDA_HOME"),
                    reason="load_inline writes a CUDA build's files only where it finds nvcc")
@pytest.mark.parametrize("form", ["slim_host", "merged", "own_unit"])
def test_both_parts_compile(tmp_path, monkeypatch, form, with_pch):
    """The split variants' files as the pool writes them, each object compiled by ninja with torch's commands:
    the host unit under slim's headers ("split"), or the binding file with the host part or a host unit under
    torch/extension.h ("split_ext"), and the CUDA file with nvcc and no torch header."""
    own_unit = form != "merged"
    import torch.utils.cpp_extension as ce

    monkeypatch.setattr(ce, "CUDA_HOME", ce.CUDA_HOME or os.environ.get("CUDA_HOME") or "/usr/local/cuda")
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    cpp = "torch::Tensor forward(torch::Tensor x);" + ("\nusing std::vector;" if form == "own_unit" else "")
    # (no c10/cuda header: torch's CPU build lacks one they include)
    spec = _spec(cu=KB.replace("#include <ATen/cuda/CUDAContext.h>\n", "")
                 .replace("at::cuda::getCurrentCUDAStream()", "0"), cpp=cpp)
    from verifier.build.pch import ensure_pch

    variants = build_variants(spec)
    label, kw = variants[0] if form == "slim_host" else variants[1]
    assert label == ("split" if form == "slim_host" else "split_ext") and ("host_source" in kw) == own_unit
    if form == "slim_host":
        assert kw["host_source"].startswith("#include <cuda.h>") and "torch/extension.h" not in kw["host_source"]
    pch = ensure_pch(spec, with_pch.pch_root())
    assert pch is not None
    slim = ensure_pch(spec, with_pch.pch_root(), SLIM_HEADER) if form == "slim_host" else None
    assert slim is not None or form != "slim_host"
    write_variant(spec_key(spec), tmp_path, kw, pch, slim)
    if form == "slim_host":  # the head from its precompiled header, the same lines in the header beside it
        assert (tmp_path / HOST_FILE).read_text().startswith(f"#include <{SLIM_HEADER[0]}>\n")
        assert (slim / SLIM_HEADER[0]).read_text() == SLIM_HEAD and (slim / (SLIM_HEADER[0] + ".gch")).is_file()
    targets = ["main.o", "cuda.cuda.o"] + ([HOST_OBJECT] if own_unit else [])
    assert ((tmp_path / HOST_FILE).exists()) == own_unit
    link = next(ln for ln in (tmp_path / "build.ninja").read_text().splitlines() if ".so: link " in ln)
    assert (HOST_OBJECT in link) == own_unit
    r = subprocess.run(["ninja", "-k", "0", *targets], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "torch" not in (tmp_path / "cuda.cu").read_text().replace("torch/types.h not included", "")
    assert "km_launch_kmown_relu_kernel(" in (tmp_path / (HOST_FILE if own_unit else "main.cpp")).read_text()


def test_add_host_unit_links_the_host_object(tmp_path):
    (tmp_path / "build.ninja").write_text("rule compile\n  command = c++ $in -o $out\n\n"
                                          "build main.o: compile /x/main.cpp\nbuild cuda.cuda.o: cuda_compile /x/cuda.cu\n"
                                          "\nbuild km_ext.so: link main.o cuda.cuda.o\n\ndefault km_ext.so\n")
    add_host_unit(tmp_path, "int k();\n")
    text = (tmp_path / "build.ninja").read_text()
    assert f"build {HOST_OBJECT}: compile {tmp_path.resolve() / HOST_FILE}" in text
    assert f"build km_ext.so: link {HOST_OBJECT} main.o cuda.cuda.o" in text
    assert (tmp_path / HOST_FILE).read_text() == "int k();\n"


def test_split_build_false_builds_without_the_cut_and_reuses_no_split_result():
    """``[verify] split_build = false``: the variants as before (slim, full), and a build result the split made in
    the same build root is rebuilt, not reused (the switch is there to compare the two paths' verdicts)."""
    from kernelmill.config import load_settings
    from verifier.build.result import BuildResult, usable

    assert [label for label, _ in build_variants(_spec(), split=False)] == ["slim", "full"]
    host = load_settings(env={"KERNELMILL_VERIFY_SPLIT_BUILD": "false"}).verify.host()
    assert host.split_build is False and load_settings(env={}).verify.host().split_build is True
    for label in ("split", "split_ext"):
        made = BuildResult(key="k", ok=True, so_path="/x.so", variant=label)
        assert usable(made, True, split=False) is None and usable(made, True, split=True) is made
    assert usable(BuildResult(key="k", ok=True, so_path="/x.so", variant="slim"), True, split=False) is not None


def test_a_host_part_slim_does_not_take_is_built_under_torch_extension_h():
    """The host unit under slim's headers only where slim takes the host part (its names map onto the headers it
    includes, verifier/build/slim.py): ``torch::tensor`` means another thing under at::, ``using namespace torch``
    hides which header a name needs; those host parts keep torch/extension.h ("split_ext")."""
    for change in ("auto t = torch::tensor({1.0f}); return y;", "using namespace torch; return y;"):
        src = KB.replace("return y;", change)
        assert split_source(src) is not None and slim_source(split_source(src).host) is None
        labels = [label for label, _ in build_variants(_spec(cu=src))]
        assert "split" not in labels and labels[0] == "split_ext", (change, labels)


# ---------------------------------------------------------------------------- C++-only extensions: "split_cpp"

CPU_SRC = """#include <torch/extension.h>
#include <vector>
static float halve(float v) { return v * 0.5f; }  // a helper of its own: internal, stays in the host unit
torch::Tensor scaled(torch::Tensor x, double s) {
    TORCH_CHECK(x.dim() >= 1, "x needs a dimension");
    auto y = torch::empty_like(x);
    auto* src = x.data_ptr<float>(); auto* dst = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) dst[i] = halve(src[i]) * static_cast<float>(s);
    return y;
}
void fill_ones(torch::Tensor out) { out.fill_(1.0); }
"""


def test_a_cpp_only_extension_is_cut_into_declarations_and_a_host_unit():
    from verifier.build.slim import SLIM_CPU_HEAD

    spec = canonical_spec({"cpp_sources": CPU_SRC, "functions": ["scaled", "fill_ones"]})
    (label, kw), (last, full) = build_variants(spec)
    assert (label, last) == ("split_cpp", "full") and full["cpp_sources"] == spec["cpp_sources"]
    assert kw["cpp_sources"] == ["torch::Tensor scaled(torch::Tensor x, double s);", "void fill_ones(torch::Tensor out);"]
    assert kw["host_source"].startswith(SLIM_CPU_HEAD) and "cuda" not in kw["host_source"].lower()
    assert kw["host_source"].endswith(CPU_SRC.replace("#include <torch/extension.h>\n", ""))
    assert build_variants(spec, split=False) == [("full", full)]


@pytest.mark.parametrize("src, why", [
    ("int f(int x) { return x; }\nint f(double x) { return 1; }", "an overload set"),
    ("static int f(int x) { return x; }", "internal linkage"),
    ("template <typename T> T f(T x) { return x; }", "a template"),
    ("int f(int x = 1) { return x; }", "a default argument"),
    ("int f(int x);", "declared, not defined here"),
    ("inline int f(int x) { return x; }", "inline"),
    ("auto f(int x) -> int { return x; }", "a trailing return type"),
    ("using namespace torch;\nTensor f(Tensor x) { return x; }", "a type the boxed binding does not name"),
    ("unsigned f(unsigned x) { return x; }", "a type the boxed binding does not take"),
    ("#include <torch/extension.h>\npy::object f(torch::Tensor x) { return py::none(); }", "pybind11 in the code"),
])
def test_what_the_cut_could_change_keeps_a_cpp_only_extension_whole(src, why):
    assert [label for label, _ in build_variants(canonical_spec({"cpp_sources": src, "functions": ["f"]}))] == \
        ["full"], why


def test_a_cpp_only_extension_builds_split_boxed_and_behaves_as_written(tmp_path, with_pch):
    """The real build: the host unit and the boxed binding link, the module computes what the unchanged build's
    does; a compile error in the code fails the cut and is reported from the full build, whose log names main.cpp."""
    import json

    import torch

    from bench.lib import fixtures as fx
    from verifier.build.pool import build_blocking
    from verifier.child.loading import load_so

    spec = {"cpp_sources": CPU_SRC, "functions": ["scaled", "fill_ones"], "extra_cflags": ["-O2"]}
    fx.make_headers(with_pch, spec)  # the slim head's precompiled header, which the shim is asked to start with
    res = build_blocking(tmp_path / "split", spec, 600, host=with_pch.host())
    assert res.ok and res.variant == "split_cpp", res.log[-3000:]
    vdir = tmp_path / "split" / res.key / "split_cpp"
    assert json.loads((vdir / "compile.json").read_text())["binding"] == "boxed"
    # the boxed binding's shim under the host unit's precompiled head (verifier/build/boxed.py SLIM_HEAD_FILES): the
    # head's include first, its directory on the shim's compile command, as on the host unit's
    log = (vdir.parent / "split_cpp.log").read_text()
    shim_line = next(ln for ln in log.splitlines() if "km_boxed_shim.o" in ln and " -c " in ln)
    host_line = next(ln for ln in log.splitlines() if "km_host.o" in ln and " -c " in ln)
    head_dir = [a for a in host_line.split() if a.startswith("-I") and Path(a[2:], "km_slim_cpu_head.h.gch").is_file()]
    assert head_dir and head_dir[0] in shim_line.split(), log[-3000:]
    assert (vdir / "km_boxed_shim.cpp").read_text().startswith("#include <km_slim_cpu_head.h>\n")
    full_host = dataclasses_replace(with_pch.host(), split_build=False)
    # another source, so another key and module name (CPython hands back the first module loaded under a name), and
    # the same flags, so the same precompiled header (another flag set would make one of its own: a minute here)
    whole = build_blocking(tmp_path / "whole", dict(spec, cpp_sources=CPU_SRC + "\nstatic int km_whole() { return 1; }\n"),
                           600, host=full_host)
    assert whole.ok and whole.variant == "full", whole.log[-3000:]
    a, b = load_so(f"km_{res.key}", res.so_path), load_so(f"km_{whole.key}", whole.so_path)
    x = torch.arange(6.0)
    assert torch.equal(a.scaled(x, 3.0), b.scaled(x, 3.0)) and torch.equal(a.scaled(x, 3.0), x * 1.5)
    ys = [torch.zeros(3), torch.zeros(3)]
    a.fill_ones(ys[0]), b.fill_ones(ys[1])
    assert torch.equal(ys[0], ys[1]) and torch.equal(ys[0], torch.ones(3))
    for mod in (a, b):
        with pytest.raises(RuntimeError, match="x needs a dimension"):
            mod.scaled(torch.tensor(1.0), 1.0)
    broken = dict(spec, cpp_sources=CPU_SRC.replace("return y;", "return undeclared_name;"))
    bad = build_blocking(tmp_path / "bad", broken, 600, host=with_pch.host())
    assert not bad.ok and "undeclared_name" in bad.log and "main.cpp" in bad.log.split("FAILED")[-1], bad.log[-3000:]


def dataclasses_replace(obj, **kw):
    import dataclasses

    return dataclasses.replace(obj, **kw)
