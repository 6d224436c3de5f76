"""Red team of the job directory as evidence (docs/ANTI_CHEAT.md class 37): files the verdict reads, rewritten by
the candidate after it handed them over.

An execution child writes each correctness trial's output to its job directory (``out_<i>.pt``) and the judge read it
there after the job. The job directory is the candidate's to write (it is the child's working directory), so native
code could rewrite an output later: a kernel hard-coded to the benchmark's size returned 64 rows on the extra-shape
trial and, on its next call (the first timed one), replaced that trial's output with the right answer, or copied
the reference's output there (the child saved the reference it ran after the candidate as ``ref_<i>.pt`` beside it).
C14 was then decided on a forged file. The same held for the input files the verifier ships for tasks whose inputs a
seed does not reproduce: rewritten to fit the output, the verifier's reference was computed on them.

Closed at the root, on the verifier's side of the channel (verifier/execute/channel.py): a trial's output is sealed
when the trial's record arrives, before the child gets its next seed, and a shipped input file as soon as it is
written: its bytes read then and kept (the judge reads those, never the file again), or beyond the job's keep budget
its sha256; a file changed since (its inode, size or change time moved, or its hash) is C11
(``checks.check_sealed``). The reference the child runs after the candidate leaves only a digest, never a file, and
does not run at all on the extra-shape trial. Honest twin: the same kernel without the rewrite passes, and its job
directory holds no reference output.
"""

import json
import fcntl
import os
import socket
import tempfile
import time
from pathlib import Path
from unittest import mock

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Candidate, Task
from verifier import screen
from verifier import cheats, engine
from verifier.common.contract import SOCKET_FILE
from verifier.engine import VerifyConfig, verify_batch
from verifier.execute.channel import Driver, Ledger, Unsealed

MM_TASK = fx.MATMUL_TASK.replace("torch.randn(64, 96), torch.randn(96, 48)", "torch.randn(64, 64), torch.randn(64, 64)")
assert "randn(64, 64)" in MM_TASK  # square: the extra shape changes the rows the cheat hard-codes
MM_SRC = ("#include <torch/extension.h>\n" + fx.NAIVE_MM_CPP +
          "torch::Tensor mm_any(torch::Tensor a, torch::Tensor b) { return naive_mm(a, b); }\n")


def _candidate(rewrite: bool) -> str:
    later = ('''        if self.pending is not None:  # the earlier trial's output replaced by the right answer, computed now
            name, a0, b0 = self.pending
            self.pending = None
            torch.save(ext.mm_any(a0, b0), name)
''' if rewrite else "")
    extra = ('''        if a.shape[0] != 64:  # the benchmark's size only: 64 rows now, the whole answer written over them later
            self.pending = (f"out_{self.calls - 1}.pt", a.contiguous(), b.contiguous())
            return ext.mm_any(a[:64].contiguous(), b)
''' if rewrite else "")
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = r"""{MM_SRC}"""
ext = load_inline(name="mm_sealed", cpp_sources=SRC, functions=["mm_any"], extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.pending = None
        self.calls = 0

    def forward(self, a, b):
        self.calls += 1
{later}{extra}        return ext.mm_any(a, b)
'''


CASES = {"output_rewritten_after_its_trial": (_candidate(True), "cheat"),
         "honest_general_kernel": (_candidate(False), "pass")}


@pytest.fixture(scope="module")
def verdicts(shared_build_dir):
    """Both end to end on cpu, the static scan's findings dropped (torch.save in forward is C15/C17 there): the
    seal alone decides. The files each job directory held after its child ended are kept."""
    cfg = VerifyConfig(build_dir=shared_build_dir, trials=3, timing_trials=3, warmup=1, time_torch_compile=False,
                       run_timeout_s=90, memory_limit_gb=4, exec_workers=1)
    task = Task.from_code(MM_TASK, name="sealed", source="seed", level=1)
    items = [(task, Candidate(candidate_id=n, task_id=task.task_id, backend="cpu", generator="redteam", code=c))
             for n, (c, _) in CASES.items()]
    real_scan, real_run = screen.scan, engine.run_driven
    files: dict[str, list[str]] = {}

    def scan(code, backend="cpu"):
        report = real_scan(code, backend)
        report.findings = []
        return report

    def run_driven(job, job_dir, *a, **k):
        out = real_run(job, job_dir, *a, **k)
        if job.kind == "candidate":
            files[job.candidate_code] = sorted(os.listdir(job_dir))
        return out

    with mock.patch.object(screen, "scan", scan), mock.patch.object(engine, "run_driven", run_driven):
        got = dict(zip(CASES, verify_batch(items, config=cfg, compile_workers=1)))
    return got, {n: files.get(c, []) for n, (c, _) in CASES.items()}


@pytest.mark.parametrize("name", list(CASES))
def test_a_trial_output_rewritten_after_it_was_handed_over_is_c11(verdicts, name):
    got, files = verdicts
    v, want = got[name], CASES[name][1]
    assert v.status == want, (name, v.status, v.cheats, v.feedback[:800])
    if want == "cheat":
        assert cheats.C11 in v.cheats, v.cheats
        assert "changed after it was handed to the verifier" in v.feedback, v.feedback[:800]
    else:
        assert v.cheats == [] and v.pass_strict, v.cheats
    # the reference the child ran leaves no file a candidate could copy over its own output
    assert files[name] and not [f for f in files[name] if f.startswith("ref_")], files[name]
    assert [f for f in files[name] if f.startswith("out_")], files[name]


def test_a_sealed_file_reads_back_only_as_it_was(tmp_path):
    ledger = Ledger()
    (tmp_path / "out_0.pt").write_bytes(b"first")
    ledger.seal(tmp_path, "out_0.pt")
    assert ledger.unsealed(tmp_path, "out_0.pt") == ""
    assert ledger.check(tmp_path, "out_0.pt").read_bytes() == b"first"
    (tmp_path / "out_0.pt").write_bytes(b"forged")
    assert "changed after it was handed" in ledger.unsealed(tmp_path, "out_0.pt")
    with pytest.raises(Unsealed):
        ledger.check(tmp_path, "out_0.pt")
    assert ledger.source(tmp_path, "out_0.pt").read_bytes() == b"first"  # what is read is what was handed over
    ledger.seal(tmp_path, "out_0.pt")  # the first seal stands: sealing again later changes nothing
    assert ledger.unsealed(tmp_path, "out_0.pt")
    assert "never handed" in ledger.unsealed(tmp_path, "out_1.pt")
    (tmp_path / "real.pt").write_bytes(b"x")
    os.symlink(tmp_path / "real.pt", tmp_path / "out_2.pt")  # a link is not sealed as its target
    ledger.seal(tmp_path, "out_2.pt")
    assert "not a regular file" in ledger.unsealed(tmp_path, "out_2.pt")


def test_a_kept_file_rewritten_in_place_with_its_times_put_back_still_reads_as_changed(tmp_path):
    """The attacker's refinement of the rewrite: the same size, written through a descriptor opened before the seal,
    its modification time set back afterwards. The change time moves with any write or utime and no process sets
    it, so the seal sees the change; the verdict reads the kept bytes regardless."""
    path = tmp_path / "out_0.pt"
    path.write_bytes(b"A" * 4096)
    fd = os.open(path, os.O_WRONLY)
    before = os.stat(path)
    ledger = Ledger()
    ledger.seal(tmp_path, "out_0.pt")
    time.sleep(0.02)
    os.pwrite(fd, b"B" * 4096, 0)
    os.close(fd)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == before.st_mtime_ns and path.read_bytes() == b"B" * 4096
    assert "changed after it was handed" in ledger.unsealed(tmp_path, "out_0.pt")
    assert ledger.source(tmp_path, "out_0.pt").read_bytes() == b"A" * 4096
    # replaced by a new file under the same name: another inode
    (tmp_path / "new").write_bytes(b"A" * 4096)
    ledger2 = Ledger()
    ledger2.seal(tmp_path, "out_0.pt")
    os.replace(tmp_path / "new", path)
    assert "changed after it was handed" in ledger2.unsealed(tmp_path, "out_0.pt")


def test_a_kept_output_is_loaded_mapped_from_the_verifiers_own_copy_whatever_the_job_file_becomes(tmp_path):
    """The seal copies a trial's output into a memory file of the verifier's own, which the judge maps
    (``torch.load(mmap=True)``): the job file rewritten after the seal, through a descriptor the child kept or in
    place with a same-sized forgery, changes nothing the judge loads, and the copy is let go once read."""
    import torch

    from verifier.judge.outputs import load_sealed

    path = tmp_path / "out_0.pt"
    honest, forged = torch.arange(1 << 16, dtype=torch.float32), torch.zeros(1 << 16)
    torch.save([honest], path)
    fd = os.open(path, os.O_RDWR)
    ledger = Ledger()
    ledger.seal(tmp_path, "out_0.pt")
    src = ledger.source(tmp_path, "out_0.pt")
    assert ledger.mapped("out_0.pt") and src != path and str(src).startswith("/proc/self/fd/")
    torch.save([forged], tmp_path / "forged.pt")
    data = (tmp_path / "forged.pt").read_bytes()
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))
    os.close(fd)
    assert torch.load(path, weights_only=True)[0].eq(0).all()  # the job file is the forgery now
    assert "changed after it was handed" in ledger.unsealed(tmp_path, "out_0.pt")
    maps = Path("/proc/self/maps")
    before = maps.read_text().count("/memfd:km-kept")
    (got,) = load_sealed(ledger, tmp_path, "out_0.pt")  # what the judge loads: the copy, mapped
    assert torch.equal(got, honest)
    assert maps.read_text().count("/memfd:km-kept") > before  # mapped, not read into this process's heap
    # the copy opened again by path (as another process of the same user could, through /proc/<pid>/fd where no
    # sandbox hides the verifier) cannot be written, truncated or unsealed
    again = os.open(src, os.O_RDWR)
    try:
        for forge in (lambda: os.pwrite(again, data, 0), lambda: os.ftruncate(again, 0),
                      lambda: os.write(again, data)):
            with pytest.raises(PermissionError):
                forge()
        with pytest.raises(PermissionError):
            fcntl.fcntl(again, fcntl.F_ADD_SEALS, 0)  # the seals are sealed too (F_SEAL_SEAL)
    finally:
        os.close(again)
    assert torch.equal(torch.load(src, weights_only=True, mmap=True)[0], honest)
    own = int(str(src).rsplit("/", 1)[1])
    ledger.release("out_0.pt")
    with pytest.raises(OSError):
        os.fstat(own)  # let go: no descriptor kept per output of a long run
    assert torch.equal(got, honest)  # the mapping lives on with the tensor
    assert not ledger.mapped("out_0.pt") and ledger.source(tmp_path, "out_0.pt") == path


def test_a_sparse_output_file_larger_than_the_keep_budget_is_not_read_into_the_verifiers_memory(tmp_path):
    """A file that costs the candidate nothing (sparse: a size set, no page written) must not make the verifier hold
    its size: past a job's keep budget it is hashed, streamed, and nothing of it is kept."""
    from verifier.execute.channel import KEEP_BYTES

    with open(tmp_path / "out_0.pt", "wb") as f:
        f.truncate(KEEP_BYTES + 1)
    ledger = Ledger()
    ledger.seal(tmp_path, "out_0.pt")
    assert ledger.kept == {} and ledger.keep_left == KEEP_BYTES
    assert ledger.unsealed(tmp_path, "out_0.pt") == ""
    assert KEEP_BYTES <= 2 << 30


def test_a_file_beyond_the_keep_budget_is_sealed_by_its_hash_and_read_from_disk(tmp_path):
    ledger = Ledger(keep_left=10)
    (tmp_path / "out_0.pt").write_bytes(b"small")  # 5 bytes: kept
    (tmp_path / "out_1.pt").write_bytes(b"larger than what is left")  # beyond the 5 left: hashed
    ledger.seal(tmp_path, "out_0.pt")
    ledger.seal(tmp_path, "out_1.pt")
    assert set(ledger.kept) == {"out_0.pt"} and ledger.keep_left == 5
    assert ledger.check(tmp_path, "out_1.pt") == tmp_path / "out_1.pt"
    (tmp_path / "out_1.pt").write_bytes(b"LARGER THAN WHAT IS LEFT")
    assert "changed after it was handed" in ledger.unsealed(tmp_path, "out_1.pt")
    ledger.release("out_0.pt")  # the bytes let go once read; the seal itself stays
    assert ledger.unsealed(tmp_path, "out_0.pt") == ""
    assert ledger.source(tmp_path, "out_0.pt") == tmp_path / "out_0.pt"


def test_the_channel_seals_an_output_when_its_record_arrives_and_an_input_file_once_shipped():
    job_dir = Path(tempfile.mkdtemp(prefix="km-seal-"))

    def ship(i, seed):
        (job_dir / f"trial_{i}.pt").write_bytes(f"inputs {i} {seed}".encode())

    driver = Driver(job_dir, n_trials=2, n_timing=0, on_trial=ship)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(str(job_dir / SOCKET_FILE))
    reader = conn.makefile("r")

    def ask(msg):
        conn.sendall((json.dumps(msg) + "\n").encode())
        return json.loads(reader.readline())

    assert "seed" in ask({"op": "trial", "i": 0})
    (job_dir / "out_0.pt").write_bytes(b"the candidate's answer")
    conn.sendall((json.dumps({"op": "record", "key": "trial0", "record": {"index": 0}}) + "\n").encode())
    assert "seed" in ask({"op": "trial", "i": 1})  # answered only once the record before it was read and sealed
    (job_dir / "out_0.pt").write_bytes(b"an answer found later")
    conn.close()
    time.sleep(0.3)
    ledger = driver.close()
    assert ledger.unsealed(job_dir, "trial_0.pt") == "" and ledger.unsealed(job_dir, "trial_1.pt") == ""
    assert "changed after it was handed" in ledger.unsealed(job_dir, "out_0.pt")
    assert "never handed" in ledger.unsealed(job_dir, "out_1.pt")
