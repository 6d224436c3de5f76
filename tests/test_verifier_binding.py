"""One binding object per declared signature set (verifier/build/binding.py, verifier/build/objcache.py): two answers whose
binding files differ only in names share one compiled object, and the module each gets is the module its own file
as written gives (same Python names, docstrings, argument errors, C++ functions called); a file with anything but
declarations, or whose declarations the other objects do not define, is compiled and linked as written.

The real builds are two-object C++ builds (the binding file and a second translation unit defining the
functions, as a CUDA build's ``cuda.cu`` does): the CPU machine has no CUDA torch to link a CUDA build against."""

import re
import subprocess
from pathlib import Path

import pytest

from verifier.build import objcache
from verifier.build.binding import canonical_binding, link_aliases, names_clear_of
from verifier.build.pch import ensure_pch, write_build_files
from verifier.child.loading import load_so


def main_cpp(cpp: str, functions, wrapped: bool = True) -> str:
    """The binding file load_inline writes for these cpp_sources and functions."""
    lines = ["#include <torch/extension.h>", cpp, "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
    for f, doc in (functions.items() if isinstance(functions, dict) else ((f, f) for f in functions)):
        lines.append(f'm.def("{f}", torch::wrap_pybind_function({f}), "{doc}");' if wrapped
                     else f'm.def("{f}", {f}, "{doc}");')
    return "\n".join(lines + ["}"])


def test_answers_differing_in_names_share_one_canonical_text():
    a = canonical_binding(main_cpp("torch::Tensor relu_cuda(torch::Tensor x);", ["relu_cuda"]))
    b = canonical_binding(main_cpp("// host side\nat::Tensor  my_relu( at::Tensor input ) ; /* launches */",
                                   ["my_relu"]))
    assert a is not None and b is not None
    assert a.text == b.text and "relu" not in a.text
    assert a.names == ("relu_cuda",) and b.names == ("my_relu",)
    assert '"relu_cuda", "relu_cuda"' in a.names_source
    # a docstring of its own (functions={...}) stays the candidate's
    c = canonical_binding(main_cpp("torch::Tensor f(torch::Tensor x);", {"f": "fast relu"}))
    assert c.text == a.text and '"f", "fast relu"' in c.names_source


def test_canonical_text_keeps_types_order_and_the_error_handling_choice():
    cpp = ("#include <vector>\nstd::vector<torch::Tensor> split_rows(const torch::Tensor& a, int64_t n, float* p,\n"
           "    c10::optional<torch::Tensor> bias);\nvoid sync_all();")
    c = canonical_binding(main_cpp(cpp, ["split_rows", "sync_all"]))
    assert "std::vector<at::Tensor> km_f0(const at::Tensor&, int64_t, float*, c10::optional<at::Tensor>);" in c.text
    assert "void km_f1();" in c.text and c.text.index("#include <vector>") < c.text.index("visibility push(hidden)")
    assert c.names == ("split_rows", "sync_all")
    # the other m.def order names the functions the other way round: a different text
    assert canonical_binding(main_cpp(cpp, ["sync_all", "split_rows"])).text != c.text
    plain = canonical_binding(main_cpp("int f(int a);", ["f"], wrapped=False))
    assert "m.def(km_binding_names[0], km_f0, km_binding_names[1]);" in plain.text
    # a different parameter type is a different text
    assert canonical_binding(main_cpp("int f(long a);", ["f"])).text != canonical_binding(
        main_cpp("int f(int a);", ["f"])).text
    # a word that is part of the type is not taken for a parameter name
    assert "km_f0(unsigned int, long long, const float);" in canonical_binding(
        main_cpp("int g(unsigned int, long long, const float);", ["g"])).text


@pytest.mark.parametrize("cpp", [
    "torch::Tensor f(torch::Tensor x) { return x; }",  # a definition
    "#define SCALE 2\ntorch::Tensor f(torch::Tensor x);",  # a macro
    "torch::Tensor f(torch::Tensor x, float s = 1.0);",  # a default argument
    'extern "C" int f(int);',  # a string (linkage)
    "torch::Tensor f(torch::Tensor x);\ntorch::Tensor f(torch::Tensor x);",  # declared twice
    "torch::Tensor f(torch::Tensor x);\nint helper(int);",  # an unexported declaration
    "namespace a { int f(int); }",
    "// a comment line that continues \\\nint f(int);",  # a line continuation inside a comment
    "int f(int (*cb)(int));",  # a function pointer
    "int f(int x[]);",
    "int f(int x);\n#include <vector>",  # an include after a declaration
    "static int f(int x);",
    "template <typename T> int f(T x);",
    "int f(int x)",  # no semicolon
    "",  # no declaration at all
])
def test_anything_but_declarations_is_compiled_as_written(cpp):
    assert canonical_binding(main_cpp(cpp, ["f"])) is None


@pytest.mark.parametrize("name", ["delete", "and", "main", "km_f1", "km_binding_names"])
def test_keywords_main_and_the_canonical_forms_own_names_are_compiled_as_written(name):
    assert canonical_binding(main_cpp(f"int {name}(int x);", [name])) is None


def test_a_binding_file_of_the_candidates_own_is_compiled_as_written():
    own = "#include <torch/extension.h>\nint f(int);\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"f\", &f); }"
    assert canonical_binding(own) is None
    # an m.def whose Python name is not the C++ name (load_inline never writes one)
    assert canonical_binding(main_cpp("int f(int);", ["f"]).replace('m.def("f"', 'm.def("g"')) is None


def test_names_the_headers_use_keep_the_file_as_written():
    c = canonical_binding(main_cpp("torch::Tensor abs(torch::Tensor x);\nint64_t mine(int64_t x);", ["abs", "mine"]))
    assert c is not None and c.includes == ("torch/extension.h",)
    assert not names_clear_of(c, {"abs", "Tensor"}) and names_clear_of(c, {"Tensor", "relu"})


def test_link_aliases_map_each_canonical_symbol_onto_the_candidates_function():
    c = canonical_binding(main_cpp("int64_t add(int64_t a, int64_t b);\nvoid go();", ["add", "go"]))
    undefined = ["_Z5km_f0ll", "_Z5km_f1v", "_ZN3c106detail14torchCheckFailEPKcS2_jS2_", "km_binding_names"]
    assert link_aliases(c, undefined, {"_Z3addll", "_Z2gov"}) == [
        "-Wl,--defsym=_Z5km_f0ll=_Z3addll", "-Wl,--defsym=_Z5km_f1v=_Z2gov"]
    # the other objects define add(int, int), not add(int64_t, int64_t): the file as written is linked
    assert link_aliases(c, undefined, {"_Z3addii", "_Z2gov"}) is None
    assert link_aliases(c, ["_Z5km_f1v"], {"_Z3addll", "_Z2gov"}) is None


# ---------------------------------------------------------------------------- real two-object builds

IMPL = "#include <cstdint>\n#include <stdexcept>\n"


@pytest.fixture(scope="module")
def pch():
    """The precompiled header test_verifier_build's PCH test builds too (same flags): the binding's compile in
    seconds, as the verifier's builds get it."""
    from verifier.common.config import VerifyConfig

    return ensure_pch({"cpp_sources": ["int f();"], "functions": ["f"], "extra_cflags": ["-O2"]},
                      VerifyConfig(pch=True).pch_root())


def two_object_build(d: Path, cpp: str, functions, impl: str, cache: Path, pch: Path | None,
                     canonical: bool = True, boxed: bool = False, impl_head: str = IMPL) -> dict:
    """load_inline's files for ``cpp`` (under the verifier's module name, loadable as ``km_<dir name>``), with
    ``impl`` as a second object of the link, built through the object cache (``canonical=False``: with the
    shared forms turned off, the file as written; ``boxed``: the boxed form first, as the verifier builds)."""
    flags = ["-O2"] + ([f"-I{pch}", "-Winvalid-pch"] if pch else [])
    write_build_files(d, objcache.MODULE, verbose=True, cpp_sources=[cpp], functions=functions, extra_cflags=flags,
                      extra_ldflags=[f"-Wl,--defsym=PyInit_km_{d.name}=PyInit_{objcache.MODULE}"])
    (d / "impl.cpp").write_text(impl_head + impl)
    ninja = (d / "build.ninja").read_text()
    ninja = ninja.replace("build main.o: compile", f"build impl.o: compile {d}/impl.cpp\nbuild main.o: compile")
    (d / "build.ninja").write_text(re.sub(r"(build \S+\.so: link main\.o)", r"\1 impl.o", ninja))
    return objcache.run_cached(d, cache, canonical_binding=canonical, boxed_binding=boxed)


ADD = "int64_t add_one(int64_t x) { if (x < 0) throw std::invalid_argument(\"negative\"); return x + 1; }"
PLUS = "int64_t plus_ten(int64_t v) { return v + 10; }"


@pytest.fixture(scope="module")
def builds(tmp_path_factory, pch):
    root = tmp_path_factory.mktemp("binding")
    cache = root / "objects"
    a = two_object_build(root / "a", "int64_t add_one(int64_t x);", ["add_one"], ADD, cache, pch)
    b = two_object_build(root / "b", "// mine\nint64_t plus_ten( int64_t value ) ;", ["plus_ten"], PLUS, cache, pch)
    written = two_object_build(root / "w", "int64_t add_one(int64_t x);", ["add_one"], ADD, cache, pch,
                               canonical=False)
    return root, cache, a, b, written


def test_two_answers_share_one_binding_object_and_call_their_own_functions(builds):
    root, cache, a, b, _ = builds
    assert a["binding"] == b["binding"] == "canonical"
    assert a["misses"] == ["impl.o", "main.o"] and b["hits"] == ["main.o"] and b["misses"] == ["impl.o"]
    # two impl objects, one canonical binding object for both, and the fixture's third build's file as written
    assert len(list(cache.glob("*.o"))) == 4
    ma, mb = load_so("km_a", str(root / "a" / "km_ext.so")), load_so("km_b", str(root / "b" / "km_ext.so"))
    assert ma.add_one(41) == 42 and mb.plus_ten(1) == 11
    assert not hasattr(ma, "plus_ten") and not hasattr(mb, "add_one")
    # nothing of the canonical form is exported (LOCAL in the dynamic symbol table: never bound to): one
    # module's km_f0 cannot stand in for another's
    dyn = subprocess.run(["readelf", "--dyn-syms", "-W", str(root / "b" / "km_ext.so")], capture_output=True,
                         text=True, check=True).stdout
    binds = {f[7]: f[4] for f in (line.split() for line in dyn.splitlines()) if len(f) >= 8}
    assert binds["_Z8plus_tenl"] == "GLOBAL"
    assert all(b == "LOCAL" for name, b in binds.items() if "km_f" in name or "km_binding" in name), binds


def test_the_module_is_the_one_the_file_as_written_gives(builds):
    root, _, _, _, written = builds
    # turned off: compiled as written (its impl object is a's)
    assert "binding" not in written and written["hits"] == ["impl.o"] and written["misses"] == ["main.o"]
    canon, plain = load_so("km_a", str(root / "a" / "km_ext.so")), load_so("km_w", str(root / "w" / "km_ext.so"))
    assert canon.add_one.__name__ == plain.add_one.__name__ == "add_one"
    assert canon.add_one.__doc__ == plain.add_one.__doc__ and canon.add_one.__doc__.startswith("add_one(arg0: ")
    errors = []
    for mod in (canon, plain):
        for bad in ("x", -1):  # pybind11's argument error, then the C++ exception translated
            with pytest.raises((TypeError, RuntimeError)) as e:
                mod.add_one(bad)
            errors.append((type(e.value), str(e.value)))
    assert errors[:2] == errors[2:] and "negative" in errors[1][1] and "add_one()" in errors[0][1]


def test_declarations_the_other_objects_do_not_define_are_linked_as_written(builds, pch, capsys):
    """The second object defines add_one(int): the canonical link is not tried; the file as written links (a
    shared object may leave symbols undefined) and fails to load as it always did, naming the missing function."""
    root, cache, *_ = builds
    capsys.readouterr()
    st = two_object_build(root / "m", "int64_t add_one(int64_t x);", ["add_one"],
                          "int add_one(int x) { return x + 1; }", cache, pch)
    # the file as written is the one test_the_module_is_the_one... built with the canonical form off: its object
    assert "binding" not in st and st["hits"] == ["main.o"]
    assert "[binding]" not in capsys.readouterr().out  # the log is the unchanged build's
    with pytest.raises(ImportError, match="_Z7add_onel"):
        load_so("km_m", str(root / "m" / "km_ext.so"))
    # defined, but static (a local symbol no other object links to): the same
    st = two_object_build(root / "s", "int64_t add_one(int64_t x);", ["add_one"],
                          "static int64_t add_one(int64_t x) { return x + 1; }\n"
                          "int64_t use_it(int64_t x) { return add_one(x); }", cache, pch)
    assert "binding" not in st and st["hits"] == ["main.o"]
    with pytest.raises(ImportError, match="_Z7add_onel"):
        load_so("km_s", str(root / "s" / "km_ext.so"))


def test_a_binding_file_that_does_not_compile_fails_as_written(builds, pch, capsys):
    root, cache, *_ = builds
    capsys.readouterr()
    with pytest.raises(RuntimeError):
        two_object_build(root / "e", "Missing add_one(int64_t x);", ["add_one"], ADD, cache, pch)
    out = capsys.readouterr().out
    assert "FAILED: main.o" in out and re.search(r"Missing.{1,3} does not name a type", out) and "main.cpp" in out
    assert "km_binding" not in out and "km_f0" not in out


def test_two_builds_at_once_compile_the_shared_object_once(builds, pch):
    """Answers of one task are built side by side: the second finds the first compiling their canonical object,
    builds its other objects, waits, and takes the object from the cache."""
    from concurrent.futures import ThreadPoolExecutor

    root, cache, *_ = builds
    before = set(cache.glob("*.o"))
    jobs = [("p", "double halve(double x);", ["halve"], "double halve(double x) { return x / 2; }"),
            ("q", "double third(double v);", ["third"], "double third(double v) { return v / 3; }")]
    with ThreadPoolExecutor(2) as pool:
        stats = list(pool.map(lambda j: two_object_build(root / j[0], j[1], j[2], j[3], cache, pch), jobs))
    assert all(st["binding"] == "canonical" for st in stats), stats
    assert sorted(len(st["hits"]) for st in stats) == [0, 1], stats  # one compiled it, the other waited for it
    assert len(set(cache.glob("*.o")) - before) == 3  # two impl objects, one binding object
    assert load_so("km_p", str(root / "p" / "km_ext.so")).halve(3.0) == 1.5
    assert load_so("km_q", str(root / "q" / "km_ext.so")).third(3.0) == 1.0


def test_a_name_the_headers_declare_fails_as_written(builds, pch, capsys):
    """``abs`` is an overload set in the global namespace once torch's headers are in: the file as written cannot
    pass it to wrap_pybind_function, and the build fails as it always did (``km_f0`` would have compiled)."""
    root, cache, *_ = builds
    capsys.readouterr()
    with pytest.raises(RuntimeError):
        two_object_build(root / "abs", "int64_t abs(int64_t x);", ["abs"], "int64_t abs(int64_t x) { return x; }",
                         cache, pch)
    out = capsys.readouterr().out
    assert "FAILED: main.o" in out and "[binding]" not in out and "km_f0" not in out
    # the headers' identifiers were read once and kept beside the objects (one set of headers and flags so far)
    assert len(list(cache.glob("*.idents"))) == 1


def test_another_include_set_is_read_for_its_own_names(builds, pch, capsys):
    """A name only the file's own extra header declares (wordexp.h's ``wordfree``, not in torch's headers): the
    identifiers read are those of the file's includes, so it is compiled as written and fails as written."""
    root, cache, *_ = builds
    capsys.readouterr()
    with pytest.raises(RuntimeError):
        two_object_build(root / "wordexp", "#include <wordexp.h>\nint64_t wordfree(int64_t x);", ["wordfree"],
                         "int64_t wordfree(int64_t x) { return x; }", cache, pch)
    out = capsys.readouterr().out
    assert "FAILED: main.o" in out and "km_f0" not in out
    assert len(list(cache.glob("*.idents"))) == 2
