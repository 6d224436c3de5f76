"""Near-duplicate detection on kernel code: tree-sitter tokens, MinHash signatures, LSH buckets.

Why tokens from a grammar: two candidates that differ only in variable names, layout or comments
are the same kernel. Tokenising with tree-sitter (Python grammar for the candidate file, CUDA/C++
grammar for the kernel sources inside it) lets us

- drop comments, docstrings and whitespace (they are not tokens at all);
- map every user-chosen identifier to one placeholder ``ID`` (renaming hides nothing);
- map literals to a class token (``NUM``, ``STR``, ``CHR``), so ``256`` vs ``512`` threads or a
  different error string do not make a copy look new;
- keep the names a kernel cannot rename without changing what it computes (CUDA built-ins such as
  ``threadIdx`` / ``__syncthreads`` / ``expf``, torch and C++ API names such as ``empty_like`` /
  ``data_ptr``, see ``API_NAMES``), so a ReLU kernel and a sigmoid kernel with the same loop do
  not collapse into one.

Kernel sources are found as Python string literals that look like C/C++ (contain ``#include``,
``__global__``, ``torch::`` or both ``{`` and ``;``); in practice these are exactly the strings passed to
``load_inline(cpp_sources=..., cuda_sources=...)``, whether inline or through a variable. Other
strings become ``STR``; a string that is a whole statement (a docstring) is dropped.

Shingles are k consecutive tokens (k = ``shingle``, default 5); a document's MinHash signature is
over its set of shingles; ``datasketch.MinHashLSH`` with ``threshold`` and ``num_perm`` proposes
candidates, which are confirmed with the signatures' estimated Jaccard similarity >= threshold.

Known limit: two files built from the same template around a different one-line expression (a
ReLU and a tanh kernel with identical launch code) share most shingles and can score above 0.8;
the corpora therefore deduplicate within one task, where such pairs do not arise.

Not guaranteed: two programs with the same algorithm but different structure (a loop unrolled by
hand, a grid-stride loop vs one thread per element) are *distinct* here, on purpose: those are
the distinct implementations diversity selection wants to keep. MinHash is an estimate: pairs
near the threshold can fall either way.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

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

# Leaf types that are identifiers in either grammar.
_IDENT_TYPES = frozenset({"identifier", "field_identifier", "type_identifier", "namespace_identifier",
                          "statement_identifier"})
_NUMBER_TYPES = frozenset({"integer", "float", "number_literal"})
_CODE_MARKERS = ("#include", "__global__", "torch::", "at::")

_PARSERS: dict = {}


def _parser(lang: str):
    """One tree-sitter parser per grammar per process (parsers are not shareable across forks)."""
    p = _PARSERS.get(lang)
    if p is None:
        from tree_sitter import Language, Parser

        if lang == "python":
            import tree_sitter_python as grammar
        else:
            import tree_sitter_cuda as grammar
        p = _PARSERS[lang] = Parser(Language(grammar.language()))
    return p


def looks_like_native_source(text: str) -> bool:
    """True when a string literal's content is C/C++/CUDA source (what load_inline compiles)."""
    return any(m in text for m in _CODE_MARKERS) or ("{" in text and ";" in text and "\n" in text)


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


def native_tokens(source: str) -> list[str]:
    """Tokens of C/C++/CUDA source by the tree-sitter CUDA grammar (see module docstring)."""
    src = source.encode("utf-8")
    tree = _parser("cuda").parse(src)
    out: list[str] = []
    cursor = tree.walk()
    # iterative pre-order walk with a cursor: far cheaper than building child lists
    while True:
        node = cursor.node
        t = node.type
        if t in ("string_literal", "char_literal", "raw_string_literal", "system_lib_string") or node.child_count == 0:
            tok = _leaf_token(node, src)
            if tok is not None:
                out.append(tok)
        elif cursor.goto_first_child():
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return out


def _string_content(node, src: bytes) -> str:
    """The value of a Python string literal: its content with escape sequences decoded."""
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


def code_tokens(code: str) -> list[str]:
    """Tokens of a candidate file: Python grammar, with load_inline sources by the CUDA grammar.

    Guarantees: comments, docstrings and whitespace produce no tokens; a consistent renaming of
    non-API identifiers and any reformatting that keeps the grammar's tokens leave the list
    unchanged. Code that does not parse still yields tokens (tree-sitter recovers from errors)."""
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
                out.extend(native_tokens(text))
                out.append("</native>")
            elif parent is not None and parent.type == "expression_statement" and parent.named_child_count == 1:
                pass  # docstring / bare string statement: documentation, not code
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


# ---------------------------------------------------------------------------- hashing

_TOKEN_IDS: dict[str, int] = {}
_MASK32 = np.uint64(0xFFFFFFFF)


def _token_id(tok: str) -> int:
    v = _TOKEN_IDS.get(tok)
    if v is None:
        v = _TOKEN_IDS[tok] = zlib.crc32(tok.encode("utf-8"))
    return v


def shingle_hashes(tokens: Sequence[str], k: int) -> np.ndarray:
    """32-bit hashes of the document's k-token shingles (numpy-vectorised rolling hash).

    A document shorter than k tokens is one shingle. Stable across processes and runs."""
    ids = np.fromiter((_token_id(t) for t in tokens), dtype=np.uint64, count=len(tokens))
    if ids.size == 0:
        return np.zeros(1, dtype=np.uint64)
    k = max(1, min(k, ids.size))
    n = ids.size - k + 1
    h = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(k):
            h = h * np.uint64(0x100000001B3) + ids[j:j + n]  # wraps mod 2^64 on purpose
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
    return np.unique(h & _MASK32)


def _identity(x):
    return x


_TEMPLATES: dict = {}


def _template(num_perm: int, seed: int):
    from datasketch import MinHash

    m = _TEMPLATES.get((num_perm, seed))
    if m is None:
        m = _TEMPLATES[(num_perm, seed)] = MinHash(num_perm=num_perm, seed=seed, hashfunc=_identity)
    return m


_PERMS: dict = {}


def minhash_values(hashes: np.ndarray, num_perm: int, seed: int = 1) -> np.ndarray:
    """The MinHash signature of a set of 32-bit shingle hashes, as uint32.

    Uses the affine permutations (h -> a*h + b mod 2^32, a odd) of datasketch's default
    ``affine32`` scheme for (num_perm, seed), applied in one numpy expression; the shingle hashes
    are already avalanched (shingle_hashes), so datasketch's input pre-mix is not repeated."""
    perms = _PERMS.get((num_perm, seed))
    if perms is None:
        m = _template(num_perm, seed)
        if m.scheme != "affine32":
            raise RuntimeError(f"datasketch default scheme is {m.scheme!r}; this code expects 'affine32'")
        a, b = m.permutations
        perms = _PERMS[(num_perm, seed)] = (np.asarray(a, dtype=np.uint32), np.asarray(b, dtype=np.uint32))
    a, b = perms
    h = hashes.astype(np.uint32)[:, None]
    return (h * a + b).min(axis=0)  # uint32 arithmetic wraps: mod 2^32


def _signature_chunk(args) -> np.ndarray:
    codes, num_perm, shingle, seed = args
    out = None
    for i, code in enumerate(codes):
        hv = minhash_values(shingle_hashes(code_tokens(code), shingle), num_perm, seed)
        if out is None:
            out = np.empty((len(codes), hv.size), dtype=hv.dtype)
        out[i] = hv
    return out if out is not None else np.empty((0, num_perm), dtype=np.uint64)


# ---------------------------------------------------------------------------- deduper


@dataclass
class DedupResult:
    kept: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)  # dropped key -> the kept key it copies


class MinHashDeduper:
    """Near-duplicate filter over code: keeps the first of every group of near-copies.

    ``num_perm`` permutations, ``shingle`` tokens per shingle, ``threshold`` on estimated Jaccard
    similarity of shingle sets. Insertion order decides which copy is kept, so callers sort their
    items best first. ``workers`` > 1 computes signatures in that many processes."""

    def __init__(self, num_perm: int = 128, shingle: int = 5, threshold: float = 0.8, seed: int = 1,
                 workers: int = 1):
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        if shingle < 1 or num_perm < 2:
            raise ValueError(f"need shingle >= 1 and num_perm >= 2, got {shingle}, {num_perm}")
        from datasketch import MinHashLSH

        self.num_perm, self.shingle, self.threshold, self.seed = num_perm, shingle, threshold, seed
        self.workers = workers
        self.lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
        self.scheme = _template(num_perm, seed).scheme  # signatures are rebuilt with the scheme they came from
        self._sigs: dict[str, object] = {}

    # -- signatures
    def signature_values(self, codes: Sequence[str]) -> np.ndarray:
        """Signatures of many documents as an (n, num_perm) array, in ``workers`` processes."""
        codes = list(codes)
        if self.workers <= 1 or len(codes) < 256:
            return _signature_chunk((codes, self.num_perm, self.shingle, self.seed))
        import multiprocessing as mp

        step = max(64, len(codes) // (self.workers * 8))
        chunks = [(codes[i:i + step], self.num_perm, self.shingle, self.seed) for i in range(0, len(codes), step)]
        with mp.get_context("fork").Pool(self.workers) as pool:
            parts = pool.map(_signature_chunk, chunks)
        return np.concatenate(parts)

    def _lean(self, values: np.ndarray):
        from datasketch import LeanMinHash

        return LeanMinHash(seed=self.seed, hashvalues=values, scheme=self.scheme)

    def signature(self, code: str):
        """The LeanMinHash of one document."""
        return self._lean(_signature_chunk(([code], self.num_perm, self.shingle, self.seed))[0])

    def similarity(self, a: str, b: str) -> float:
        """Estimated Jaccard similarity of two documents' shingle sets."""
        return self.signature(a).jaccard(self.signature(b))

    # -- index
    def find_copy(self, sig) -> str | None:
        """The key of a stored document this signature nearly copies, or None."""
        best, best_j = None, -1.0
        for key in self.lsh.query(sig):
            j = sig.jaccard(self._sigs[key])
            if j >= self.threshold and (j > best_j or (j == best_j and str(key) < str(best))):
                best, best_j = key, j
        return best

    def add_signature(self, key: str, sig) -> str | None:
        """Store ``key`` unless it nearly copies a stored document; returns that document's key."""
        if key in self._sigs:
            return None
        dup = self.find_copy(sig)
        if dup is None:
            self.lsh.insert(key, sig)
            self._sigs[key] = sig
        return dup

    def add(self, key: str, code: str) -> str | None:
        return self.add_signature(key, self.signature(code))

    def dedup(self, items: Iterable[tuple[str, str]]) -> DedupResult:
        """Keep the first document of each near-copy group among ``(key, code)`` items (in order)."""
        items = list(items)
        values = self.signature_values([c for _, c in items])
        res = DedupResult()
        for (key, _), v in zip(items, values):
            dup = self.add_signature(key, self._lean(v))
            if dup is None:
                res.kept.append(key)
            else:
                res.dropped[key] = dup
        return res

    def __len__(self) -> int:
        return len(self._sigs)


def select_diverse(items: Sequence[tuple[str, str]], k: int, deduper: MinHashDeduper) -> tuple[list[str], dict[str, str]]:
    """Up to ``k`` keys from ``(key, code)`` items (best first) with no two near-copies.

    Uses ``deduper``'s settings with a fresh index, so copies are judged within this group only.
    Returns (kept keys, dropped key -> the kept key it copies). Items past k that are distinct are
    neither kept nor dropped as copies (they are over the per-group budget)."""
    fresh = MinHashDeduper(deduper.num_perm, deduper.shingle, deduper.threshold, deduper.seed)
    kept: list[str] = []
    dropped: dict[str, str] = {}
    for key, code in items:
        if len(kept) >= k:
            break
        dup = fresh.add(key, code)
        if dup is None:
            kept.append(key)
        else:
            dropped[key] = dup
    return kept, dropped
