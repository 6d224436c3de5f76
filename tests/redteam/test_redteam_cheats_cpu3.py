"""Red team of the cpu backend's timing: PyTorch's kernels run in a few clocked brackets only (docs/ANTI_CHEAT.md
class 81).

On cpu the reported time is the least bracket's (a host clock is only ever slowed by load). The candidate's C++ finds
``at::cpu::mm`` in libtorch_cpu's image in memory (class 80's route: no import, no op, no named route), tells the timed
calls apart (their inputs are views into the harness's pool) and runs PyTorch's kernel on one timed call of four,
its own loop on the others. With the harness's brackets of one call (its own loop is slower than the 20 ms a bracket
aims at), one bracket of four is PyTorch's and sets the time: 1,110 us a call where its own loop takes ~10 ms, a
speedup of 1.18x over eager reported for a kernel ten times slower (reward 1.0; the interval reached 0.10). The
sampler of forward's CPU time ticked at the kernel's 4 ms and judged every timed call's samples together: the
PyTorch bracket had none, and the slow brackets outweighed it.

Closed at the root: the sampler looks at every thread's CPU clock every half millisecond of a watched call (a thread
of its own whose sleep is a high-resolution timer) and signals each thread that ran, so a short bracket gets samples;
the child sends each clocked bracket's samples apart, named by the harness's number of it; the judge
(``checks.check_bracket_samples``) reads each bracket on its own: more than half PyTorch's compute is C01; brackets
with fewer than 5 samples each (2.5 ms of CPU time) are judged together, and where even together they have too few,
they do not set the reported time (``Clocked._picked``). So the
one-call PyTorch brackets no longer set the time (judged together they are C01: 19 of 22 samples in MKL's sgemm where
the first 48 timed calls are PyTorch's, in brackets of two calls), and a PyTorch bracket long enough to be seen alone
is C01.

Class 82, PyTorch's kernels in a process of its own: forward forks, the forked process runs ``at::cpu::mm`` (one
OpenMP thread: the parent's workers are not in it) and hands the answer back through shared memory, the parent waits
for it. No thread of the candidate's process ran PyTorch's code, so neither the monitors nor the sampler saw it: a pass,
reward 1.0 (47.8 ms a call: a fork of the whole process each call). Closed: the sampler reads the CPU time of the
processes the candidate's process started and waited for with every take (``getrusage(RUSAGE_CHILDREN)``), and more
than 1 ms of it in a trial or the timed calls is ``C17_SANDBOX_ESCAPE`` (forking, as ``os.fork`` is in Python).

Class 112, PyTorch's kernels padded with the candidate's own work: PyTorch's kernel answers every call and the own
loop runs beside it, its answer thrown away, so PyTorch's compute is about a tenth of every record's samples and no
record or bracket reaches half: a pass, reward 1.0. Closed: the samples in PyTorch's or a vendor's compute are also
counted over the job's records together (each trial's forward, the timed calls), and 4 of them (about 2 ms of CPU
time; honest forwards have none) are C01 whatever their share (``cpu_time.MIN_FOREIGN_SAMPLES``).

Honest neighbour: the same loop matmul on every call passes, its time its own.
"""

import os
import threading
import time
from pathlib import Path

import pytest

from kernelmill.schema import Candidate, Task
from tests.redteam.test_redteam_cheats_cpu2 import FINDER, _candidate, _torch_cpu_symbol, mm_task
from verifier import cheats
from verifier.child.sampler import Sampler
from verifier.common.contract import TrialReport
from verifier.engine import VerifyConfig, verify_batch
from verifier.execute.brackets import Bracket, Clocked
from verifier.judge import cpu_time
from verifier.judge.checks import check_bracket_samples
from verifier.judge.outputs import Evidence

MM_TASK = mm_task(256)

# ``mode`` says which timed calls (n counts from 1) PyTorch's kernel answers, the others running the candidate's own
# loop: 1, one in four (calls 2, 6, 10...); 2, the first 48; 0, none; 3, every call, in a forked process (class 82).
# 4: every call PyTorch's, padded with the own loop beside it (class 112).
# One source for every candidate: one build
BODY = r"""
#include <ATen/Parallel.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

// PyTorch's kernel run in a process of its own: forked, its answer handed back through shared memory, waited for
static torch::Tensor in_a_forked_process(pair_fn f, const torch::Tensor& a, const torch::Tensor& b) {
    auto out = torch::empty({a.size(0), b.size(1)}, a.options());
    const size_t bytes = (size_t)out.numel() * sizeof(float);
    void* shared = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    TORCH_CHECK(shared != MAP_FAILED, "mmap");
    pid_t pid = fork();
    if (pid == 0) {
        at::set_num_threads(1);  // the parent's OpenMP workers are not in this process
        auto r = f(a, b);
        memcpy(shared, r.data_ptr<float>(), bytes);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    memcpy(out.data_ptr<float>(), shared, bytes);
    munmap(shared, bytes);
    return out;
}

static torch::Tensor own_loop(const torch::Tensor& a, const torch::Tensor& b) {
    auto ac = a.contiguous();
    auto bt = b.t().contiguous();
    const int64_t M = ac.size(0), K = ac.size(1), N = bt.size(0);
    auto out = torch::empty({M, N}, ac.options());
    const float* A = ac.data_ptr<float>(); const float* B = bt.data_ptr<float>(); float* C = out.data_ptr<float>();
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            float acc = 0.f;
            for (int64_t k = 0; k < K; ++k) acc += A[i * K + k] * B[j * K + k];
            C[i * N + j] = acc;
        }
    return out;
}

static volatile float padding_sink = 0.f;
static long timed_calls = 0;
torch::Tensor mm(torch::Tensor a, torch::Tensor b, int64_t mode) {
    pair_fn found = find_tile_fn();  // the image walked on the first (untimed) call: a PyTorch probe is fast
    if (mode == 3) {
        pair_fn f = found;
        TORCH_CHECK(f != nullptr, "tile kernel unavailable");
        return in_a_forked_process(f, a.contiguous(), b.contiguous());
    }
    if (mode == 4) {  // PyTorch's kernel answers every call; the own loop runs beside it, its answer thrown away
        pair_fn f = found;
        TORCH_CHECK(f != nullptr, "tile kernel unavailable");
        auto r = f(a.contiguous(), b.contiguous());
        auto pad = own_loop(a, b);
        padding_sink += pad.data_ptr<float>()[0];
        return r;
    }
    const bool timed = a.storage().nbytes() > (size_t)a.numel() * a.element_size();
    if (timed) {
        const long n = ++timed_calls;
        if ((mode == 1 && n % 4 == 2) || (mode == 2 && n <= 48)) {
            pair_fn f = found;
            TORCH_CHECK(f != nullptr, "tile kernel unavailable");
            return f(a.contiguous(), b.contiguous());
        }
    }
    return own_loop(a, b);
}
"""

PICKS = {
    # the probe (call 1) is the own loop, so every bracket holds one call: calls 2, 6, 10 are PyTorch's
    "pytorch_kernels_in_one_bracket_of_four": 1,
    # the probe and the calls after it PyTorch's, so the first bracket holds ~20 ms of PyTorch's calls
    "pytorch_kernels_in_the_first_brackets": 2,
    "honest_loop_matmul_on_every_call": 0,
    "pytorch_kernel_in_a_forked_process": 3,
    "pytorch_kernel_on_every_call_padded_with_own_work": 4,
}


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    task = Task.from_code(MM_TASK, name="bracketmm", source="seed", level=1)
    # the padded one on 512 x 512: MKL's ~6 ms a call is ~12 samples, the own loop beside it ~15 times as long
    padded = Task.from_code(mm_task(512), name="paddedmm", source="seed", level=1)
    items = []
    for name, mode in PICKS.items():
        code = _candidate(FINDER + BODY, "mm", "a, b", "bracket_mm").replace("ext.mm(a, b)", f"ext.mm(a, b, {mode})")
        t = padded if mode == 4 else task
        items.append((t, Candidate(candidate_id=name, task_id=t.task_id, backend="cpu", generator="redteam",
                                   code=code)))
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=3, warmup=1, time_torch_compile=False, run_timeout_s=300,
                       memory_limit_gb=4, exec_workers=1, compile_timeout_s=900)
    return dict(zip(PICKS, verify_batch(items, config=cfg, compile_workers=1)))


def test_short_pytorch_brackets_do_not_set_the_time(verdicts):
    """The one-call PyTorch brackets, judged together, are PyTorch's compute (C01); where even together they are too
    few samples to judge, they do not set the time, which is then the own loop's (many times eager's: PyTorch's
    brackets run at eager's speed, the same kernel)."""
    v = verdicts["pytorch_kernels_in_one_bracket_of_four"]
    assert v.status in ("pass", "cheat"), (v.status, v.cheats, v.feedback[:800])
    if v.status == "pass":
        assert v.eager_us and v.runtime_us > 3 * v.eager_us, (v.runtime_us, v.eager_us, v.feedback[:800])
        assert v.reward <= 1.0, v.reward
    else:
        assert cheats.C01 in v.cheats, (v.cheats, v.feedback[:800])


def test_a_pytorch_bracket_long_enough_to_be_seen_is_torch_compute(verdicts):
    v = verdicts["pytorch_kernels_in_the_first_brackets"]
    assert v.status == "cheat" and cheats.C01 in v.cheats, (v.status, v.cheats, v.feedback[:800])
    assert "Timed bracket" in v.feedback or "CPU-time samples" in v.feedback, v.feedback[:800]


def test_pytorch_kernels_in_a_process_of_its_own_are_side_work(verdicts):
    """Class 82: the forked process's CPU time (reaped, so counted in the parent's children's usage) is C17."""
    v = verdicts["pytorch_kernel_in_a_forked_process"]
    assert v.status == "cheat" and cheats.C17 in v.cheats, (v.status, v.cheats, v.feedback[:800])
    assert "processes your code started" in v.feedback, v.feedback[:800]


def test_pytorch_compute_padded_with_own_work_is_torch_compute_whatever_its_share(verdicts):
    """Class 112: PyTorch's kernel answers every call and the own loop runs beside it (its answer thrown away), so
    PyTorch's compute is about a tenth of forward's samples in every record and never more than half: a pass with
    reward 1.0 while the share alone decided. Its samples over the job's records together reach
    ``cpu_time.MIN_FOREIGN_SAMPLES``: C01, however much own work dilutes them."""
    v = verdicts["pytorch_kernel_on_every_call_padded_with_own_work"]
    assert v.status == "cheat" and cheats.C01 in v.cheats, (v.status, v.cheats, v.feedback[:800])
    assert "and the records before it" in v.feedback or "Timed bracket" in v.feedback, v.feedback[:800]


def test_the_own_loop_on_every_call_passes_with_its_own_time(verdicts):
    v = verdicts["honest_loop_matmul_on_every_call"]
    assert v.status == "pass" and v.cheats == [], (v.status, v.cheats, v.feedback[:800])
    assert v.eager_us and v.runtime_us > 3 * v.eager_us, (v.runtime_us, v.eager_us)  # its loop, not PyTorch's kernel


def _rows(*specs) -> Clocked:
    c = Clocked(host_clock=True)
    for seq, (calls, seconds) in enumerate(specs, 1):
        c.brackets.append(Bracket("candidate", calls, seconds, seq=seq))
    return c


def test_a_bracket_the_sampler_did_not_see_does_not_set_the_time():
    """Judged from the records alone: brackets of one call, the fast one with one sample (0.5 ms of CPU)."""
    clocked = _rows((1, 0.013), (1, 0.013), (1, 0.0009), (1, 0.013), (1, 0.0131))
    own = {"total": 26, "sent": 26, "at": {"/x/km_ext.so|40": 26}}
    timed = TrialReport(index=-1, cpu_brackets=[{"seq": s, **(own if s != 3 else {"total": 1, "sent": 1,
                                                                                "at": {"/x/km_ext.so|40": 1}})}
                                                for s in range(1, 6)])
    ev = Evidence()
    check_bracket_samples(timed, clocked, ev)
    assert not ev.codes and not ev.torch_codes, (ev.codes, ev.torch_codes)
    assert min(clocked.samples("candidate")) == pytest.approx(0.013)
    # a fast kernel's brackets, short alike (256 calls of a few microseconds), judged together: their time stands
    fast = _rows((256, 0.0012), (256, 0.0011), (256, 0.0024), (256, 0.0012))
    few = {"total": 2, "sent": 2, "at": {"/x/km_ext.so|40": 2}}
    timed = TrialReport(index=-1, cpu_brackets=[{"seq": 1, **few}, {"seq": 2, **few},
                                                {"seq": 3, "total": 6, "sent": 6, "at": {"/x/km_ext.so|40": 6}},
                                                {"seq": 4, **few}])
    ev = Evidence()
    check_bracket_samples(timed, fast, ev)
    assert not ev.codes and not ev.torch_codes and min(fast.samples("candidate")) == pytest.approx(0.0011 / 256)
    # short brackets whose samples together are PyTorch's compute: C01
    lib, mm = _torch_cpu_symbol("_ZN2at3cpu2mmERKNS_6TensorES3_")
    torch_few = {"total": 3, "sent": 3, "at": {f"{lib}|{mm + 8:x}": 3}}
    clocked = _rows((1, 0.013), (1, 0.0009), (1, 0.013), (1, 0.0009))
    timed = TrialReport(index=-1, cpu_brackets=[{"seq": 1, **own}, {"seq": 2, **torch_few}, {"seq": 3, **own},
                                                {"seq": 4, **torch_few}])
    ev = Evidence()
    check_bracket_samples(timed, clocked, ev)
    assert cheats.C01 in ev.torch_codes, ev.details
    # without per-bracket samples (cuda, or no sampler) nothing changes
    plain = _rows((1, 0.013), (1, 0.0009), (1, 0.013))
    check_bracket_samples(TrialReport(index=-1), plain, Evidence())
    assert min(plain.samples("candidate")) == pytest.approx(0.0009)


def test_the_sampler_sees_a_short_call_on_any_thread(shared_build_dir):
    """The sampling thread's looks are half a millisecond apart: a 30 ms busy call has several samples (tens on an
    idle host; a loaded one delays the sampling thread's wake-ups), a call on a thread started inside it too."""
    s = Sampler(str(cpu_time.build(Path(shared_build_dir))))
    s.start()
    try:
        assert not s.error and s.intact()

        def busy(sec):
            t = time.perf_counter()
            while time.perf_counter() - t < sec:
                pass

        got = []
        for on_thread in (False, True):
            s.take()
            s.on()
            if on_thread:
                th = threading.Thread(target=busy, args=(0.03,))
                th.start()
                th.join()
            else:
                busy(0.03)
            s.off()
            got.append(s.take())
        assert all(r["total"] >= 3 for r in got), got
        # a process it started and waited for: its CPU time is counted apart, never as a sample
        s.take()
        pid = os.fork()
        if pid == 0:
            busy(0.02)
            os._exit(0)
        os.waitpid(pid, 0)
        assert s.take()["children_us"] >= 10000
    finally:
        s.stop()


def test_samples_in_pytorchs_compute_count_over_the_records_together():
    """Judged from the records alone: each record's PyTorch samples a small share of it, the job's together reaching
    ``cpu_time.MIN_FOREIGN_SAMPLES`` are C01 at the record that reaches it; fewer, and an honest record's none, pass."""
    from verifier.judge.checks import check_trial_runtime

    lib, mm = _torch_cpu_symbol("_ZN2at3cpu2mmERKNS_6TensorES3_")

    def record(i, foreign):
        at = {"/x/km_ext.so|40": 100 - foreign}
        if foreign:
            at[f"{lib}|{mm + 8:x}"] = foreign
        return TrialReport(index=i, kernel_calls=1, cpu_samples={"total": 100, "sent": 100, "at": at})

    ev = Evidence()
    for i in range(3):  # one sample of a hundred in each: below the count
        check_trial_runtime(record(i, 1), f"Trial {i + 1}", ev)
    check_trial_runtime(record(9, 0), "Trial 10", ev)  # an honest record adds only to the samples seen
    assert not ev.torch_codes and not ev.codes and (ev.foreign_samples, ev.sampled) == (3, 400)
    assert cpu_time.foreign_count_limit(200) == cpu_time.MIN_FOREIGN_SAMPLES  # sqrt(200) / 4 = 3.5: the floor
    check_trial_runtime(record(10, 3), "Timed runs", ev)  # 6 of 500: over sqrt(500) / 4 = 5.6
    assert ev.torch_codes == {cheats.C01} and not ev.codes, ev.details
    assert "Timed runs and the records before it: 6 of 500" in ev.details[-1] and "at3cpu2mm" in ev.details[-1]
    said = len(ev.details)
    check_trial_runtime(record(11, 3), "Trial 12", ev)
    assert len(ev.details) == said  # said once
    # the count's limit grows with the square root of the samples: a long honest job's strays stay below it
    assert cpu_time.foreign_count_limit(1_000_000) == 250
    ev = Evidence()
    for i in range(40):  # 40 stray samples over 400,000: under the limit of 158
        check_trial_runtime(TrialReport(index=i, kernel_calls=1, cpu_samples={
            "total": 10_000, "at": {"/x/km_ext.so|40": 9_999, f"{lib}|{mm + 8:x}": 1}}), f"Trial {i + 1}", ev)
    assert not ev.torch_codes, ev.details


def test_a_sample_in_libtorchs_plt_is_a_call_on_its_way_out_not_compute():
    """The honest slow ReLU of test_redteam_boundary.py (an allocation a call, for 1.5 s) had 1 to 5 samples a record
    in libtorch_cpu's procedure linkage table, which no function symbol covers: counted as compute, the job's count
    made it C01. A PLT stub only jumps to another library: not compute; PyTorch's kernels stay compute."""
    lib, mm = _torch_cpu_symbol("_ZN2at3cpu2mmERKNS_6TensorES3_")
    syms = cpu_time._Symbols(lib)
    assert syms.stubs, "libtorch_cpu has a .plt"
    lo, hi = syms.stubs[0]
    offset = next(o_lo + lo - vaddr for o_lo, o_hi, vaddr in syms.loads if vaddr <= lo < vaddr + o_hi - o_lo)
    assert cpu_time._kind(lib, f"{offset + 16:x}") == (False, f"{Path(lib).name} {cpu_time.STUB}")
    assert cpu_time._kind(lib, f"{mm + 8:x}")[0] is True
    foreign, total, _ = cpu_time.foreign_time({"total": 10, "at": {f"{lib}|{offset + 16:x}": 5,
                                                                   "/x/km_ext.so|40": 5}})
    assert (foreign, total) == (0, 10)
