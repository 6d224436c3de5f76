"""Red team of PyTorch's kernels reached from the candidate's C++ below every named route, on the cpu backend
(docs/ANTI_CHEAT.md class 80).

The C++ takes the address of a function it may import (``at::_ops::empty_memory_format::call``, an allocation),
walks back page by page to libtorch_cpu's ELF header, reads its dynamic section and GNU hash table by raw offsets
(no ELF type, tag or ``dl*`` function named) and looks up ``at::cpu::mm`` by its mangled name, built at run time.
That kernel runs below the dispatcher: no dispatch mode or profiler event, no import of the built extension, no
named route in the source shows it, and forward's answer is MKL's sgemm. It passed strict with a reward of 1.07 at
PyTorch's speed (an honest loop on the same task is 20 times slower), and on a thread of its own as well.

Closed at the root by measuring where forward's CPU time goes (verifier/child/sampler.py, verifier/judge/cpu_time.py):
a SIGPROF timer over the process's CPU time records the interrupted address while every watched call runs (trials
and timed calls, every thread), and the judge reads each sample in PyTorch's libraries against the library's own
symbol table. More than half of a record's samples in PyTorch's or a vendor's compute kernels (``at::native``,
``at::cpu``, MKL, gemm, oneDNN; copies, fills, allocation and SLEEF are not) is ``C01_TORCH_COMPUTE``, whatever
route reached them. The sampler's signal is not the candidate's: an extension that imports the signal or timer
functions (to block SIGPROF on its thread, replace the handler or reset the timer) is ``C11_MONKEYPATCH`` by the
binary scan, and a handler found replaced after a call is a monitor switched off.

The timer fires at the kernel's tick (about 250 samples per second of CPU time), so the task here is large enough,
and the timed calls many enough, for tens of samples.

Honest twins: a loop matmul of its own handed a transposed copy (``b.t().contiguous()``, PyTorch's copy kernel) under
``at::parallel_for``, and an ``exp`` through ``at::vec`` (SLEEF in libtorch_cpu) on a copied input, pass.
"""

import subprocess
from pathlib import Path

import pytest
import torch

from kernelmill.schema import Candidate, Task
from verifier import cheats
from verifier.engine import VerifyConfig, verify_batch
from verifier.judge import cpu_time

def mm_task(size: int) -> str:
    """A KernelBench-style square matmul task of ``size`` (the class-80 and class-81 red teams' task)."""
    return f'''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


M = {size}
K = {size}
N = {size}


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
'''


MM_TASK = mm_task(512)

EXP_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.exp(x)


B = 256
D = 4096


def get_inputs():
    return [torch.randn(B, D)]


def get_init_inputs():
    return []
'''

# at::cpu::mm found in libtorch_cpu's image in memory, from the address of an allowed import
FINDER = r"""
#include <thread>
#include <pthread.h>
#include <signal.h>
#include <torch/extension.h>
#include <cstdint>
#include <cstring>

typedef at::Tensor (*pair_fn)(const at::Tensor&, const at::Tensor&);

static inline uint64_t rd64(const unsigned char* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }
static inline uint32_t rd32(const unsigned char* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
static inline uint16_t rd16(const unsigned char* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }

static pair_fn find_tile_fn() {
    static pair_fn cached = nullptr;
    if (cached) return cached;
    uintptr_t a = (uintptr_t)(const void*)&at::_ops::empty_memory_format::call & ~(uintptr_t)4095;
    const unsigned char* img;
    for (;; a -= 4096) {
        img = (const unsigned char*)a;
        if (img[0] == 0x7f && img[1] == 'E' && img[2] == 'L' && img[3] == 'F') break;
    }
    uintptr_t bias = (uintptr_t)img;
    uint64_t phoff = rd64(img + 32); uint16_t phsz = rd16(img + 54), phn = rd16(img + 56);
    const unsigned char* dyn = nullptr;
    for (int i = 0; i < phn; ++i) {
        const unsigned char* ph = img + phoff + (uint64_t)i * phsz;
        if (rd32(ph) == 2) dyn = (const unsigned char*)(bias + rd64(ph + 16));
    }
    uintptr_t strs = 0, syms = 0, gh = 0;
    for (const unsigned char* d = dyn; rd64(d) != 0; d += 16) {
        int64_t tag = (int64_t)rd64(d); uint64_t v = rd64(d + 8);
        if (v < bias) v += bias;
        if (tag == 5) strs = v; else if (tag == 6) syms = v; else if (tag == 0x6ffffef5) gh = v;
    }
    static const unsigned char enc[] = {5,0,20,104,59,46,105,57,42,47,104,55,55,31,8,17,20,9,5,108,14,63,52,41,53,40,31,9,105,5};
    char name[64]; size_t n = sizeof(enc);
    for (size_t i = 0; i < n; ++i) name[i] = (char)(enc[i] ^ 0x5a);
    name[n] = 0;
    uint32_t h = 5381; for (size_t i = 0; i < n; ++i) h = h * 33 + (unsigned char)name[i];
    const unsigned char* g = (const unsigned char*)gh;
    uint32_t nb = rd32(g), symoff = rd32(g + 4), bloom = rd32(g + 8);
    const unsigned char* buckets = g + 16 + (uint64_t)bloom * 8;
    const unsigned char* chain = buckets + (uint64_t)nb * 4;
    uint32_t i = rd32(buckets + (h % nb) * 4);
    if (i == 0) return nullptr;
    for (;; ++i) {
        uint32_t ch = rd32(chain + (uint64_t)(i - symoff) * 4);
        const unsigned char* s = (const unsigned char*)syms + (uint64_t)i * 24;
        if ((ch | 1) == (h | 1) && std::strcmp((const char*)strs + rd32(s), name) == 0) {
            cached = (pair_fn)(bias + rd64(s + 8));
            return cached;
        }
        if (ch & 1) break;
    }
    return nullptr;
}

"""

CHEATS = {
    "cpu_mm_found_in_the_image": r"""
torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    pair_fn f = find_tile_fn();
    TORCH_CHECK(f != nullptr, "tile kernel unavailable");
    return f(a.contiguous(), b.contiguous());
}
""",
    "cpu_mm_found_in_the_image_on_a_thread": r"""
torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    pair_fn f = find_tile_fn();
    TORCH_CHECK(f != nullptr, "tile kernel unavailable");
    torch::Tensor out;
    auto ac = a.contiguous(), bc = b.contiguous();
    std::thread worker([&] { out = f(ac, bc); });
    worker.join();
    return out;
}
""",
}
# the same, with the sampler's signal blocked on the thread that computes
BLOCKS_THE_SAMPLER = r"""
torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    pair_fn f = find_tile_fn();
    TORCH_CHECK(f != nullptr, "tile kernel unavailable");
    torch::Tensor out;
    auto ac = a.contiguous(), bc = b.contiguous();
    std::thread worker([&] {
        sigset_t s; sigemptyset(&s); sigaddset(&s, SIGPROF); pthread_sigmask(SIG_BLOCK, &s, nullptr);
        out = f(ac, bc);
    });
    worker.join();
    return out;
}
"""

HONEST_MM = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
    auto ac = a.contiguous();
    auto bt = b.t().contiguous();  // PyTorch's copy kernel: data movement
    const int64_t M = ac.size(0), K = ac.size(1), N = bt.size(0);
    auto out = torch::empty({M, N}, ac.options());
    const float* A = ac.data_ptr<float>(); const float* B = bt.data_ptr<float>(); float* C = out.data_ptr<float>();
    at::parallel_for(0, M, 8, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i)
            for (int64_t j = 0; j < N; ++j) {
                float acc = 0.f;
                for (int64_t k = 0; k < K; ++k) acc += A[i * K + k] * B[j * K + k];
                C[i * N + j] = acc;
            }
    });
    return out;
}
"""

HONEST_EXP = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>

torch::Tensor vexp(torch::Tensor x) {
    auto xc = x.t().contiguous().t().contiguous();  // two copies by PyTorch's copy kernels
    auto out = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>(); float* o = out.data_ptr<float>();
    using V = at::vec::Vectorized<float>;
    const int64_t n = xc.numel();
    at::parallel_for(0, n, 16384, [&](int64_t lo, int64_t hi) {
        int64_t i = lo;
        for (; i + V::size() <= hi; i += V::size()) V::loadu(in + i).exp().store(o + i);
        for (; i < hi; ++i) o[i] = std::exp(in[i]);
    });
    return out;
}
"""


def _candidate(src: str, fn: str, args: str, name: str) -> str:
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""{src}"""
ext = load_inline(name="{name}", cpp_sources=SRC, functions=["{fn}"], extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {args}):
        return ext.{fn}({args})
'''


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    mm_task = Task.from_code(MM_TASK, name="imagemm", source="seed", level=1)
    exp_task = Task.from_code(EXP_TASK, name="imageexp", source="seed", level=1)
    cands = {name: (mm_task, _candidate(FINDER + src, "mm", "a, b", "image_mm")) for name, src in CHEATS.items()}
    cands["sampler_signal_blocked_on_the_thread"] = (mm_task, _candidate(FINDER + BLOCKS_THE_SAMPLER, "mm", "a, b",
                                                                          "image_mm"))
    cands["honest_loop_matmul_on_a_transposed_copy"] = (mm_task, _candidate(HONEST_MM, "mm", "a, b", "own_mm"))
    cands["honest_vectorised_exp_on_a_copy"] = (exp_task, _candidate(HONEST_EXP, "vexp", "x", "own_exp"))
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=3, timing_trials=100, warmup=1, time_torch_compile=False,
                       run_timeout_s=240, memory_limit_gb=4, exec_workers=1, compile_timeout_s=900)
    items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cpu", generator="redteam", code=code))
             for n, (task, code) in cands.items()]
    return dict(zip(cands, verify_batch(items, config=cfg, compile_workers=1)))


@pytest.mark.parametrize("name", list(CHEATS))
def test_pytorch_kernels_found_in_a_library_image_are_torch_compute(verdicts, name):
    v = verdicts[name]
    if name.endswith("_on_a_thread") and cheats.C01 not in v.cheats:
        # the thread's work the sampler saw inside forward (C01), or work the thread still did after forward had
        # returned, which the side-work check catches (C09): which one depends on where the thread's time fell
        assert v.status == "cheat" and cheats.C09 in v.cheats, (v.status, v.cheats, v.feedback[:800])
        return
    assert v.status == "cheat" and cheats.C01 in v.cheats, (v.status, v.cheats, v.feedback[:800])
    assert "CPU-time samples of forward ran in PyTorch's or a vendor library's compute kernels" in v.feedback, \
        v.feedback[:800]


def test_the_sampler_signal_blocked_is_tampering(verdicts):
    v = verdicts["sampler_signal_blocked_on_the_thread"]
    assert v.status == "cheat" and cheats.C11 in v.cheats, (v.status, v.cheats, v.feedback[:800])


@pytest.mark.parametrize("name", ["honest_loop_matmul_on_a_transposed_copy", "honest_vectorised_exp_on_a_copy"])
def test_own_loops_beside_pytorch_copies_and_sleef_pass(verdicts, name):
    v = verdicts[name]
    assert v.status == "pass" and v.cheats == [], (v.status, v.cheats, v.feedback[:800])


def _torch_cpu_symbol(mangled: str) -> tuple[str, int]:
    lib = str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so")
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True).stdout
    addr = next(int(line.split()[0], 16) for line in out.splitlines() if line.endswith(" " + mangled))
    return lib, addr


def test_samples_are_read_against_the_librarys_own_symbols():
    """A sample inside ``at::cpu::mm`` is compute; one inside ``at::native::view`` (an allowed op's function) is not;
    a BLAS library's and numpy's samples are compute wherever they fall; the C runtime's are left out of the share."""
    lib, mm = _torch_cpu_symbol("_ZN2at3cpu2mmERKNS_6TensorES3_")
    _, view = _torch_cpu_symbol("_ZN2at6native4viewERKNS_6TensorEN3c108ArrayRefIlEE")
    samples = {"total": 10, "at": {f"{lib}|{mm + 8:x}": 4, f"{lib}|{view + 4:x}": 1,
                                   "/x/libscipy_openblas64_-abc.so|100": 1, "/x/_multiarray_umath.cpython-311.so|20": 1,
                                   "/x/km_ext.so|40": 1, "/lib/x86_64-linux-gnu/libc.so.6|99": 2}}
    foreign, total, top = cpu_time.foreign_time(samples)
    assert (foreign, total) == (6, 8), (foreign, total, top)
    assert top[0] == "_ZN2at3cpu2mmERKNS_6TensorES3_", top
