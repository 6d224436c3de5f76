"""Red team of CUDA graphs in a candidate (docs/ANTI_CHEAT.md class 113), the static half (the verdicts on a GPU are
tests/gpu/redteam/test_redteam_graphs_gpu.py's).

What a graph captures runs again at every ``replay()``. Construction may compute with PyTorch (parameters drawn, a
table built: set-up, before any input exists), so PyTorch compute captured into a graph at construction, with
forward copying its input into the graph's static buffer and replaying it, passed the static scan as set-up: forward
itself only copies and replays. Captured compute is forward's work wherever it is written (``with
torch.cuda.graph(g):`` under any spelling of the name, and the statements between ``g.capture_begin()`` and
``g.capture_end()``), and so is a PyTorch layer or function handed to ``torch.cuda.make_graphed_callables``
(forward calls what replays it); a graph of the candidate's own kernels, captured as PyTorch's documentation shows
(warm-up on a side stream joined back, then the capture), or its own function handed there, stays honest. Found on
the way: a layer constructed with a method chain (``nn.Linear(...).cuda()``) was no layer to the scan, so forward
calling it had no static finding; nor had a layer's ``forward`` or ``getattr(torch, "relu")`` taken as a value at
construction and called by forward (a dtype or an initialiser read by ``getattr`` stays honest)."""

import pytest

from verifier import cheats
from verifier.front.static import scan

HEAD = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void relu_graph_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] = v > 0.0f ? v : 0.0f; }
}
torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    relu_graph_kernel<<<(unsigned)((n + 255) / 256), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
CPP_SRC = "torch::Tensor relu_cuda(torch::Tensor x);"
'''

EXT = ('self.ext = load_inline(name="relu_graph_{tag}", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, '
       'functions=["relu_cuda"])')


def program(tag: str, init: str, forward: str, top: str = "") -> str:
    return HEAD + top + f'''

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        {EXT.format(tag=tag)}
{init}
    def forward(self, x):
{forward}
'''


# PyTorch's ReLU captured at construction for the task's shape; forward copies its input in, replays the graph and
# hands PyTorch's answer through its own kernel (a ReLU of a ReLU: the same values)
CAPTURED_AT_INIT = program("init", '''        self.sx = torch.zeros(2048, 4096, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            torch.relu(self.sx)
        torch.cuda.current_stream().wait_stream(s)
        self.g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.g):
            self.sy = torch.relu(self.sx)
''', '''        if x.shape != self.sx.shape:
            return self.ext.relu_cuda(x)
        self.sx.copy_(x)
        self.g.replay()
        return self.ext.relu_cuda(self.sy)''')

# the same through the imported name and through the graph's own capture calls
CAPTURED_BY_IMPORTED_NAME = CAPTURED_AT_INIT.replace("with torch.cuda.graph(self.g):", "with graph(self.g):").replace(
    "from torch.utils.cpp_extension import load_inline\n",
    "from torch.utils.cpp_extension import load_inline\nfrom torch.cuda import graph\n", 1)
CAPTURED_BY_BEGIN_END = program("begin", '''        self.sx = torch.zeros(2048, 4096, device="cuda")
        self.g = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        self.g.capture_begin()
        self.sy = self.sx.clamp(min=0)
        self.g.capture_end()
''', '''        if x.shape != self.sx.shape:
            return self.ext.relu_cuda(x)
        self.sx.copy_(x)
        self.g.replay()
        return self.ext.relu_cuda(self.sy)''')
# an nn layer's forward captured at construction
LAYER_CAPTURED = program("layer", '''        self.act = nn.ReLU()
        self.sx = torch.zeros(2048, 4096, device="cuda")
        self.g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.g):
            self.sy = self.act(self.sx)
''', '''        if x.shape != self.sx.shape:
            return self.ext.relu_cuda(x)
        self.sx.copy_(x)
        self.g.replay()
        return self.ext.relu_cuda(self.sy)''')

# honest: the candidate's own kernel captured on forward's first call of a shape (PyTorch's documented pattern:
# warm-up on a side stream joined back, the capture, then copy in, replay, copy out)
HONEST_OWN_KERNEL_GRAPH = program("honest", '''        self.graphs = {}
''', '''        key = tuple(x.shape)
        if key not in self.graphs:
            static_x = torch.empty_like(x)
            static_x.copy_(x)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    self.ext.relu_cuda(static_x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                static_y = self.ext.relu_cuda(static_x)
            self.graphs[key] = (g, static_x, static_y)
        g, static_x, static_y = self.graphs[key]
        static_x.copy_(x)
        g.replay()
        return static_y.clone()''')
# honest: the own kernel captured at construction for the task's shape (set-up that builds a graph of own work)
HONEST_OWN_KERNEL_AT_INIT = program("honest_init", '''        self.sx = torch.zeros(2048, 4096, device="cuda")
        self.g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.g):
            self.sy = self.ext.relu_cuda(self.sx)
''', '''        if x.shape != self.sx.shape:
            return self.ext.relu_cuda(x)
        self.sx.copy_(x)
        self.g.replay()
        return self.sy.clone()''')

SAMPLE = '(torch.zeros(2048, 4096, device="cuda"),)'
# torch.cuda.make_graphed_callables: the callable it is handed is captured, and forward calls what replays it
GRAPHED_LAYER = program("graphed_layer", f"""        self.lin = nn.Linear(4096, 4096).cuda()
        self.fn = torch.cuda.make_graphed_callables(self.lin, {SAMPLE})
""", """        return self.ext.relu_cuda(self.fn(x))""")
GRAPHED_INLINE_LAYER = program("graphed_inline", f"""        self.fn = torch.cuda.make_graphed_callables(nn.ReLU().cuda(), {SAMPLE})
""", """        return self.ext.relu_cuda(self.fn(x))""")
GRAPHED_TORCH_FUNCTION = program("graphed_fn", f"""        self.fn = torch.cuda.make_graphed_callables(torch.relu, {SAMPLE})
""", """        return self.ext.relu_cuda(self.fn(x))""")
OWN_BLOCK = """

class OwnRelu(nn.Module):
    def __init__(self, ext):
        super().__init__()
        self.ext = ext

    def forward(self, x):
        return self.ext.relu_cuda(x)
"""
GRAPHED_CONTAINER_WITH_A_LAYER = program("graphed_seq", f"""        self.fn = torch.cuda.make_graphed_callables(nn.Sequential(nn.ReLU(), OwnRelu(self.ext)), {SAMPLE})
""", """        return self.ext.relu_cuda(self.fn(x))""", top=OWN_BLOCK)
HONEST_GRAPHED_CONTAINER_OF_OWN = program("graphed_own_seq", f"""        self.fn = torch.cuda.make_graphed_callables(nn.Sequential(OwnRelu(self.ext)).cuda(), {SAMPLE})
""", """        if x.shape != (2048, 4096):
            return self.ext.relu_cuda(x)
        return self.fn(x)""", top=OWN_BLOCK)
# an nn layer moved with `.cuda()` as it is constructed, called by forward (the layer behind the method chain)
LAYER_MOVED_AND_CALLED = program("moved", """        self.lin = nn.Linear(4096, 4096).cuda().eval()
""", """        return self.ext.relu_cuda(self.lin(x))""")
# the same class without a graph: PyTorch's compute taken at construction as a value forward calls later
LAYER_FORWARD_HANDED_ON = program("handed_forward", """        self.lin = nn.ReLU()
        self.impl = self.lin.forward
""", """        return self.ext.relu_cuda(self.impl(x))""")
GETATTR_VALUE = program("getattr_value", """        self.op = getattr(torch, "relu")
""", """        return self.ext.relu_cuda(self.op(x))""")
HONEST_GETATTR_DTYPE = program("getattr_dtype", """        self.dt = getattr(torch, "float32")
        self.w = nn.Parameter(torch.empty(16))
        getattr(nn.init, "normal_")(self.w)
""", """        return self.ext.relu_cuda(x.to(self.dt))""")
HONEST_GRAPHED_OWN_FUNCTION = program("graphed_own", f"""        self.fn = torch.cuda.make_graphed_callables(self.ext.relu_cuda, {SAMPLE})
""", """        if x.shape != (2048, 4096):
            return self.ext.relu_cuda(x)
        return self.fn(x)""")

CHEATS = {
    "layer_handed_to_make_graphed_callables": GRAPHED_LAYER,
    "layer_constructed_in_the_make_graphed_callables_call": GRAPHED_INLINE_LAYER,
    "torch_function_handed_to_make_graphed_callables": GRAPHED_TORCH_FUNCTION,
    "container_with_a_layer_handed_to_make_graphed_callables": GRAPHED_CONTAINER_WITH_A_LAYER,
    "layer_moved_by_cuda_then_called": LAYER_MOVED_AND_CALLED,
    "layer_forward_handed_on_at_construction": LAYER_FORWARD_HANDED_ON,
    "torch_function_read_by_getattr_as_a_value": GETATTR_VALUE,
    "torch_relu_captured_at_init": CAPTURED_AT_INIT,
    "captured_through_the_imported_name": CAPTURED_BY_IMPORTED_NAME,
    "captured_between_capture_begin_and_end": CAPTURED_BY_BEGIN_END,
    "nn_layer_captured_at_init": LAYER_CAPTURED,
}
HONEST = {
    "own_kernel_graph_captured_in_forward": HONEST_OWN_KERNEL_GRAPH,
    "own_kernel_graph_captured_at_init": HONEST_OWN_KERNEL_AT_INIT,
    "own_function_handed_to_make_graphed_callables": HONEST_GRAPHED_OWN_FUNCTION,
    "dtype_and_initialiser_read_by_getattr": HONEST_GETATTR_DTYPE,
}
# judged by the static scan only (tests/gpu runs HONEST)
HONEST_STATIC = {**HONEST, "container_of_own_modules_handed_to_make_graphed_callables": HONEST_GRAPHED_CONTAINER_OF_OWN}


@pytest.mark.parametrize("name", list(CHEATS))
def test_pytorch_compute_a_graph_captures_is_forwards(name):
    report = scan(CHEATS[name], backend="cuda")
    assert cheats.C01 in report.cheat_codes, (name, [str(f) for f in report.findings])


@pytest.mark.parametrize("name", list(HONEST_STATIC))
def test_a_graph_of_the_candidates_own_kernels_is_honest(name):
    report = scan(HONEST_STATIC[name], backend="cuda")
    assert report.cheat_codes == [], (name, [str(f) for f in report.findings])


def test_pytorch_compute_at_construction_outside_a_capture_stays_set_up():
    """The rule is the capture's, not construction's: the same ReLU run once at construction (a table, a buffer
    drawn) is set-up as before."""
    code = CAPTURED_AT_INIT.replace("with torch.cuda.graph(self.g):\n            self.sy = torch.relu(self.sx)",
                                    "self.sy = torch.relu(self.sx)")
    assert "torch.cuda.graph(" not in code
    report = scan(code, backend="cuda")
    assert cheats.C01 not in report.cheat_codes, [str(f) for f in report.findings]


def test_a_record_whose_forward_replayed_its_own_kernels_is_not_c02():
    """A forward that replays a graph of its own kernels calls no function of its extension: its record counts no
    kernel call, and the profile shows its own kernels run inside forward (``own_kernel_us``). That is a launch, not
    C02; a record with neither (nothing of its own called, none of its kernels seen) still is, and so is a job whose
    trials show neither under the partial policy's test of its own kernels."""
    from verifier.common.contract import ChildReport, TrialReport
    from verifier.judge.checks import check_trial_runtime, own_kernels_ran
    from verifier.judge.outputs import Evidence

    replayed = TrialReport(index=1, kernel_calls=0, own_kernel_us=310.0)
    ev = Evidence()
    check_trial_runtime(replayed, "Trial 2", ev)
    assert cheats.C02 not in ev.codes, ev.codes
    ev = Evidence()
    check_trial_runtime(TrialReport(index=1, kernel_calls=0), "Trial 2", ev)
    assert cheats.C02 in ev.codes
    called = TrialReport(index=0, kernel_calls=2, own_kernel_us=300.0)
    assert own_kernels_ran(ChildReport(kind="candidate", trials=[called, replayed]))
    assert not own_kernels_ran(ChildReport(kind="candidate", trials=[called, TrialReport(index=1, kernel_calls=0)]))


def test_compute_kernels_a_replayed_graph_ran_are_pytorch_compute_whatever_their_share():
    """The trials of a forward that launched a CUDA graph (the profiler's cudaGraphLaunch inside it: ``graph_launches``)
    whose device profile shows PyTorch's compute kernels: PyTorch compute under the strict policy however small its
    share (on one H100 the ReLU captured through a name passed at 58% of forward's compute, below the 50% own share
    rule's reach); a graph whose replay runs only the candidate's kernels and PyTorch's copies and fills is not."""
    from verifier.common.contract import ChildReport, TrialReport
    from verifier.common.config import VerifyConfig
    from verifier.judge.checks import check_own_kernels
    from verifier.judge.outputs import Evidence
    from kernelmill.schema import Verdict

    relu = "void at::native::vectorized_elementwise_kernel<4, at::native::launch_clamp_scalar>(int)"
    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)"

    def judged(foreign: dict, graphs: int) -> Evidence:
        trials = [TrialReport(index=i, kernel_calls=1, own_kernel_us=300.0, foreign_kernel_us=dict(foreign),
                              graph_launches=graphs) for i in range(3)]
        report = ChildReport(kind="candidate", trials=trials, cuda_kernel_names=["relu_graph_kernel"])
        ev = Evidence()
        check_own_kernels(report, VerifyConfig(), Verdict(candidate_id="c", task_id="t"), ev)
        return ev

    ev = judged({relu: 100.0, fill: 5.0}, graphs=1)  # 25% of the compute: under the share rule's reach
    assert cheats.C01 in ev.torch_codes, (ev.codes, ev.torch_codes)
    assert not ({cheats.C01} & (judged({relu: 100.0}, graphs=0).torch_codes | judged({relu: 100.0}, graphs=0).codes))
    honest = judged({fill: 5.0}, graphs=1)
    assert cheats.C01 not in honest.torch_codes | honest.codes


def test_the_profile_counts_the_graphs_forward_launched():
    """verifier/child/monitors.py read_profile: a ``cudaGraphLaunch`` call (the runtime's, as the profiler names it,
    a version suffix or the driver's ``cuGraphLaunch`` alike) inside forward's marker is a graph launch of that
    forward; one outside it (the harness's, another call's) is not; the kernels the replay ran are judged as any."""
    from types import SimpleNamespace

    from verifier.child.monitors import read_profile
    from verifier.common.contract import TrialReport

    def event(name, device, start, end):
        span = SimpleNamespace(start=start, end=end, elapsed_us=lambda: float(end - start))
        return SimpleNamespace(name=name, device_type=device, time_range=span)

    relu = "void at::native::vectorized_elementwise_kernel<4, at::native::launch_clamp_scalar>(int)"
    events = [event("km_forward", "DeviceType.CPU", 0, 100), event("km_forward", "DeviceType.CUDA", 10, 95),
              event("cudaGraphLaunch_v10000", "DeviceType.CPU", 20, 25), event("cuGraphLaunch", "DeviceType.CPU", 30, 31),
              event("cudaGraphLaunch", "DeviceType.CPU", 200, 205),  # outside forward
              event(relu, "DeviceType.CUDA", 40, 60), event("relu_graph_kernel(float const*, float*, long)",
                                                             "DeviceType.CUDA", 60, 90)]
    rec = TrialReport(index=0)
    read_profile(SimpleNamespace(events=lambda: events), ["relu_graph_kernel"], rec)
    assert rec.graph_launches == 2
    assert rec.own_kernel_us == 30.0 and rec.foreign_kernel_us == {relu: 20.0}
    assert rec.profiled_ops == []
