"""The sandbox of candidate code (verifier/common/sandbox.py) on the cpu backend, with real bubblewrap and real
compiled extensions: C++ that writes or reads outside its directory, includes an outside file, leaves
detached processes, forks without bound, connects to a loopback listener the test started, or reads the
host's environment is blocked and named in its verdict; an honest kernel still passes.

All runtime escapes live in ONE extension (so the module compiles it once); the build-time escape (a static
initialiser, which runs in the build process) and the outside include are their own sources."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.lib import fixtures as fx
from verifier import cheats
from verifier.common import sandbox
from verifier.engine import VerifyConfig
from verifier.entry import verify_candidate

HOST = VerifyConfig().host()  # the suite's host settings, which the configs below keep
pytestmark = pytest.mark.skipif(not sandbox.enabled(HOST),
                                reason=f"no sandbox here: {sandbox.status(HOST).get('reason')}")

SECRET = "kmtest-planted-secret-7f3a91"
ENV_SECRET = "kmtest-env-secret-c0ffee42"

ESCAPE_CPP = r"""
#include <torch/extension.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const float* a = x.data_ptr<float>();
    float* b = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] > 0.f ? a[i] : 0.f;
    return y;
}

void write_file(std::string path) {  // a write outside the build directory, failure ignored
    FILE* f = fopen(path.c_str(), "w");
    if (f) { fputs("escaped", f); fclose(f); }
}

void leak_file(std::string path) {  // the file's text in an exception: would reach the feedback
    FILE* f = fopen(path.c_str(), "r");
    std::string text = "could not open";
    if (f) { char buf[4096]; size_t n = fread(buf, 1, sizeof buf - 1, f); buf[n] = 0; text = buf; fclose(f); }
    TORCH_CHECK(false, "file says: ", text);
}

void leak_env(std::string name) {
    const char* v = getenv(name.c_str());
    TORCH_CHECK(false, "env says: ", v ? v : "(unset)");
}

void detach() {  // a child in its own session that would outlive the verifier
    if (fork() == 0) {
        setsid();
        prctl(PR_SET_NAME, "km-escapee", 0, 0, 0);
        for (int i = 0; i < 600; ++i) sleep(1);
        _exit(0);
    }
}

void fork_many(int64_t n) {  // a (bounded) fork bomb
    for (int64_t i = 0; i < n; ++i) {
        pid_t p = fork();
        if (p == 0) { prctl(PR_SET_NAME, "km-bomb", 0, 0, 0); pause(); _exit(0); }
        if (p < 0) break;
    }
}

void connect_port(int64_t port) {  // a connection attempt, failure ignored
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    connect(s, (sockaddr*)&a, sizeof a);
    close(s);
}
"""
ESCAPE_FUNCS = ["relu", "write_file", "leak_file", "leak_env", "detach", "fork_many", "connect_port"]


def escape_candidate(before: str) -> str:
    """A candidate whose forward calls one escape of the shared escape extension, then an honest ReLU. Its flags are
    the suite's fixtures' (``-O2``, bench/lib/fixtures.py): the extension builds against the precompiled header the
    run has already made for them, instead of making a header set of its own (about a minute of one core on the
    2-core machine) for this one extension."""
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
CPP = r"""{ESCAPE_CPP}"""
ext = load_inline(name="escape_ext", cpp_sources=CPP, functions={ESCAPE_FUNCS!r}, extra_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        {before}
        return ext.relu(x.contiguous())
'''


@pytest.fixture(scope="module")
def config(shared_build_dir):
    # the session's build root: the honest relu extension is built once for every module that verifies it
    return VerifyConfig(build_dir=shared_build_dir, trials=2, timing_trials=2, warmup=1,
                        time_torch_compile=False, run_timeout_s=40, memory_limit_gb=4, exec_workers=1)


def verify(code: str, config, task: str = fx.RELU_TASK):
    return verify_candidate(task, code, backend="cpu", config=config)


def blocked(v) -> None:
    """An escape's verdict: a C17 cheat (reward -1), named in the feedback."""
    assert v.status == "cheat" and cheats.C17 in v.cheats, (v.status, v.cheats, v.feedback)
    assert v.reward == -1.0
    assert "C17_SANDBOX_ESCAPE" in v.feedback, v.feedback


def test_honest_kernel_passes_in_the_sandbox(config):
    v = verify(escape_candidate("pass"), config)
    assert v.status == "pass", v.feedback
    assert v.versions["sandbox"]["isolation"].startswith("bubblewrap")
    assert v.versions["sandbox"]["network"].startswith("isolated")


def test_cpp_write_outside_is_blocked(config, tmp_path):
    target = tmp_path / "escaped.txt"
    repo_target = Path(__file__).resolve().parent.parent / "km_escaped_by_test.txt"
    v = verify(escape_candidate(f"ext.write_file({str(target)!r})\n        ext.write_file({str(repo_target)!r})"),
               config)
    assert not target.exists() and not repo_target.exists()
    blocked(v)
    assert str(repo_target) in v.feedback  # named: the write went to a discarded copy


def test_cpp_read_outside_never_reaches_the_feedback(config, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    for path in (secret, Path("/etc/passwd")):
        v = verify(escape_candidate(f"ext.leak_file({str(path)!r})"), config)
        assert v.status != "pass"
        assert SECRET not in v.feedback and "root:x:0" not in v.feedback, v.feedback
        assert "could not open" in v.feedback  # the file is not in the sandbox's view at all


def test_host_environment_is_not_visible(config, monkeypatch):
    monkeypatch.setenv("KM_TEST_HOST_SECRET", ENV_SECRET)
    v = verify(escape_candidate("ext.leak_env('KM_TEST_HOST_SECRET')"), config)
    assert v.status == "crash"
    assert ENV_SECRET not in v.feedback and "(unset)" in v.feedback


def _alive(name: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and Path(f"/proc/{d}/comm").read_text().strip() == name:
                out.append(int(d))
        except OSError:
            pass
    return out


def test_detached_processes_end_with_the_verdict(config):
    v = verify(escape_candidate("ext.detach()"), config)
    blocked(v)
    assert "outlived the job" in v.feedback
    assert _alive("km-escapee") == []


def test_fork_bomb_is_bounded_and_named(config):
    v = verify(escape_candidate("ext.fork_many(5000)"), config)
    blocked(v)
    assert _alive("km-bomb") == []


def test_loopback_connect_is_blocked_and_named(config):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    got = []

    def accept():
        end = time.time() + 60
        while time.time() < end and not got:
            try:
                got.append(srv.accept()[0])
            except socket.timeout:
                pass
    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        v = verify(escape_candidate(f"ext.connect_port({port})"), config)
    finally:
        got.append(None)
        t.join()
        srv.close()
    assert got == [None], "the candidate reached the test's listener"
    blocked(v)
    assert "network use" in v.feedback


def test_include_of_an_outside_file_shows_no_text(config, tmp_path):
    secret = tmp_path / "secret.h"
    secret.write_text(f"{SECRET} this is not C++\n")
    for path in (secret, Path("/etc/passwd")):
        code = fx.cpu_candidate("return ext2.relu(x)", module=f'ext2 = load_inline(name="inc", cpp_sources='
                                f'"#include \\"{path}\\"\\nint f() {{ return 1; }}", functions=["f"])')
        v = verify(code, config)
        assert v.status == "compile_error", v.feedback
        assert SECRET not in v.feedback and "root:x:0" not in v.feedback and "root:x:0" not in v.compile_log
        assert SECRET not in v.compile_log


def test_static_initialiser_escape_fails_the_build(config, tmp_path):
    """C++ run by the build process itself (a static initialiser runs when the built module is imported)."""
    target = Path("/tmp") / f"km-escaped-at-build-{os.getpid()}.txt"  # a directory the view has
    cpp = (r'#include <cstdio>' + "\n" + r'static int km_init = [] { FILE* f = fopen("' + str(target) +
           r'", "w"); if (f) { fputs("x", f); fclose(f); } return 0; }();' + "\nint f() { return km_init; }")
    code = fx.cpu_candidate("ext2.f()\nreturn ext.relu(x)", module=f'ext2 = load_inline(name="init", '
                            f'cpp_sources={cpp!r}, functions=["f"])')
    v = verify(code, config)
    assert not target.exists()
    assert v.status == "cheat" and v.cheats == [cheats.C17], (v.status, v.cheats, v.feedback)
    assert "C17_SANDBOX_ESCAPE" in v.compile_log and str(target) in v.feedback


# ---------------------------------------------------------------- the mechanisms, without torch


def _box(tmp_path, host=HOST, **kw):
    root = tmp_path / "root"
    root.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    return sandbox.Sandbox(root, writable=[str(work)], host=host, **kw), work


def test_view_is_read_only_but_the_writable_dir(tmp_path):
    box, work = _box(tmp_path)
    outside = tmp_path / "outside.txt"
    script = ("import os\nprint(os.path.exists('/etc/passwd'), os.path.exists(os.path.expanduser('~/.bashrc')))\n"
              f"open({str(work / 'ok')!r}, 'w').write('x')\n"
              f"open({str(outside)!r}, 'w').write('x')\n"
              "for p in ('/usr/evil', '/etc/passwd'):\n"
              "    try:\n        open(p, 'w')\n    except OSError as e:\n        print(type(e).__name__)\n")
    r = subprocess.run(box.argv([sys.executable, "-c", script]), capture_output=True, text=True, env={}, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (work / "ok").is_file() and not outside.exists()
    assert r.stdout.startswith("False False") and "OSError" in r.stdout  # /usr is a read-only bind
    # a write outside the writable dir never reaches the host, and is listed (and cleared) for the verdict
    assert box.outside_writes(clear=False) == sorted(["/etc/passwd", str(outside)])
    assert len(box.outside_writes()) == 2
    assert box.outside_writes() == []


def _supervised(tmp_path, script: str, timeout: float,
                host=HOST) -> tuple[subprocess.CompletedProcess, list, float]:
    """Run ``script`` under ``python -m verifier.common.sandbox --supervise`` in a fresh sandbox (no cgroup) with the
    host settings ``host``: its result, the supervisor's findings and the seconds it took."""
    box, _ = _box(tmp_path, host)
    r, w = os.pipe()
    cmd = box.argv(sandbox.supervise_argv(w, [sys.executable, "-c", script], host),
                   {"PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    t0 = time.time()
    p = subprocess.run(cmd, env={}, pass_fds=(w,), timeout=timeout, capture_output=True, text=True)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    return p, json.loads(text) if text.strip() else [], time.time() - t0


def test_supervisor_ends_detached_processes_and_sees_network_use(tmp_path):
    script = ("import os, socket, time\n"
              "if os.fork() == 0:\n    os.setsid()\n    time.sleep(300)\n    os._exit(0)\n"
              "s = socket.socket()\ns.settimeout(1)\n"
              "try:\n    s.connect(('127.0.0.1', 9))\nexcept OSError:\n    pass\n")
    p, findings, took = _supervised(tmp_path, script, 60)
    assert p.returncode == 0, p.stderr
    assert took < 30
    assert any("outlived the job" in x for x in findings) and any("network use" in x for x in findings), findings


def test_supervisor_bounds_a_fork_bomb_without_a_cgroup(tmp_path):
    """The GPU box delegates no pids controller: the supervisor's own process count ends a fork bomb there.
    Started here without the cgroup (plain subprocess), so only the count can stop it."""
    script = ("import os, signal, time\n"
              "for i in range(5000):\n"
              "    if os.fork() == 0:\n        signal.pause()\n        os._exit(0)\n"
              "time.sleep(300)\n")
    # [verify] sandbox_procs reaches the supervisor (its argv)
    p, findings, took = _supervised(tmp_path, script, 120, VerifyConfig(sandbox_procs=64).host())
    assert took < 60, "the bomb ran until the job's own end"
    assert p.returncode != 0
    assert any("fork bomb" in x and "at most 64 " in x for x in findings), findings


def test_redaction_of_compiler_text_and_host_values(tmp_path):
    own = tmp_path / "build"
    log = (f"{own}/main.cpp:3:1: error: expected ';'\n    3 | int x\n      | ^\n"
           f"/etc/passwd:1:5: error: 'root' does not name a type\n    1 | root:x:0:0:root:/root:/bin/bash\n"
           f"      | ^~~~\n{tmp_path}/secret.h:1:1: error: {SECRET} was not declared\n")
    out = sandbox.redact_compiler_log(log, [str(own)])
    assert "int x" in out and "expected ';'" in out
    assert "root:x" not in out and "'root'" not in out and SECRET not in out
    assert "/etc/passwd:1:" in out
    assert sandbox.redact_env(f"value {ENV_SECRET}!", [ENV_SECRET]) == "value [host environment value withheld]!"


def test_cli_binary_candidate_gets_a_verdict(tmp_path):
    """A candidate file that is not text is the candidate's problem: a verdict and exit 0 (README), not exit 2."""
    task = tmp_path / "task.py"
    task.write_text(fx.RELU_TASK)
    cand = tmp_path / "cand.bin"
    cand.write_bytes(bytes(range(256)) * 8)
    r = subprocess.run([sys.executable, "-m", "flows.cli", "verify", str(task), str(cand), "--backend", "cpu",
                        "--json"], capture_output=True, text=True, timeout=300,
                       cwd=Path(__file__).resolve().parent.parent,
                       env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent)))
    assert r.returncode == 0, r.stderr[-2000:]
    import json
    assert json.loads(r.stdout)["status"] == "extract_error"


def test_sigkilled_build_leaves_no_compiler(tmp_path):
    """The build runs in a sandbox that dies with its parent: SIGKILL of the verifying process ends the compiler."""
    script = ("import sys\nfrom verifier.build.pool import build_blocking\nfrom bench.lib import fixtures as fx\n"
              "from kernelmill.config import load_settings\n"
              "build_blocking(sys.argv[1], dict(cpp_sources=fx.SHARED_CPP + '\\n// kill test',"
              " functions=fx.SHARED_FUNCS), 300, host=load_settings().verify.host())\n")  # KERNELMILL_VERIFY_PCH=false
    root = Path(__file__).resolve().parent.parent
    p = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], cwd=root,
                         env=dict(os.environ, PYTHONPATH=str(root), KERNELMILL_VERIFY_PCH="false"))
    def ours() -> list[int]:  # this build's compiler only (other builds may run on a shared machine)
        out = []
        for pid in _alive("cc1plus"):
            try:
                if str(tmp_path) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    out.append(pid)
            except OSError:
                pass
        return out

    end = time.time() + 120
    while time.time() < end and not ours():
        time.sleep(0.2)
    assert ours(), "the compiler never started"
    p.kill()
    p.wait()
    end = time.time() + 10
    while time.time() < end and ours():
        time.sleep(0.2)
    assert ours() == []


def test_child_report_withholds_host_environment_values(tmp_path, monkeypatch):
    """Redaction on read (verifier/common/contract.py): the error strings a child wrote never carry host env values,
    even where no sandbox cleared the child's environment."""
    import json as _json

    from verifier.common.contract import REPORT_FILE, ChildReport

    monkeypatch.setenv("KM_TEST_HOST_SECRET", ENV_SECRET)
    (tmp_path / REPORT_FILE).write_text(_json.dumps({"kind": "candidate", "import_error": f"boom {ENV_SECRET}",
                                                     "trials": [{"index": 0, "error": f"x{ENV_SECRET}y"}]}))
    rep = ChildReport.read(tmp_path)
    assert ENV_SECRET not in rep.import_error and ENV_SECRET not in rep.trials[0].error
    assert "withheld" in rep.import_error


def test_a_warm_process_whose_warm_up_failed_takes_no_job(tmp_path):
    """A pre-forked child whose warm-up failed (its CUDA context made while the device was short of memory, say)
    ends without taking a job: the server forks the job's process when the job comes, and that one starts cold.
    Before, the broken child took the job, and the retry of its verifier_error met the next child forked right
    after the failure (on an H200 under ten test workers, three retries over 85 s all failed at the profiler's
    first stop with 'CUDA error: out of memory')."""
    from verifier.common import childenv
    from verifier.execute.processes import child_env

    jobs = [tmp_path / "a", tmp_path / "b"]
    for j in jobs:
        j.mkdir()
    env = child_env(HOST, **{childenv.WARM_BACKEND: "cpu", childenv.SERVE_WARM: "1"}, OMP_NUM_THREADS="1")
    fake = ("import runpy, sys\nfrom verifier.child import forkserver\n"
            "forkserver._warm_up = lambda: ['warm-up failed:\\nRuntimeError: CUDA error: out of memory']\n"
            "sys.argv = ['worker', '--serve', '128']\nrunpy.run_module('verifier.child.worker', run_name='__main__')")
    p = subprocess.run([sys.executable, "-c", fake], input="".join(f"{j}\t60\n" for j in jobs), env=env,
                       capture_output=True, text=True, timeout=120, cwd=str(Path(__file__).resolve().parents[1]))
    answers = p.stdout.splitlines()
    assert len(answers) == 2 and all(a.split("\t")[1] == "0" for a in answers), (p.stdout, p.stderr[-2000:])
    for j in jobs:
        log = (j / "child.log").read_text()
        assert log.startswith("[verifier] the process forked ahead of this job did not take it: its warm-up failed"), log
        assert "started cold" in log.splitlines()[0] and "warm execution process ready" not in log, log
        assert "job.json" in log, log  # the job itself ran in the cold process (and failed: its dir has no job)


def test_warm_execution_process_warms_up_without_error(tmp_path):
    """A warm fork server (verifier.child.worker --serve, childenv.SERVE_WARM) forks the next job's child before the job
    exists, and that child initialises (cuda: CUDA context, profiler) first; its own first line in the job's
    log says so, and whether that failed (a local-name bug once made every warm-up fail, so each cuda job
    paid the CUDA context and the profiler's start itself)."""
    from verifier.common import childenv
    from verifier.execute.processes import child_env

    job = tmp_path / "job"
    job.mkdir()
    env = child_env(HOST, **{childenv.WARM_BACKEND: "cpu", childenv.SERVE_WARM: "1"}, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "verifier.child.worker", "--serve", "128"], input=f"{job}\t60\n", env=env,
                       capture_output=True, text=True, timeout=120)
    log = (job / "child.log").read_text()
    assert log.startswith("[verifier] warm execution process ready in"), (log, p.stderr)
    assert "(forked by its fork server)" in log.splitlines()[0], log
    assert "warm-up failed" not in log, log
    rc, timed_out, findings = p.stdout.splitlines()[0].split("\t")  # the protocol line, nothing before it
    assert timed_out == "0" and rc != "0", p.stdout  # the job itself fails: its dir has no job.json
