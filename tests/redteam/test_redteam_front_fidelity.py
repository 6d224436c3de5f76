"""Red team of the front end's readings that honest frontier-style CUDA answers needed
(tests/test_fidelity_cuda_front.py holds the honest candidates and their minimal reproducers): each honest form passes
here, and beside it the cheat that could hide behind the reading is still caught, with its code.

1. C03: a try/except handler that cannot complete normally (it ends in an unconditional ``raise``: a log line or a
   message first) falls back to nothing, and a try only construction runs (a default SM count) is no forward
   fallback unless it guards the build or a call of the kernels. A handler that computes the reference before
   re-raising, whose raise is conditional or can be skipped (a ``return`` in a ``finally``, of the handler or of the
   try), a try in a helper forward calls too, a build in ``__init__`` falling back to PyTorch, and a callable
   installed by construction that forward runs, stay caught.
2. C01: ``self.relu(x)`` / ``self.norm(x)`` where the name is the program's own method or module is its code, not
   Tensor.relu. An nn.ReLU held under that name, an own module whose forward computes with torch, the name bound
   to ``torch.relu`` (assigned, ``setattr``, shadowing the method from a subclass or the class body, a property
   handing it back, a module whose ``forward`` is bound to it), an own class that inherits an nn layer without a
   forward of its own, stay C01.
3. C01: views named movedim / moveaxis / swapaxes / swapdims, descriptions (``is_floating_point``,
   ``broadcast_shapes``, ``result_type``) and allocator bookkeeping (``new_empty_strided``, ``record_stream``) compute
   nothing, statically and at run time (verifier/common/ops.py); compute after them stays C01.
4. C01: the backward of a torch.autograd.Function is never run by the verifier; called from forward (directly,
   or through ``.backward()``) it is scanned as forward code.
5. C04: ModelNew built on an nn layer (``nn.Conv2d`` for its parameters) with its own forward is honest; without a
   forward, or reaching the layer's code (``super().forward``, ``nn.Linear.forward(self, x)``,
   ``self._conv_forward``, ``forward = nn.Linear.forward``, a submodule the layer built: ``self.out_proj``) it is C04,
   so is a container as the base, and ``F.conv2d`` on its weights is C01.
6. extract: a launch through a token-pasting macro is a launch (the source as the preprocessor gives it, a header
   joined to it at run time included); a macro nothing invokes, or one invoked under ``#if 0``, launches nothing
   (C02's extract error).
7. C17: ``os.getcwd()`` is a path's name; ``os.chdir`` stays C17, listing the directory C15.
"""

import shutil

import pytest

from verifier import cheats
from verifier.common.ops import forbidden
from verifier.front.extract import check_candidate_shape
from verifier.front.static import scan

_PROGRAM = '''import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline
{imports}
src = r"""
#include <torch/extension.h>

__global__ void relu_kernel(const float* x, float* y, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}}

torch::Tensor relu_fwd(torch::Tensor x) {{
    auto y = torch::empty_like(x);
    int n = x.numel();
{launch}
    return y;
}}
"""

ext = load_inline(name="relu_ext", cpp_sources="torch::Tensor relu_fwd(torch::Tensor x);", cuda_sources=src,
                  functions=["relu_fwd"])

{body}'''
_LAUNCH = "    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);"
_PASTE = "#define LAUNCH(NAME) NAME##_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n)\n"


def program(body: str, imports: str = "", launch: str = _LAUNCH) -> str:
    return _PROGRAM.format(imports=imports, body=body, launch=launch)


def forward(lines: str, init: str = "", imports: str = "") -> str:
    return program("class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n" + init +
                   "\n    def forward(self, x):\n" + lines, imports)


def front_codes(code: str) -> list[str]:
    """The codes the front end gives (an extract problem about a kernel never launched reads as C02's)."""
    problems = check_candidate_shape(code, "cuda")
    if problems:
        return [cheats.C02] if any("never launched" in p for p in problems) else ["extract"]
    return scan(code, "cuda").cheat_codes


TRY = "        try:\n            return ext.relu_fwd(x)\n        except RuntimeError as e:\n"
HONEST = {
    # 1. C03
    "handler_logs_then_reraises": forward(TRY + "            print(f'relu_fwd failed: {e}', file=sys.stderr)\n"
                                          "            raise\n", imports="import sys\n"),
    "handler_builds_message_then_raises_from": forward(
        TRY + "            msg = f'relu_fwd failed on {tuple(x.shape)}'\n            raise RuntimeError(msg) from e\n"),
    "init_try_sets_a_default": forward("        return ext.relu_fwd(x)\n", init=(
        "        try:\n            self.sms = torch.cuda.get_device_properties(0).multi_processor_count\n"
        "        except RuntimeError:\n            self.sms = 132\n")),
    "init_build_reraises": program(
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        try:\n"
        "            self.impl = load_inline(name='relu2', cpp_sources='torch::Tensor relu_fwd(torch::Tensor x);',\n"
        "                                    cuda_sources=src, functions=['relu_fwd'])\n"
        "        except Exception as e:\n            print(f'build failed: {e}')\n            raise\n\n"
        "    def forward(self, x):\n        return self.impl.relu_fwd(x)\n"),
    # 2. C01 on the program's own names
    "own_submodule_named_relu": program(
        "class CudaReLU(nn.Module):\n    def forward(self, x):\n        return ext.relu_fwd(x)\n\n\n"
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.relu = CudaReLU()\n\n"
        "    def forward(self, x):\n        return self.relu(x)\n"),
    "own_method_overridden_by_a_subclass": program(
        "class Base(nn.Module):\n    def relu(self, x):\n        return ext.relu_fwd(x)\n\n"
        "    def forward(self, x):\n        return self.relu(x)\n\n\nclass ModelNew(Base):\n"
        "    def relu(self, x):\n        return ext.relu_fwd(x.contiguous())\n"),
    "own_method_named_norm": program(
        "class ModelNew(nn.Module):\n    def norm(self, x):\n        return ext.relu_fwd(x)\n\n"
        "    def forward(self, x):\n        return self.norm(x)\n"),
    # 3. views, descriptions, bookkeeping
    "views_and_descriptions": forward(
        "        if not x.is_floating_point() or torch.result_type(x, 1.0) != torch.float32:\n"
        "            raise TypeError('float32 expected')\n"
        "        shape = torch.broadcast_shapes(x.shape, (1, x.shape[-1]))\n"
        "        y = ext.relu_fwd(x.expand(shape).movedim(1, -1).contiguous()).moveaxis(-1, 1)\n"
        "        z = y.swapaxes(0, 1).swapdims(0, 1).new_empty_strided(y.size(), y.stride())\n"
        "        z.copy_(y)\n        z.record_stream(torch.cuda.current_stream())\n        return z\n"),
    # 4. autograd backward
    "autograd_function_backward": program(
        "class ReLUFn(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n        return ext.relu_fwd(x)\n\n    @staticmethod\n"
        "    def backward(ctx, g):\n        (x,) = ctx.saved_tensors\n"
        "        return torch.where(x > 0, g, torch.zeros_like(g))\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return ReLUFn.apply(x)\n"),
    # 5. an nn layer as the base
    "layer_base_with_own_forward": program(
        "class ModelNew(nn.Linear):\n    def __init__(self):\n        super().__init__(16, 16)\n"
        "        self.reset_parameters()\n\n    def forward(self, x):\n        w = self.weight.contiguous()\n"
        "        return ext.relu_fwd(x[..., :w.shape[1]].contiguous())\n"),
    # 6. a launch through a token-pasting macro
    "token_pasting_launch": program(
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu_fwd(x)\n",
        launch=_PASTE + "    LAUNCH(relu);"),
    "token_pasting_launch_macro_in_a_joined_header": program(
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu_fwd(x)\n",
        launch="    LAUNCH(relu);").replace('src = r"""\n', 'HEAD = r"""\n' + _PASTE + '"""\nsrc = HEAD + r"""\n'),
    # 7. the working directory's name
    "getcwd_for_the_build_directory": program(
        "BUILD = os.path.join(os.getcwd(), 'build_relu')\nos.makedirs(BUILD, exist_ok=True)\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu_fwd(x)\n"
        "", imports="import os\n"),
}

CHEATS = {
    # 1. C03: a fallback before the raise, a raise that can be skipped, a try forward reaches, a callable installed
    "handler_stores_the_reference_then_reraises": (cheats.C03, forward(
        TRY + "            self.cached = torch.relu(x)\n            raise\n")),
    "handler_raises_on_a_condition": (cheats.C03, forward(
        TRY + "            print('failed')\n            if x.numel() > 10:\n                raise\n")),
    "handler_returns_from_a_finally_before_the_raise": (cheats.C03, forward(
        TRY + "            try:\n                print('failed')\n            finally:\n"
              "                return self.out\n"
              "            raise\n")),
    "finally_swallows_the_reraise": (cheats.C03, forward(
        "        try:\n            return ext.relu_fwd(x)\n        except RuntimeError:\n            print('failed')\n"
        "            raise\n        finally:\n            return self.out\n")),
    "try_in_a_helper_forward_calls_too": (cheats.C03, program(
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self._setup()\n\n"
        "    def _setup(self):\n        try:\n            self.sms = 1\n        except RuntimeError:\n"
        "            self.sms = 132\n\n    def forward(self, x):\n        self._setup()\n"
        "        return ext.relu_fwd(x)\n")),
    "init_build_falls_back_to_pytorch": (cheats.C03, program(
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        try:\n"
        "            self.impl = self._build()\n        except Exception as e:\n"
        "            print(f'build failed: {e}; falling back to PyTorch')\n            self.impl = None\n\n"
        "    def _build(self):\n"
        "        return load_inline(name='relu2', cpp_sources='torch::Tensor relu_fwd(torch::Tensor x);',\n"
        "                           cuda_sources=src, functions=['relu_fwd'])\n\n"
        "    def forward(self, x):\n        if self.impl is None:\n            return torch.relu(x)\n"
        "        return self.impl.relu_fwd(x)\n")),
    "init_handler_installs_a_torch_path": (cheats.C01, program(
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.fn = ext.relu_fwd\n"
        "        try:\n            self.sms = torch.cuda.get_device_properties(0).multi_processor_count\n"
        "        except RuntimeError:\n            self.fn = self._reference\n\n"
        "    def _reference(self, x):\n        return torch.relu(x)\n\n    def forward(self, x):\n"
        "        return self.fn(x)\n")),
    # 2. C01: names of the program's own objects that are not its code
    "nn_relu_held_as_relu": (cheats.C01, forward("        return self.relu(ext.relu_fwd(x))\n",
                                                 init="        self.relu = nn.ReLU()\n")),
    "own_submodule_computing_with_torch": (cheats.C01, program(
        "class R(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n\n"
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.relu = R()\n\n"
        "    def forward(self, x):\n        return self.relu(ext.relu_fwd(x))\n")),
    "name_bound_to_torch_relu": (cheats.C01, forward("        return self.relu(ext.relu_fwd(x))\n",
                                                     init="        self.relu = torch.relu\n")),
    "name_set_by_setattr": (cheats.C01, forward("        return self.relu(ext.relu_fwd(x))\n",
                                                init="        setattr(self, 'relu', torch.relu)\n")),
    "subclass_shadows_the_own_method": (cheats.C01, program(
        "class Base(nn.Module):\n    def relu(self, x):\n        return ext.relu_fwd(x)\n\n"
        "    def forward(self, x):\n        return self.relu(x)\n\n\n"
        "class ModelNew(Base):\n    def __init__(self):\n        super().__init__()\n"
        "        self.relu = torch.relu\n")),
    "class_body_rebinds_the_method": (cheats.C01, program(
        "class ModelNew(nn.Module):\n    def relu(self, x):\n        return ext.relu_fwd(x)\n\n"
        "    relu = torch.relu\n\n"
        "    def forward(self, x):\n        return self.relu(x)\n")),
    "subclass_binds_the_name_in_its_body": (cheats.C01, program(
        "class Base(nn.Module):\n    def relu(self, x):\n        return ext.relu_fwd(x)\n\n"
        "    def forward(self, x):\n        return self.relu(x)\n\n\nclass ModelNew(Base):\n"
        "    relu = staticmethod(torch.relu)\n")),
    "own_module_whose_forward_is_a_property": (cheats.C01, program(
        "class R(nn.Module):\n    @property\n    def forward(self):\n        return torch.relu\n\n\n"
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.relu = R()\n\n"
        "    def forward(self, x):\n        return self.relu(ext.relu_fwd(x))\n")),
    "property_handing_back_torch_relu": (cheats.C01, program(
        "class ModelNew(nn.Module):\n    @property\n    def relu(self):\n        return torch.relu\n\n"
        "    def forward(self, x):\n        return self.relu(ext.relu_fwd(x))\n")),
    "own_module_whose_forward_is_torch_relu": (cheats.C01, program(
        "class R(nn.Module):\n    forward = staticmethod(torch.relu)\n\n\nclass ModelNew(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.relu = R()\n\n"
        "    def forward(self, x):\n        return self.relu(ext.relu_fwd(x))\n")),
    "own_class_inheriting_a_layer_without_forward": (cheats.C01, program(
        "class Act(nn.ReLU):\n    pass\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.act = Act()\n\n    def forward(self, x):\n        return self.act(ext.relu_fwd(x))\n")),
    # 3. compute after a view
    "compute_after_movedim": (cheats.C01, forward(
        "        return ext.relu_fwd(x.movedim(1, -1).contiguous()).sum()\n")),
    "compute_into_new_empty_strided": (cheats.C01, forward(
        "        y = x.new_empty_strided(x.size(), x.stride())\n        y.copy_(torch.relu(ext.relu_fwd(x)))\n"
        "        return y\n")),
    # 4. backward run from forward
    "backward_called_from_forward": (cheats.C01, program(
        "class Fn(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
        "        return ext.relu_fwd(x)\n\n"
        "    @staticmethod\n    def backward(ctx, g):\n        return torch.relu(g)\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return Fn.backward(None, Fn.apply(x))\n")),
    # 5. the layer's own forward
    "layer_base_without_forward": (cheats.C04, program(
        "class ModelNew(nn.Linear):\n    def relu(self, x):\n        return ext.relu_fwd(x)\n")),
    "layer_base_super_forward": (cheats.C04, program(
        "class ModelNew(nn.Linear):\n    def forward(self, x):\n        return super().forward(ext.relu_fwd(x))\n")),
    "layer_base_forward_called_by_class": (cheats.C04, program(
        "class ModelNew(nn.Linear):\n    def forward(self, x):\n"
        "        return nn.Linear.forward(self, ext.relu_fwd(x))\n")),
    "layer_base_private_method": (cheats.C04, program(
        "class ModelNew(nn.Conv2d):\n    def forward(self, x):\n"
        "        return self._conv_forward(ext.relu_fwd(x), self.weight, self.bias)\n")),
    "layer_base_forward_assigned": (cheats.C04, program(
        "class ModelNew(nn.Linear):\n    forward = nn.Linear.forward\n\n    def relu(self, x):\n"
        "        return ext.relu_fwd(x)\n")),
    "layer_base_submodule_the_layer_built": (cheats.C04, program(
        "class ModelNew(nn.MultiheadAttention):\n    def forward(self, x):\n"
        "        return self.out_proj(ext.relu_fwd(x))\n")),
    "container_base_running_its_members": (cheats.C04, program(
        "class ModelNew(nn.Sequential):\n    def __init__(self):\n        super().__init__(nn.ReLU())\n\n"
        "    def forward(self, x):\n        return self[0](ext.relu_fwd(x))\n")),
    "layer_base_functional_on_its_weights": (cheats.C01, program(
        "class ModelNew(nn.Conv2d):\n    def forward(self, x):\n"
        "        return F.conv2d(ext.relu_fwd(x), self.weight, self.bias)\n")),
    # 6. a macro that launches nothing
    "pasting_macro_never_invoked": (cheats.C02, program(
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu_fwd(x)\n", launch=_PASTE)),
    "pasting_macro_invoked_under_if_0": (cheats.C02, program(
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu_fwd(x)\n",
        launch=_PASTE + "#if 0\n    LAUNCH(relu);\n#endif")),
    # 7. the working directory changed or listed
    "chdir": (cheats.C17, program("os.chdir(os.getcwd())\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
                                  "        return ext.relu_fwd(x)\n", imports="import os\n")),
    "listdir_of_getcwd": (cheats.C15, program("FILES = os.listdir(os.getcwd())\n\n\nclass ModelNew(nn.Module):\n"
                                              "    def forward(self, x):\n        return ext.relu_fwd(x)\n",
                                              imports="import os\n")),
}
_NEEDS_CPP = {"token_pasting_launch", "token_pasting_launch_macro_in_a_joined_header"}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_form_has_no_finding(name):
    if name in _NEEDS_CPP and shutil.which("cpp") is None:
        pytest.skip("no C preprocessor: the pasted launch cannot be expanded here")
    assert front_codes(HONEST[name]) == [], scan(HONEST[name], "cuda").findings


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheat_behind_the_honest_form_is_caught(name):
    code_, text = CHEATS[name]
    assert code_ in front_codes(text), (name, front_codes(text))


def test_views_and_dtype_queries_pass_the_runtime_allowlist_and_compute_does_not():
    """What the profiler records for the views (their own name around the permute / transpose) and dtype
    promotion; the compute after them is still forbidden."""
    views = ["aten::movedim", "aten::moveaxis", "aten::permute", "aten::swapaxes", "aten::swapdims",
             "aten::transpose", "aten::new_empty_strided", "aten::empty_strided", "aten::record_stream",
             "aten::result_type", "aten::promote_types", "aten::can_cast"]
    assert forbidden(views) == []
    assert forbidden(views + ["aten::sum", "aten::relu"]) == ["aten::relu", "aten::sum"]
