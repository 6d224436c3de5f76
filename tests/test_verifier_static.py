"""Verifier stages that need no compiler: extraction, static legality (one cheating candidate and one
honest look-alike per statically visible cheat), reward table, metrics."""

import itertools
import math
import statistics
import random

import pytest

from bench.lib import fixtures as fx
from kernelmill.schema import Verdict
from verifier import cheats
from verifier.front.extract import check_candidate_shape, extract_code
from verifier.serve.metrics import pass_at_k, summarize_verdicts
from verifier.judge.reward import reward_for
from verifier.front.static import scan


def test_extract_prefers_block_with_modelnew():
    resp = "Here:\n```python\nprint('hi')\n```\nand\n```python\nclass ModelNew:\n    pass\n```\nDone."
    assert extract_code(resp).startswith("class ModelNew")
    assert extract_code(fx.HONEST_RELU) == fx.HONEST_RELU
    assert extract_code("no code here, sorry") == ""
    assert extract_code("") == ""


def test_candidate_shape_problems():
    assert check_candidate_shape("", "cpu")
    assert any("ModelNew" in p for p in check_candidate_shape("import torch\nx = 1\n", "cpu"))
    assert any("__global__" in p for p in check_candidate_shape(fx.HONEST_RELU, "cuda"))
    assert check_candidate_shape(fx.HONEST_RELU, "cpu") == []
    assert check_candidate_shape(fx.cuda_relu_candidate(1), "cuda") == []
    # ModelNew is the module-level name: a class, or the name bound to a class of the program
    assert check_candidate_shape(fx.HONEST_RELU.replace("class ModelNew(", "class Model(") + "ModelNew = Model\n",
                                 "cpu") == []
    assert any("not a class" in p for p in check_candidate_shape(fx.HONEST_RELU + "ModelNew = 3\n", "cpu"))


def test_load_inline_args_resolved_statically():
    rep = scan(fx.HONEST_RELU)
    assert len(rep.extensions) == 1 and rep.extensions[0].resolved
    assert rep.extensions[0].args["functions"] == fx.SHARED_FUNCS
    assert "relu(torch::Tensor x)" in rep.extensions[0].args["cpp_sources"]
    dyn = fx.cpu_candidate("return ext.relu(x)", module="import os\next3 = load_inline(name='d', cpp_sources=os.environ['X'])")
    assert [s.resolved for s in scan(dyn).extensions] == [True, False]


# (cheat code, cheating candidate, honest look-alike) for every row the static scan sees
STATIC_CASES = [
    (cheats.C01, fx.cpu_candidate("y = torch.relu(x)\nreturn y"),
     fx.cpu_candidate("out = torch.empty_like(x).view(-1)\next.relu_into(x.contiguous().view(-1), out)\nreturn out.view(x.shape)")),
    (cheats.C01, fx.cpu_candidate("return self.lin(x)", init="self.lin = nn.Linear(1000, 1000)"),
     fx.cpu_candidate("return ext.relu(x)", init="self.lin = nn.Linear(1000, 1000)  # weights only")),
    (cheats.C01, fx.cpu_candidate("return (x @ x.t())"), fx.cpu_candidate("return ext.matmul(x, x.t().contiguous())")),
    (cheats.C01, fx.cpu_candidate("return torch.compile(lambda t: t.clamp(min=0))(x)"), fx.HONEST_RELU),
    # a constant table built with torch in __init__ is honest; the same compute in forward is not
    (cheats.C01, fx.cpu_candidate("return ext.relu(x) * torch.sin(torch.arange(1000.0))"),
     fx.cpu_candidate("return ext.relu(x)", init="self.register_buffer('pe', torch.sin(torch.arange(1000.0)))")),
    (cheats.C02, fx.cpu_candidate("return x.new_zeros(x.shape)"),
     fx.cpu_candidate("fn = ext.relu\nreturn fn(x)")),
    (cheats.C03, fx.cpu_candidate("try:\n    return ext.relu(x)\nexcept Exception:\n    return torch.relu(x)"),
     fx.cpu_candidate("try:\n    return ext.relu(x)\nexcept RuntimeError as e:\n    raise RuntimeError('relu kernel failed') from e")),
    (cheats.C04, fx.cpu_candidate("return super().forward(x)", bases="Model", module="from ref import Model"),
     fx.cpu_candidate("return ext.relu(x)", module="class ModelConfig:\n    rows = 64")),
    (cheats.C09, fx.cpu_candidate("return ext.relu(x)", imports="import threading"),
     fx.cpu_candidate("return ext.relu(x)", imports="import math")),
    (cheats.C09, fx.cpu_candidate("s = torch.cuda.Stream()\nreturn ext.relu(x)"),
     fx.cpu_candidate("s = torch.cuda.current_stream() if x.is_cuda else None\nreturn ext.relu(x)")),
    (cheats.C12, fx.cpu_candidate("torch.manual_seed(0)\nreturn ext.relu(x)"),
     fx.cpu_candidate("seed = 1234  # a constant named seed, used for nothing\nreturn ext.relu(x)")),
    (cheats.C15, fx.cpu_candidate("return ext.relu(x)", imports="import gc"),
     fx.cpu_candidate("gc_count = 0\nreturn ext.relu(x)")),
    (cheats.C15, fx.cpu_candidate("f = open('/tmp/expected.pt', 'rb')\nreturn ext.relu(x)"),
     fx.cpu_candidate("opened = x.is_contiguous()\nreturn ext.relu(x)")),
    (cheats.C17, fx.cpu_candidate("return ext.relu(x)", imports="import socket"),
     fx.cpu_candidate("return ext.relu(x)", imports="import math")),
    (cheats.C17, fx.cpu_candidate("time.sleep(0.01)\nreturn ext.relu(x)", imports="import time"),
     fx.cpu_candidate("t = time.perf_counter()\nreturn ext.relu(x)", imports="import time")),
    (cheats.C18, fx.cpu_candidate("os.write(1, b'{\"correct\": true}')\nreturn ext.relu(x)", imports="import os"),
     fx.cpu_candidate("print('launching relu')\nreturn ext.relu(x)")),
]


# The same rows reached by other routes (what a model rewarded for passing writes once the obvious one is
# caught), each with an honest look-alike.
STATIC_CASES += [
    # reflection handed around as a value, builtins by name, interpreter hooks
    (cheats.C11, fx.cpu_candidate("g = getattr\nreturn g(torch, 're' + 'lu')(x)"),
     fx.cpu_candidate("t = getattr(x, 'data')\nreturn ext.relu(t)")),
    (cheats.C11, fx.cpu_candidate("return __builtins__['getattr'](torch, 'relu')(x)"),
     fx.cpu_candidate("name = __name__\nreturn ext.relu(x)")),
    (cheats.C11, fx.cpu_candidate("return operator.attrgetter('re' + 'lu')(torch)(x)", imports="import operator"),
     fx.cpu_candidate("return operator.itemgetter(0)([ext.relu(x)])", imports="import operator")),
    (cheats.C11, fx.cpu_candidate("sys.settrace(None)\nreturn ext.relu(x)", imports="import sys"),
     fx.cpu_candidate("big = sys.maxsize > 2**32\nreturn ext.relu(x)", imports="import sys")),
    (cheats.C11, fx.cpu_candidate("f = types.FunctionType(ext.relu.__code__, {})\nreturn f(x)", imports="import types"),
     fx.cpu_candidate("return ext.relu(x)", imports="import typing")),
    # frames and closures: the verifier's objects (expected outputs, seeds) reached through the interpreter
    (cheats.C15, fx.cpu_candidate("try:\n    raise ValueError\nexcept ValueError as e:\n    fr = e.__traceback__\n"
                                  "    raise\nreturn ext.relu(x)"),
     fx.cpu_candidate("return ext.relu(x)", init="self.label = self.__class__.__name__")),
    (cheats.C15, fx.cpu_candidate("return ext.relu(x)", init="self.g = self.forward.__globals__"),
     fx.cpu_candidate("return ext.relu(x)", init="self.doc = self.forward.__doc__")),
    # files read without open(): archives, numpy, torch's loader, globbing the job directory
    (cheats.C15, fx.cpu_candidate("z = zipfile.ZipFile('ref_1.pt')\nreturn ext.relu(x)", imports="import zipfile"),
     fx.cpu_candidate("return ext.relu(x)", imports="import math")),
    (cheats.C15, fx.cpu_candidate("return ext.relu(x)", init="self.table = np.load('expected.npy')",
                                  imports="import numpy as np"),
     fx.cpu_candidate("return ext.relu(x)", init="self.scale = float(np.sqrt(64.0))", imports="import numpy as np")),
    (cheats.C15, fx.cpu_candidate("return torch.load('out_0.pt')"), fx.HONEST_RELU),
    (cheats.C15, fx.cpu_candidate("files = glob.glob('*.pt')\nreturn ext.relu(x)", imports="import glob"),
     fx.cpu_candidate("return ext.relu(x)", imports="import math")),
    # host compute: numpy or Python lists instead of the kernel
    (cheats.C01, fx.cpu_candidate("return torch.as_tensor(np.maximum(np.asarray(x.cpu()), 0)).to(x.device)",
                                  imports="import numpy as np"),
     fx.cpu_candidate("n = int(np.prod(x.shape))\nreturn ext.relu(x.view(n)).view(x.shape)", imports="import numpy as np")),
    # Python lists read by tolist: judged by their bytes at run time, as item (tests/redteam/test_redteam_host_compute.py);
    # statically the kernel it never calls is row 2
    (cheats.C02, fx.cpu_candidate("return torch.tensor([max(v, 0.0) for v in x.flatten().tolist()]).view(x.shape)"),
     fx.cpu_candidate("s = float(x.shape[0])\nn = torch.tensor(x.shape).tolist()\nreturn ext.relu(x)")),
    # the operating system beyond environment and paths
    (cheats.C17, fx.cpu_candidate("os.setsid()\nreturn ext.relu(x)", imports="import os"),
     fx.cpu_candidate("os.environ.setdefault('TORCH_CUDA_ARCH_LIST', '9.0')\nd = os.path.join('a', 'b')\n"
                      "return ext.relu(x)", imports="import os")),
]


# Forms real solutions use, next to the cheat each resembles (tests/redteam/test_redteam_static.py has the rest):
# ModelNew bound to a class, a Sequential of the candidate's own modules, tuple-keyed tables and ** in dicts.
_OWN_BLOCK = "class Block(nn.Module):\n    def forward(self, x):\n        return ext.relu(x)\n"
_TABLES = "_TUNED = {(1, 131072, 64): (8, 64, 512)}\nCFG = {**{'a': 1}, 'b': 2}\n"
STATIC_CASES += [
    (cheats.C04, fx.cpu_candidate("return super().forward(x)", bases="Model", module="from ref import Model").replace(
        "class ModelNew(", "class Fast(") + "\n\nModelNew = Fast\n",
     fx.cpu_candidate("return ext.relu(x)").replace("class ModelNew(", "class Model(") + "\n\nModelNew = Model\n"),
    (cheats.C01, fx.cpu_candidate("return torch.matmul(x, x)").replace("class ModelNew(", "class Fast(") +
     "\n\nModelNew = Fast\n",
     fx.cpu_candidate("return ext.relu(x)").replace("class ModelNew(", "class Fast(") + "\n\nModelNew = Fast\n"),
    (cheats.C01, fx.cpu_candidate("return self.seq(x)", init="self.seq = nn.Sequential(nn.Linear(1000, 1000))"),
     fx.cpu_candidate("return self.seq(x)", init="self.seq = nn.Sequential(Block(), Block())", module=_OWN_BLOCK)),
    (cheats.C01, fx.cpu_candidate("return torch.relu(x)", module=_TABLES),
     fx.cpu_candidate("return ext.relu(x)", module=_TABLES)),
]


@pytest.mark.parametrize("code,cheat,honest", [(c, ch, h) for c, ch, h in STATIC_CASES],
                         ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(STATIC_CASES)])
def test_static_cheat_and_honest_lookalike(code, cheat, honest):
    found = scan(cheat).cheat_codes
    assert code in found, (code, [str(f) for f in scan(cheat).findings])
    assert scan(honest).findings == [], [str(f) for f in scan(honest).findings]


def test_every_catalogue_row_has_a_code():
    rows = [c.row for c in cheats.CATALOGUE.values()]
    assert rows[:18] == list(range(1, 19)) and all(1 <= r <= 18 for r in rows[18:])  # later codes refine a row
    assert cheats.C01 == "C01_TORCH_COMPUTE" and cheats.C18 == "C18_FAKE_VERDICT"
    assert cheats.C19 == "C19_UNRUN_TORCH_PATH" and cheats.CATALOGUE[cheats.C19].row == 1


def test_reward_is_monotone_in_outcome():
    order = [Verdict("a", status="pass", cheats=["C01_TORCH_COMPUTE"]), Verdict("b", status="extract_error"),
             Verdict("c", status="compile_error"), Verdict("d", status="crash"), Verdict("e", status="wrong"),
             Verdict("f", status="pass", correct=True, speedup_eager=0.5),
             Verdict("g", status="pass", correct=True, speedup_eager=1.5),
             Verdict("h", status="pass", correct=True, speedup_eager=3.0)]
    rewards = [reward_for(v) for v in order]
    assert rewards == sorted(rewards) and len(set(rewards)) == len(rewards)
    assert reward_for(Verdict("x", status="pass", correct=True, speedup_eager=1e9)) == 4.0


def _brute_pass_at_k(n, c, k):
    samples = [1] * c + [0] * (n - c)
    combos = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in comb) for comb in combos) / len(combos)


def test_pass_at_k_matches_enumeration():
    rng = random.Random(0)
    for _ in range(30):
        n = rng.randint(1, 9)
        c, k = rng.randint(0, n), rng.randint(1, n)
        assert pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(n, c, k))
    with pytest.raises(ValueError):
        pass_at_k(0, 0, 1)


def test_summarize_verdicts():
    vs = [Verdict("a1", task_id="a", status="pass", correct=True, speedup_eager=1.2, speedup_compile=0.9),
          Verdict("a2", task_id="a", status="wrong"),
          Verdict("b1", task_id="b", status="pass", correct=True, speedup_eager=1.05, speedup_compile=1.5),
          Verdict("b2", task_id="b", status="pass", correct=True, speedup_eager=0.5)]
    s = summarize_verdicts(vs, k=2)
    assert s["tasks"] == 2 and s["samples"] == 4
    assert s["pass@1"] == pytest.approx((0.5 + 1.0) / 2)
    assert s["pass@2"] == pytest.approx(1.0)
    assert s["avg@2"] == pytest.approx(0.75)
    assert s["fast_1.0_eager"] == pytest.approx(2 / 4) and s["fast_1.1_eager"] == pytest.approx(1 / 4)
    assert s["fast_1.0_compile"] == pytest.approx(1 / 4) and s["fast_1.1_compile"] == pytest.approx(1 / 4)


def test_own_kernels_are_matched_by_exact_name_never_by_substring():
    """Time coverage (C01 on cuda) counts a profiled kernel as the candidate's only when its bare name is one
    of the candidate's __global__ functions: a kernel called `gemm` does not claim cuBLAS's time, nor one
    named like a vendor kernel."""
    from verifier.common.backends import is_own_kernel, kernel_identifier

    assert kernel_identifier("void (anonymous namespace)::relu_kernel<float, 4>(float const*, float*, int)") == \
        "relu_kernel"
    assert kernel_identifier("ampere_sgemm_128x64_nn") == "ampere_sgemm_128x64_nn"
    own = ["gemm", "relu_kernel", "ampere_sgemm_128x64_nn", "kmown_gemm"]
    assert is_own_kernel("void relu_kernel<float>(float const*, float*, long)", own)
    # the candidate's kernels are built as kmown_<name> (backends.own_kernel_renames): its own `gemm` is that one;
    # a kernel that merely carries the name `gemm` (left as written, or a library's) is matched by a vendor family
    assert is_own_kernel("kmown_gemm(float const*, float const*, float*, int, int, int)", own)
    assert not is_own_kernel("gemm(float const*, float const*, float*, int, int, int)", own)
    assert not is_own_kernel("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_cublas", own)
    assert not is_own_kernel("ampere_sgemm_128x64_nn", own)  # a vendor name stays foreign even when copied
    assert not is_own_kernel("void at::native::vectorized_elementwise_kernel<4, relu_kernel>(int)", own)


def test_load_inline_sources_built_from_constants_are_read_statically():
    """textwrap.dedent, str.replace / format / % and str() of constants: honest ways to write a source that
    the compile pool can still build ahead and the vendor scans still read."""
    code = '''import textwrap
import torch
from torch.utils.cpp_extension import load_inline
BLOCK = 256
SRC = textwrap.dedent("""
    __global__ void k(float* x) { }
    #define B BLOCKSZ
""").replace("BLOCKSZ", str(BLOCK))
SRC2 = "#define T %d\\n" % (BLOCK * 2)
ext = load_inline(name="a", cpp_sources="void f();".strip(), cuda_sources=[SRC, SRC2], functions=["f"])
BAD = "{}{}".format(1)
ext2 = load_inline(name="b", cpp_sources=BAD, functions=["f"])
'''
    specs = scan(code).extensions
    assert specs[0].resolved and specs[0].args["cuda_sources"] == ["\n__global__ void k(float* x) { }\n#define B 256\n",
                                                                   "#define T 512\n"]
    assert not specs[1].resolved  # a format that fails is left to the child, not an error of the scan


def test_extension_functions_named_like_tensor_methods_are_not_torch_compute():
    """`ext.mm(a, b)` calls the candidate's own function even when the sources of `ext` are built at run time
    (the static stage cannot read them, but it reads `functions`, and it knows `ext` came from load_inline)."""
    for functions in ('["mm"]', 'os.environ.get("FN", "mm").split()'):
        code = f'''import os
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
ext = load_inline(name="m", cpp_sources=os.environ.get("SRC", "torch::Tensor mm(torch::Tensor a, torch::Tensor b);"),
                  functions={functions})


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.mm(a, b)
'''
        rep = scan(code)
        assert rep.findings == [] and not rep.extensions[0].resolved, [str(f) for f in rep.findings]
    assert C01_in(scan(code.replace("return ext.mm(a, b)", "return a.mm(b)")))


def C01_in(rep) -> bool:
    return cheats.C01 in rep.cheat_codes


def test_kernel_names_read_past_launch_bounds_on_either_side_of_void():
    """`__global__ void __launch_bounds__(256) k(...)` is legal CUDA: the kernel is `k`, not the attribute
    (reading the attribute as the name made every launch of such an honest kernel look like no own kernel)."""
    from verifier.common.backends import kernel_names_in

    src = """__global__ void a(float* x) {}
__global__ void __launch_bounds__(256, 2) b(float* x) {}
__global__ __launch_bounds__(128) void c(float* x) {}
template <typename T> __global__ static void d(T* x) {}
__global__ void __cluster_dims__(2, 1, 1) f(float* x) {}
"""
    assert kernel_names_in([src]) == ["a", "b", "c", "d", "f"]


# Reflection judged by what it does (issue 35): reading the candidate's own objects is not a patch. Each program
# below is a KernelBench-style answer of the kind real models wrote; the cheats they resemble are in
# tests/redteam/test_redteam_static.py (writes through namespaces, setattr on torch, torch called by a name).
_OWN_BN = '''
class FastBatchNorm(nn.Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.weight = nn.Parameter(torch.ones(num_features))

    def extra_repr(self):
        return "{num_features}, eps={eps}, momentum={momentum}".format(**self.__dict__)

    def forward(self, x):
        return ext.relu(x)
'''


def test_formatting_extra_repr_from_own_dict_is_not_a_patch():
    """technoabsurdist-l1-p33 (gemini-2.5-pro, judged correct by its source) formats ``extra_repr`` with
    ``**self.__dict__``: a read of its own attributes, rejected as C11 before."""
    code = fx.cpu_candidate("return self.bn(x)", init="self.bn = FastBatchNorm(64)", module=_OWN_BN)
    assert scan(code).findings == [], [str(f) for f in scan(code).findings]
    read_forms = ["dict(self.__dict__)", "self.__dict__.get('eps', 0.0)", "'eps' in vars(self)",
                  "sorted(vars(self).items())", "f'{self.__dict__}'", "{**vars(self)}"]
    for form in read_forms:
        rep = scan(fx.cpu_candidate(f"info = {form}\nreturn ext.relu(x)"))
        assert rep.findings == [], (form, [str(f) for f in rep.findings])


def test_reading_a_submodules_weights_by_a_computed_name_is_not_a_patch():
    """yenhaohuang-l3-p38 (gpt-5.5, judged correct) reads an nn.LSTM's weights layer by layer with
    ``getattr(self.lstm, "weight_ih_l" + suffix)``: a read of its own submodule, rejected as C11 before.
    Private and computed names on its own objects (``hasattr(block, '_fused')``) are reads too."""
    forward = ("out = x\nfor layer in range(2):\n    suffix = str(layer)\n"
               "    w = getattr(self.lstm, 'weight_ih_l' + suffix).contiguous()\n"
               "    b = getattr(self.lstm, f'bias_ih_l{layer}')\n"
               "    if hasattr(self, '_fused') and getattr(self, '_scale', 1.0) > 0:\n"
               "        out = ext.relu(out)\nreturn out")
    code = fx.cpu_candidate(forward, init="self.lstm = nn.LSTM(8, 8, num_layers=2)\nself._fused = True")
    assert scan(code).findings == [], [str(f) for f in scan(code).findings]
    # writing its own attributes by name, as __init__ loops do, is not a patch either
    init = "for i in range(3):\n    setattr(self, f'w{i}', nn.Parameter(torch.zeros(8)))\ndelattr(self, 'w2')"
    assert scan(fx.cpu_candidate("return ext.relu(x)", init=init)).findings == []


def test_code_that_does_not_parse_is_reported_with_its_syntax_error_and_line():
    """A bare program (a ``.py`` solution, no fence) with a syntax error got "no code block found" (52 solutions of
    the test bed): it is code, and the verdict says where it does not parse."""
    program = fx.HONEST_RELU + "\nclass Broken(nn.Module):\n    def forward(self, x):\n        return x * 0.0f\n"
    assert extract_code(program) == program
    problems = check_candidate_shape(extract_code(program), "cpu")
    line = program.splitlines().index("        return x * 0.0f") + 1
    assert problems == [f"the code does not parse as Python: line {line}: invalid decimal literal "
                        "(the line reads: return x * 0.0f)"], problems
    # code around a stray fence is still code; prose, or C++ alone, is still an answer with no code
    stray = fx.HONEST_RELU + "```\n"
    assert any(f"line {stray.count(chr(10))}: invalid syntax" in p for p in check_candidate_shape(extract_code(stray),
                                                                                                   "cpu"))
    for answer in ("I cannot write this kernel, sorry.", "```cpp\nclass Foo {};\n```\nimport it yourself"):
        assert extract_code(answer) == ""
        assert "no code block found" in check_candidate_shape(extract_code(answer), "cpu")[0]


def _timed_pass(ref_us: list[float], cand_us: list[float], calls: int = 8,
                null_us: dict[int, float] | None = None, gates: list[float] | None = None) -> Verdict:
    """A passing verdict judged from bracket times (us per call) as the harness would have clocked them: brackets
    of ``calls`` calls, on cpu (a host clock, the least) or, given ``null_us`` (the task's null brackets by calls),
    on cuda (the median, each bracket ``cand_us`` a call after the null; the reference's samples from brackets of
    as many calls; ``gates``: each bracket's gate wait, cuda): the real judge's speedup figures, its feedback and the
    real reward."""
    from verifier.runs import ReferenceTiming
    from verifier.common.contract import ChildReport
    from verifier.execute.brackets import Bracket, Clocked, null_for
    from verifier.judge.speedups import record_speedups
    from verifier.judge.outputs import Evidence

    null = {k: us * 1e-6 for k, us in (null_us or {1: 10.0}).items()}
    shift = 0.0 if null_us is None else null_for(null, calls)  # cuda's brackets hold the null's time too
    clocked = Clocked(host_clock=null_us is None,
                      brackets=[Bracket("candidate", calls, us * 1e-6 * calls + shift, gate_wait_s=g)
                                for us, g in zip(cand_us, gates or [0.0] * len(cand_us))])
    summary = min if null_us is None else statistics.median
    ref = ReferenceTiming(ChildReport(kind="reference"), {
        "eager_s": summary(ref_us) * 1e-6, "null": {str(k): v for k, v in null.items()},
        "eager_samples": [us * 1e-6 for us in ref_us], "eager_calls": calls})
    v = Verdict("c", status="pass", correct=True)
    ev = Evidence()
    record_speedups(v, ChildReport(kind="candidate"), clocked, ref, ev)
    v.reward = reward_for(v)
    v.feedback = " ".join(ev.details)
    return v


def test_a_kernel_of_a_few_microseconds_earns_no_speedup_from_the_nulls_shift():
    """Red team, noise turned into reward: one H200's real batch timed a 4.4 us reference against a candidate at
    the 0.5 us floor (8.79x, interval 2.85-12.48, reward about 2.5), and the same pair at 0.068x in the next batch.
    A bracket of 256 such calls is about a millisecond, the size of the shift of the null measured in another
    process, so the interval must reach 1 and the reward stay that of a pass; a steady kernel of 200 us is
    resolved and keeps its speedup."""
    tiny = _timed_pass(ref_us=[4.4, 4.5, 4.3, 4.4], cand_us=[0.0, 0.1, 0.0, 0.05], calls=256,
                      null_us={1: 500.0, 256: 1000.0})
    assert tiny.speedup_eager > 8  # the point is what the brackets say...
    assert tiny.speedup_lo < 1.0 < tiny.speedup_hi  # ...and its interval what the clock can tell
    assert tiny.reward == 1.0
    assert tiny.versions["timing"]["resolution_us"]["candidate"] == pytest.approx(2 * 500.0 / 256, rel=1e-3)
    assert "resolves this kernel's time to about 3.9 us a call" in tiny.feedback
    big = _timed_pass(ref_us=[400.0, 401.0, 399.0, 400.5], cand_us=[200.0, 200.5, 199.5, 200.2], calls=100,
                     null_us={1: 500.0, 256: 1000.0})
    assert 1.8 < big.speedup_lo < 2.0 < big.speedup_hi < 2.2 and big.reward > 1.8
    assert "resolves" not in big.feedback


def test_the_timing_record_counts_the_gates_given_the_full_wait():
    """``versions["timing"]["full_gate_waits"]``: the candidate's brackets whose gate the harness would have held up to
    QUEUE_WAIT_S for its calls (the device alone meanwhile), told from those given the short wait of a model that
    waits on the host (tests/gpu checks a hinted model has none)."""
    from verifier.execute.harness import LATE_QUEUE_WAIT_S, QUEUE_WAIT_S

    gates = [QUEUE_WAIT_S, QUEUE_WAIT_S, LATE_QUEUE_WAIT_S, LATE_QUEUE_WAIT_S]
    v = _timed_pass(ref_us=[100.0] * 4, cand_us=[50.0] * 4, null_us={1: 10.0, 8: 20.0}, gates=gates)
    assert v.versions["timing"]["full_gate_waits"] == 2 and v.versions["timing"]["brackets"] == 4
    assert _timed_pass(ref_us=[100.0] * 4, cand_us=[50.0] * 4).versions["timing"]["full_gate_waits"] == 0


def test_a_speedup_whose_interval_straddles_one_earns_the_plain_pass():
    """The brackets of a busy host: the least time says 2.5x, the spread of the brackets says anything from
    slower to faster; the reward is that of a pass, 1.0 (one task's reward was 2.505 in a run, 1.0 in its twin)."""
    v = _timed_pass(ref_us=[100.0, 250.0, 240.0, 260.0, 255.0], cand_us=[40.0, 200.0, 210.0, 190.0, 205.0])
    assert v.speedup_eager == pytest.approx(2.5)
    assert v.speedup_lo < 1.0 < v.speedup_hi and v.speedup_lo <= v.speedup_eager <= v.speedup_hi
    assert v.reward == 1.0


def test_a_clear_two_fold_speedup_earns_more_than_a_pass():
    v = _timed_pass(ref_us=[100.0, 100.5, 101.0, 100.2, 100.8], cand_us=[50.0, 50.3, 50.1, 50.6, 50.2])
    assert 1.9 < v.speedup_lo <= v.speedup_eager <= v.speedup_hi < 2.1
    assert v.reward == pytest.approx(1.0 + math.log2(v.speedup_lo)) and v.reward > 1.9
    # and the interval is a function of the brackets alone: the same figures, the same verdict
    assert _timed_pass([100.0, 100.5, 101.0, 100.2, 100.8], [50.0, 50.3, 50.1, 50.6, 50.2]) == v


def test_the_reward_counts_the_speedups_lower_bound_and_is_monotone_in_it():
    def r(lo, s=3.0, hi=4.0):
        return reward_for(Verdict("x", status="pass", correct=True, speedup_eager=s, speedup_lo=lo, speedup_hi=hi))

    assert r(0.99) == r(0.5) == r(1.0) == 1.0  # an interval that reaches 1 is no evidence of a speedup
    los = [1.0, 1.001, 1.2, 2.0, 3.0, 8.0, 100.0]
    assert [r(lo) for lo in los] == sorted(r(lo) for lo in los) and r(1.001) == pytest.approx(1.0, abs=2e-3)
    assert r(100.0) == 4.0
    # a verdict without an interval (written before intervals existed) counts its point speedup as before
    assert reward_for(Verdict("y", status="pass", correct=True, speedup_eager=2.0)) == 2.0


@pytest.mark.parametrize("decorator", ["torch.jit.ignore", "torch.jit.unused", "torch.jit.export",
                                       "torch.compiler.disable", "torch.fx.wrap"])
def test_a_marking_decorator_on_the_kernels_helper_is_no_finding(decorator):
    """(docs/ANTI_CHEAT.md class 67) a helper that launches the kernel, marked for TorchScript, the compiler or FX so
    that the model stays scriptable: the decorator computes nothing (it was "hands torch.jit.ignore on as a value",
    C01, then C19 for a path no monitor saw run). ``torch.compile`` as the decorator is still PyTorch compute."""
    helper = "    @{}\n    def run(self, x):\n        return ext.relu(x.contiguous())\n\n    def forward(self, x):"

    def with_helper(dec: str) -> str:
        return fx.cpu_candidate("return self.run(x)").replace("    def forward(self, x):", helper.format(dec))

    assert scan(with_helper(decorator), "cpu").findings == []
    assert cheats.C01 in scan(with_helper("torch.compile"), "cpu").cheat_codes
