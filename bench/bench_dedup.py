"""Dedup throughput and quality: curation's MinHashDeduper, plain datasketch and rensa on the same corpus and tokens.

    python bench/bench_dedup.py [--n 100000] [--workers 2] [--methods kernelmill,datasketch,rensa,before]
    python bench/bench_dedup.py --n 1000000 --stream        # kernelmill only, corpus never held

Corpus: ``n`` synthetic candidate files (Python + a CUDA source string, like real candidates).
About 60% are originals: 1-3 kernels each, random compositions of kernel layouts (one thread per
element, grid-stride, float4-vectorised, per-row reduction) and 4-8-step expression chains; the
rest are planted copies of an earlier original with every user identifier renamed, the block size
changed, the layout reformatted, comments added and in half the cases one expression step
rewritten. Every method sees the documents in the same order and keeps the first of each
near-copy group, on the same tokens (``curation.tokens.code_tokens``) and the same ``--shingle``:

- kernelmill: ``curation.dedup.MinHashDeduper`` with its defaults (tokens and shingles in
  ``--workers`` processes, rensa signatures, LSH, exact Jaccard check of proposed pairs);
  kernelmill-chain: the same with ``chain=True`` (a copy of a dropped copy is dropped);
- datasketch: one ``datasketch.MinHash`` per document filled with ``update_batch`` (its vectorised
  path) from the shingles as byte strings (``curation.dedup.shingles``), ``MinHashLSH`` query, the
  first candidate whose estimated Jaccard reaches the threshold is the match, else insert; one
  process;
- rensa: ``RMinHashDeduplicator`` with its own defaults (8 bands) on the same byte-string shingles;
  one process;
- before: the deduper of ``--before-rev`` (rensa MinHash + 16-band LSH, estimate only, 5-token shingles).

Each method runs in its own forked process, so its CPU seconds (its process and the workers it
starts) and its peak RSS (the corpus included) are its own. Reported against the planted ground
truth: copy recall (planted copies dropped), originals dropped, and originals *wrongly* dropped:
the share of originals dropped times the share of a sample of them whose exact token-shingle
Jaccard with the document the method named as their match is below the threshold (random
originals from shared templates are often real near-copies after normalisation; dropping those is
right). Wall times depend on machine load: each row records the 1-minute load average when it started.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib.planted_corpus import iter_corpus, synthetic_corpus  # noqa: E402


def _shingled(docs, shingle):
    """Every document's shingles by the same code (curation.tokens + curation.dedup.shingles)."""
    from curation.dedup import shingles
    from curation.tokens import code_tokens

    for d in docs:
        yield shingles(code_tokens(d), shingle)


def datasketch_dedup(docs, num_perm: int, shingle: int, threshold: float) -> dict[int, int]:
    """Plain datasketch on the same tokens: one MinHash per document (update_batch), MinHashLSH
    query, the first candidate whose estimated Jaccard reaches the threshold is the original,
    else insert. One process."""
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    template = MinHash(num_perm=num_perm, seed=1)  # permutations drawn once, as a careful user does
    sigs, dropped = {}, {}
    for i, sh in enumerate(_shingled(docs, shingle)):
        m = MinHash(num_perm=num_perm, seed=1, permutations=template.permutations, scheme=template.scheme)
        m.update_batch(sh)
        hit = min((j for j in lsh.query(m) if m.jaccard(sigs[j]) >= threshold), default=None)
        if hit is None:
            lsh.insert(i, m)
            sigs[i] = m
        else:
            dropped[i] = hit
    return dropped


def rensa_dedup(docs, num_perm: int, shingle: int, threshold: float) -> dict[int, int]:
    """rensa's RMinHashDeduplicator with its own defaults (8 LSH bands at threshold 0.8) on the same
    shingles, one process; the kept key a copy matches is not reported (-1)."""
    from rensa import RMinHashDeduplicator

    d = RMinHashDeduplicator(threshold, num_perm, True, seed=1)
    dropped = {}
    batch = []

    def flush():
        for (i, _), ok in zip(batch, d.add_pairs(batch)):
            if not ok:
                dropped[int(i)] = -1
        batch.clear()

    for i, sh in enumerate(_shingled(docs, shingle)):
        batch.append((str(i), sh))
        if len(batch) >= 512:
            flush()
    flush()
    return dropped


def kernelmill_dedup(docs, num_perm, shingle, threshold, workers, module=None, chain=False) -> dict[int, int]:
    """curation's deduper with its defaults (``module``: another revision's curation/dedup.py, run
    with the given settings)."""
    if module is None:
        from curation.dedup import MinHashDeduper

        d = MinHashDeduper(threshold=threshold, shingle=shingle, workers=workers, chain=chain)
    else:
        d = module.MinHashDeduper(num_perm=num_perm, shingle=shingle, threshold=threshold, workers=workers)
    res = d.dedup((str(i), doc) for i, doc in enumerate(docs))
    return {int(k): int(v) for k, v in res.dropped.items()}


def quality(dropped: dict[int, int], origin: list[int], docs: list[str] | None, shingle: int, threshold: float,
            sample: int = 300) -> tuple[float, float, float | None]:
    """(copy recall, originals dropped, originals wrongly dropped: the share of originals dropped
    times the share of sampled dropped originals whose exact token-shingle Jaccard with the
    document the method named as their match is below the threshold; None without the documents
    or without a named match).

    Random originals can be real near-copies of each other after identifiers and literals are
    normalised, so "original dropped" alone overstates errors; the exact check says how many of
    those drops MinHash got wrong."""
    from curation.tokens import code_tokens

    copies = [i for i, o in enumerate(origin) if o != i]
    originals = [i for i, o in enumerate(origin) if o == i]
    recall = sum(i in dropped for i in copies) / max(1, len(copies))
    dropped_orig = [i for i in originals if i in dropped]
    if docs is None:
        return recall, len(dropped_orig) / max(1, len(originals)), None
    rng = random.Random(1)
    checked = rng.sample(dropped_orig, min(sample, len(dropped_orig)))

    def sh(x):
        t = code_tokens(x)
        return {tuple(t[j:j + shingle]) for j in range(max(1, len(t) - shingle + 1))}

    wrong = 0
    for i in checked:
        if dropped[i] < 0:
            return recall, len(dropped_orig) / max(1, len(originals)), None  # no match reported
        a, b = sh(docs[i]), sh(docs[dropped[i]])
        wrong += len(a & b) / len(a | b) < threshold
    od = len(dropped_orig) / max(1, len(originals))
    return recall, od, od * wrong / max(1, len(checked))


def copy_jaccard(docs: list[str], origin: list[int], shingle: int, sample: int = 1000) -> tuple[float, float]:
    """(1st percentile, median) exact shingle Jaccard of sampled planted copies with their original."""
    from curation.tokens import code_tokens

    def sh(x):
        t = code_tokens(x)
        return {tuple(t[j:j + shingle]) for j in range(max(1, len(t) - shingle + 1))}

    copies = [i for i, o in enumerate(origin) if o != i]
    js = sorted(len(sh(docs[i]) & sh(docs[origin[i]])) / len(sh(docs[i]) | sh(docs[origin[i]]))
                for i in random.Random(2).sample(copies, min(sample, len(copies))))
    return js[len(js) // 100], js[len(js) // 2]


def _rss_mb() -> tuple[float, float]:
    import resource

    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)


def _cpu_s() -> float:
    import resource

    return sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for f in ("ru_utime", "ru_stime"))


def _load_before_module(rev: str):
    import importlib.util
    import subprocess

    src = subprocess.run(["git", "show", f"{rev}:curation/dedup.py"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    path = Path("/tmp") / f"dedup_{rev}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("dedup_before", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["dedup_before"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _method(m: str, docs, args) -> tuple[str, str, int, dict[int, int]]:
    """(label, processes, num_perm, dropped) of one method run on ``docs``."""
    if m in ("kernelmill", "kernelmill-chain"):
        from curation.dedup import MinHashDeduper

        d = MinHashDeduper()
        label = (f"kernelmill MinHashDeduper (rensa signatures, {d.bands}x{d.rows} LSH, max_bucket {d.max_bucket}, "
                 f"exact check{', chain=True' if m == 'kernelmill-chain' else ''})")
        return label, f"{args.workers} workers + 1", d.num_perm, kernelmill_dedup(
            docs, 0, args.shingle, args.threshold, args.workers, chain=m == "kernelmill-chain")
    if m == "datasketch":
        return ("datasketch MinHash + MinHashLSH", "1", args.num_perm,
                datasketch_dedup(docs, args.num_perm, args.shingle, args.threshold))
    if m == "rensa":
        return ("rensa RMinHashDeduplicator (its default 8 bands)", "1", args.num_perm,
                rensa_dedup(docs, args.num_perm, args.shingle, args.threshold))
    if m == "before":
        mod = _load_before_module(args.before_rev)
        return (f"kernelmill before ({args.before_rev}: rensa, 16-band LSH, estimate only, 5-token shingles)",
                f"{args.workers} workers + 1", args.num_perm, kernelmill_dedup(docs, args.num_perm, 5, args.threshold,
                                                                              args.workers, module=mod))
    raise SystemExit(f"unknown method {m}")


def _run_in_child(m: str, docs, args) -> dict:
    """Run one method in a forked process: its wall and CPU seconds, peak RSS, result."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def child():
        load = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), _cpu_s()
        label, procs, num_perm, dropped = _method(m, docs, args)
        wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
        self_mb, child_mb = _rss_mb()
        send.send(dict(label=label, procs=procs, num_perm=num_perm, dropped=dropped, wall=wall, cpu=cpu,
                       rss=max(self_mb, child_mb), load=load, shingle=5 if m == "before" else args.shingle))
        send.close()

    proc = ctx.Process(target=child)
    proc.start()
    send.close()
    out = recv.recv()
    proc.join()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--num-perm", type=int, default=128, help="permutations of the datasketch, rensa and before rows "
                    "(kernelmill uses its default)")
    ap.add_argument("--shingle", type=int, default=7, help="tokens per shingle, every method")
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--methods", default="kernelmill,datasketch,rensa",
                    help="comma list of kernelmill, kernelmill-chain (chain=True), datasketch, rensa, before (the "
                    "deduper of --before-rev)")
    ap.add_argument("--before-rev", default="ec92c92", help="git revision whose curation/dedup.py is 'before'")
    ap.add_argument("--stream", action="store_true", help="kernelmill only: generate the corpus while "
                    "deduplicating, never holding it (the 1M-document run); no exact false-drop check")
    ap.add_argument("--chain", action="store_true", help="with --stream: the deduper with chain=True")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "curation_cpu.md"))
    args = ap.parse_args(argv)
    load0 = os.getloadavg()
    rows = []
    if args.stream:
        from curation.dedup import MinHashDeduper

        origin: list[int] = []

        def docs_iter():
            for d, o in iter_corpus(args.n):
                origin.append(o)
                yield d

        t0, c0 = time.perf_counter(), _cpu_s()
        dd = MinHashDeduper(threshold=args.threshold, shingle=args.shingle, workers=args.workers, chain=args.chain)
        res = dd.dedup((str(i), doc) for i, doc in enumerate(docs_iter()))
        dropped = {int(k): int(v) for k, v in res.dropped.items()}
        wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
        rows.append(dict(label=f"kernelmill MinHashDeduper ({dd.bands}x{dd.rows} LSH, max_bucket {dd.max_bucket}, "
                               f"exact check{', chain=True' if args.chain else ''}), corpus generated in the same process",
                         procs=f"{args.workers} workers + 1", num_perm=dd.num_perm, wall=wall, cpu=cpu,
                         rss=max(_rss_mb()), load=load0[0],
                         q=quality(dropped, origin, None, args.shingle, args.threshold)))
        mb, cj = None, None
    else:
        docs, origin = synthetic_corpus(args.n)
        mb = sum(len(d) for d in docs) / 1e6
        cj = copy_jaccard(docs, origin, args.shingle)
        for m in args.methods.split(","):
            r = _run_in_child(m, docs, args)
            r["q"] = quality(r.pop("dropped"), origin, docs, r["shingle"], args.threshold)  # its own shingles
            rows.append(r)
    n_copies = sum(1 for i, o in enumerate(origin) if o != i)
    fmt = lambda x: "—" if x is None else f"{x:.3f}"  # noqa: E731
    lines = [
        f"## Dedup: {args.n:,} synthetic kernels" + (f" ({mb:.1f} MB)" if mb else "") +
        f", {n_copies:,} planted copies, shingle {args.shingle} tokens, threshold {args.threshold}; every method on "
        "the same tokens (curation.tokens.code_tokens)",
        "",
        "| method | processes | num_perm | load at start | seconds | docs/s | CPU seconds | docs per CPU second | "
        "peak RSS MB | copy recall | originals dropped | originals wrongly dropped (exact Jaccard < threshold, sampled) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *[f"| {r['label']} | {r['procs']} | {r['num_perm']} | {r['load']:.1f} | {r['wall']:.1f} | {args.n / r['wall']:,.0f} "
          f"| {r['cpu']:.1f} | {args.n / r['cpu']:,.0f} | {r['rss']:,.0f} | {r['q'][0]:.4f} | {r['q'][1]:.4f} | {fmt(r['q'][2])} |"
          for r in rows],
        "",
    ]
    base = next((r for r in rows if r["label"].startswith("datasketch")), None)
    if base and len(rows) > 1:
        lines.append("vs datasketch (docs/s; docs per CPU second): " + "; ".join(
            f"{r['label'].split(' (')[0]} **{base['wall'] / r['wall']:.2f}x**; {base['cpu'] / r['cpu']:.2f}x"
            for r in rows if r is not base))
    if cj:
        lines.append(f"planted copies' exact shingle Jaccard with their original: 1st percentile {cj[0]:.3f}, "
                     f"median {cj[1]:.3f}")
    lines.append(f"load average at start {load0[0]:.1f} / {load0[1]:.1f} / {load0[2]:.1f} (1/5/15 min), at the end "
                 f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())}; machine: "
                 f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        old = out.read_text() if out.is_file() else ""
        marker = f"<!-- dedup {args.n}{' stream' if args.stream else ''}{' chain' if args.chain else ''} -->"
        end = marker.replace("<!-- ", "<!-- /")
        if marker in old:
            head, rest = old.split(marker, 1)
            rest = rest.split(end, 1)[-1]
        else:
            head, rest = "", old
        out.write_text(head + f"{marker}\n{text}\n{end}\n" + rest.lstrip("\n"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
