"""Near-duplicate detection on kernel code: normalised tokens, k-token shingles, rensa MinHash + LSH.

Pipeline for one document (``MinHashDeduper``):

1. tokens (curation/tokens.py): comments, docstrings and layout gone, user identifiers ``ID``,
   literals ``NUM``/``STR``, kernel and torch API names kept, the C++/CUDA inside load_inline
   strings lexed too;
2. shingles: every run of ``shingle`` consecutive tokens (one shingle when the document is
   shorter), each as a 4-byte-per-token byte string (tokens numbered by CRC-32 of their text);
3. a rensa ``RMinHash`` signature (``num_perm`` values) of the shingle set;
4. rensa's ``RMinHashDeduplicator``: its LSH index (``bands`` bands) proposes stored documents,
   and a document is a copy when a proposed one has estimated Jaccard similarity >= ``threshold``
   with it. Copies are not stored, so every group keeps its first document.

Steps 1-3 run in ``workers`` processes; step 4 runs in the calling process, in document order,
so the result does not depend on ``workers``. Why rensa: on the same tokens it deduplicates 100,000
kernels several times faster than datasketch's MinHash + MinHashLSH, with the same recall
(bench/bench_dedup.py, bench/results/curation_cpu.md).

LSH bands: with 128 permutations, 16 bands of 8 rows propose a pair at true Jaccard 0.8 with
probability 0.95 and at 0.9 with probability 0.9999 (rensa's own default for 0.8, 8 bands of 16,
gives 0.20 and 0.81: it misses copies). More bands propose more unrelated pairs (each costs one
signature comparison, in Rust).

Known limit: two files built from the same template around a different one-line expression (a
ReLU and a tanh kernel with identical launch code) share most shingles and can score above 0.8;
the corpora therefore deduplicate within one task, where such pairs do not arise.

Not guaranteed: two programs with the same algorithm but different structure (a loop unrolled by
hand, a grid-stride loop vs one thread per element) are *distinct* here, on purpose: those are
the distinct implementations diversity selection wants to keep. MinHash is an estimate: pairs
near the threshold can fall either way (the standard error of the estimate is about
sqrt(J (1 - J) / num_perm), 0.035 at J = 0.8 with 128 permutations).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import numpy as np

from curation.tokens import API_MEMBERS, API_NAMES, code_tokens, looks_like_native_source, native_tokens  # noqa: F401

_TOKEN_IDS: dict[str, int] = {}


def _token_id(tok: str) -> int:
    v = _TOKEN_IDS.get(tok)
    if v is None:
        if len(_TOKEN_IDS) > 500_000:  # the vocabulary is small, but stay bounded on odd input
            _TOKEN_IDS.clear()
        v = _TOKEN_IDS[tok] = zlib.crc32(tok.encode("utf-8"))
    return v


def shingles(tokens: Sequence[str], k: int) -> list[bytes]:
    """The document's k-token shingles as byte strings (4 bytes per token: its CRC-32).

    A document shorter than k tokens is one shingle; an empty one is one empty shingle. Stable
    across processes and runs (no salted hashing)."""
    get = _TOKEN_IDS.get
    ids = np.array([get(t) or _token_id(t) for t in tokens], dtype="<u4")
    if ids.size <= k:
        return [ids.tobytes()]
    windows = np.lib.stride_tricks.sliding_window_view(ids, k)
    return np.ascontiguousarray(windows).view(np.dtype((np.void, 4 * k))).ravel().tolist()


def _signature_chunk(args) -> list:
    """RMinHash signatures of a list of documents (runs in a worker process)."""
    from rensa import RMinHash

    codes, num_perm, shingle, seed = args
    out = []
    for c in codes:
        # one document at a time: rensa's batch constructors run on its Rust thread pool, which a
        # forked worker inherits broken (it hangs); the per-document path is single-threaded
        m = RMinHash(num_perm, seed)
        m.update(shingles(code_tokens(c), shingle))
        out.append(m)
    return out


# ---------------------------------------------------------------------------- deduper


@dataclass
class DedupResult:
    kept: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)  # dropped key -> the kept key it copies


class MinHashDeduper:
    """Near-duplicate filter over code: keeps the first of every group of near-copies.

    ``num_perm`` permutations, ``shingle`` tokens per shingle, ``threshold`` on estimated Jaccard
    similarity of shingle sets, ``bands`` LSH bands (must divide num_perm). Insertion order
    decides which copy is kept, so callers sort their items best first. ``workers`` > 1 computes
    signatures in that many processes (the result is the same). A key already stored is ignored."""

    def __init__(self, num_perm: int = 128, shingle: int = 5, threshold: float = 0.8, seed: int = 1,
                 workers: int = 1, bands: int = 16):
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        if shingle < 1 or num_perm < 2:
            raise ValueError(f"need shingle >= 1 and num_perm >= 2, got {shingle}, {num_perm}")
        if bands < 1 or num_perm % bands:
            raise ValueError(f"bands must divide num_perm, got {bands} bands for {num_perm}")
        from rensa import RMinHashDeduplicator

        self.num_perm, self.shingle, self.threshold, self.seed = num_perm, shingle, threshold, seed
        self.workers, self.bands = workers, bands
        self._index = RMinHashDeduplicator(threshold, num_perm, True, num_bands=bands, seed=seed)
        self._order: dict[str, int] = {}  # stored key -> its document's number
        self._offered = 0  # documents offered so far (stored or not): the next document's number
        self._sigs: dict[str, object] = {}  # stored key -> signature (to name the closest original)

    # -- signatures
    def signatures(self, codes: Iterable[str], chunk: int = 512) -> Iterator:
        """RMinHash signatures of many documents, in order, computed ``chunk`` at a time in
        ``workers`` processes. Streams: memory holds a few chunks, not the whole input."""
        it = iter(codes)

        def chunks():
            while True:
                part = [c for _, c in zip(range(chunk), it)]
                if not part:
                    return
                yield (part, self.num_perm, self.shingle, self.seed)

        if self.workers <= 1:
            for args in chunks():
                yield from _signature_chunk(args)
            return
        import multiprocessing as mp

        with mp.get_context("fork").Pool(self.workers) as pool:
            for sigs in pool.imap(_signature_chunk, chunks()):
                yield from sigs

    def signature(self, code: str):
        """The rensa RMinHash of one document."""
        return _signature_chunk(([code], self.num_perm, self.shingle, self.seed))[0]

    def signature_values(self, codes: Sequence[str]) -> np.ndarray:
        """Signatures of many documents as an (n, num_perm) uint32 array."""
        return np.array([s.digest() for s in self.signatures(codes)], dtype=np.uint32).reshape(-1, self.num_perm)

    def similarity(self, a: str, b: str) -> float:
        """Estimated Jaccard similarity of two documents' shingle sets."""
        return self.signature(a).jaccard(self.signature(b))

    # -- index
    def _copied(self, sigs: list, positions: list[int]) -> list[str]:
        """For each signature (a confirmed copy), the stored key it is most similar to among those
        stored before it (``positions``: the signatures' document numbers); ties: the earliest."""
        out = []
        for sig, keys, pos in zip(sigs, self._index.get_duplicate_sets(sigs), positions):
            earlier = [k for k in keys if self._order[k] < pos] or keys
            out.append(max(earlier, key=lambda k: (sig.jaccard(self._sigs[k]), -self._order[k])))
        return out

    def add_signature(self, key: str, sig) -> str | None:
        """Store ``key`` unless it nearly copies a stored document; returns that document's key."""
        if key in self._order:
            return None
        pos = self._offered
        self._offered += 1
        if self._index.add(key, sig):
            self._order[key] = pos
            self._sigs[key] = sig
            return None
        return self._copied([sig], [pos])[0]

    def add(self, key: str, code: str) -> str | None:
        return self.add_signature(key, self.signature(code))

    def dedup(self, items: Iterable[tuple[str, str]], chunk: int = 512) -> DedupResult:
        """Keep the first document of each near-copy group among ``(key, code)`` items (in order).

        ``items`` may be a generator: documents are read, signed and indexed ``chunk`` at a time."""
        res = DedupResult()
        keys: list[str] = []

        def codes():
            for key, code in items:
                keys.append(key)
                yield code

        batch: list = []
        for sig in self.signatures(codes(), chunk):
            batch.append(sig)
            if len(batch) >= chunk:
                self._add_batch(keys[:len(batch)], batch, res)
                del keys[:len(batch)]
                batch = []
        if batch:
            self._add_batch(keys[:len(batch)], batch, res)
        return res

    def _add_batch(self, keys: list[str], sigs: list, res: DedupResult) -> None:
        fresh = [(k, s) for k, s in zip(keys, sigs) if k not in self._order]
        added = self._index.add_pairs(fresh)
        dropped, positions = [], []
        pos = self._offered
        self._offered += len(fresh)
        for (key, sig), ok in zip(fresh, added):
            if ok:
                self._order[key] = pos
                self._sigs[key] = sig
                res.kept.append(key)
            else:
                dropped.append((key, sig))
                positions.append(pos)
            pos += 1
        if dropped:
            for (key, _), copied in zip(dropped, self._copied([s for _, s in dropped], positions)):
                res.dropped[key] = copied

    def __len__(self) -> int:
        return len(self._order)


def select_diverse(items: Sequence[tuple[str, str]], k: int, deduper: MinHashDeduper) -> tuple[list[str], dict[str, str]]:
    """Up to ``k`` keys from ``(key, code)`` items (best first) with no two near-copies.

    Uses ``deduper``'s settings with a fresh index, so copies are judged within this group only.
    Returns (kept keys, dropped key -> the kept key it copies). Items past k that are distinct are
    neither kept nor dropped as copies (they are over the per-group budget)."""
    fresh = MinHashDeduper(deduper.num_perm, deduper.shingle, deduper.threshold, deduper.seed, bands=deduper.bands)
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
