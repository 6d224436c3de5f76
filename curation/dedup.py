"""Near-duplicate detection on kernel code: normalised tokens, k-token shingles, rensa MinHash, LSH bands, then an
exact Jaccard check of every proposed pair.

For one document (``MinHashDeduper``):
1. tokens (curation/tokens.py): comments, docstrings and layout gone, user identifiers ``ID``, literals
   ``NUM`` / ``STR``, kernel and torch API names kept, the C++/CUDA inside load_inline strings lexed too;
2. shingles: every run of ``shingle`` consecutive tokens (one shingle when the document is shorter), each hashed
   to 54 bits from the tokens' CRC-32s (numpy, a chunk of documents at a time), kept as a sorted set;
3. a rensa MinHash signature (``num_perm`` values) of that set
   (``RMinHash.digest_matrix_from_flat_token_hashes``: one Rust call per chunk);
4. LSH: ``bands`` bands of ``rows`` signature values; a stored document that shares a band value is a candidate.
   A band value shared by ``max_bucket`` stored documents stops proposing candidates: it is boilerplate (a launch
   frame, a wrapper every file has), and on a large corpus its bucket would make every document a candidate of
   thousands;
5. verification: a candidate whose signature agrees with the document's on enough values (the threshold less
   ``ESTIMATE_SLACK`` standard errors of the estimate) and whose set size allows it has its exact Jaccard
   similarity computed from the two shingle sets; the document is a copy when one reaches ``threshold``.

Guarantees: every drop names a kept document with true shingle Jaccard >= threshold (no drop for an estimation
error). Copies are not stored, so every group keeps its first document and a document is compared with the kept
ones (greedy: a copy of a dropped copy that is not itself close to a kept document is kept, which is what diversity
selection wants). With ``chain=True`` copies are stored too, so a group linked by near-copy pairs keeps only its
first document (the connected components of union-find dedup, computed in one pass because documents arrive in
order): higher copy recall, more originals dropped. Steps 1-2 run in ``workers`` processes; steps 3-5 in the calling
process, in document order, so the result does not depend on ``workers``. Cost: every stored document's shingle set
stays in memory (8 bytes per distinct shingle).

Why these defaults (threshold 0.8, 7-token shingles, 256 permutations, 14 bands of 9 rows, max_bucket 128;
bench/bench_dedup.py on 100,000 kernels, bench/results/curation_cpu.md; figures as of commit 6733833):
- the exact check decides, not the MinHash estimate: the estimate's standard error at J = 0.8 with 128
  permutations is 0.035, so estimate-only dedup misses copies and drops originals whose true similarity is below
  the threshold;
- 7-token shingles, not 5: kernels written from the same frame around different expressions share fewer 7-grams
  (median Jaccard of two unrelated synthetic kernels 0.40 with 5 tokens, 0.33 with 7) while copies stay copies, so
  LSH proposes far fewer pairs;
- 256 permutations: the estimate that picks which candidates get the exact check is twice as tight as with 128
  (half the exact checks); signing costs the same (rensa);
- 14 bands of 9 rows propose a pair at true Jaccard 0.8 with probability 0.87, at 0.85 with 0.975, at 0.9 with
  0.999, and a pair of unrelated kernels almost never;
- rensa for the signatures: one Rust call signs a chunk, where datasketch hashes every shingle with SHA-1 in Python.
  rensa's LSH index is not used: it is queried with ``RMinHash`` objects, not signature rows, and checks candidates
  by estimate only. The band index is a dict per band;
- workers tokenise and shingle; the signatures are computed in the calling process, because rensa's Rust thread
  pool does not survive a ``fork`` of a process that has used it (a child that calls rensa hangs).

Not guaranteed: two programs with the same algorithm but different structure (a loop unrolled by hand, a
grid-stride loop vs one thread per element) are distinct here, on purpose: those are the distinct implementations
diversity selection wants to keep. A copy whose every band value differs from its original's, or is boilerplate, is
not proposed, so not found (the benchmark's copy recall says how often). Two files built from the same template
around a different one-line expression (a ReLU and a tanh kernel with identical launch code) share most shingles
and can score above 0.8, so the corpora deduplicate within one task, where such pairs do not arise.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import numpy as np

from curation.tokens import API_MEMBERS, API_NAMES, code_tokens, looks_like_native_source, native_tokens  # noqa: F401

ESTIMATE_SLACK = 3.0  # in standard errors of the MinHash estimate at the threshold
_HASH_BITS = 54  # shingle hash width: leaves 10 bits for the document number when sorting a chunk
_MASK = np.uint64((1 << _HASH_BITS) - 1)
_MULT = np.random.default_rng(20240611).integers(1, 2 ** 63, size=64, dtype=np.uint64) | np.uint64(1)

_TOKEN_IDS: dict[str, int] = {}


def token_ids(tokens: Sequence[str]) -> list[int]:
    """Each token's CRC-32 (stable across processes and runs: no salted hashing)."""
    ids = _TOKEN_IDS
    missing = set(tokens).difference(ids)
    if missing:
        if len(ids) > 500_000:  # the vocabulary is small, but stay bounded on odd input
            ids.clear()
            missing = set(tokens)
        for t in missing:
            ids[t] = zlib.crc32(t.encode("utf-8"))
    return list(map(ids.__getitem__, tokens))


def shingles(tokens: Sequence[str], k: int) -> list[bytes]:
    """The document's k-token shingles as byte strings (4 bytes per token: its CRC-32).

    The input other MinHash libraries take (bench/bench_dedup.py feeds these to datasketch and to
    rensa's own deduplicator). A document shorter than k tokens is one shingle; an empty one is
    one empty shingle."""
    ids = np.array(token_ids(tokens), dtype="<u4")
    if ids.size <= k:
        return [ids.tobytes()]
    windows = np.lib.stride_tricks.sliding_window_view(ids, k)
    return np.ascontiguousarray(windows).view(np.dtype((np.void, 4 * k))).ravel().tolist()


def shingle_sets(token_lists: Sequence[Sequence[str]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The shingle sets of many documents: (hashes, bounds), document i's sorted distinct 54-bit
    shingle hashes being ``hashes[bounds[i]:bounds[i + 1]]``.

    A shingle's hash is a function of its k tokens only (the same shingle in two documents has the
    same hash). A document shorter than k tokens has one shingle, of all its tokens."""
    n = len(token_lists)
    if n >= 1 << (64 - _HASH_BITS):
        raise ValueError(f"at most {1 << (64 - _HASH_BITS)} documents per call")
    lens = np.fromiter((len(t) for t in token_lists), dtype=np.int64, count=n)
    flat: list[int] = []
    for t in token_lists:
        flat += token_ids(t)
    ids = np.array(flat, dtype=np.uint64)
    total = ids.size
    starts = np.cumsum(lens) - lens
    padded = np.concatenate([ids, np.zeros(k, np.uint64)])
    h = np.zeros(total, np.uint64)
    for j in range(k):
        h += padded[j:j + total] * _MULT[j]
    own_len = np.repeat(lens, lens)
    pos = np.arange(total) - np.repeat(starts, lens)
    whole = pos + k <= own_len  # windows inside their document
    short = np.flatnonzero((lens > 0) & (lens < k))
    for i in short.tolist():  # the one shingle of a short document: its own tokens only
        s, m = int(starts[i]), int(lens[i])
        h[s] = (ids[s:s + m] * _MULT[:m]).sum(dtype=np.uint64)
        whole[s] = True
    h ^= h >> np.uint64(31)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(29)
    doc = np.repeat(np.arange(n, dtype=np.uint64), lens)[whole]
    key = (doc << np.uint64(_HASH_BITS)) | (h[whole] & _MASK)
    empty = np.flatnonzero(lens == 0).astype(np.uint64)
    if empty.size:  # an empty document: one shingle, hash 0
        key = np.concatenate([key, empty << np.uint64(_HASH_BITS)])
    key.sort(kind="stable")
    key = key[np.concatenate(([True], key[1:] != key[:-1]))]
    bounds = np.searchsorted(key, np.arange(n + 1, dtype=np.uint64) << np.uint64(_HASH_BITS))
    return key & _MASK, bounds


def _shingle_chunk(args) -> tuple[np.ndarray, np.ndarray]:
    """``shingle_sets`` of a list of documents' tokens (runs in a worker process)."""
    codes, shingle = args
    return shingle_sets([code_tokens(c) for c in codes], shingle)


def _signatures(hashes: np.ndarray, bounds: np.ndarray, num_perm: int, seed: int) -> np.ndarray:
    """rensa MinHash signatures, (n, num_perm) uint32, of the sets ``shingle_sets`` returned."""
    from rensa import RMinHash  # here: imported after the fork in the signing process (rensa does not survive fork)

    if len(bounds) < 2:
        return np.zeros((0, num_perm), np.uint32)
    m = RMinHash.digest_matrix_from_flat_token_hashes(hashes, bounds.astype(np.uint64), num_perm, seed)
    return np.array(m.to_rows(), dtype=np.uint32)


def exact_jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard similarity of two sorted sets of distinct values."""
    return float(exact_jaccard_many(a, [b])[0])


def exact_jaccard_many(query: np.ndarray, others: Sequence[np.ndarray]) -> np.ndarray:
    """Jaccard similarity of one sorted set of distinct values with each of many (one vectorised
    lookup of all their values in ``query``)."""
    sizes = np.fromiter((len(o) for o in others), dtype=np.int64, count=len(others))
    if not query.size:
        return (sizes == 0).astype(np.float64)
    cat = np.concatenate(others) if len(others) > 1 else others[0]
    at = np.searchsorted(query, cat)
    hit = query[np.minimum(at, query.size - 1)] == cat
    cum = np.concatenate(([0], np.cumsum(hit)))
    ends = np.cumsum(sizes)
    inter = cum[ends] - cum[ends - sizes]
    return inter / (query.size + sizes - inter)


# ---------------------------------------------------------------------------- deduper


@dataclass
class DedupResult:
    kept: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)  # dropped key -> the earlier key it nearly copies


class MinHashDeduper:
    """Near-duplicate filter over code: keeps the first document of every group of near-copies.

    ``num_perm`` permutations, ``shingle`` tokens per shingle, ``threshold`` on the exact Jaccard
    similarity of shingle sets, ``bands`` LSH bands of ``rows`` signature values (module
    docstring). A document is a copy when it nearly copies a kept document; with ``chain``, when
    it nearly copies any earlier document, kept or dropped, so a group linked by near-copy pairs
    keeps only its first document (what union-find dedup does). A band value shared by
    ``max_bucket`` stored documents is boilerplate and proposes no more candidates (0: no limit).
    Insertion order decides which copy is kept, so callers sort their items best first.
    ``workers`` > 1 tokenises in that many processes (the result is the same). A key already
    offered is ignored."""

    def __init__(self, num_perm: int = 256, shingle: int = 7, threshold: float = 0.8, seed: int = 1,
                 workers: int = 1, bands: int = 14, rows: int = 9, max_bucket: int = 128, chain: bool = False):
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        if not 1 <= shingle <= len(_MULT) or num_perm < 2:
            raise ValueError(f"need 1 <= shingle <= {len(_MULT)} and num_perm >= 2, got {shingle}, {num_perm}")
        if bands < 1 or rows < 1 or bands * rows > num_perm:
            raise ValueError(f"need bands * rows <= num_perm, got {bands} x {rows} for {num_perm}")
        if max_bucket == 1 or max_bucket < 0:
            raise ValueError(f"max_bucket must be 0 (no limit) or at least 2, got {max_bucket}")
        self.num_perm, self.shingle, self.threshold, self.seed = num_perm, shingle, threshold, seed
        self.workers, self.bands, self.rows, self.max_bucket, self.chain = workers, bands, rows, max_bucket, chain
        # exact checks for pairs whose estimate is at most ESTIMATE_SLACK standard errors below the threshold
        self.min_agree = (threshold - ESTIMATE_SLACK * math.sqrt(threshold * (1 - threshold) / num_perm)) * num_perm
        self._band_mult = _MULT[:rows]
        self._tables: list[dict] = [{} for _ in range(bands)]  # band hash -> stored number(s), () when full
        self._keys: list[str] = []  # stored number -> key
        self._sets: list[np.ndarray] = []  # stored number -> shingle set
        self._sigs = np.zeros((64, num_perm), np.uint32)  # stored number -> signature
        self._sizes = np.zeros(64, np.int64)  # stored number -> shingle set size
        self._kept: set[str] = set()
        self._seen: set[str] = set()
        self.pairs_checked = 0  # candidate pairs whose exact Jaccard was computed (for benchmarks)

    # -- signatures
    def signed_chunks(self, codes: Iterable[str], chunk: int = 512) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(signatures, shingle hashes, bounds) of ``chunk`` documents at a time, in order; tokens and
        shingles computed in ``workers`` processes, signatures here. Streams: memory holds a few
        chunks, not the whole input."""
        it = iter(codes)
        chunk = min(chunk, 1 << (64 - _HASH_BITS))

        def chunks():
            while True:
                part = [c for _, c in zip(range(chunk), it)]
                if not part:
                    return
                yield (part, self.shingle)

        if self.workers <= 1:
            sets = map(_shingle_chunk, chunks())
            for hashes, bounds in sets:
                yield _signatures(hashes, bounds, self.num_perm, self.seed), hashes, bounds
            return
        import multiprocessing as mp  # here: only the multi-worker path forks

        # fork is safe: the workers never call rensa (its thread pool does not survive a fork)
        with mp.get_context("fork").Pool(self.workers) as pool:
            for hashes, bounds in pool.imap(_shingle_chunk, chunks()):
                yield _signatures(hashes, bounds, self.num_perm, self.seed), hashes, bounds

    def signature_values(self, codes: Sequence[str]) -> np.ndarray:
        """Signatures of many documents as an (n, num_perm) uint32 array."""
        parts = [s for s, _, _ in self.signed_chunks(codes)]
        return np.concatenate(parts) if parts else np.zeros((0, self.num_perm), np.uint32)

    def similarity(self, a: str, b: str) -> float:
        """Estimated Jaccard similarity of two documents' shingle sets (share of equal signature values)."""
        s = _signatures(*_shingle_chunk(([a, b], self.shingle)), self.num_perm, self.seed)
        return float(np.mean(s[0] == s[1]))

    def exact_similarity(self, a: str, b: str) -> float:
        """Jaccard similarity of two documents' shingle sets (what decides a copy)."""
        hashes, bounds = shingle_sets([code_tokens(a), code_tokens(b)], self.shingle)
        return exact_jaccard(hashes[bounds[0]:bounds[1]], hashes[bounds[1]:bounds[2]])

    # -- index
    def _band_keys(self, sigs: np.ndarray) -> list[list[int]]:
        r = self.rows
        bands = sigs[:, :self.bands * r].reshape(len(sigs), self.bands, r).astype(np.uint64)
        return (bands * self._band_mult).sum(axis=2, dtype=np.uint64).tolist()

    def _offer(self, key: str, sig: np.ndarray, band_keys: list[int], shingle_set: np.ndarray) -> str | None:
        """Offer one document; returns the key of the earlier document it nearly copies (None: kept).

        Of the candidates whose exact Jaccard reaches the threshold, the one with the highest
        estimate is named (ties: the earliest)."""
        self._seen.add(key)
        copied = None
        cands: set[int] = set()
        for table, bk in zip(self._tables, band_keys):
            v = table.get(bk)
            if v is not None:
                if type(v) is int:
                    cands.add(v)
                else:
                    cands.update(v)
        if cands:
            idx = np.fromiter(cands, dtype=np.int64, count=len(cands))
            agree = np.count_nonzero(self._sigs[idx] == sig, axis=1)
            size = self._sizes[idx]
            # Jaccard <= smaller / larger set size: pairs of unequal sizes cannot reach the threshold
            close = (agree >= self.min_agree) & (size >= self.threshold * shingle_set.size) \
                & (shingle_set.size >= self.threshold * size)
            if close.any():
                idx, agree = idx[close], agree[close]
                order = np.lexsort((idx, -agree))
                idx = idx[order].tolist()
                self.pairs_checked += len(idx)
                sims = exact_jaccard_many(shingle_set, [self._sets[i] for i in idx])
                copied = next((self._keys[i] for i, j in zip(idx, sims.tolist()) if j >= self.threshold), None)
        if copied is None:
            self._kept.add(key)
        elif not self.chain:
            return copied
        pos = len(self._keys)
        self._keys.append(key)
        self._sets.append(shingle_set.copy())
        if pos >= len(self._sigs):
            self._sigs = np.concatenate([self._sigs, np.zeros_like(self._sigs)])
            self._sizes = np.concatenate([self._sizes, np.zeros_like(self._sizes)])
        self._sigs[pos] = sig
        self._sizes[pos] = shingle_set.size
        for table, bk in zip(self._tables, band_keys):
            v = table.get(bk)
            if v is None:
                table[bk] = pos
            elif v != ():
                if type(v) is int:
                    v = table[bk] = [v]
                v.append(pos)
                if len(v) == self.max_bucket:
                    table[bk] = ()  # a boilerplate band value: it proposes nothing from now on
        return copied

    def add(self, key: str, code: str) -> str | None:
        """Store ``key`` unless its code nearly copies a stored document; returns that document's key."""
        if key in self._seen:
            return None
        hashes, bounds = _shingle_chunk(([code], self.shingle))
        sigs = _signatures(hashes, bounds, self.num_perm, self.seed)
        return self._offer(key, sigs[0], self._band_keys(sigs)[0], hashes[bounds[0]:bounds[1]])

    def dedup(self, items: Iterable[tuple[str, str]], chunk: int = 512) -> DedupResult:
        """Keep the first document of each near-copy group among ``(key, code)`` items (in order).

        ``items`` may be a generator: documents are read, signed and indexed ``chunk`` at a time."""
        res = DedupResult()
        keys: list[str] = []

        def codes():
            for key, code in items:
                keys.append(key)
                yield code

        done = 0
        for sigs, hashes, bounds in self.signed_chunks(codes(), chunk):
            band_keys = self._band_keys(sigs)
            for i in range(len(sigs)):
                key = keys[done + i]
                if key in self._seen:
                    continue
                copied = self._offer(key, sigs[i], band_keys[i], hashes[bounds[i]:bounds[i + 1]])
                if copied is None:
                    res.kept.append(key)
                else:
                    res.dropped[key] = copied
            done += len(sigs)
            if done > 1 << 16:  # the keys list holds only chunks not yet indexed
                del keys[:done]
                done = 0
        return res

    def __len__(self) -> int:
        """Documents kept."""
        return len(self._kept)


def select_diverse(items: Sequence[tuple[str, str]], k: int, deduper: MinHashDeduper) -> tuple[list[str], dict[str, str]]:
    """Up to ``k`` keys from ``(key, code)`` items (best first) with no two near-copies.

    Uses ``deduper``'s settings with a fresh index, so copies are judged within this group only.
    Returns (kept keys, dropped key -> the earlier key it nearly copies). Items past k that are
    distinct are neither kept nor dropped as copies (they are over the per-group budget)."""
    fresh = MinHashDeduper(deduper.num_perm, deduper.shingle, deduper.threshold, deduper.seed, bands=deduper.bands,
                           rows=deduper.rows, max_bucket=deduper.max_bucket, chain=deduper.chain)
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
