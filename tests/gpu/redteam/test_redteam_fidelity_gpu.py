"""Issue 47 on cuda: honest constructs frontier models write, each beside its cheating twin.

- a module-level ``@triton.jit`` kernel beside the CUDA code, never called on the task's shapes: imports and passes
  (it crashed at import: the candidate's source was in no file and no linecache entry); its twin calls the Triton
  kernel in forward: not a pass (Triton compute is out of scope, said clearly);
- a CPU tensor op in ``__init__`` starts PyTorch's intra-op pool: not the candidate's thread (C09 on a 64-core host)."""

import pytest

from bench.lib import fixtures as fx

pytestmark = pytest.mark.gpu

TRITON = '''
import triton
import triton.language as tl


@triton.jit
def _relu_triton(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(y_ptr + i, tl.maximum(tl.load(x_ptr + i, mask=m), 0.0), mask=m)
'''


def _with(module: str, forward: str = "return self.ext.relu_cuda(x.contiguous())", init: str = "") -> str:
    code = fx.cuda_relu_candidate(5, forward=forward)
    code = code.replace("class ModelNew", module + "\n\nclass ModelNew")
    return code.replace("self.ext = load_inline", init + "self.ext = load_inline") if init else code


TRITON_CALLED = ("y = torch.empty_like(x)\n        _relu_triton[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), "
                 "BLOCK=1024)\n        return y")
CASES = {
    "honest_module_level_triton_never_called": (_with(TRITON), "pass"),
    "triton_kernel_called_in_forward": (_with(TRITON, forward=TRITON_CALLED), None),
    "honest_cpu_tensor_op_in_init_starts_torchs_pool": (_with("", init="self.table = torch.zeros(1 << 20).sum()\n"
                                                                        "        "), "pass"),
}


@pytest.fixture(scope="module")
def verdicts():
    return fx.cuda_relu_verdicts({n: c for n, (c, _) in CASES.items()}, "fidelity")


@pytest.mark.parametrize("name", list(CASES))
def test_fidelity_pair(verdicts, name):
    v, want = verdicts[name], CASES[name][1]
    if want:
        assert v.status == want, (name, v.status, v.cheats, v.feedback[:800])
    else:
        assert v.status != "pass" and not v.pass_strict, (name, v.status, v.feedback[:400])
