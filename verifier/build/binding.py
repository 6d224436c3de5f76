"""One binding object per declared signature set: the ``main.cpp`` of a ``load_inline`` build in a form that does
not depend on the candidate's names.

The binding file torch writes is ``#include <torch/extension.h>``, the candidate's ``cpp_sources`` and one
``m.def("name", torch::wrap_pybind_function(name), "doc");`` per exported function. Most model answers declare
their host functions there and define them in the CUDA source, so two answers to one task differ in their binding
file only by names: the functions', their parameters', comments and spacing. Compiling that file costs ~8-13
CPU-s a candidate even against the precompiled header (pybind11's template instantiations), a third of a
candidate's compile. :func:`canonical_binding` rewrites such a file into the same text for every answer with the
same declared types (functions ``km_f0``, ``km_f1``... in ``m.def`` order, parameters unnamed, ``torch::Tensor``
spelled ``at::Tensor``), whose object verifier/build/objcache.py then compiles once; the names come from a one-line
file compiled per build (:attr:`CanonicalBinding.names_source`) and the link maps each ``km_f<i>`` onto the
candidate's own function (``--defsym``, :func:`link_aliases`). The module the candidate imports is the same:
the same functions under the same Python names and docstrings, the same pybind11 signatures (they come from the
types, not the names), the same C++ functions called.

What it does not take: anything but ``#include <...>`` lines followed by one declaration per exported function
(a definition, a macro, a namespace, a default argument, a string, an unexported declaration: the file is
compiled as written), nor a function name the included headers use for anything (``abs``: the file as written
would name an overload set, where ``km_f0`` names one function; the caller checks the preprocessed headers'
identifiers with :func:`names_clear_of`), a keyword, ``main`` or ``km_*``. The declarations are hidden (``#pragma GCC visibility``), so no ``km_f<i>`` is exported
from the module and one module's cannot stand in for another's. When the canonical compile or link fails, or
the link's other objects do not define every function the declarations name, the caller compiles the file as
written, so a failure reads exactly as it would have (verifier/build/objcache.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MODULE_LINE = "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"
CANONICAL_FILE = "km_binding.cpp"  # beside main.cpp in the build directory
NAMES_FILE = "km_binding_names.cpp"
NAMES_OBJECT = "km_binding_names.o"
HEADERS_FILE = "km_binding_headers.cpp"  # its includes alone, preprocessed once per flags (names_clear_of)
NAMES_SYMBOL = "km_binding_names"
_IDENT = r"[A-Za-z_]\w*"
_DOC = r'"((?:[^"\\\n]|\\.)*)"'
_DEF_WRAPPED = re.compile(rf'm\.def\("({_IDENT})", torch::wrap_pybind_function\(({_IDENT})\), {_DOC}\);')
_DEF_PLAIN = re.compile(rf'm\.def\("({_IDENT})", ({_IDENT}), {_DOC}\);')
_INCLUDE = re.compile(r"#[ \t]*include[ \t]*<([\w./+-]+)>[ \t]*")
_TOKEN = re.compile(r"\s*(::|&&|[A-Za-z_]\w*|[<>,&*])")
# a parameter's last word is its type, not a name, when it is one of these
_TYPE_WORDS = {"const", "volatile", "unsigned", "signed", "int", "long", "short", "char", "float", "double", "bool",
               "void", "auto", "wchar_t", "char8_t", "char16_t", "char32_t"}
_REFUSED_WORDS = {"struct", "class", "enum", "union", "typename", "template", "extern", "static", "inline",
                  "namespace", "using", "typedef", "operator", "decltype", "constexpr", "friend", "virtual",
                  "register", "thread_local", "asm", "noexcept", "throw", "__attribute__", "__declspec"}


@dataclass(frozen=True)
class CanonicalBinding:
    """A binding file in the form shared by every build that declares the same types (module docstring)."""

    text: str  # the canonical main.cpp
    includes: tuple[str, ...]  # its headers, in order (``#include <h>``)
    names: tuple[str, ...]  # the exported C++ functions, in m.def order: km_f<i> stands for names[i]
    names_source: str  # defines NAMES_SYMBOL: each function's Python name and docstring, as load_inline wrote them


# C++ keywords and alternative tokens, and names the file as written would not compile under (``main``) or
# that the canonical form itself uses (km_*)
_NOT_OWN = set("""alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t
char32_t class compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield
decltype default delete do double dynamic_cast else enum explicit export extern false float for friend goto if
inline int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public
register reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch
template this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
wchar_t while xor xor_eq main""".split())


def own_name(name: str) -> bool:
    """A name the canonical form may stand in for: not a keyword, ``main`` or one of its own (``km_``)."""
    return name not in _NOT_OWN and not name.startswith("km_")


def names_clear_of(binding: "CanonicalBinding", header_identifiers: set[str]) -> bool:
    """Whether no exported name is an identifier anywhere in the preprocessed headers (macros included): then the
    headers declare nothing of that name, the file as written finds exactly its own declaration where it names
    the function, and the canonical form compiles exactly when it does. Conservative: a name the headers use for
    anything (a member, a parameter) keeps the file as written."""
    return not any(n in header_identifiers for n in binding.names)


def canonical_name(i: int) -> str:
    return f"km_f{i}"


def _tokens(text: str) -> list[str] | None:
    out, pos, text = [], 0, text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            return None
        out.append(m.group(1))
        pos = m.end()
    return out


def _join(tokens: list[str]) -> str:
    out = ""
    for t in tokens:
        if out and (out[-1].isalnum() or out[-1] == "_") and (t[0].isalnum() or t[0] == "_"):
            out += " "
        out += t
    return out


def _type(tokens: list[str]) -> list[str] | None:
    """A type's tokens, ``torch::Tensor`` read as ``at::Tensor``; None for anything but a plain type."""
    if not tokens or any(t in _REFUSED_WORDS for t in tokens) or tokens[0] in (",", ">", "::"):
        return None
    out = list(tokens)
    for i in range(len(out) - 2):
        if out[i] == "torch" and out[i + 1] == "::" and out[i + 2] == "Tensor" and (i == 0 or out[i - 1] != "::"):
            out[i] = "at"
    depth = 0
    for t in out:
        depth += {"<": 1, ">": -1}.get(t, 0)
        if depth < 0:
            return None
    return out if depth == 0 else None


def _parameter(text: str) -> str | None:
    """A parameter's type without its name; None for what is not a plain ``TYPE [name]``."""
    toks = _tokens(text)
    if not toks:
        return None
    last = toks[-1]
    if (len(toks) >= 2 and re.fullmatch(_IDENT, last) and last not in _TYPE_WORDS
            and (re.fullmatch(r"\w+", toks[-2]) or toks[-2] in (">", "&", "&&", "*"))):
        toks = toks[:-1]
    t = _type(toks)
    return _join(t) if t else None


def _split_params(text: str) -> list[str] | None:
    if not text.strip() or text.strip() == "void":
        return []
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def _declaration(stmt: str) -> tuple[str, str, tuple[str, ...]] | None:
    """(function name, its return type, its parameters' types without their names) of ``RET NAME(PARAMS)``, each
    type canonical (``torch::Tensor`` spelled ``at::Tensor``, tokens joined as :func:`_join` does)."""
    m = re.fullmatch(rf"\s*([^()]+?)\s*\b({_IDENT})\s*\(([^()]*)\)\s*", stmt)
    if not m:
        return None
    ret_tokens = _tokens(m.group(1))
    ret = _type(ret_tokens) if ret_tokens else None
    params = _split_params(m.group(3))
    if ret is None or params is None:
        return None
    canon = [_parameter(p) for p in params]
    if any(c is None for c in canon):
        return None
    return m.group(2), _join(ret), tuple(canon)


@dataclass(frozen=True)
class Declared:
    """A binding file that is includes and one declaration per exported function, read (:func:`read_declared`)."""

    includes: tuple[str, ...]  # its headers, in order
    functions: tuple[tuple[str, str, str, tuple[str, ...]], ...]  # (name, docstring literal, return type, parameters)
    wrapped: bool  # each m.def wraps its function in torch::wrap_pybind_function (torch's error translation)


def read_declared(main_text: str) -> Declared | None:
    """A ``load_inline`` binding file read as its includes and exported declarations, in ``m.def`` order; None
    where the file is anything else (a definition, a macro, a namespace, a default argument, a string, an
    unexported declaration, an exported name :func:`own_name` refuses)."""
    head, sep, tail = main_text.rpartition("\n" + MODULE_LINE + "\n")
    if not sep or not tail.endswith("\n}"):
        return None
    defs, wrapped = [], set()
    for line in tail.split("\n")[:-1]:
        w = _DEF_WRAPPED.fullmatch(line)
        m = w or _DEF_PLAIN.fullmatch(line)
        if not m or m.group(1) != m.group(2):
            return None
        defs.append((m.group(1), m.group(3)))
        wrapped.add(w is not None)
    names = [n for n, _ in defs]
    if not defs or len(set(names)) != len(names) or len(wrapped) != 1 or any(not own_name(n) for n in names):
        return None
    code = _without_comments(head)
    if code is None:
        return None
    includes, body = [], ""
    for line in code.split("\n"):
        if line.strip().startswith("#"):
            inc = _INCLUDE.fullmatch(line.strip())
            if not inc or body.strip():  # another directive, or an include after a declaration
                return None
            if inc.group(1) not in includes:
                includes.append(inc.group(1))
        else:
            body += line + "\n"
    if any(c in body for c in "{}=[]#"):
        return None
    stmts = body.split(";")
    if stmts and stmts[-1].strip():
        return None  # text after the last declaration
    found: dict[str, tuple[str, tuple[str, ...]]] = {}
    for stmt in stmts[:-1]:
        d = _declaration(stmt)
        if d is None or d[0] not in names or d[0] in found:
            return None
        found[d[0]] = (d[1], d[2])
    if set(found) != set(names) or not includes:
        return None
    return Declared(includes=tuple(includes), functions=tuple((n, doc, *found[n]) for n, doc in defs),
                    wrapped=wrapped == {True})


def canonical_binding(main_text: str) -> CanonicalBinding | None:
    """The canonical form of a ``load_inline`` binding file, or None where the file is anything but includes and
    one declaration per exported function (module docstring)."""
    d = read_declared(main_text)
    if d is None:
        return None
    call = "torch::wrap_pybind_function({f})" if d.wrapped else "{f}"
    lines = [f"#include <{h}>" for h in d.includes]
    lines += ["#pragma GCC visibility push(hidden)", f'extern "C" const char* const {NAMES_SYMBOL}[];']
    lines += [f"{ret} {canonical_name(i)}({', '.join(params)});" for i, (_n, _doc, ret, params) in enumerate(d.functions)]
    lines += ["#pragma GCC visibility pop", MODULE_LINE]
    lines += [f"m.def({NAMES_SYMBOL}[{2 * i}], {call.format(f=canonical_name(i))}, {NAMES_SYMBOL}[{2 * i + 1}]);"
              for i in range(len(d.functions))]
    lines.append("}")
    literals = ", ".join(f'"{n}", "{doc}"' for n, doc, _r, _p in d.functions)
    names_source = f'extern "C" const char* const {NAMES_SYMBOL}[] = {{{literals}}};\n'
    return CanonicalBinding(text="\n".join(lines) + "\n", includes=d.includes,
                            names=tuple(n for n, *_ in d.functions), names_source=names_source)


def _without_comments(text: str) -> str | None:
    """The text with its comments replaced by a space; None where it has a string or character literal, a
    backslash (a line continuation, also inside a ``//`` comment) or ``??`` (a trigraph) anywhere."""
    if "\\" in text or "??" in text:
        return None
    out, i = [], 0
    while i < len(text):
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = len(text) if j < 0 else j
            out.append(" ")
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                return None
            out.append(" " + "\n" * text.count("\n", i, j))
            i = j + 2
        elif text[i] in "\"'":
            return None
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def link_aliases(binding: CanonicalBinding, undefined: list[str], defined: set[str]) -> list[str] | None:
    """``-Wl,--defsym=CANONICAL=ORIGINAL`` for each ``km_f<i>`` symbol the canonical object refers to
    (``undefined``: its undefined symbols, as ``nm -u`` lists them), onto the candidate's function of the same
    parameter types; None when one is not among ``defined`` (the symbols the link's other objects define:
    the file as written would then not link or load the same way, so it is compiled as written)."""
    out = []
    for i, name in enumerate(binding.names):
        prefix = f"_Z{len(canonical_name(i))}{canonical_name(i)}"
        mine = [s for s in undefined if s.startswith(prefix) and not s[len(prefix):][:1].isdigit()]
        if len(mine) != 1:
            return None
        original = f"_Z{len(name)}{name}{mine[0][len(prefix):]}"
        if original not in defined:
            return None
        out.append(f"-Wl,--defsym={mine[0]}={original}")
    return out
