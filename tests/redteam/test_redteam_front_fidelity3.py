"""Red team of the front end's readings that a third set of honest frontier-style CUDA answers needed
(tests/data/fidelity_cuda/c77 onward; tests/test_fidelity_cuda_front.py runs them): each honest form passes here, and
beside it the cheat that could hide behind the reading is still caught, with its code.

97. C11: a constant set on the module ``PYBIND11_MODULE`` creates (``m.attr("__version__") = "1.0";``,
    ``m.attr("BLOCK") = py::int_(256);``) walks to no Python object. Reading or calling an
    attribute, a dunder other than ``__version__`` / ``__doc__`` / ``__all__`` / ``__author__``, another object's
    attribute, the same store outside the macro's body, and an import as the stored value stay C11.
98. C01 / C11: a name the candidate's C++ defines itself is its own, whatever a library's prefix it shares (a
    function ``cute``, a variable ``cutlass``, a kernel ``cublas_like_sgemm`` in a ``namespace cublas_like``, a
    variable ``mkl_threads``, a function ``PyTorchStyle_relu``, a variable ``tp_base``); CUTLASS is read by its
    namespace. ``cute::``, ``using namespace cute``, an alias of ``cutlass``, the namespace reopened, a cuBLAS
    function declared by hand (no body) and called, a type slot read through an object (``->tp_dict``) beside an own
    variable of that name, and the C API by name stay C01 / C11.
99. C01: Python's operator module on sizes and numbers (``operator.mul(x.shape[0], x.shape[1])``,
    ``operator.floordiv(x.numel(), self.hidden)``, ``functools.reduce(operator.mul, x.shape, 1)``, a helper's
    ``reduce`` over the shape it is handed) is integer arithmetic. An operator function with a tensor operand (any
    spelling: ``operator.add``, ``operator.__add__``, ``from operator import mul``, ``operator.floordiv``, which
    passed before), with no operand the scan can place as a size, and ``reduce`` / ``map`` of one over tensors are
    C01.
100. C01: a tensor's storage queried for its address or size (``x.untyped_storage().data_ptr()``, ``.nbytes()``,
    ``x.storage().size()``, ``len``, ``get_device``) computes nothing; its bytes read into Python, copied or written
    (``tolist``, ``cpu``, ``copy_``, ``fill_`` on the storage, named or not; ``bytes(s)``, ``s[0]``, iterating it,
    handing it to a function) are C01.
101. C01: ``@torch.compiler.allow_in_graph`` on a launcher (or on the extension's function) computes nothing; a
    decorated function computing with torch is C01, and a compute function handed on as a value at import or
    construction (``f = torch.compiler.allow_in_graph(torch.relu)``, ``f = torch.relu``), then called in forward, is
    C01 (it was dropped as set-up and passed the static scan).
109. C01: a Tensor method called through its class (``torch.Tensor.contiguous(x)``, ``torch.Tensor.view(x, n, -1)``)
    is the method; torch's symbolic-size helpers on sizes (``torch.sym_int(x.numel() // 4)``, ``torch.sym_max(1,
    torch.sym_min(self.max_blocks, n))``, ``torch.sym_sum([x.shape[0], x.shape[1]])``) are integer arithmetic. An
    unbound compute method, an unbound storage read, a helper on a tensor operand (``torch.sym_sum([y, x])`` adds
    them) or on values the scan cannot place, and a helper handed on as a value stay C01.
"""

import pytest

from verifier import cheats
from verifier.front.binary import scan_tampering
from verifier.front.static import scan
from verifier.front.vendor import scan_sources

from tests.redteam.test_redteam_front_fidelity import forward, front_codes, program


def source_codes(sources: list[str]) -> list[str]:
    """The codes the source and tampering scans give C++ sources (C01 for a library, C11 for tampering)."""
    return ([cheats.C01] if scan_sources(sources) else []) + ([cheats.C11] if scan_tampering(sources) else [])


# ------------------------------------------------------------------------------------------ 97, 98: the C++ text
_MODULE = 'torch::Tensor relu_fwd(torch::Tensor x);\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n' \
          '    m.def("relu_fwd", &relu_fwd, "relu", py::arg("x"));\n{body}\n}}\n'


def module(body: str) -> str:
    return _MODULE.format(body=body)


HONEST_SOURCES = {
    # 97
    "module_version_string": module('    m.attr("__version__") = "1.0.2";'),
    "module_int_constant": module('    m.attr("BLOCK_THREADS") = py::int_(256);\n    m.attr("kVec") = 4;'),
    "module_doc_and_bool": module('    m.doc() = "fused relu";\n    m.attr("SUPPORTS_HALF") = true;'),
    "module_variable_named_mod": 'PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) {\n  mod.attr("__version__") = "2";\n}\n',
    # 98
    "function_named_cute": "__device__ float cute(float v) { return v > 0.f ? v : 0.f; }\n"
                           "__global__ void k(float* y) { y[0] = cute(y[0]); }\n",
    "variable_named_cutlass": "void f(float* y) { const bool cutlass = false; if (!cutlass) y[0] = 1.f; }\n",
    "kernel_named_cublas_like": "namespace cublas_like {\n__global__ void cublas_like_sgemm(float* c) { c[0] = 0.f; }\n}\n"
                                "void launch(float* c) { cublas_like::cublas_like_sgemm<<<1, 1>>>(c); }\n",
    "variable_named_mkl_threads": "static int mkl_threads = 4;\nint threads() { return mkl_threads; }\n",
    "struct_named_cudnn_like": "struct cudnn_like_desc { int n, c, h, w; };\nint f(cudnn_like_desc d) { return d.n; }\n",
    "function_named_PyTorchStyle": "torch::Tensor PyTorchStyle_relu(torch::Tensor x) { return x; }\n",
    "variable_named_tp_base": "int f(int rank) { const int tp_base = rank / 8; return tp_base; }\n",
    "cute_in_an_identifier": "__device__ int cute_swizzle(int i) { return i ^ (i >> 3); }\n",
}

CHEAT_SOURCES = {
    # 97: reads, calls, dunders, other objects, outside the module's body, an import stored
    "module_attribute_called": (cheats.C11, module('    m.attr("relu_fwd")(1);')),
    "module_attribute_read": (cheats.C11, module('    auto v = m.attr("__dict__");')),
    "module_dunder_stored": (cheats.C11, module('    m.attr("__class__") = py::int_(1);')),
    "module_attribute_compared": (cheats.C11, module('    bool b = m.attr("x") == py::int_(1);')),
    "numpy_import_stored": (cheats.C11, module('    m.attr("np") = py::module_::import("numpy");')),
    "other_object_attribute_stored": (cheats.C11, module('    py::int_ x(1);\n    x.attr("real") = 2;')),
    "store_outside_the_module_body": (cheats.C11, 'void setup(py::module_& m) { m.attr("x") = 1; }\n'),
    # a submodule (m.def_submodule) needs PyImport_AddModule, which the binary scan rejects (child/loading.py): its
    # attributes are not the module's own constants here either
    "submodule_attribute_stored": (cheats.C11, module('    auto ops = m.def_submodule("ops");\n'
                                                      '    ops.attr("THREADS") = py::int_(1024);')),
    "store_after_a_brace_in_a_string": (cheats.C11, module('    m.doc() = "{";\n    char c = \'{\';') +
                                        'void setup(py::module_& m) { m.attr("x") = 1; }\n'),
    "torch_attribute_through_the_module": (cheats.C11, module('    m.attr("mm") = m.attr("torch").attr("mm");')),
    # 98: CUTLASS by its namespace, a library's function declared by hand and called, a slot read through an object
    "cute_namespace_qualified": (cheats.C01, "void f(float* p) { auto t = cute::make_tensor(p); }\n"),
    "cute_using_directive": (cheats.C01, "using namespace cute;\n__device__ float cute_scale = 1.f;\n"),
    "cutlass_namespace_alias": (cheats.C01, "namespace gemm = cutlass::gemm;\nint cutlass_free = 0;\n"),
    "cutlass_global_qualified": (cheats.C01, "void f() { ::cutlass::arch::synclog_setup(); }\n"),
    "cute_namespace_reopened": (cheats.C01, "namespace cute { void f(); }\nvoid cute() {}\n"),
    "cublas_declared_by_hand": (cheats.C01, "int cublasSgemm_v2(void*, int, int);\n"
                                            "namespace cublas_like { void f() { cublasSgemm_v2(0, 0, 0); } }\n"),
    "cublas_beside_own_names": (cheats.C01, "void cublas_like_sgemm(cublasHandle_t h) { cublasSgemm(h); }\n"),
    "mkl_beside_own_variable": (cheats.C01, "int mkl_threads = 1;\nvoid f() { mkl_set_num_threads(mkl_threads); }\n"),
    "slot_read_beside_own_variable": (cheats.C11, "int tp_dict = 0;\nvoid f(void* o) { auto d = ((T*)o)->tp_dict; }\n"),
    "c_api_by_name": (cheats.C11, "void PyTorchStyle_relu() { PyObject_GetAttrString(nullptr, \"mm\"); }\n"),
}


@pytest.mark.parametrize("name", sorted(HONEST_SOURCES))
def test_honest_source_has_no_finding(name):
    src = HONEST_SOURCES[name]
    assert scan_sources([src]) == [] and scan_tampering([src]) == [], (scan_sources([src]), scan_tampering([src]))


@pytest.mark.parametrize("name", sorted(CHEAT_SOURCES))
def test_cheat_source_is_caught(name):
    code_, src = CHEAT_SOURCES[name]
    assert code_ in source_codes([src]), (name, scan_sources([src]), scan_tampering([src]))


def test_module_constants_are_honest_in_a_whole_program():
    """The program whole: the pybind11 module with its constants as cpp_sources, built without ``functions``."""
    text = program("class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu_fwd(x)\n").replace(
        'cpp_sources="torch::Tensor relu_fwd(torch::Tensor x);"', "cpp_sources=CPP").replace(
        '                  functions=["relu_fwd"])', ")").replace(
        "ext = load_inline(", "CPP = r'''\n" + module('    m.attr("__version__") = "1.0";') + "'''\next = load_inline(")
    assert "PYBIND11_MODULE" in text and 'functions=["relu_fwd"]' not in text
    assert front_codes(text) == []
    report = scan(text, "cuda")
    assert report.extensions and report.extensions[0].resolved
    for ext in report.extensions:
        srcs = [ext.args["cpp_sources"], ext.args["cuda_sources"]]
        assert scan_tampering(srcs) == [] and scan_sources(srcs) == []


# ------------------------------------------------------------------------------------- 99-101: the Python text
_IMPORTS = "import functools\nimport operator\nfrom functools import reduce\nfrom operator import mul\n"
HONEST = {
    # 99
    "operator_mul_on_sizes": forward("        n = operator.mul(x.shape[0], x.shape[1])\n"
                                     "        return ext.relu_fwd(x.view(n, -1))\n", imports=_IMPORTS),
    "operator_on_counts_and_init_settings": forward(
        "        rows = operator.floordiv(x.numel(), self.hidden)\n        return ext.relu_fwd(x.view(rows, -1))\n",
        init="        self.hidden = functools.reduce(operator.mul, (4, 4), 1)\n", imports=_IMPORTS),
    "reduce_mul_over_the_shape": forward("        n = functools.reduce(operator.mul, x.shape, 1)\n"
                                         "        return ext.relu_fwd(x.view(n))\n", imports=_IMPORTS),
    "imported_mul_on_sizes": forward("        n = mul(x.size(0), x.size(1)) + reduce(mul, x.shape[1:], 1)\n"
                                     "        return ext.relu_fwd(x)\n", imports=_IMPORTS),
    "helper_reduce_over_its_shape_argument": program(
        "def prod(shape):\n    return functools.reduce(operator.mul, shape, 1)\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        n = prod(x.shape[:-1])\n"
        "        cols = operator.floordiv(x.numel(), n)\n        return ext.relu_fwd(x.view(n, cols))\n",
        imports=_IMPORTS),
    "operator_comparison_of_dtypes": forward(
        "        if operator.ne(x.dtype, torch.float32):\n            raise TypeError('float32')\n"
        "        return ext.relu_fwd(x)\n", imports=_IMPORTS),
    "operator_index_and_comparison_on_sizes": forward(
        "        if operator.ne(x.dim(), 2) or operator.index(x.shape[-1]) % 4:\n            raise ValueError('2D')\n"
        "        return ext.relu_fwd(x)\n", imports=_IMPORTS),
    # 100
    "storage_queries": forward(
        "        s = x.untyped_storage()\n        aligned = s.data_ptr() % 16 == 0 and s.nbytes() >= x.nbytes\n"
        "        assert x.storage().size() >= x.numel()\n        return ext.relu_fwd(x if aligned else x.clone())\n"),
    "storage_measured_and_compared": forward(
        "        s = x.storage()\n        n = len(s) + s.size()\n        d = x.untyped_storage().get_device()\n"
        "        same = s.data_ptr() == x.untyped_storage().data_ptr()\n        del s\n        return ext.relu_fwd(x)\n"),
    "storage_address_inline": forward(
        "        if x.untyped_storage().data_ptr() != x.data_ptr():\n            x = x.contiguous()\n"
        "        return ext.relu_fwd(x)\n"),
    # 101
    "allow_in_graph_launcher": program(
        "@torch.compiler.allow_in_graph\ndef launch(x):\n    return ext.relu_fwd(x)\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return launch(x)\n"),
    "initialiser_handed_on_in_construction": forward(
        "        return ext.relu_fwd(x)\n", init="        self.w = nn.Parameter(torch.empty(4, 4))\n"
        "        init = functools.partial(nn.init.trunc_normal_, std=0.02)\n        init(self.w)\n", imports=_IMPORTS),
    "allow_in_graph_of_the_own_function": program(
        "launch = torch.compiler.allow_in_graph(ext.relu_fwd)\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return launch(x)\n"),
    # 109
    "unbound_views_and_sizes": forward(
        "        flat = torch.Tensor.view(torch.Tensor.contiguous(x), -1)\n"
        "        n = torch.Tensor.size(flat, 0) + torch.Tensor.numel(x) * 0\n"
        "        return torch.Tensor.view_as(ext.relu_fwd(torch.Tensor.reshape(flat, (n,))), x)\n"),
    "sym_helpers_on_sizes": forward(
        "        n4 = torch.sym_int(x.numel() // 4)\n"
        "        blocks = torch.sym_max(1, torch.sym_min(self.max_blocks, (n4 + 255) // 256))\n"
        "        total = torch.sym_sum([x.shape[0], x.shape[1]]) + torch.sym_float(blocks)\n"
        "        return ext.relu_fwd(x if torch.sym_not(total < 0) else x.contiguous())\n",
        init="        self.max_blocks = 132 * 8\n"),
    "sym_int_of_a_sym_value_then_operator": forward(
        "        rows = torch.sym_int(x.shape[0])\n        n = operator.mul(rows, x.shape[1])\n"
        "        return ext.relu_fwd(x.view(n))\n", imports=_IMPORTS),
}

CHEATS = {
    # 99: a tensor operand, every spelling; nothing placeable; reduce / map over tensors
    "operator_mul_on_a_tensor": (cheats.C01, forward("        return operator.mul(ext.relu_fwd(x), x.shape[0])\n",
                                                     imports=_IMPORTS)),
    "operator_add_on_tensors": (cheats.C01, forward("        y = ext.relu_fwd(x)\n        return operator.add(y, x)\n",
                                                    imports=_IMPORTS)),
    "operator_dunder_add_on_tensors": (cheats.C01, forward(
        "        y = ext.relu_fwd(x)\n        return operator.__add__(y, x)\n", imports=_IMPORTS)),
    "operator_floordiv_on_a_tensor": (cheats.C01, forward(
        "        y = ext.relu_fwd(x)\n        return operator.floordiv(y, 2)\n", imports=_IMPORTS)),
    "imported_mul_on_tensors": (cheats.C01, forward("        return mul(ext.relu_fwd(x), x)\n", imports=_IMPORTS)),
    "operator_alias_on_tensors": (cheats.C01, forward("        y = ext.relu_fwd(x)\n        return op.sub(y, x)\n",
                                                      imports="import operator as op\n")),
    "operator_comparison_of_tensors": (cheats.C01, forward(
        "        y = ext.relu_fwd(x)\n        return operator.gt(y, x).float()\n", imports=_IMPORTS)),
    "operator_on_unplaceable_values": (cheats.C01, program(
        "def scale(a, b):\n    return operator.mul(a, b)\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return scale(ext.relu_fwd(x), self.w)\n",
        imports=_IMPORTS)),
    "reduce_mul_over_tensors": (cheats.C01, forward(
        "        y = ext.relu_fwd(x)\n        return functools.reduce(operator.mul, [y, x])\n", imports=_IMPORTS)),
    "reduce_add_over_a_tensors_rows": (cheats.C01, forward(
        "        y = ext.relu_fwd(x)\n        return reduce(operator.add, y)\n", imports=_IMPORTS)),
    "map_mul_over_tensors": (cheats.C01, forward(
        "        y = ext.relu_fwd(x)\n        return list(map(operator.mul, [y], [x]))[0]\n", imports=_IMPORTS)),
    # 100: the storage's bytes
    "storage_read_into_python": (cheats.C01, forward(
        "        raw = x.untyped_storage().tolist()\n        return ext.relu_fwd(x)\n")),
    "named_storage_copied_to_host": (cheats.C01, forward(
        "        s = x.untyped_storage()\n        host = s.cpu()\n        return ext.relu_fwd(x)\n")),
    "storage_copied_over_the_output": (cheats.C01, forward(
        "        y = ext.relu_fwd(x)\n        y.untyped_storage().copy_(x.untyped_storage())\n        return y\n")),
    "storage_converted_to_bytes": (cheats.C01, forward(
        "        raw = bytes(x.untyped_storage())\n        return ext.relu_fwd(x)\n")),
    "storage_indexed": (cheats.C01, forward("        b = x.untyped_storage()[0]\n        return ext.relu_fwd(x)\n")),
    "named_storage_iterated": (cheats.C01, forward(
        "        s = x.untyped_storage()\n        total = 0\n        for v in s:\n            total += v\n"
        "        return ext.relu_fwd(x)\n")),
    "storage_handed_to_a_function": (cheats.C01, forward(
        "        raw = list(x.storage())\n        return ext.relu_fwd(x)\n")),
    "storage_filled": (cheats.C01, forward("        y = ext.relu_fwd(x)\n        y.storage().fill_(0)\n        return y\n")),
    # 101
    "allow_in_graph_function_computes": (cheats.C01, program(
        "@torch.compiler.allow_in_graph\ndef launch(x):\n    return torch.relu(ext.relu_fwd(x))\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return launch(x)\n")),
    "allow_in_graph_of_a_torch_function_at_import": (cheats.C01, program(
        "f = torch.compiler.allow_in_graph(torch.relu)\n\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return f(ext.relu_fwd(x))\n")),
    "torch_function_bound_at_import": (cheats.C01, program(
        "f = torch.relu\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return f(ext.relu_fwd(x))\n")),
    "torch_function_bound_in_construction": (cheats.C01, forward(
        "        return self.act(ext.relu_fwd(x))\n", init="        self.act = F.gelu\n")),
    # 109: unbound compute and storage reads; helpers on tensors, on unplaceable values, handed on
    "unbound_compute_method": (cheats.C01, forward("        y = ext.relu_fwd(x)\n        return torch.Tensor.add(y, x)\n")),
    "unbound_relu_only": (cheats.C01, forward("        return torch.Tensor.relu(x)\n")),
    "unbound_copy_of_torch_compute": (cheats.C01, forward(
        "        y = ext.relu_fwd(x)\n        torch.Tensor.copy_(y, torch.relu(x))\n        return y\n")),
    "unbound_storage_read": (cheats.C01, forward(
        "        raw = torch.Tensor.untyped_storage(x).tolist()\n        return ext.relu_fwd(x)\n")),
    "sym_sum_of_tensors": (cheats.C01, forward("        y = ext.relu_fwd(x)\n        return torch.sym_sum([y, x])\n")),
    "sym_max_of_tensors": (cheats.C01, forward("        y = ext.relu_fwd(x)\n        return torch.sym_max(y, x)\n")),
    "sym_min_of_unplaceable_values": (cheats.C01, forward(
        "        y = ext.relu_fwd(x)\n        return torch.sym_min(y, self.w)\n")),
    "sym_ite_choosing_tensor_compute": (cheats.C01, forward(
        "        y = ext.relu_fwd(x)\n        return torch.sym_ite(True, y + x, y)\n")),
    "sym_helper_handed_on_at_import": (cheats.C01, program(
        "f = torch.sym_max\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n"
        "        y = ext.relu_fwd(x)\n        return f(y, x)\n")),
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_form_has_no_finding(name):
    assert front_codes(HONEST[name]) == [], scan(HONEST[name], "cuda").findings


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheat_behind_the_honest_form_is_caught(name):
    code_, text = CHEATS[name]
    assert code_ in front_codes(text), (name, front_codes(text))
