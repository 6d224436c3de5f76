"""The boxed binding (verifier/build/boxed.py, verifier/build/objcache.py): a binding file whose exported functions
take and return common types is built as one module object shared by every build with the same flags (whatever
the names and types) and a small shim object of its own, and the module each candidate gets behaves as the one
its file as written gives: the same functions called with the same converted arguments, the same results, the same
errors; anything it does not take is built as before, and a failure reads as the file as written's.

Real two-object C++ builds as in tests/test_verifier_binding.py (the CPU machine has no CUDA torch to link a CUDA
build against); the second object is the candidate's, defining its functions with ATen."""

import subprocess

import pytest
import torch

from tests.test_verifier_binding import main_cpp, pch, two_object_build  # noqa: F401  (the module's PCH fixture)
from verifier.build import boxed
from verifier.build.boxed import boxed_binding, shim_source
from verifier.child.loading import load_so

# ---------------------------------------------------------------------------- which files, read without compiling


def test_common_types_are_boxed_with_their_codes_and_the_wrapping_kept():
    b = boxed_binding(main_cpp(
        "torch::Tensor f(const torch::Tensor& x, const float s, int64_t k, bool on);\n"
        "std::tuple<torch::Tensor, torch::Tensor> g(torch::Tensor a, c10::optional<torch::Tensor> b, "
        "std::vector<long> v, torch::IntArrayRef sz);\nvoid h(torch::Tensor& out, double d, int n);",
        {"f": "scale", "g": "pair", "h": "in place"}))
    assert b is not None and b.wrapped and b.names == ("f", "g", "h")
    f, g, h = b.functions
    assert (f.codes, f.ret_code, f.doc) == ((1, 5, 3, 7), 1, "scale")
    assert (g.codes, g.ret_code) == ((1, 8, 11, 14), boxed.RET_TUPLE)
    assert (h.codes, h.ret_code) == ((1, 6, 2), boxed.RET_VOID)
    assert boxed_binding(main_cpp("torch::Tensor f(torch::Tensor x);", ["f"], wrapped=False)).wrapped is False


@pytest.mark.parametrize("decl", [
    "torch::Tensor f(unsigned int n);",  # a type the module has no caster for
    "torch::Tensor f(int& n);",  # a non-const reference to what pybind11 converts into a temporary
    "torch::Tensor f(torch::Tensor&& x);",
    "torch::Tensor f(float* p);",
    "std::tuple<torch::Tensor, int> f(torch::Tensor x);",  # a tuple of anything but tensors
    "std::string f(torch::Tensor x);",
    "torch::Tensor f(" + ", ".join(f"int a{i}" for i in range(boxed.MAX_PARAMS + 1)) + ");",
])
def test_other_types_are_not_boxed(decl):
    assert boxed_binding(main_cpp(decl, ["f"])) is None


def test_the_shim_declares_the_files_own_functions_with_the_same_types():
    """The declarations keep each parameter's const and reference (they decide the mangled name the link resolves),
    spelled where the shim's headers declare them; the table and shims are hidden."""
    text = shim_source(boxed_binding(main_cpp(
        "torch::Tensor f(const torch::Tensor& x, torch::IntArrayRef sz, const std::vector<long>& v);", ["f"])))
    assert "at::Tensor f(const at::Tensor&, c10::IntArrayRef, const std::vector<long>&);" in text
    assert text.index("at::Tensor f(") < text.index("#pragma GCC visibility push(hidden)")
    assert '{"f", "f", km_p0, 3, 1, 1, km_s0}' in text


# ---------------------------------------------------------------------------- real builds

HEAD = "#include <ATen/core/Tensor.h>\n#include <optional>\n#include <tuple>\n#include <vector>\n"
DECL = ("torch::Tensor {p}scale(const torch::Tensor& x, double s, int64_t k);\n"
        "std::tuple<torch::Tensor, torch::Tensor> {p}two(torch::Tensor x, c10::optional<torch::Tensor> y, "
        "std::vector<long> v, bool b);\nvoid {p}bump(torch::Tensor& x, const float f, torch::IntArrayRef sz);\n"
        "int64_t {p}count(std::vector<torch::Tensor> xs);")
IMPL_A = """
at::Tensor {p}scale(const at::Tensor& x, double s, int64_t k) {{
  TORCH_CHECK(k >= 0, "k must be >= 0, got ", k);
  TORCH_CHECK_INDEX(k < 100, "k out of range: ", k);
  return x.mul(s).add(k);
}}
std::tuple<at::Tensor, at::Tensor> {p}two(at::Tensor x, std::optional<at::Tensor> y, std::vector<long> v, bool b) {{
  return {{x.add(y ? *y : x), x.new_full({{1}}, static_cast<double>(v.size()) + b)}};
}}
void {p}bump(at::Tensor& x, float f, c10::IntArrayRef sz) {{ x.add_(f * static_cast<double>(sz.size())); }}
int64_t {p}count(std::vector<at::Tensor> xs) {{ return static_cast<int64_t>(xs.size()); }}
"""
DOCS = {"scale": "scale it", "two": "a pair", "bump": "in place", "count": "how many"}


def _build(root, d, prefix, cache, pch, boxed_on=True, canonical=True, impl=None):  # noqa: F811
    return two_object_build(root / d, DECL.format(p=prefix), {prefix + k: v for k, v in DOCS.items()},
                            impl if impl is not None else IMPL_A.format(p=prefix), cache, pch, canonical=canonical,
                            boxed=boxed_on, impl_head=HEAD)


@pytest.fixture(scope="module")
def built(tmp_path_factory, pch):  # noqa: F811
    root = tmp_path_factory.mktemp("boxed")
    cache = root / "objects"
    a = _build(root, "box_a", "za_", cache, pch)
    b = _build(root, "box_b", "zb_", cache, pch)  # other names: the same module object
    w = _build(root, "box_w", "za_", cache, pch, boxed_on=False, canonical=False)  # a's file as written
    return root, cache, a, b, w


def test_two_answers_share_the_module_object_and_call_their_own_functions(built):
    root, cache, a, b, _ = built
    assert a["binding"] == b["binding"] == "boxed"
    # compiled once at most: by a, or before it by the compile pool beside the precompiled header (another test's
    # pool build with these flags; test_the_pools_module_object_beside_the_header_is_taken)
    assert "impl.o" in a["misses"] and b["hits"] == [boxed.MODULE_OBJECT] and "impl.o" in b["misses"]
    # module names of their own: CPython hands back the first module loaded under a name (test_verifier_binding's)
    ma = load_so("km_box_a", str(root / "box_a" / "km_ext.so"))
    mb = load_so("km_box_b", str(root / "box_b" / "km_ext.so"))
    x = torch.arange(4.0)
    assert torch.equal(ma.za_scale(x, 2.0, 3), x * 2 + 3) and torch.equal(mb.zb_scale(x, 1.0, 1), x + 1)
    assert not hasattr(ma, "zb_scale") and not hasattr(mb, "za_scale")
    # the table and shims are not exported: one module's cannot stand in for another's
    dyn = subprocess.run(["readelf", "--dyn-syms", "-W", str(root / "box_b" / "km_ext.so")], capture_output=True,
                         text=True, check=True).stdout
    binds = {f[7]: f[4] for f in (line.split() for line in dyn.splitlines()) if len(f) >= 8}
    assert all(v == "LOCAL" for k, v in binds.items() if "km_" in k and not k.startswith("PyInit")), binds


def _outcome(fn):
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 - the outcome compared is the exception's type and first line
        return type(e), str(e).splitlines()[0]
    return r


def test_the_module_behaves_as_the_file_as_written(built):
    """Values, None for an optional, a tuple, in-place work, a list, scalar conversions; TORCH_CHECK and
    TORCH_CHECK_INDEX translated to RuntimeError and IndexError by the same wrapping; arguments no caster takes and
    keywords refused with TypeError naming the function."""
    root, *_ = built
    boxed_mod = load_so("km_box_a", str(root / "box_a" / "km_ext.so"))
    written = load_so("km_box_w", str(root / "box_w" / "km_ext.so"))
    x = torch.arange(4.0)
    calls = [lambda m: m.za_scale(x, 2.0, 3), lambda m: m.za_scale(x, 2, 3), lambda m: m.za_two(x, None, [1, 2], True),
             lambda m: m.za_two(x, x, (5,), False), lambda m: m.za_count([x, x, x]), lambda m: m.za_count([])]
    for call in calls:
        got, want = call(boxed_mod), call(written)
        assert type(got) is type(want)
        flat = [(got, want)] if not isinstance(got, tuple) else list(zip(got, want))
        assert all(torch.equal(g, w) if isinstance(g, torch.Tensor) else g == w for g, w in flat)
    ys = [x.clone(), x.clone()]
    assert boxed_mod.za_bump(ys[0], 1.5, [2, 3]) is None and written.za_bump(ys[1], 1.5, [2, 3]) is None
    assert torch.equal(ys[0], ys[1]) and torch.equal(ys[0], x + 3)
    for bad in (lambda m: m.za_scale(x, 2.0, -1), lambda m: m.za_scale(x, 2.0, 100)):
        assert _outcome(lambda: bad(boxed_mod)) == _outcome(lambda: bad(written))
    assert _outcome(lambda: boxed_mod.za_scale(x, 2.0, -1))[0] is RuntimeError
    assert _outcome(lambda: boxed_mod.za_scale(x, 2.0, 100))[0] is IndexError
    for bad in (lambda m: m.za_scale("x", 2.0, 1), lambda m: m.za_scale(x, 2.0, 1.5), lambda m: m.za_scale(x),
                lambda m: m.za_scale(x, s=1.0, k=1), lambda m: m.za_two(x, 3, [1], True)):
        got, want = _outcome(lambda: bad(boxed_mod)), _outcome(lambda: bad(written))
        assert got[0] is want[0] is TypeError and got[1].startswith("za_") and want[1].startswith("za_")
    assert boxed_mod.za_scale.__name__ == "za_scale" and "scale it" in boxed_mod.za_scale.__doc__


def test_declarations_the_candidate_does_not_define_are_built_as_written(built, pch, capsys):  # noqa: F811
    """The candidate defines scale(Tensor, float, int): the declared one (double, int64_t) is missing. The boxed
    link is not made and the canonical form not tried (it would not link either): the file as written links and
    fails to load as it always did, naming the missing function."""
    root, cache, *_ = built
    capsys.readouterr()
    impl = IMPL_A.format(p="za_").replace("at::Tensor za_scale(const at::Tensor& x, double s, int64_t k)",
                                          "at::Tensor za_scale(const at::Tensor& x, float s, int k)")
    st = _build(root, "box_m", "za_", cache, pch, impl=impl)
    assert "binding" not in st and st["hits"] == ["main.o"]  # the file as written, a's (built by the fixture)
    assert "[binding]" not in capsys.readouterr().out
    with pytest.raises(ImportError, match="za_scale"):
        load_so("km_box_m", str(root / "box_m" / "km_ext.so"))


def test_redteam_a_candidate_defining_the_boxed_table_gets_its_file_as_written(built, pch):  # noqa: F811
    """A candidate whose own object defines the boxed form's table (to have the module bind functions of its
    choosing under the exported names): two definitions of one symbol do not link, the boxed form is dropped, and
    the module is the file as written's, whose functions are the declared ones."""
    root, cache, *_ = built
    impl = IMPL_A.format(p="za_") + ('struct km_entry { const char* n; };\nextern "C" const km_entry km_entries[] = '
                                     '{{"za_scale"}};\nextern "C" const int km_n_entries = 1;\n')
    st = _build(root, "box_t", "za_", cache, pch, impl=impl)
    assert st.get("binding") != "boxed"
    mod = load_so("km_box_t", str(root / "box_t" / "km_ext.so"))
    x = torch.arange(3.0)
    assert torch.equal(mod.za_scale(x, 2.0, 1), x * 2 + 1) and mod.za_count([x]) == 1


def test_a_shared_object_that_failed_to_compile_is_not_compiled_again(tmp_path):
    """A shared form's object whose compile failed (a torch whose pybind11 the module source does not fit, say) is
    kept as failed: the next build goes to the next form at once instead of paying the compile again."""
    import os

    from verifier.build.objcache import _Boxed, _canonical_object

    def attempt():
        lock = os.open(tmp_path / ".k.lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            return _canonical_object(tmp_path, tmp_path, _Boxed(None, "main.o", "echo tried >> tries.txt; false", "",
                                                                 "k", lock, []), wait=True)
        finally:
            os.close(lock)

    assert attempt() is False and attempt() is False
    assert (tmp_path / "tries.txt").read_text() == "tried\n" and (tmp_path / "k.failed").is_file()


def test_global_identifiers_are_those_outside_every_namespace_class_and_body():
    from verifier.build.objcache import global_identifiers

    text = (b'#define KM_MACRO(x) { x }\n#define __BEGIN extern "C" {\nextern "C" {\nint c_func(int);\n}\n'
            b"namespace at { int relu(int); struct S { int forward(); }; }\n"
            b"inline int helper(int v) { return inner(v); }\nchar q = '{';\nconst char* s = \"}\";\n")
    every = {"everything"}
    got = global_identifiers(text, every)
    assert {"KM_MACRO", "__BEGIN", "c_func", "helper", "q", "s", "int", "char"} <= got
    assert not {"relu", "forward", "inner", "S", "x"} & got
    assert global_identifiers(b"namespace a { int f(); }\nusing namespace a;\n", every) == every
    assert global_identifiers(b"namespace a { int f();\n", every) == every  # braces it cannot pair


RELU_IMPL = """
at::Tensor relu(const at::Tensor& x) { return x.mul(-1.0); }  // the candidate's own relu, not at::relu
"""


def test_a_name_torch_declares_in_its_namespaces_is_boxed_and_calls_the_candidates_function(built, pch):  # noqa: F811
    """``relu``: torch declares at::relu (argument-dependent lookup would find it for a tensor argument), not a
    global one. The file as written names the candidate's ::relu; the boxed shim calls ``::relu`` too."""
    root, cache, *_ = built
    st = two_object_build(root / "box_relu", "torch::Tensor relu(const torch::Tensor& x);", ["relu"], RELU_IMPL, cache,
                          pch, boxed=True, impl_head=HEAD)
    assert st["binding"] == "boxed"
    x = torch.arange(3.0)
    assert torch.equal(load_so("km_box_relu", str(root / "box_relu" / "km_ext.so")).relu(x), -x)


def test_a_name_the_headers_declare_globally_is_not_boxed(built, pch):  # noqa: F811
    """``abs`` is a global function of the C library that torch's headers include: the file as written names an
    overload set there and fails to compile; the boxed form is not tried, so the build fails as it always did."""
    root, cache, *_ = built
    with pytest.raises(RuntimeError):
        two_object_build(root / "box_abs", "int64_t abs(int64_t x);", ["abs"], "int64_t abs(int64_t x) { return x; }",
                         cache, pch, boxed=True)
    assert not (root / "box_abs" / boxed.SHIM_FILE).exists()


def test_the_pools_module_object_beside_the_header_is_taken(pch, tmp_path):  # noqa: F811
    """The compile pool builds the module object once per flag set beside torch/extension.h's precompiled header
    (pch.ensure_boxed_module, outside the sandbox, as the header); a build whose binding command names that
    header's directory takes it without compiling, whatever its own object cache holds."""
    from verifier.build.pch import ensure_boxed_module
    from verifier.common.config import VerifyConfig

    obj = ensure_boxed_module({"cpp_sources": ["int f();"], "functions": ["f"], "extra_cflags": ["-O2"]},
                              VerifyConfig(pch=True).pch_root())
    assert obj is not None and obj.parent == pch and obj.name == boxed.MODULE_OBJECT
    cache = tmp_path / "objects"  # empty: nothing of the module object in it
    st = _build(tmp_path, "box_pre", "zp_", cache, pch)
    assert st["binding"] == "boxed" and st["hits"] == [boxed.MODULE_OBJECT], st
    assert not (cache / f"{boxed.MODULE_OBJECT}").exists()
    x = torch.arange(3.0)
    assert torch.equal(load_so("km_box_pre", str(tmp_path / "box_pre" / "km_ext.so")).zp_scale(x, 2.0, 1), x * 2 + 1)
