"""The sandbox of candidate code on the cuda backend (verifier/common/sandbox.py): the GPU device nodes stay usable
(an honest CUDA kernel passes in its sandbox), and CUDA sources whose host code writes or reads outside,
leaves detached processes, forks without bound, connects to a loopback listener the test started or reads
the host's environment are blocked and named in the verdict. Run on the GPU machine:

    python -m pytest -q -m gpu tests/gpu/test_sandbox_gpu.py -rA

All escapes live in ONE .cu source (one nvcc build for the module)."""

import os
import socket
import threading
import time
from pathlib import Path

import pytest
import torch

from bench.lib import fixtures as fx
from verifier.common import sandbox
from verifier.engine import VerifyConfig
from verifier.entry import verify_candidate

HOST = VerifyConfig().host()  # the host settings of the configs below (none sets a host key)
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
              pytest.mark.skipif(not sandbox.enabled(HOST), reason=f"no sandbox: {sandbox.status(HOST).get('reason')}")]

SECRET = "kmtest-gpu-planted-secret-51d2"
ENV_SECRET = "kmtest-gpu-env-secret-9e77"

ESCAPE_CU = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

__global__ void relu_escape_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long stride = (long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) { float v = x[i]; y[i] = v > 0.0f ? v : 0.0f; }
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    int blocks = (int)std::min<long>((n + 255) / 256, 65535L);
    relu_escape_kernel<<<blocks, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}

void write_file(std::string path) {
    FILE* f = fopen(path.c_str(), "w");
    if (f) { fputs("escaped", f); fclose(f); }
}

void leak_file(std::string path) {
    FILE* f = fopen(path.c_str(), "r");
    std::string text = "could not open";
    if (f) { char buf[4096]; size_t k = fread(buf, 1, sizeof buf - 1, f); buf[k] = 0; text = buf; fclose(f); }
    TORCH_CHECK(false, "file says: ", text);
}

void leak_env(std::string name) {
    const char* v = getenv(name.c_str());
    TORCH_CHECK(false, "env says: ", v ? v : "(unset)");
}

void detach() {
    if (fork() == 0) { setsid(); prctl(PR_SET_NAME, "km-gpu-escapee", 0, 0, 0); for (int i = 0; i < 600; ++i) sleep(1); _exit(0); }
}

void fork_many(int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        pid_t p = fork();
        if (p == 0) { prctl(PR_SET_NAME, "km-gpu-bomb", 0, 0, 0); pause(); _exit(0); }
        if (p < 0) break;
    }
}

void connect_port(int64_t port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    connect(s, (sockaddr*)&a, sizeof a);
    close(s);
}
"""
CPP = ("torch::Tensor relu_cuda(torch::Tensor x); void write_file(std::string p); void leak_file(std::string p); "
       "void leak_env(std::string n); void detach(); void fork_many(int64_t n); void connect_port(int64_t port);")
FUNCS = ["relu_cuda", "write_file", "leak_file", "leak_env", "detach", "fork_many", "connect_port"]


def escape_candidate(before: str) -> str:
    return f'''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
CUDA_SRC = r"""{ESCAPE_CU}"""
CPP_SRC = "{CPP}"
ext = load_inline(name="escape_cu", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions={FUNCS!r},
                  extra_cuda_cflags=["-O2"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        {before}
        return ext.relu_cuda(x.contiguous())
'''


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    # run_timeout_s as the other files of tests/gpu give it: at 60 s an honest ReLU timed out in its timing stage
    # (55 s, no bracket done) on one H100 that six pytest workers' verifiers shared (e5fe740; 77 CUDA processes)
    return VerifyConfig(build_dir=str(tmp_path_factory.mktemp("sandbox-gpu-builds")), trials=3, timing_trials=5,
                        warmup=1, time_torch_compile=False, run_timeout_s=180, exec_workers=1)


def verify(code: str, config):
    return verify_candidate(fx.CUDA_RELU_TASK, code, backend="cuda", config=config)


def blocked(v) -> None:
    assert v.status != "pass", v.feedback
    assert v.reward <= 0.1
    assert "C17_SANDBOX_ESCAPE" in v.feedback, v.feedback


def _alive(name: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and Path(f"/proc/{d}/comm").read_text().strip() == name:
                out.append(int(d))
        except OSError:
            pass
    return out


def test_honest_cuda_kernels_pass_with_the_device_nodes(config):
    for k in range(2):
        v = verify(fx.cuda_relu_candidate(k), config)
        assert v.status == "pass", v.feedback
        assert v.versions["sandbox"]["isolation"].startswith("bubblewrap")
    v = verify(escape_candidate("pass"), config)
    assert v.status == "pass", v.feedback


def test_cuda_write_outside_is_blocked(config):
    target = Path("/tmp") / f"km-gpu-escaped-{os.getpid()}.txt"
    repo_target = Path(__file__).resolve().parents[2] / "km_gpu_escaped_by_test.txt"
    v = verify(escape_candidate(f"ext.write_file({str(target)!r})\n        ext.write_file({str(repo_target)!r})"),
               config)
    assert not target.exists() and not repo_target.exists()
    blocked(v)


def test_cuda_read_outside_and_environment_never_reach_the_feedback(config, tmp_path, monkeypatch):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    for path in (secret, Path("/etc/passwd")):
        v = verify(escape_candidate(f"ext.leak_file({str(path)!r})"), config)
        assert v.status != "pass"
        assert SECRET not in v.feedback and "root:x:0" not in v.feedback, v.feedback
    monkeypatch.setenv("KM_TEST_HOST_SECRET", ENV_SECRET)
    v = verify(escape_candidate("ext.leak_env('KM_TEST_HOST_SECRET')"), config)
    assert ENV_SECRET not in v.feedback and "(unset)" in v.feedback


def test_cuda_detached_processes_and_fork_bomb_end_with_the_verdict(config):
    v = verify(escape_candidate("ext.detach()"), config)
    blocked(v)
    assert _alive("km-gpu-escapee") == []
    v = verify(escape_candidate("ext.fork_many(5000)"), config)
    blocked(v)
    assert _alive("km-gpu-bomb") == []


def test_cuda_loopback_connect_is_blocked(config):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    got = []

    def accept():
        end = time.time() + 120
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
    assert got == [None]
    blocked(v)
