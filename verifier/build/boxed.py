"""The boxed binding: a ``load_inline`` binding file whose exported functions take and return the common types
(tensors, scalars, lists and optionals of them), compiled with no pybind11 instantiation of the candidate's own.

Why. A binding file costs ~6-10 CPU-s a candidate even against the precompiled header: a unit that includes
``torch/extension.h`` pays ~5.9 s of GCC's deferred template instantiation, and pybind11's instantiations for each
signature add the rest. The canonical form (verifier/build/binding.py) shares that object between answers that
declare the same signature set, but model answers declare many: the test bed's 160-candidate batch has 59 distinct
sets and 54 distinct function types among its 176 exported functions, so a cold batch compiled most of them.

What it is. Two objects take the place of ``main.o``:
- the module object (:data:`MODULE_SOURCE`): the same ``#include <torch/extension.h>`` and
  ``PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)``, compiled once per compile command (flags) and shared by every
  build; its init defines one function per entry of the table the other object holds. Each function takes its
  arguments as given, converts each with pybind11's own caster of the declared type (``make_caster<T>::load`` with
  conversions allowed, as pybind11 calls a function of one overload), calls the entry's shim and converts the
  result with pybind11's caster of the declared return type; the call sits inside torch's error translation
  (``HANDLE_TH_ERRORS ... END_HANDLE_TH_ERRORS_PYBIND``, what ``torch::wrap_pybind_function`` puts around it)
  where the file wraps its functions, and the conversions outside it, as there;
- the shim object (:func:`shim_source`, per build, ~1 s: ``ATen/core/Tensor.h``, from the split host unit's
  precompiled head where the build has one, and no pybind11): the file's own declarations (the same names and
  types, so the link resolves them to the same functions, default visibility as the file gives them), one shim per
  function that calls it with the converted arguments
  (``*static_cast<T*>(a[i])``: a reference to the caster's value, as pybind11 passes it) and stores its result, and
  the table (Python name, docstring, type codes, shim), hidden.

What the candidate sees is the same module: the same functions under the same names and docstrings, the same
arguments accepted and converted by the same casters, the same C++ functions called, the same exceptions
translated the same way, results converted by the same casters. Two things differ and are documented:
``__doc__``'s first line is pybind11's signature line of a function of ``*args`` (``forward(*args) -> object``)
before the file's docstring, and an argument no caster accepts raises TypeError with a message of the same form
but not the same text.

Which files: those :func:`binding.read_declared` reads (includes and one declaration per exported function),
every parameter and return type one of :data:`PARAMS` / :data:`RETURNS` (``const`` and ``&`` as below), at most
:data:`MAX_PARAMS` parameters, the names clear of the headers' identifiers (objcache checks). Anything else, or a
boxed build whose shim does not compile or whose declarations the other objects do not define, is built as before
(the canonical form, then the file as written: verifier/build/objcache.py), so a failure reads as it always did.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from verifier.build.binding import Declared, read_declared

MODULE_FILE = "km_boxed_module.cpp"
MODULE_OBJECT = "km_boxed_module.o"  # also its name beside the precompiled header (pch.ensure_boxed_module)
SHIM_FILE = "km_boxed_shim.cpp"
SHIM_OBJECT = "km_boxed_shim.o"
MAX_PARAMS = 32

# a parameter's type with its const and reference taken off -> (code, the type the module's caster holds)
PARAMS: dict[str, tuple[int, str]] = {}
for _code, _spelled, _names in (
        (1, "at::Tensor", ("at::Tensor",)),
        (2, "int", ("int", "int32_t", "std::int32_t")),
        (3, "int64_t", ("int64_t", "std::int64_t", "long", "long int")),
        (4, "long long", ("long long", "long long int")),
        (5, "float", ("float",)),
        (6, "double", ("double",)),
        (7, "bool", ("bool",)),
        (8, "std::optional<at::Tensor>", ("c10::optional<at::Tensor>", "std::optional<at::Tensor>",
                                          "at::optional<at::Tensor>", "torch::optional<at::Tensor>")),
        (9, "std::vector<at::Tensor>", ("std::vector<at::Tensor>",)),
        (10, "std::vector<int>", ("std::vector<int>",)),
        (11, "std::vector<int64_t>", ("std::vector<int64_t>", "std::vector<long>", "std::vector<std::int64_t>")),
        (12, "std::vector<float>", ("std::vector<float>",)),
        (13, "std::vector<double>", ("std::vector<double>",)),
        (14, "c10::IntArrayRef", ("c10::IntArrayRef", "at::IntArrayRef", "torch::IntArrayRef"))):
    for _n in _names:
        PARAMS[_n] = (_code, _spelled)
# return types -> (code, the type the module holds the result in)
RET_VOID, RET_TUPLE = 20, 21
RETURNS: dict[str, tuple[int, str]] = {
    "at::Tensor": (1, "at::Tensor"), "int": (2, "int"), "int64_t": (3, "int64_t"), "long": (3, "int64_t"),
    "float": (5, "float"), "double": (6, "double"), "bool": (7, "bool"),
    "std::vector<at::Tensor>": (9, "std::vector<at::Tensor>"), "void": (RET_VOID, "")}
_TUPLE = re.compile(r"std::tuple<at::Tensor(?:,at::Tensor)*>")


@dataclass(frozen=True)
class BoxedFunction:
    name: str
    doc: str  # the docstring literal's text, as the file wrote it
    ret: str  # the declared return type, as read
    ret_code: int
    params: tuple[str, ...]  # the declared parameter types, as read (they keep the file's mangled names)
    codes: tuple[int, ...]
    casts: tuple[str, ...]  # the type each argument is read as in the shim (the caster's, with the declared ref)


@dataclass(frozen=True)
class BoxedBinding:
    includes: tuple[str, ...]
    functions: tuple[BoxedFunction, ...]
    wrapped: bool

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.functions)


def _param(t: str) -> tuple[int, str] | None:
    """(code, the shim's cast) of a declared parameter type: ``T``, ``const T``, ``const T&`` for any type above;
    ``T&`` for a tensor only (what else pybind11 would bind to a temporary is not boxed); None otherwise."""
    m = re.fullmatch(r"(const )?(.+?)(&)?", t)
    if not m:
        return None
    const, base, ref = bool(m.group(1)), m.group(2), bool(m.group(3))
    if base.endswith(" const"):  # ``T const&``
        const, base = True, base[:-len(" const")]
    found = PARAMS.get(base)
    if found is None or (ref and not const and found[0] != 1):
        return None
    return found


def _return(t: str) -> int | None:
    if t in RETURNS:
        return RETURNS[t][0]
    return RET_TUPLE if _TUPLE.fullmatch(t) else None


def boxed_binding(main_text: str) -> BoxedBinding | None:
    """The boxed form of a ``load_inline`` binding file (module docstring), or None."""
    d = read_declared(main_text)
    return boxed_of(d) if d is not None else None


def boxed_of(d: Declared) -> BoxedBinding | None:
    out = []
    for name, doc, ret, params in d.functions:
        rc = _return(ret)
        found = [_param(p) for p in params]
        if rc is None or len(params) > MAX_PARAMS or any(f is None for f in found):
            return None
        out.append(BoxedFunction(name=name, doc=doc, ret=ret, ret_code=rc, params=params,
                                 codes=tuple(f[0] for f in found), casts=tuple(f[1] for f in found)))
    return BoxedBinding(includes=d.includes, functions=tuple(out), wrapped=d.wrapped)


def boxable(declarations: list[str]) -> bool:
    """Whether a binding file of these declarations (``RET NAME(PARAMS);`` each) would be built boxed: each reads
    as :func:`binding.read_declared` reads one, with every type one the boxed form takes."""
    from verifier.build.binding import _declaration

    for decl in declarations:
        d = _declaration(decl.rstrip().rstrip(";"))
        if d is None or _return(d[1]) is None or len(d[2]) > MAX_PARAMS or any(_param(t) is None for t in d[2]):
            return False
    return True


def _declared_type(t: str) -> str:
    """A declared type as the shim spells it: the same type (aliases of torch's namespace named where the shim's
    headers declare them), so the declaration mangles as the file's."""
    t = re.sub(r"\btorch::IntArrayRef\b", "c10::IntArrayRef", t)
    return re.sub(r"\b(?:torch|at)::optional<", "std::optional<", t)


def shim_source(b: BoxedBinding, head: str = "") -> str:
    """The per-build object's text: the file's declarations, a shim per function, the table. ``head``: a precompiled
    header's name the unit starts with (:data:`SLIM_HEAD_FILES`, the split's host unit's, already on the compile
    command's include path): its headers parse once per flags instead of once per build."""
    lines = [f"#include <{head}>"] if head else []
    lines += ["#include <ATen/core/Tensor.h>", "#include <c10/util/ArrayRef.h>", "#include <cstdint>",
              "#include <optional>", "#include <tuple>", "#include <utility>", "#include <vector>"]
    for f in b.functions:
        lines.append(f"{_declared_type(f.ret)} {f.name}({', '.join(_declared_type(p) for p in f.params)});")
    lines += ["#pragma GCC visibility push(hidden)", "namespace {"]
    for i, f in enumerate(b.functions):
        args = ", ".join(f"*static_cast<{c}*>(a[{k}])" for k, c in enumerate(f.casts))
        call = f"::{f.name}({args})"  # qualified: no argument-dependent lookup (at::relu for a tensor argument)
        if f.ret_code == RET_VOID:
            body = f"{call};"
        elif f.ret_code == RET_TUPLE:
            body = (f"auto km_r = {call}; auto* km_o = static_cast<std::vector<at::Tensor>*>(r); "
                    "std::apply([km_o](auto&&... x) { (km_o->push_back(std::move(x)), ...); }, std::move(km_r));")
        else:
            body = f"*static_cast<{RETURNS.get(f.ret, (0, f.ret))[1]}*>(r) = {call};"
        lines.append(f"void km_s{i}(void* const* a, void* r) {{ (void)a; (void)r; {body} }}")
        lines.append(f"const int km_p{i}[] = {{{', '.join(map(str, f.codes)) or '0'}}};")
    lines += ["}", ENTRY_STRUCT, 'extern "C" {', "extern const km_entry km_entries[];", "extern const int km_n_entries;",
              "}", "const km_entry km_entries[] = {"]
    for i, f in enumerate(b.functions):
        lines.append(f'    {{"{f.name}", "{f.doc}", km_p{i}, {len(f.codes)}, {f.ret_code}, {int(b.wrapped)}, km_s{i}}},')
    lines += ["};", f"const int km_n_entries = {len(b.functions)};", "#pragma GCC visibility pop"]
    return "\n".join(lines) + "\n"


# The heads a split build's host unit is compiled under (verifier/build/slim.py SLIM_HEADER, SLIM_CPU_HEADER: the files
# verifier/build/pch.py precompiles under these names, which slim.py takes from here): both start with the shim's own
# ``ATen/core/Tensor.h``, so a shim compiled under one parses ``ATen/core/Tensor.h`` and the tensor operators from the
# precompiled header (~1.3 of the shim's ~2.5 s on the CPU machine) and otherwise means what it meant. The CUDA head's
# ``cuda.h`` and ``cuda_runtime.h`` add global C functions and their inline overloads (``max``, ``min``): a shim's call
# ``::name(args)`` of a declared function still resolves to the file's declaration, an exact match of its own types, and
# a declaration those headers conflict with fails the shim's compile, after which the build goes on as without the boxed
# form (the canonical form, then the file as written)
SLIM_HEAD_FILES = ("km_slim_cpu_head.h", "km_slim_head.h")

ENTRY_STRUCT = ("struct km_entry { const char* name; const char* doc; const int* params; int n_params; int ret; "
                "int wrapped; void (*shim)(void* const*, void*); };")

# The shared module object: compiled with the binding file's own command (its flags, TORCH_EXTENSION_NAME),
# once per command; the table is the shim object's (hidden: each module binds its own)
MODULE_SOURCE = r"""#include <torch/extension.h>
#include <array>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#pragma GCC visibility push(hidden)
""" + ENTRY_STRUCT + r"""
extern "C" {
extern const km_entry km_entries[];
extern const int km_n_entries;
}
namespace {
namespace py = pybind11;
template <class T> using km_c = py::detail::make_caster<T>;
using km_caster = std::variant<std::monostate, km_c<at::Tensor>, km_c<int>, km_c<int64_t>, km_c<long long>,
    km_c<float>, km_c<double>, km_c<bool>, km_c<std::optional<at::Tensor>>, km_c<std::vector<at::Tensor>>,
    km_c<std::vector<int>>, km_c<std::vector<int64_t>>, km_c<std::vector<float>>, km_c<std::vector<double>>,
    km_c<c10::IntArrayRef>>;
const char* const km_type_names[] = {"", "torch.Tensor", "int", "int", "int", "float", "float", "bool",
    "Optional[torch.Tensor]", "list[torch.Tensor]", "list[int]", "list[int]", "list[float]", "list[float]",
    "list[int]"};

template <class T> void* km_load(km_caster& c, py::handle h) {
  auto& k = c.template emplace<km_c<T>>();
  if (!k.load(h, true)) return nullptr;
  return &py::detail::cast_op<T&>(k);
}

void* km_load_code(km_caster& c, int code, py::handle h) {
  switch (code) {
    case 1: return km_load<at::Tensor>(c, h);
    case 2: return km_load<int>(c, h);
    case 3: return km_load<int64_t>(c, h);
    case 4: return km_load<long long>(c, h);
    case 5: return km_load<float>(c, h);
    case 6: return km_load<double>(c, h);
    case 7: return km_load<bool>(c, h);
    case 8: return km_load<std::optional<at::Tensor>>(c, h);
    case 9: return km_load<std::vector<at::Tensor>>(c, h);
    case 10: return km_load<std::vector<int>>(c, h);
    case 11: return km_load<std::vector<int64_t>>(c, h);
    case 12: return km_load<std::vector<float>>(c, h);
    case 13: return km_load<std::vector<double>>(c, h);
    case 14: return km_load<c10::IntArrayRef>(c, h);
  }
  return nullptr;
}

py::type_error km_incompatible(const km_entry& e, const py::args& args) {
  std::string sig = std::string(e.name) + "(): incompatible function arguments. The following argument types are "
                    "supported:\n    1. (";
  for (int i = 0; i < e.n_params; ++i) {
    if (i) sig += ", ";
    sig += "arg" + std::to_string(i) + ": " + km_type_names[e.params[i]];
  }
  sig += ")\n\nInvoked with: ";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i) sig += ", ";
    sig += py::repr(args[i]).cast<std::string>();
  }
  return py::type_error(sig);
}

void km_run(const km_entry& e, void* const* a, void* r) {
  if (!e.wrapped) {
    e.shim(a, r);
    return;
  }
  HANDLE_TH_ERRORS
  e.shim(a, r);
  END_HANDLE_TH_ERRORS_PYBIND
}

template <class T> py::object km_ret(const km_entry& e, void* const* a) {
  T r{};
  km_run(e, a, &r);
  return py::cast(std::move(r));
}

py::object km_call(const km_entry& e, const py::args& args) {
  if (static_cast<int>(args.size()) != e.n_params) throw km_incompatible(e, args);
  km_caster c[32];
  void* a[32];
  for (int i = 0; i < e.n_params; ++i) {
    a[i] = km_load_code(c[i], e.params[i], args[i]);
    if (!a[i]) throw km_incompatible(e, args);
  }
  switch (e.ret) {
    case 1: return km_ret<at::Tensor>(e, a);
    case 2: return km_ret<int>(e, a);
    case 3: return km_ret<int64_t>(e, a);
    case 5: return km_ret<float>(e, a);
    case 6: return km_ret<double>(e, a);
    case 7: return km_ret<bool>(e, a);
    case 9: return km_ret<std::vector<at::Tensor>>(e, a);
    case 20: km_run(e, a, nullptr); return py::none();
    case 21: {
      std::vector<at::Tensor> r;
      km_run(e, a, &r);
      py::tuple t(r.size());
      for (size_t i = 0; i < r.size(); ++i) t[i] = py::cast(std::move(r[i]));
      return std::move(t);
    }
  }
  throw std::runtime_error("kernelmill boxed binding: unknown return code");
}
}  // namespace
#pragma GCC visibility pop

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  for (int i = 0; i < km_n_entries; ++i) {
    const km_entry* e = &km_entries[i];
    m.def(e->name, [e](py::args args) { return km_call(*e, args); }, e->doc);
  }
}
"""
