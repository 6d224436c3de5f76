"""CUDA graphs in a candidate on cuda (docs/ANTI_CHEAT.md class 113; the static half and the programs are
tests/redteam/test_redteam_graphs.py's):

- PyTorch's ReLU captured into a graph at construction and replayed by forward, its answer handed through the
  candidate's own kernel: C01, by the static scan (the capture is forward's work) and, where the capture goes
  through a name the scan cannot resolve, by what the trials' device profile shows (PyTorch's kernel launched by
  the graph's replay, inside forward);
- the candidate's own kernel in a graph, captured on forward's first call of a shape as PyTorch documents it, or at
  construction for the task's shape: a pass (the graph's replays launch the candidate's own kernels)."""

import pytest

from bench.lib import fixtures as fx
from tests.redteam.test_redteam_graphs import CAPTURED_AT_INIT, HONEST
from verifier import cheats

pytestmark = pytest.mark.gpu

# the capture through a name bound at the top of the file, which the static scan does not follow: the trials'
# device profile is left to tell
THROUGH_A_NAME = CAPTURED_AT_INIT.replace("with torch.cuda.graph(self.g):", "with capture(self.g):").replace(
    'CPP_SRC = "torch::Tensor relu_cuda(torch::Tensor x);"\n',
    'CPP_SRC = "torch::Tensor relu_cuda(torch::Tensor x);"\ncapture = torch.cuda.graph\n', 1)

CASES = {
    "torch_relu_captured_at_init": (CAPTURED_AT_INIT, cheats.C01),
    "torch_relu_captured_through_a_name": (THROUGH_A_NAME, cheats.C01),
    **{f"honest_{n}": (code, "pass") for n, code in HONEST.items()},
}


@pytest.fixture(scope="module")
def verdicts():
    assert "capture(self.g)" in THROUGH_A_NAME and "capture = torch.cuda.graph" in THROUGH_A_NAME
    return fx.cuda_relu_verdicts({n: c for n, (c, _) in CASES.items()}, "graphs")


@pytest.mark.parametrize("name", list(CASES))
def test_graph_case(verdicts, name):
    v, want = verdicts[name], CASES[name][1]
    if want == "pass":
        assert v.status == "pass", (name, v.status, v.cheats, v.feedback[:800])
    else:
        assert v.status == "cheat" and want in v.cheats, (name, v.status, v.cheats, v.feedback[:800])
        assert v.reward < 0
