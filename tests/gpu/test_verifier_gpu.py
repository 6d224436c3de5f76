"""The verifier on the cuda backend (marker gpu): honest CUDA kernels pass with timings against eager and
torch.compile; the rows that need CUDA (side stream, stale memory through the caching allocator, an
illegal memory access, a kernel never launched) each get a cheating candidate and an honest look-alike.
Runs as `pytest -m gpu tests/gpu`, or as a plain script where pytest is absent."""

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pytest  # noqa: E402
import torch  # noqa: E402

from bench.lib import fixtures as fx  # noqa: E402
from kernelmill.schema import Candidate, Task  # noqa: E402
from verifier import cheats  # noqa: E402
from verifier.engine import VerifyConfig, verify_batch  # noqa: E402

pytestmark = pytest.mark.gpu

OOB_SRC = fx.cuda_relu_candidate(900).replace("y[i] = v > 0.0f ? v : 0.0f;", "y[i + (1L << 40)] = v;")
ATEN_SRC = fx.cuda_relu_candidate(901).replace(
    "relu_kernel_901<<<blocks, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);\n    return y;",
    "return at::relu(x);")
# A ReLU whose first thread also spins ~200 us: long enough that hiding it from the timer would pay.
SPIN = "if (blockIdx.x == 0 && threadIdx.x == 0) { long long t0 = clock64(); while (clock64() - t0 < 400000) {} }\n    "
SLOW_SRC = fx.cuda_relu_candidate(902).replace("long i = (long)blockIdx.x", SPIN + "long i = (long)blockIdx.x")
# C09 in C++: the kernel goes to a private non-blocking stream that the timing events never see.
HIDDEN_SRC = fx.cuda_relu_candidate(903).replace("long i = (long)blockIdx.x", SPIN + "long i = (long)blockIdx.x").replace(
    "relu_kernel_903<<<blocks, threads>>>",
    "static cudaStream_t side = nullptr;\n    if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);\n"
    "    relu_kernel_903<<<blocks, threads, 0, side>>>")
# The CUDA source defines its own pybind11 module: the 'light' build (torch/extension.h removed) cannot
# compile it, so the verifier must fall back to the unchanged build and still pass it.
PYBIND_IN_CU_SRC = fx.cuda_relu_candidate(904).replace(
    "    return y;\n}\n", "    return y;\n}\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"relu_cuda\", &relu_cuda); }\n"
).replace('functions=["relu_cuda"], ', "").replace('CPP_SRC = "torch::Tensor relu_cuda(torch::Tensor x);"', 'CPP_SRC = ""')
# The split build (verifier/build/split.py) on what model-written sources hold: a struct parameter, a __host__
# __device__ helper both sides call, a launch on torch's current stream with dim3 sizes.
SPLIT_SRC = fx.cuda_relu_candidate(906).replace(
    "#include <cuda_runtime.h>", "#include <cuda_runtime.h>\n#include <ATen/cuda/CUDAContext.h>\n"
    "struct Relu906 { float lo; };\n__host__ __device__ inline float clamp906(float v, float lo) { return v > lo ? v : 0.0f; }"
).replace("__global__ void relu_kernel_906(", "__global__ void relu_kernel_906(Relu906 p, ").replace(
    "y[i] = v > 0.0f ? v : 0.0f;", "y[i] = clamp906(v, p.lo);").replace(
    "relu_kernel_906<<<blocks, threads>>>(", "relu_kernel_906<<<dim3(blocks), dim3(threads), 0, "
    "at::cuda::getCurrentCUDAStream()>>>(Relu906{clamp906(-1.0f, 0.0f)}, ")
# Host code that asks whether nvcc compiles it: compiled apart from nvcc it would call torch's relu (a cheat);
# as written it launches its kernel. The split keeps it whole, so its verdict is that of the code as written.
CUDACC_SRC = fx.cuda_relu_candidate(907).replace(
    "    auto y = torch::empty_like(x);", "#ifndef __CUDACC__\n    return torch::relu(x);\n#endif\n    auto y = torch::empty_like(x);")
CASES = {
    "split_build_variant": (SPLIT_SRC, "pass", None),
    "host_code_asking_for_nvcc_is_built_as_written": (CUDACC_SRC, "pass", None),
    "bare_build_variant": (fx.cuda_relu_bare_candidate(905), "pass", None),
    "pybind_in_cuda_source_falls_back": (PYBIND_IN_CU_SRC, "pass", None),
    "c09_cpp_side_stream": (HIDDEN_SRC, None, None),  # judged by test_side_stream_work_is_not_hidden
    "c09_honest_slow_kernel_on_current_stream": (SLOW_SRC, "pass", None),
    "honest": (fx.cuda_relu_candidate(0), "pass", None),
    "c09_side_stream": (fx.cuda_relu_candidate(0, forward="s = torch.cuda.Stream()\n        with torch.cuda.stream(s):\n"
                                                        "            return self.ext.relu_cuda(x)"), "cheat", cheats.C09),
    "c09_honest_current_stream": (fx.cuda_relu_candidate(0, forward="s = torch.cuda.current_stream()\n        "
                                                                   "return self.ext.relu_cuda(x)"), "pass", None),
    "c06_stale_cuda": (fx.cuda_relu_candidate(0, forward="out = torch.empty_like(x)\n        self.ext.relu_cuda(x[:1])\n"
                                                       "        return out"), "cheat", cheats.C06),
    "c06_honest_empty": (fx.cuda_relu_candidate(0, forward="x = x.contiguous().view(x.shape)\n        "
                                                         "return self.ext.relu_cuda(x)"), "pass", None),
    "c02_kernel_never_launched": (ATEN_SRC, "cheat", cheats.C02),
    "illegal_memory_access": (OOB_SRC, "crash", None),
    "honest_after_crash": (fx.cuda_relu_candidate(1), "pass", None),
    # a forward that waits on the host (a synchronize, an .item()): it cannot queue its timed calls ahead of the
    # harness's gate, so each bracket comes late; judged as any other, and its later brackets do not hold the
    # device alone for the full queue wait each (test_a_forward_that_waits_on_the_host_is_timed_without_idle_waits)
    "honest_host_sync_in_forward": (fx.cuda_relu_candidate(2, forward="torch.cuda.synchronize()\n        "
                                                                     "return self.ext.relu_cuda(x.contiguous())"),
                                    "pass", None),
}


BUILD_DIR = os.environ.get("KM_GPU_BUILDS") or tempfile.mkdtemp(prefix="km-gpu-builds-")


def _run_cases():
    task = Task.from_code(fx.CUDA_RELU_TASK, name="relu_cuda", source="seed", level=1)
    cfg = VerifyConfig(build_dir=BUILD_DIR,
                       timing_trials=5, time_torch_compile=True, run_timeout_s=180, exec_workers=4)
    fx.make_headers(cfg, fx.CUDA_EXT_SPEC)  # test_build_variants_on_gpu asks that the builds used them
    items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cuda", generator="test", code=c))
             for n, (c, _, _) in CASES.items()]
    return dict(zip(CASES, verify_batch(items, config=cfg, compile_workers=os.cpu_count())))


_CACHE = {}


def verdicts():
    if not _CACHE:
        _CACHE.update(_run_cases())
    return _CACHE


@pytest.mark.parametrize("name", list(CASES))
def test_gpu_case(name):
    v = verdicts()[name]
    _, status, code = CASES[name]
    if status is None:
        return
    print(name, v.status, v.cheats, v.runtime_us, v.eager_us, v.compile_us, v.device)
    assert v.status == status, (name, v.status, v.cheats, v.feedback)
    if code:
        assert code in v.cheats, (name, v.cheats, v.feedback)
    if status == "pass":
        assert v.correct and v.stage_reached == "timing" and v.runtime_us > 0 and v.eager_us > 0
        assert v.compile_us and v.speedup_compile > 0, v.feedback
        assert "H100" in v.device or "H200" in v.device or torch.cuda.get_device_name(0) in v.device


def test_a_forward_that_waits_on_the_host_is_timed_without_idle_waits():
    """Its child finds that it waits on the host (verifier/child/timing.py forward_waits_on_host) and says so: every
    bracket's gate opens after LATE_QUEUE_WAIT_S (verifier/execute/harness.py), none waits QUEUE_WAIT_S for calls that
    cannot be queued with the device held alone (LATE_RUN of them did before the hint, 4 s a model). An honest
    forward that does not wait is not hinted."""
    from verifier.execute.harness import LATE_RUN, QUEUE_WAIT_S

    v = verdicts()["honest_host_sync_in_forward"]
    assert v.status == "pass", v.feedback
    t = v.versions["timing"]
    print("timing", v.stage_seconds.get("child_timing_brackets"), v.stage_seconds.get("harness_queue"), t)
    assert t["host_waits"] and not t["host_waits_taken_back"], t
    assert t["late"] > LATE_RUN, t  # it was late, bracket after bracket
    # no bracket's gate was given the full wait (each bracket's bound, recorded by the harness: load-independent)
    assert t["full_gate_waits"] == 0, t
    # and the harness's waits for the child's calls (``harness_queue``) stay under what the LATE_RUN full waits alone
    # cost before the hint: a loose bound, since each short wait of a harness on a loaded host (ten test workers on
    # one device, their builds) overshoots by its wake-up (e514965 went past 0.05 s a bracket)
    assert v.stage_seconds["harness_queue"] < QUEUE_WAIT_S * LATE_RUN, (v.stage_seconds, t)
    honest = verdicts()["honest"].versions["timing"]
    # not hinted, so every gate of it was given the full wait (it needed none: its calls were queued in time)
    assert honest["host_waits"] is False and honest["full_gate_waits"] == honest["brackets"], honest
    # a false hint (the red team's: tests/gpu/redteam/test_redteam_omnipotent_gpu.py forges it on every bracket) is
    # taken back by the first bracket that comes in time, and the model's time is unchanged


def _variant_of(name: str) -> dict:
    """The build record (result.json) of a case's extension, found by a kernel name in its build dir."""
    import json

    marker = {"bare_build_variant": "relu_bare_905", "pybind_in_cuda_source_falls_back": "relu_kernel_904",
              "honest": "relu_kernel_0(", "split_build_variant": "relu_kernel_906(",
              "host_code_asking_for_nvcc_is_built_as_written": "relu_kernel_907("}[name]
    verdicts()
    for key_dir in Path(BUILD_DIR).iterdir():
        spec = key_dir / "spec.json"
        if spec.is_file() and marker in spec.read_text():
            return json.loads((key_dir / "result.json").read_text())
    raise AssertionError(f"no build of {name} in {BUILD_DIR}")


def test_build_variants_on_gpu():
    """A torch-free CUDA source builds as 'bare'; a KernelBench-style source (torch/extension.h, torch::Tensor,
    torch::empty_like, a kernel launched by a host function) as 'split' (its host code in a unit of its own under
    slim's headers, its kernels by nvcc without torch, verifier/build/split.py); one that defines its pybind11
    module inside the CUDA source as 'split_ext' (that host part under torch/extension.h, which slim does not take;
    slim and light cannot build that source); host code that asks whether nvcc compiles it is not split (slim)."""
    assert _variant_of("bare_build_variant")["variant"] == "bare"
    assert _variant_of("honest")["variant"] == "split"
    assert _variant_of("split_build_variant")["variant"] == "split"
    assert _variant_of("host_code_asking_for_nvcc_is_built_as_written")["variant"] == "slim"
    # its host part (the module definition with it) goes to the binding file, which includes torch/extension.h
    assert _variant_of("pybind_in_cuda_source_falls_back")["variant"] == "split_ext"
    assert all(_variant_of(n)["pch"] for n in ("bare_build_variant", "honest"))


def test_illegal_access_feedback():
    v = verdicts()["illegal_memory_access"]
    assert "illegal memory access" in v.feedback.lower() or "SIG" in v.feedback, v.feedback


if __name__ == "__main__":
    failed = 0
    for n in CASES:
        try:
            test_gpu_case(n)
            print("PASS", n)
        except AssertionError as e:
            failed += 1
            print("FAIL", n, str(e)[:800])
    try:
        test_illegal_access_feedback()
        print("PASS illegal_access_feedback")
    except AssertionError as e:
        failed += 1
        print("FAIL illegal_access_feedback", str(e)[:800])
    sys.exit(1 if failed else 0)


def test_side_stream_work_is_not_hidden():
    """Work launched from C++ on a private non-blocking stream either counts in the timed region (on the
    H200 the current-stream events did wait for it) or is flagged C09 by the wall-minus-event check: it
    never makes a candidate look faster than the same kernel on the current stream."""
    v, slow = verdicts()["c09_cpp_side_stream"], verdicts()["c09_honest_slow_kernel_on_current_stream"]
    assert slow.status == "pass" and slow.runtime_us > 100, slow.feedback
    if v.status == "cheat":
        # C09 from the idle-gap probes, C01 from the time coverage, or C16: the harness read a timed output the
        # side stream had not finished when the child's done passed. Either way it is not passed faster.
        assert {cheats.C09, cheats.C01, cheats.C16} & set(v.cheats), v.feedback
    elif v.status == "wrong":
        # a race of the candidate's own: its output was allocated on the current stream, where the verifier's
        # poison fill of freed memory was still queued, and written on a stream ordered after nothing. Blocks that
        # ran before the fill reached their elements lost them to it (on one H100 at e5fe740: all but the
        # spinning warp's 32 elements "never written"). Wrong, never passed faster.
        assert "never written" in v.feedback, v.feedback
    else:
        assert v.status == "pass" and v.runtime_us >= 0.8 * slow.runtime_us, (
            v.status, v.runtime_us, slow.runtime_us, v.versions.get("timing"), v.feedback[:600])


def test_the_host_wait_check_tells_forwards_that_wait_from_those_that_do_not():
    """verifier/child/timing.py forward_waits_on_host, each answer five times: forwards that synchronise or read a
    value back (whatever device work they queue after the wait) are found waiting; asynchronous ones, a short ReLU,
    200 launches and a long matmul chain, are not (at 14885cc + the check's fix, on one H200: 20-52 ms a check)."""
    from verifier.child.timing import forward_waits_on_host
    from verifier.common.backends import CudaBackend

    b, x = CudaBackend(), torch.randn(4096, 4096, device="cuda")
    waits = {"sync_then_relu": lambda t: (torch.cuda.synchronize(), torch.relu(t))[1],
             "relu_then_item": lambda t: (lambda y: (float(y.view(-1)[0]), y)[1])(torch.relu(t)),
             "matmul_then_sync": lambda t: (lambda y: (torch.cuda.synchronize(), y)[1])(t @ t)}
    not_waits = {"relu": torch.relu, "200_launches": lambda t: [t.add_(0.0) for _ in range(200)][-1],
                 "matmul_chain": lambda t: torch.tanh(t @ t @ t)}
    for name, fn in {**waits, **not_waits}.items():
        got = [forward_waits_on_host(b, fn, lambda s: [x], [1, 2, 3]) for _ in range(5)]
        assert got == [name in waits] * 5, (name, got)


def test_a_tasks_plan_measures_its_forwards_intermediates():
    """The plan measures what the reference's forward holds beyond its inputs and outputs (TaskPlan.work_bytes), and a
    job of its task is admitted by it: a forward of 4 MiB in and out that builds a 256 MiB intermediate plans at least
    that much, one with no intermediate far less (an H100's real batch at cc46f2f ran 21 of 160 candidates out of
    device memory while the gate counted such jobs by their inputs and outputs alone)."""
    from verifier.execute import admission
    from verifier.judge import plan as plan_mod

    heavy = fx.RELU_TASK.replace("return torch.relu(x)", "return torch.relu(x.repeat(64, 1)).view(64, *x.shape).sum(0)")
    heavy = heavy.replace("torch.randn(64, 1000)", "torch.randn(1024, 1024)")
    light = fx.RELU_TASK.replace("torch.randn(64, 1000)", "torch.randn(1024, 1024)")
    assert heavy != light != fx.RELU_TASK
    cfg = VerifyConfig(build_dir=tempfile.mkdtemp(prefix="km-plan-gpu-"), other_shape=False)
    h = plan_mod.task_plan(heavy, "cuda", cfg, "heavy")
    li = plan_mod.task_plan(light, "cuda", cfg, "light")
    assert h.work_bytes >= 256 << 20 > 16 * li.work_bytes, (h.work_bytes, li.work_bytes)
    assert h.job_bytes() - li.job_bytes() >= admission.WORK_COPIES * (256 << 20), (h.job_bytes(), li.job_bytes())


# A process of the verifier's waiting on its device sleeps (verifier/common/hostwait.py): the fork server's warm-up of
# a child sets it before the CUDA context, and a synchronize on a long kernel then costs the process little CPU; under
# [verify] host_waits = "spin" (the server's children told so) CUDA's default spin holds a core the whole wait. A
# timing phase (``hostwait.held_alone``, the children's one spelling) spins as CUDA's default does, and blocks again
# after it.
_WAIT_PROBE = r"""
import json, os, time, torch
from verifier.child import forkserver
from verifier.common import hostwait
notes = forkserver._warm_up()
x = torch.ones(1, device="cuda")
torch.cuda.synchronize()


def wait():
    t0, c0 = time.perf_counter(), time.process_time()
    torch.cuda._sleep(1_200_000_000)  # clock cycles of one thread: about 0.6 s at 2 GHz
    torch.cuda.synchronize()
    return {"blocking": hostwait.waits_blocking(), "wall": time.perf_counter() - t0, "cpu": time.process_time() - c0}


got = wait()
with hostwait.held_alone("cuda") as changed:
    timing = dict(wait(), changed=changed)
print(json.dumps(dict(got, notes=notes, timing=timing, after=hostwait.waits_blocking())))
"""


@pytest.mark.parametrize("spin", [False, True], ids=["block", "spin"])
def test_verifier_process_waits_for_the_device_asleep(spin):
    import json
    import subprocess

    from verifier.common import childenv

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]),
               **{childenv.HOST_WAITS: "spin" if spin else "block"})
    out = subprocess.run([sys.executable, "-c", _WAIT_PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["notes"] == [] and got["wall"] > 0.3, got
    timing = got["timing"]
    assert timing["blocking"] is False and timing["cpu"] > 0.5 * timing["wall"], got  # a timing phase spins
    if spin:
        assert got["blocking"] is False and got["cpu"] > 0.5 * got["wall"], got
        assert timing["changed"] is False and got["after"] is False, got
    else:
        assert got["blocking"] is True and got["cpu"] < 0.2 * got["wall"], got
        assert timing["changed"] is True and got["after"] is True, got
