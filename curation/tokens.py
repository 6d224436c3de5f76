"""Tokens of kernel code for near-copy detection: what a rename, a reformat or a comment cannot change.

A candidate file is Python with C++/CUDA source inside string literals (what ``load_inline`` compiles). Its tokens
are
- every Python and C/C++/CUDA token except comments, docstrings and whitespace;
- ``ID`` for every user-chosen identifier, so a consistent renaming hides nothing;
- ``NUM`` / ``STR`` / ``CHR`` for literals, so ``256`` vs ``512`` threads or another error string do not make a copy
  look new;
- verbatim for keywords and for names a kernel cannot rename without changing what it computes (CUDA built-ins such
  as ``threadIdx`` / ``__syncthreads`` / ``expf``, torch and C++ API names such as ``empty_like`` / ``data_ptr``:
  ``API_NAMES``; ``API_MEMBERS`` only after ``.`` or ``->``), so a ReLU kernel and a sigmoid kernel with the same
  loop do not collapse into one;
- the tokens of every string literal that looks like C/C++ source (``looks_like_native_source``), lexed as C++
  between ``<native>`` and ``</native>``; other strings are ``STR``; a string that is a statement on its own line (a
  docstring) is dropped.

Two implementations produce these tokens:
- ``code_tokens``: a regular-expression lexer (two ``re.findall`` calls and one pass over the tokens). It is what
  deduplication uses, because it is several times faster than walking a syntax tree from Python
  (bench/results/curation_cpu.md);
- ``grammar_tokens``: the same tokens read off tree-sitter's syntax trees (Python grammar, CUDA grammar for the
  native strings). It is the reference the lexer is tested against (tests/test_dedup_tokens.py): on realistic
  candidate files the two lists are equal.

Where the two differ (rare in kernel code; neither is wrong, they are two tokenisations): a template closer ``>>``
is one token for the lexer and two ``>`` for the grammar; a dotted name in a Python ``import`` keeps an
``API_MEMBERS`` name for the lexer only; a string that is a statement after ``:`` on the same line, or one of several
string literals concatenated as a statement, is a docstring for the grammar only; code tree-sitter must recover
from (syntax errors) is tokenised as written by the lexer.
"""

from __future__ import annotations

import keyword
import re

# Names kept verbatim: renaming them changes the program's meaning (CUDA built-ins, math
# functions, torch / ATen / C++ API, Python built-ins used by candidate files).
API_NAMES = frozenset("""
threadIdx blockIdx blockDim gridDim warpSize __syncthreads __syncwarp __shfl_down_sync
__shfl_xor_sync __shfl_sync __shfl_up_sync __ldg __expf __logf __fdividef __frcp_rn __float2half
__half2float __half __nv_bfloat16 __bfloat162float __float2bfloat16 atomicAdd atomicMax atomicMin
atomicCAS atomicExch half2 float2 float4 int4 dim3 size_t uint32_t int64_t int32_t uint64_t
expf exp logf log log1pf sqrtf sqrt rsqrtf rsqrt powf pow tanhf tanh erff erf erfcf fabsf fabs
fmaxf fminf fmax fmin max min abs floorf ceilf roundf sinf cosf sin cos sigmoid relu gelu
INFINITY NAN FLT_MAX FLT_MIN CUDART_INF_F std numeric_limits infinity lowest reinterpret_cast
static_cast torch at c10 Tensor TensorOptions ScalarType kFloat kHalf kBFloat16 kInt kLong kCUDA kCPU
empty empty_like zeros zeros_like ones ones_like full
TORCH_CHECK AT_DISPATCH_FLOATING_TYPES AT_DISPATCH_FLOATING_TYPES_AND_HALF scalar_t
PYBIND11_MODULE TORCH_EXTENSION_NAME cudaGetLastError cudaDeviceSynchronize
cudaStream_t getCurrentCUDAStream at_cuda
nn Module Parameter ModuleList functional F load_inline cpp_extension utils super __init__
cpp_sources cuda_sources functions extra_cflags extra_cuda_cflags
forward self range len int float bool print isinstance tuple list
randn rand randint manual_seed no_grad
""".split())

# Member names kept only after a dot (``x.numel()``, ``threadIdx.x``): as plain variables they
# are ordinary user names (a variable called ``numel`` or ``x`` is renamed freely).
API_MEMBERS = frozenset("""
x y z w data_ptr size sizes numel dim stride strides options dtype device contiguous is_contiguous
view reshape to cuda cpu float half item def
""".split()) | API_NAMES

_CODE_MARKERS = ("#include", "__global__", "torch::", "at::")


def looks_like_native_source(text: str) -> bool:
    """True when a string literal's content is C/C++/CUDA source (what load_inline compiles)."""
    return any(m in text for m in _CODE_MARKERS) or ("{" in text and ";" in text and "\n" in text)


# ---------------------------------------------------------------------------- the lexer

# Words that are keywords, primitive types or literal words in the C++/CUDA grammar: the grammar
# gives their text, so the lexer keeps them verbatim too.
CPP_WORDS = frozenset("""
alignas alignof asm auto bool break case catch char char8_t char16_t char32_t class const constexpr
consteval constinit const_cast continue decltype default delete do double dynamic_cast else enum
explicit export extern false float for friend goto if inline int long mutable namespace new noexcept
nullptr NULL operator private protected public register reinterpret_cast return short signed sizeof
static static_assert static_cast struct switch template this thread_local throw true try typedef
typeid typename union unsigned using virtual void volatile while wchar_t
__global__ __device__ __host__ __shared__ __constant__ __managed__ __restrict__ __forceinline__
__noinline__ __launch_bounds__ __inline__ restrict
size_t ssize_t ptrdiff_t intptr_t uintptr_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t
uint64_t
""".split())
PY_WORDS = frozenset(keyword.kwlist) | {"__future__"}

# Both lexers skip whitespace and comments in a prefix of each match, so ``findall`` returns
# tokens only (the one capture group) and no position is tried against every alternative.
_PY_STRING = (r'(?:[rRbBuUfF]{1,2})?(?:"""[^"\\]*(?:(?:\\[\s\S]|"(?!""))[^"\\]*)*"""'
              r"|'''[^'\\]*(?:(?:\\[\s\S]|'(?!''))[^'\\]*)*'''"
              r'|"[^"\\\n]*(?:\\[\s\S][^"\\\n]*)*"'
              r"|'[^'\\\n]*(?:\\[\s\S][^'\\\n]*)*')")
_PY_LEX = re.compile(
    r"(?:[ \t\f\r]+|#[^\n]*|\\\r?\n)*+("                            # whitespace, comments, line joins
    r"[^\W\d]\w*(?![\"'])"                                        # name (not a string prefix)
    r"|" + _PY_STRING +                                           # string (with prefix)
    r"|(?:0[xXoObB][0-9a-fA-F_]+|\d[\d_]*\.?[\d_]*(?:[eE][-+]?\d+)?[jJ]?|\.\d[\d_]*(?:[eE][-+]?\d+)?[jJ]?)"
    r"|\n"
    r"|\*\*=|//=|>>=|<<=|->|:=|\*\*|//|==|!=|<=|>=|<<|>>|[-+*/%&|^@]=|\.\.\.|\S)")
_CPP_LEX = re.compile(
    r"(?:\s+|//[^\n]*|/\*[\s\S]*?\*/)*+("                           # whitespace, comments
    r"[A-Za-z_]\w*(?![\"'])"                                      # identifier (not a literal prefix)
    r"|[(){}\[\];,?~]"                                             # punctuation that starts no longer token
    r"|(?:[-+](?=\.?\d))?(?:0[xX][0-9a-fA-F']+|\d[\d']*\.?[\d']*(?:[eE][-+]?\d+)?|\.\d[\d']*(?:[eE][-+]?\d+)?)"
    r"[uUlLfFhH]*"                                                # number (a sign: see native_tokens)
    r"|<<<|>>>|<<=|>>=|->\*|->|::|\+\+|--|&&|\|\||<<|>>|[-+*/%&|^!=<>]=|\.\.\."  # operators
    r'|"[^"\\\n]*(?:\\[\s\S][^"\\\n]*)*"'                         # string literal
    r"|'[^'\\\n]*(?:\\[\s\S][^'\\\n]*)*'"                         # char literal
    r'|#[ \t]*include[ \t]*(?:<[^>\n]*>|"[^"\n]*")'               # include line
    r"|#[ \t]*(?:ifdef|ifndef|if|elif|else|endif|undef)\b"        # conditional: the rest is lexed
    r"|#[ \t]*[A-Za-z_]\w*(?:\\\n|[^\n])*"                         # define / pragma / other: whole line
    r'|(?:u8|[LuU])?R"\([\s\S]*?\)"|(?:u8|[LuU])["\'][^"\'\n]*["\']'  # prefixed literals
    r"|\S)")
_DIRECTIVE = re.compile(r"#[ \t]*(\w+)[ \t]*((?:\\\n|[^\n])*)")
_DEFINE = re.compile(r"([A-Za-z_]\w*)(\([^)]*\))?[ \t]*((?:\\\n|[^\n])*)")
_ESCAPE = re.compile(r"\\(?:\n|[\\'\"abfnrtv]|[0-7]{1,3}|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{[^}]+\})")
_INTERPOLATION = re.compile(r"\{\{|\}\}|\{[^{}]*\}")
_CONDITIONALS = ("#ifdef", "#ifndef", "#if", "#elif", "#else", "#endif", "#undef")
# after these a sign is a binary operator (a -1), not part of a number literal (f(-1))
_OPERAND_END = frozenset({")", "]", "++", "--"})


def _decode_escape(m: re.Match) -> str:
    try:
        return m.group(0).encode("latin-1", "backslashreplace").decode("unicode_escape")
    except UnicodeDecodeError:
        return m.group(0)


def python_string_value(literal: str) -> str:
    """The value of a Python string literal as tree-sitter's nodes give it: escapes decoded unless
    raw, f-string interpolations (``{expr}``) left out, doubled braces kept."""
    q = min(i for i in (literal.find('"'), literal.find("'")) if i >= 0)
    prefix = literal[:q].lower()
    body = literal[q:]
    n = 3 if body[:3] in ('"""', "'''") else 1
    body = body[n:-n]
    if "f" in prefix:
        body = _INTERPOLATION.sub(lambda m: m.group(0) if m.group(0) in ("{{", "}}") else "", body)
    if "r" not in prefix and "\\" in body:
        body = _ESCAPE.sub(_decode_escape, body)
    return body


def _directive_tokens(line: str) -> list[str]:
    """A #define / #pragma / other directive line as the grammar reads it: the directive word, for
    #define the macro's name and parameters, then the rest of the line as one verbatim token."""
    m = _DIRECTIVE.match(line)
    word, rest = "#" + m.group(1), m.group(2)
    out = [word]
    if word == "#define":
        d = _DEFINE.match(rest)
        if d is None:
            return out
        out.append("ID")
        if d.group(2):
            params = [p.strip() for p in d.group(2)[1:-1].split(",") if p.strip()]
            out.append("(")
            for j, p in enumerate(params):
                out += ([","] if j else []) + ["..." if p == "..." else "ID"]
            out.append(")")
        rest = d.group(3)
    if rest.strip():
        out.append(rest.strip())
    return out


def _cpp_token(tok: str) -> str:
    """The output token of one C++ token, where no neighbour matters (cached in _CPP_CACHE)."""
    c = tok[0]
    if c.isalpha() or c == "_":
        if tok[-1] in "\"'":
            return "CHR" if tok[-1] == "'" else "STR"  # prefixed literal: L"..", u8"..", R"(..)"
        return tok if tok in CPP_WORDS or tok in API_NAMES else "ID"
    if c.isdigit() or (c in ".-+" and len(tok) > 1 and (tok[1].isdigit() or tok[1] == ".")):
        return "NUM"
    if c == '"':
        return "STR"
    if c == "'":
        return "CHR"
    return tok


_CPP_CACHE: dict[str, str] = {}


def native_tokens(source: str) -> list[str]:
    """Tokens of C/C++/CUDA source (see the module docstring)."""
    # the sentinel ends the text with a token, so a trailing comment is skipped as a prefix
    # rather than re-scanned from inside (findall retries at every position after a failed match)
    toks = _CPP_LEX.findall(source + "\n@")
    toks.pop()
    cache = _CPP_CACHE
    if len(cache) > 200_000:  # user names and numbers are unbounded over a corpus
        cache.clear()
    get = cache.get
    out = [get(t) or cache.setdefault(t, _cpp_token(t)) for t in toks]
    # the few tokens whose output depends on a neighbour: API members after . or ->, a sign
    # after an operand, preprocessor lines
    fix = [i for i, t in enumerate(toks) if t[0] in "#-+." and (len(t) > 1 or t == ".")]
    expand: dict[int, list[str]] = {}
    for i in fix:
        t = toks[i]
        if t == "." or t == "->":
            if i + 1 < len(toks) and toks[i + 1] in API_MEMBERS:
                out[i + 1] = toks[i + 1]
        elif t[0] == "#":
            word = "#" + t[1:].lstrip().split(None, 1)[0].split("<")[0].split('"')[0]
            if word == "#include":
                expand[i] = ["#include", "STR"]
            elif word in _CONDITIONALS:
                out[i] = word
            else:
                expand[i] = _directive_tokens(t)
        elif out[i] == "NUM" and t[0] in "-+" and i > 0:
            p, po = toks[i - 1], out[i - 1]
            if p in _OPERAND_END or po in ("ID", "NUM", "STR", "CHR") or (po == p and po in API_MEMBERS
                                                                           and po not in CPP_WORDS):
                expand[i] = [t[0], "NUM"]
    for i in sorted(expand, reverse=True):
        out[i:i + 1] = expand[i]
    return out


def code_tokens(code: str) -> list[str]:
    """Tokens of a candidate file (module docstring), by the lexer.

    Guarantees: comments, docstrings and whitespace produce no tokens; a consistent renaming of
    non-API identifiers and any reformatting that keeps the tokens leave the list unchanged. Any
    text yields tokens (nothing is parsed, so nothing can fail)."""
    out: list[str] = []
    append = out.append
    toks = _PY_LEX.findall(code + "\n")  # the newline: see native_tokens' sentinel
    depth = 0
    line_start = True  # the next token starts a logical line
    prev = ""
    n = len(toks)
    for i, tok in enumerate(toks):
        c = tok[0]
        if c == "\n":
            if depth == 0:
                line_start = True
            continue
        starts = line_start
        line_start = False
        if tok[-1] in "\"'" and len(tok) > 1:
            value = python_string_value(tok)
            if looks_like_native_source(value):
                append("<native>")
                out.extend(native_tokens(value))
                append("</native>")
            elif starts and depth == 0 and (i + 1 == n or toks[i + 1] == "\n"):
                pass  # docstring / bare string statement: documentation, not code
            else:
                append("STR")
        elif c.isalpha() or c == "_" or (not c.isascii() and c.isidentifier()):
            if tok in PY_WORDS or tok in API_NAMES or (tok in API_MEMBERS and prev == "."):
                append(tok)
            else:
                append("ID")
        elif c.isdigit() or (c == "." and len(tok) > 1 and tok[1].isdigit()):
            append("NUM")
        else:
            if tok in "([{":
                depth += 1
            elif tok in ")]}":
                depth = max(0, depth - 1)
            append(tok)
        prev = tok
    return out


# ---------------------------------------------------------------------------- the grammar (reference)

_IDENT_TYPES = frozenset({"identifier", "field_identifier", "type_identifier", "namespace_identifier",
                          "statement_identifier"})
_NUMBER_TYPES = frozenset({"integer", "float", "number_literal"})
_PARSERS: dict = {}


def _parser(lang: str):
    """One tree-sitter parser per grammar per process (parsers are not shareable across forks)."""
    p = _PARSERS.get(lang)
    if p is None:
        from tree_sitter import Language, Parser  # here: the lexer path needs no tree-sitter; only checks do

        if lang == "python":
            import tree_sitter_python as grammar
        else:
            import tree_sitter_cuda as grammar
        p = _PARSERS[lang] = Parser(Language(grammar.language()))
    return p


def _leaf_token(node, src: bytes) -> str | None:
    t = node.type
    if t == "comment":
        return None
    if t in _IDENT_TYPES:
        name = src[node.start_byte:node.end_byte].decode("utf-8", "replace")
        if name in API_NAMES:
            return name
        if name in API_MEMBERS and _is_member(node, t):
            return name
        return "ID"
    if t in _NUMBER_TYPES:
        return "NUM"
    if t in ("string_literal", "raw_string_literal", "system_lib_string"):
        return "STR"
    if t == "char_literal":
        return "CHR"
    if t == "primitive_type" or node.is_named:
        # named leaves: primitive types, true/false/none, preprocessor words: their text
        return src[node.start_byte:node.end_byte].decode("utf-8", "replace")
    return t  # anonymous leaf: keyword or punctuation, its type is its text


def _is_member(node, t: str) -> bool:
    if t == "field_identifier":
        return True
    parent = node.parent
    return parent is not None and parent.type == "attribute" and parent.child_by_field_name("attribute") == node


def grammar_native_tokens(source: str) -> list[str]:
    """``native_tokens`` by the tree-sitter CUDA grammar."""
    src = source.encode("utf-8")
    tree = _parser("cuda").parse(src)
    out: list[str] = []
    cursor = tree.walk()
    while True:
        node = cursor.node
        if node.type in ("string_literal", "char_literal", "raw_string_literal", "system_lib_string") or node.child_count == 0:
            tok = _leaf_token(node, src)
            if tok is not None:
                out.append(tok)
        elif cursor.goto_first_child():
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return out


def _string_content(node, src: bytes) -> str:
    parts = []
    for c in node.children:
        if c.type == "string_content":
            # tree-sitter-python nests escape_sequence nodes inside string_content
            if c.child_count:
                pos = c.start_byte
                for e in c.children:
                    parts.append(src[pos:e.start_byte].decode("utf-8", "replace"))
                    parts.append(_unescape(src[e.start_byte:e.end_byte]))
                    pos = e.end_byte
                parts.append(src[pos:c.end_byte].decode("utf-8", "replace"))
            else:
                parts.append(src[c.start_byte:c.end_byte].decode("utf-8", "replace"))
        elif c.type == "escape_sequence":
            parts.append(_unescape(src[c.start_byte:c.end_byte]))
    return "".join(parts)


def _unescape(raw: bytes) -> str:
    try:
        return raw.decode("unicode_escape")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace")


def grammar_tokens(code: str) -> list[str]:
    """``code_tokens`` read off tree-sitter syntax trees: the reference the lexer is tested against."""
    src = code.encode("utf-8")
    tree = _parser("python").parse(src)
    out: list[str] = []
    cursor = tree.walk()
    while True:
        node = cursor.node
        t = node.type
        descend = False
        if t == "string":
            text = _string_content(node, src)
            parent = node.parent
            if looks_like_native_source(text):
                out.append("<native>")
                out.extend(grammar_native_tokens(text))
                out.append("</native>")
            elif parent is not None and parent.type == "expression_statement" and parent.named_child_count == 1:
                pass  # docstring / bare string statement
            else:
                out.append("STR")
        elif node.child_count == 0:
            tok = _leaf_token(node, src)
            if tok is not None:
                out.append(tok)
        else:
            descend = cursor.goto_first_child()
        if descend:
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return out
