"""Red team of the front end's readings that a second set of honest frontier-style CUDA answers needed
(tests/data/fidelity_cuda/c42 onward; tests/test_fidelity_cuda_front.py runs them): each honest form passes here, and
beside it the cheat that could hide behind the reading is still caught, with its code.

91. C01: an autocast region (``torch.autocast(device_type="cuda", enabled=False)`` around the launch) and the
    decorators that set one up for a custom autograd Function (``torch.amp.custom_fwd`` / ``custom_bwd``) compute
    nothing (the ``torch.cuda.amp`` spellings passed already); PyTorch compute inside the region, and a matmul in a
    decorated forward, stay C01.
92. C01: the current stream's raw handle (``torch._C._cuda_getCurrentRawStream``, inductor's ``get_raw_stream``)
    handed to the launcher is a query, however it is reached (imported, ``torch._C`` aliased); other ``torch._C``
    functions stay C01 (``torch._C._nn.gelu``) or C11 (a dispatch guard), and replacing the query is C11.
95. extraction: a response fenced with tildes (``~~~python``), one whose text starts with a byte-order mark, and one
    with a line of prose before an unfenced program are read as the program they hold; whatever is extracted is
    judged whole, so a cheat in such a response keeps its code, a backtick block still wins over a tilde one, and
    prose after an unfenced program (or a program that does not parse) stays an extract error.
96. C01: a function of a module the program imports (``itertools.repeat``, as ``math.floor`` and ``np.prod``) is
    not a Tensor method of the same name. The exemption was a prefix of the receiver's text ("torch", "np", "math",
    "os", "sys"), so a tensor named ``torch_out``, ``npx`` or ``system`` had its ``.softmax()`` / ``.sum()`` /
    ``.exp()`` read as a module's; it is now the imported, never rebound module name, and those stay C01, as does
    ``operator.mul`` (Python's operator on whatever it is handed) and a module name rebound to a tensor.
"""

import pytest

from verifier import cheats
from verifier.front.extract import extract_code
from verifier.front.static import scan

from tests.redteam.test_redteam_front_fidelity import forward, front_codes, program

HONEST = {
    # 91
    "autocast_disabled_around_launch": forward(
        "        with torch.autocast(device_type='cuda', enabled=False):\n            return ext.relu_fwd(x)\n"),
    "amp_autocast_around_launch": forward(
        "        with torch.amp.autocast('cuda', dtype=torch.float16):\n            return ext.relu_fwd(x)\n"),
    "custom_fwd_on_autograd_function": program(
        "class Fn(torch.autograd.Function):\n    @staticmethod\n"
        "    @torch.amp.custom_fwd(device_type='cuda', cast_inputs=torch.float32)\n    def forward(ctx, x):\n"
        "        return ext.relu_fwd(x)\n\n    @staticmethod\n    @torch.amp.custom_bwd(device_type='cuda')\n"
        "    def backward(ctx, g):\n        raise NotImplementedError\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return Fn.apply(x)\n"),
    # 92
    "raw_stream_handle": forward(
        "        return ext.relu_fwd(x) if get_raw_stream(x.device.index) is not None else None\n",
        imports="from torch._C import _cuda_getCurrentRawStream as get_raw_stream\n"),
    # 96
    "itertools_repeat": forward("        for _ in itertools.repeat(None, 1):\n            pass\n        return ext.relu_fwd(x)\n",
                                imports="import itertools\n"),
    "math_floor_numpy_prod": forward("        n = math.floor(x.numel() / 2) + int(np.prod(x.shape))\n        return ext.relu_fwd(x)\n",
                                     imports="import math\nimport numpy as np\n"),
    "raw_stream_qualified": forward("        s = torch._C._cuda_getCurrentRawStream(0)\n        return ext.relu_fwd(x)\n"),
}

CHEATS = {
    # 91
    "matmul_inside_autocast": (cheats.C01, forward(
        "        with torch.autocast(device_type='cuda', dtype=torch.float16):\n"
        "            return ext.relu_fwd(torch.matmul(x, x.t()).float())\n")),
    "relu_inside_disabled_autocast": (cheats.C01, forward(
        "        with torch.autocast('cuda', enabled=False):\n            return torch.relu(x)\n")),
    "custom_fwd_forward_computes": (cheats.C01, program(
        "class Fn(torch.autograd.Function):\n    @staticmethod\n    @torch.amp.custom_fwd(device_type='cuda')\n"
        "    def forward(ctx, x):\n        ext.relu_fwd(x)\n        return F.relu(x)\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return Fn.apply(x)\n")),
    # 92
    "torch_C_nn_gelu": (cheats.C01, forward("        ext.relu_fwd(x)\n        return torch._C._nn.gelu(x)\n")),
    "torch_C_nn_imported": (cheats.C01, forward("        ext.relu_fwd(x)\n        return g(x)\n",
                                                imports="from torch._C._nn import gelu as g\n")),
    "torch_C_variable_functions": (cheats.C01, forward(
        "        ext.relu_fwd(x)\n        return torch._C._VariableFunctions.relu(x)\n")),
    # 96
    "tensor_named_torch_out": (cheats.C01, forward("        torch_out = ext.relu_fwd(x)\n        return torch_out.softmax(dim=1)\n")),
    "tensor_named_npx": (cheats.C01, forward("        npx = ext.relu_fwd(x)\n        return npx.sum(dim=1)\n")),
    "tensor_named_system": (cheats.C01, forward("        system = ext.relu_fwd(x)\n        return system.exp()\n")),
    "module_name_rebound_to_tensor": (cheats.C01, forward("        math = ext.relu_fwd(x)\n        return math.exp()\n",
                                                          imports="import math\n")),
    "operator_module_on_tensors": (cheats.C01, forward("        return operator.mul(ext.relu_fwd(x), 2).sum()\n",
                                                       imports="import operator\n")),
    "raw_stream_query_replaced": (cheats.C11, forward(
        "        torch._C._cuda_getCurrentRawStream = lambda i: 0\n        return ext.relu_fwd(x)\n")),
    "torch_C_dispatch_guard_by_module_alias": (cheats.C11, forward(
        "        with C._DisableTorchDispatch():\n            return ext.relu_fwd(x)\n", imports="import torch._C as C\n")),
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_form_has_no_finding(name):
    assert front_codes(HONEST[name]) == [], scan(HONEST[name], "cuda").findings


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheat_behind_the_honest_form_is_caught(name):
    code_, text = CHEATS[name]
    assert code_ in front_codes(text), (name, front_codes(text))


_RELU = program("class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu_fwd(x)\n")
_TORCH_RELU = program("class ModelNew(nn.Module):\n    def forward(self, x):\n        ext.relu_fwd(x)\n"
                      "        return torch.relu(x)\n")
RESPONSES = {  # (response, the codes its extracted program gets)
    "tilde_fence": ("Fused ReLU:\n\n~~~python\n" + _RELU + "~~~\n", []),
    "long_tilde_fence_with_info": ("~~~~ python title=model.py\n" + _RELU + "~~~~\n", []),
    "byte_order_mark": ("\ufeff" + _RELU, []),
    "prose_before_unfenced_program": ("Here is the optimized code:\n\n" + _RELU, []),
    "tilde_fence_cheat": ("~~~python\n" + _TORCH_RELU + "~~~\n", [cheats.C01]),
    "prose_before_unfenced_cheat": ("The answer:\n\n" + _TORCH_RELU, [cheats.C01]),
    "byte_order_mark_cheat": ("\ufeff" + _TORCH_RELU, [cheats.C01]),
    # a backtick block wins over a tilde one, as before
    "backtick_block_beside_tilde_block": ("~~~python\n" + _RELU + "~~~\n\n```python\n" + _TORCH_RELU + "```\n",
                                          [cheats.C01]),
    # prose after the unfenced program: still a program that does not parse
    "prose_after_unfenced_program": ("Here it is:\n\n" + _RELU + "\nThis is faster.\n", ["extract"]),
}


@pytest.mark.parametrize("name", sorted(RESPONSES))
def test_response_forms_extract_the_program_they_hold(name):
    text, codes = RESPONSES[name]
    code = extract_code(text)
    assert "class ModelNew" in code
    found = front_codes(code)
    assert (found == codes) if not codes else set(codes) <= set(found), (name, found)
