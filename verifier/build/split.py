"""The "split" build of a CUDA source that uses torch: its host code compiled by the C++ compiler against the
precompiled header, its device code by nvcc with no torch header at all.

Where a slim CUDA build's seconds go (bench/results/build_phases_cpu_bd490ec.md): three front ends (cudafe++, cicc,
the host compiler) each parse torch's headers, ~16 of a CUDA file's ~17 s, while ptxas, which compiles the
kernels, takes 0.03 s. The kernels name nothing from torch: only the host functions around them do (``torch::Tensor``,
``torch::empty_like``, ``TORCH_CHECK``, the current stream). A typical model-written source is top-level kernels,
device helpers, a few constants and macros, and host functions that check tensors, allocate and launch.

``split_source`` cuts such a source at its top-level items into
- the device part (kernels, ``__device__`` functions and variables, and what both sides use: types, constants,
  macros, the non-torch includes), compiled by nvcc without torch (the "bare" prelude: cuda.h, cuda_runtime.h and
  the standard headers of the names it uses), plus one launcher per kernel,
  ``void km_launch_<kernel>(dim3, dim3, size_t, cudaStream_t, <the kernel's parameters>)``, which launches it;
- the host part (the host functions, torch's includes, what both sides use, and a declaration of each launcher in
  place of its kernel; each ``kernel<<<grid, block, shmem, stream>>>(args)`` in it becomes
  ``km_launch_kernel(grid, block, shmem, stream, args)``), compiled by the C++ compiler: the "split" variant puts it in
  a unit of its own (``km_host.cpp``) under slim's headers (verifier/build/slim.py, where slim takes it; their fixed
  head from a precompiled header of its own), so the binding file stays the spec's and its canonical object is shared
  across candidates (verifier/build/binding.py); "split_ext" appends it to the binding file (``main.cpp``) against
  the precompiled header of torch/extension.h, or a unit of its own under that header. On the 2-core CPU machine:
  a host unit under slim's precompiled head 1.2-1.4 s, the binding file with the host part ~6 s, of which a
  translation unit including torch/extension.h pays ~5.9 s even precompiled (4.3 of them GCC's deferred template
  instantiation, which no precompiled header keeps).

What the candidate's code means does not change: the same host statements run in the same order, each launch takes
the same configuration and its arguments are converted to the kernel's parameter types as the launch converts them
(the launcher's parameters are the kernel's, verbatim, and its mangled name is checked by the link: a type read
differently on the two sides is an unresolved symbol at import, a failed variant, never a silent mismatch), and
the device code is compiled from the same text. Anything whose meaning a cut could change is not split (None, and
``split_refusal`` says why): a templated kernel or launch, a namespace or ``extern "C"`` block, conditional
compilation around code, a macro that launches, the host side naming a device-side symbol other than by launching
it (``cudaMemcpyToSymbol``, ``cudaFuncSetAttribute(kernel, ...)``), host code that tests ``__CUDACC__`` or
``__CUDA_ARCH__``, a device part that still names torch, a kernel parameter with a default, a template or no name,
and raw strings. The flags decide too (``split_flag_refusal``): nvcc's flags must not reach the host code (``-D``,
``-U``, ``-Xcompiler``, include paths) and the C++ flags must not add to it what the CUDA build never gave it.

A split build that fails to compile, link or import is followed by the next variant (slim, then the full build,
whose log is the one reported): the split's own guess is never the candidate's verdict (verifier/build/variants.py).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from verifier.front.vendor import strip_cxx

LAUNCH_PREFIX = "km_launch_"
HOST_FILE = "km_host.cpp"  # the host part's own translation unit, beside main.cpp and cuda.cu
HOST_OBJECT = "km_host.o"
_LAUNCH_PARAMS = ("km_grid", "km_block", "km_shmem", "km_stream")

# what names torch: a qualified name, a macro, an include (a CUDA source naming none of them builds "bare",
# verifier/build/variants.py) ...
TORCH_QUALIFIED = (r"\b(?:torch|at|c10|pybind11|py)::|\b(?:TORCH|AT|C10|PYBIND11)_[A-Z0-9_]+|"
                   r"#\s*include\s*[<\"](?:torch|ATen|c10|pybind11|Python)")
# ... or, here, a type a ``using namespace`` makes unqualified (an item naming any is host code; a device part that
# names any is not split)
NAMES_TORCH = re.compile(TORCH_QUALIFIED + r"|\bTensor(?:Options|List)?\b|\bIntArrayRef\b|\bScalarType\b")
_IDENT = re.compile(r"[A-Za-z_]\w*")
# the macros whose value differs between nvcc's host pass and the C++ compiler (and the file and line, which the
# cut changes): host code that reads one could take another branch when split
_CUDA_HOST_MACROS = re.compile(r"\b__(?:CUDA|NVCC|USE_FAST_MATH)\w*|\b__(?:FILE|LINE|BASE_FILE|FILE_NAME|COUNTER|"
                               r"INCLUDE_LEVEL|TIMESTAMP)__\b")
# what torch/extension.h declares and the full build's CUDA file has only if it includes that header itself
_PYTHON_NAMES = re.compile(r"\bpy::|\bpybind11\b|\bPy[A-Z_]\w*|\bPYBIND11_\w+")
_EXTENSION_H = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]torch/(?:extension|python|all)\.h[>"]', re.M)
_DEVICE_WORDS = re.compile(r"\b__device__\b|\b__constant__\b|\b__shared__\b|\b__managed__\b")
_KEYWORDS = {"const", "volatile", "unsigned", "signed", "int", "long", "short", "char", "float", "double", "bool",
             "void", "auto", "struct", "class", "enum", "union", "__restrict__", "__restrict", "restrict",
             "__grid_constant__", "size_t", "int64_t", "int32_t", "uint32_t", "uint64_t"}
# nvcc flags that reach no host code (device code generation, warnings); anything else keeps the source unsplit
SPLIT_CUDA_FLAGS = re.compile(
    r"-O[0-3]?|--use_fast_math|-use_fast_math|-std=(?:c|gnu)\+\+\d\d|-lineinfo|--expt-relaxed-constexpr|"
    r"--expt-extended-lambda|-Xptxas=?\S*|--ptxas-options=\S+|-v|-w|--restrict|-maxrregcount=\d+|"
    r"--maxrregcount=\d+|-ftz=(?:true|false)|-prec-div=(?:true|false)|-prec-sqrt=(?:true|false)|"
    r"--fmad=(?:true|false)|-fmad=(?:true|false)|-arch=sm_\d+a?|--gpu-architecture=sm_\d+a?|-gencode=\S+")
# C++ flags that change no host code's meaning (the split puts the CUDA source's host code under them)
SPLIT_CXX_FLAGS = re.compile(r"-O[0-3s]?|-std=(?:c|gnu)\+\+\d\d|-fPIC|-w|-Wall|-Wextra|-Wno-[\w-]+|-g|-v|-fopenmp|"
                             r"-march=native|-mavx2|-mfma|-funroll-loops")


@dataclass(frozen=True)
class SplitSource:
    """A CUDA source cut in two (module docstring)."""

    device: str  # nvcc's part: no torch; the launchers at its end
    host: str  # the host part: nvcc's macros and cuda_runtime.h, host functions, launches through the launchers
    kernels: tuple[str, ...]  # the kernels the host part launches, in order of first appearance

    @property
    def host_unit(self) -> str:
        """HOST_FILE's text: torch/extension.h first (the precompiled header the binding file uses), the host part."""
        return "#include <torch/extension.h>\n" + self.host


class _Refused(Exception):
    pass


def split_flag_refusal(spec: dict) -> str:
    """"" when a spec's flags let its CUDA source be split; else the first flag that does not."""
    if spec.get("extra_include_paths"):
        return "extra_include_paths"
    for key, pat in (("extra_cuda_cflags", SPLIT_CUDA_FLAGS), ("extra_cflags", SPLIT_CXX_FLAGS)):
        for f in spec.get(key) or []:
            if not isinstance(f, str) or (f.strip() and not pat.fullmatch(f.strip())):
                return f"{key} {f!r}"
    return ""


def split_source(src: str, exported: frozenset = frozenset()) -> SplitSource | None:
    """The source cut in two, or None when it is not split (``split_refusal`` says why). ``exported``: the names the
    binding file declares (``declared_functions``), which the host part must define as the full build would."""
    try:
        return _split(src, exported)
    except _Refused:
        return None


def split_refusal(src: str, exported: frozenset = frozenset()) -> str:
    """Why ``split_source`` returns None ("" when it does not)."""
    try:
        _split(src, exported)
    except _Refused as e:
        return str(e)
    return ""


def _mask(text: str) -> str:
    """``text`` with the contents of string and character literals replaced by ``x`` (same length): braces,
    semicolons and ``<<<`` inside a literal are not code."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"' and i > 0 and text[i - 1] == "R" and (i < 2 or not (text[i - 2].isalnum() or text[i - 2] == "_")):
            raise _Refused("a raw string literal")
        if c in "\"'":
            if c == "'" and i + 1 < n and text[i + 1].isalnum() and re.search(r"(?<![\w.])\d[\w.']*$", text[:i]):
                i += 1  # a digit separator (1'000'000, 0xFF'FF): inside a number, not after a prefix (u8'a', L'a')
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                out[k] = "x"
            i = j + 1
            continue
        i += 1
    return "".join(out)


_OPEN, _CLOSE = "([{", ")]}"


def _match(mask: str, i: int) -> int:
    """The index just past the bracket that closes the one at ``i``."""
    depth = 0
    for j in range(i, len(mask)):
        c = mask[j]
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return j + 1
    raise _Refused("unbalanced brackets")


@dataclass
class _Item:
    start: int
    end: int
    kind: str  # pp, decl (ends with ;), def (a braced body: function, type)
    head: str  # the masked text before the body (def) or the whole masked item (pp, decl)


def _items(mask: str) -> list[_Item]:
    """The top-level items of a masked source."""
    out: list[_Item] = []
    i, n = 0, len(mask)
    while i < n:
        while i < n and mask[i].isspace():
            i += 1
        if i >= n:
            break
        if mask[i] == "#":
            j = mask.find("\n", i)
            j = n if j < 0 else j
            out.append(_Item(i, j, "pp", mask[i:j]))
            i = j
            continue
        j = i
        while True:
            if j >= n:
                if mask[i:n].strip():
                    raise _Refused("a top-level item without an end (a macro call?)")
                i = n
                break
            c = mask[j]
            if c == "#" and mask[:j].rstrip(" \t").endswith("\n"):
                raise _Refused("a preprocessor line inside a declaration")
            if c == ";":
                out.append(_Item(i, j + 1, "decl", mask[i:j + 1]))
                i = j + 1
                break
            if c in "([":
                j = _match(mask, j)
                continue
            if c == "{":
                head = mask[i:j]
                end = _match(mask, j)
                if re.search(r"\bnamespace\b|\bextern\s+\"", head):
                    raise _Refused("a namespace or extern block")
                if _is_function_head(head):
                    out.append(_Item(i, end, "def", head))
                    i = end
                    break
                j = end  # a type's body or a braced initialiser: the item ends at its ;
                continue
            if c in ")]}":
                raise _Refused("unbalanced brackets")
            j += 1
    return out


def _is_function_head(head: str) -> bool:
    h = head.strip()
    if "=" in re.sub(r"\([^()]*\)", "", h) or re.search(r"\b(?:struct|class|union|enum)\b", h.split("(")[0]):
        return False
    return bool(re.search(r"\)\s*(?:const\b\s*|noexcept\b\s*|override\b\s*|final\b\s*|->\s*[\w:<>,\s*&]+)*$", h))


def _name_before_params(head: str) -> tuple[str, str]:
    """(name, parameter text) of a function head: the last top-level parenthesised group and the identifier
    before it."""
    close = head.rstrip().rfind(")")
    # walk back to the matching (
    depth = 0
    for k in range(close, -1, -1):
        if head[k] == ")":
            depth += 1
        elif head[k] == "(":
            depth -= 1
            if depth == 0:
                m = re.search(r"([A-Za-z_]\w*)\s*$", head[:k])
                if not m:
                    raise _Refused("a function head without a name")
                return m.group(1), head[k + 1:close]
    raise _Refused("a function head without parameters")


def _params(text: str) -> list[str]:
    """The parameter names of a kernel's parameter list (refusing what a launcher could not pass on)."""
    t = text.strip()
    if not t or t == "void":
        return []
    if any(s in t for s in ("<", "=", "...", "(")):
        raise _Refused("a kernel parameter with a template, default, pointer to function or pack")
    names = []
    for p in t.split(","):
        p = re.sub(r"\[[^\]]*\]\s*$", "", p.strip()).strip()
        m = re.search(r"([A-Za-z_]\w*)$", p)
        if not m or m.group(1) in _KEYWORDS or len(_IDENT.findall(p)) < 2:
            raise _Refused("a kernel parameter without a name")
        if m.group(1).startswith("km_"):
            raise _Refused("a kernel parameter named km_*")
        names.append(m.group(1))
    return names


_LAUNCH = re.compile(r"<<<")


def _rewrite_launches(text: str, mask: str, kernels: dict) -> str:
    """Host text with each ``k<<<cfg>>>(args)`` of a known kernel replaced by a launcher call."""
    out, last = [], 0
    for m in _LAUNCH.finditer(mask):
        if m.start() < last:
            continue
        before = mask[:m.start()].rstrip()
        if before.endswith(">"):
            raise _Refused("a templated kernel launch")
        nm = re.search(r"([A-Za-z_][\w:]*)$", before)
        if not nm or nm.group(1) not in kernels:
            raise _Refused("a launch of a kernel this source does not define at top level")
        # the configuration: up to the first >>> outside brackets
        depth, j = 0, m.end()
        while j < len(mask):
            c = mask[j]
            if c in _OPEN:
                depth += 1
            elif c in _CLOSE:
                depth -= 1
            elif depth == 0 and mask.startswith(">>>", j):
                break
            j += 1
        else:
            raise _Refused("a launch without >>>")
        cfg = _top_split(text[m.end():j], mask[m.end():j])
        if not 2 <= len(cfg) <= 4 or any(not c.strip() for c in cfg):
            raise _Refused("a launch configuration of other than 2 to 4 parts")
        k = j + 3
        while k < len(mask) and mask[k].isspace():
            k += 1
        if k >= len(mask) or mask[k] != "(":
            raise _Refused("a launch without arguments")
        close = _match(mask, k)
        cfg += ["0", "nullptr"][len(cfg) - 2:]
        args = text[k + 1:close - 1]
        call = f"{LAUNCH_PREFIX}{nm.group(1)}({', '.join(c.strip() for c in cfg)}"
        call += f", {args.strip()})" if args.strip() else ")"
        out.append(text[last:nm.start()])
        out.append(call)
        last = close
    out.append(text[last:])
    return "".join(out)


def _top_split(text: str, mask: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(mask):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _declared_name(decl: str) -> str:
    """The name a device variable's declaration introduces (``__constant__ float w[256];`` -> w)."""
    d = re.sub(r"=.*$|\[.*$|;\s*$", "", decl.strip(), flags=re.S)
    m = re.search(r"([A-Za-z_]\w*)\s*$", d)
    return m.group(1) if m else ""


def _split(src: str, exported: frozenset = frozenset()) -> SplitSource:
    if LAUNCH_PREFIX in src or "km_grid" in src:
        raise _Refused("the source names km_launch_*")
    text = strip_cxx(src)
    mask = _mask(text)
    items = _items(mask)
    kernels: dict[str, tuple[str, list[str]]] = {}  # name -> its parameter text and its parameters' names
    device_names: set[str] = set()
    host_parts: list[str] = []
    device_parts: list[str] = []
    declared: set[str] = set()
    cond = 0
    for it in items:
        body = text[it.start:it.end]
        head = text[it.start:it.start + len(it.head)]  # the item's own text (literals kept) before its body
        if it.kind == "pp":
            d = re.match(r"#\s*(\w+)", head)
            word = d.group(1) if d else ""
            if word in ("if", "ifdef", "ifndef"):
                cond += 1
            elif word == "endif":
                cond -= 1
            if "<<<" in head:
                raise _Refused("a macro that launches a kernel")
            host_parts.append(body)
            if not NAMES_TORCH.search(body):  # torch's includes and macros are the host side's alone
                device_parts.append(body)
            continue
        if cond:
            raise _Refused("conditional compilation around code")
        if re.search(r"\btemplate\b", head) and "__global__" in head:
            raise _Refused("a templated kernel")
        if "__global__" in head:
            name, params = _name_before_params(head if it.kind == "def" else head.rstrip().rstrip(";"))
            if name in kernels and kernels[name][0] != params.strip():
                raise _Refused("two kernels of one name")
            kernels[name] = (params.strip(), _params(params))
            device_parts.append(body)
            if name not in declared:
                declared.add(name)
                host_parts.append(f"void {LAUNCH_PREFIX}{name}(dim3, dim3, size_t, cudaStream_t"
                                  + (f", {params.strip()});" if params.strip() not in ("", "void") else ");"))
            continue
        kind_type = re.match(r"\s*(?:template\s*<[^;{]*?>\s*)?(?:typedef\s+)?(?:struct|class|union)\s+([A-Za-z_]\w*)?",
                             it.head)
        if _DEVICE_WORDS.search(it.head) and not re.search(r"\b__host__\b", head):
            if kind_type:  # a type whose members are device-only: the device's (its name, where it has one)
                if kind_type.group(1):
                    device_names.add(kind_type.group(1))
            elif it.kind == "def":  # (_items makes a braced item a def only where its head is a function's)
                device_names.add(_name_before_params(head)[0])
            elif "(" not in head:
                device_names.add(_declared_name(head))
            else:
                device_names.add(_name_before_params(head.rstrip().rstrip(";"))[0])
            device_parts.append(body)
            continue
        torchy = bool(NAMES_TORCH.search(mask[it.start:it.end]))
        is_func = it.kind == "def"
        shared = not torchy and (not is_func or re.search(r"\b(?:constexpr|__host__)\b", head))
        if is_func and re.search(r"\b__host__\b", head) and torchy:
            raise _Refused("a __host__ __device__ function that names torch")
        if is_func and _name_before_params(head)[0] in exported and re.search(
                r"\b(?:inline|static|constexpr|template)\b|__forceinline__", head):
            # the binding file's declaration links to the CUDA file's definition in the full build, which an inline
            # or static one never provides; in one file with it the declaration would find it
            raise _Refused("an exported function defined inline, static or as a template")
        host_parts.append(body)
        if shared and (it.kind != "decl" or not _host_only_variable(head)):
            device_parts.append(body)
    if cond:
        raise _Refused("an unterminated #if")
    if not kernels:
        raise _Refused("no kernel")
    host = "\n".join(host_parts)
    host_mask = _mask(host)
    if "<<<" not in host_mask:
        raise _Refused("no launch in host code")
    host = _rewrite_launches(host, host_mask, kernels)
    host_mask = _mask(host)
    if _CUDA_HOST_MACROS.search(host_mask):
        raise _Refused("host code that tests __CUDACC__ or __CUDA_ARCH__")
    if _PYTHON_NAMES.search(host_mask) and not _EXTENSION_H.search(src):
        raise _Refused("host code that uses pybind11 or Python without including torch/extension.h")
    named = set(_IDENT.findall(host_mask))
    clash = named & (device_names | set(kernels))
    if clash:
        raise _Refused(f"host code names a device-side symbol ({sorted(clash)[0]}) other than by launching it")
    device = "\n".join(device_parts)
    if NAMES_TORCH.search(_mask(device)):
        raise _Refused("device code that names torch")
    launchers = []
    for name, (params, names) in kernels.items():
        ps = ", ".join(f"{t} {v}" for t, v in zip(("dim3", "dim3", "size_t", "cudaStream_t"), _LAUNCH_PARAMS))
        ps += f", {params}" if params and params != "void" else ""
        launchers.append(f"void {LAUNCH_PREFIX}{name}({ps}) {{\n  {name}<<<{', '.join(_LAUNCH_PARAMS)}>>>"
                         f"({', '.join(names)});\n}}")
    device += "\n// the launchers the host part calls (verifier/build/split.py)\n" + "\n".join(launchers) + "\n"
    return SplitSource(device=device, host=_host_prelude() + host + "\n", kernels=tuple(kernels))


@functools.cache
def _host_prelude() -> str:
    """What the host part starts with: the macros nvcc defines for every CUDA file torch builds
    (``COMMON_NVCC_FLAGS``' ``-D``s: half and bfloat16 operators off) and cuda_runtime.h, which nvcc includes in
    every CUDA file."""
    import torch.utils.cpp_extension as ce

    defines = []
    for f in ce.COMMON_NVCC_FLAGS:
        m = re.fullmatch(r"-D(\w+)(?:=(.*))?", f)
        if m:
            defines.append(f"#define {m.group(1)} {m.group(2) if m.group(2) is not None else 1}")
    return ("// the CUDA source's host code (verifier/build/split.py)\n" + "".join(d + "\n" for d in defines)
            + "#include <cuda_runtime.h>\n")


def declared_functions(cpp_sources: list[str]) -> frozenset:
    """The names of the functions the binding's own sources declare (best effort: none where they do not parse)."""
    try:
        text = strip_cxx("\n".join(cpp_sources))
        return frozenset(_name_before_params(it.head.rstrip().rstrip(";"))[0] for it in _items(_mask(text))
                         if it.kind == "decl" and "(" in it.head)
    except _Refused:
        return frozenset()


def exported_declarations(cpp_sources: list[str], names) -> list[str] | None:
    """For a C++-only extension (the "split_cpp" variant, verifier/build/variants.py): a declaration of each
    exported function as its one top-level definition spells its head, in ``names`` order; None where a name is
    not exactly one plain definition (another item of that name, a template, ``static``, ``inline``, a default
    argument, an attribute, an operator) or the sources do not parse."""
    try:
        items = _items(_mask(strip_cxx("\n".join(cpp_sources))))
    except _Refused:
        return None
    named: dict[str, list[_Item]] = {}
    for it in items:
        if it.kind in ("decl", "def") and "(" in it.head:
            try:
                named.setdefault(_name_before_params(it.head.rstrip().rstrip(";"))[0], []).append(it)
            except _Refused:
                return None
    out = []
    for name in names:
        found = named.get(name, [])
        if len(found) != 1 or found[0].kind != "def":
            return None
        head = " ".join(found[0].head.split())
        if re.search(r"\b(?:template|static|inline|constexpr|consteval|extern|operator|friend|virtual|auto|decltype)\b|"
                     r"\[\[|__attribute__|__declspec|=|->", head):
            return None
        out.append(head + ";")
    return out


def declarations_only(cpp_sources: list[str]) -> bool:
    """Whether the binding's own sources are ``#include`` lines and function declarations only: then the host part
    can follow them in the binding file (one translation unit, one load of the precompiled header), because nothing
    in them (a macro, a ``using``, a definition) can change what the host part means."""
    text = strip_cxx("\n".join(cpp_sources))
    if re.search(r"#\s*include\s*[<\"][^>\"]*(?:cuda|half|bf16|fp16|fp8)", text):
        return False  # a CUDA header before the host part's macros (the half operators nvcc turns off)
    try:
        items = _items(_mask(text))
    except _Refused:
        return False
    for it in items:
        h = it.head.strip()
        if it.kind == "pp":
            if not re.fullmatch(r"#\s*(?:include\s*[<\"][^>\"]+[>\"]|pragma\s+once)", h):
                return False
        elif it.kind != "decl" or "(" not in h or re.match(
                r"(?:using|typedef|template|namespace|extern|static_assert|struct|class|union|enum)\b", h) or \
                "=" in re.sub(r"\([^()]*\)", "", h):
            return False
    return True


def _host_only_variable(head: str) -> bool:
    """A top-level declaration that defines a variable with storage the device cannot use (not const/constexpr):
    it stays on the host side only (two copies would be two variables)."""
    h = head.strip()
    if re.match(r"(?:typedef|using|static_assert|template|struct|class|union|enum)\b", h):
        return False
    if re.search(r"\b(?:constexpr|const)\b", h.split("=")[0]) and "*" not in h.split("=")[0].split("const")[-1]:
        return False
    if "(" in h.split("=")[0] and "=" not in h:
        return False  # a function declaration
    return True
