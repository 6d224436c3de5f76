"""Where a batch's builds went, read off its build root after the batch: for every build (a key directory of
verifier/build/result.py), the variant that produced the module (bare, slim, light, full; "failed" when none did),
the fast variants that failed before it (every fast variant tried leaves ``<variant>.log``), its CPU and wall seconds (``result.json``),
and whether the object cache supplied objects. The throughput benchmark (bench/bench_verifier.py --batch real)
records it per batch, so a compile-bound figure says which variant to cut next.

    python3 -m bench.lib.build_breakdown BUILD_ROOT   # prints the table of one build root
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

FAST_VARIANTS = ("bare", "slim", "light")


@dataclass
class BuildRow:
    key: str
    variant: str  # the variant that produced the module, or "failed"
    failed_first: list = field(default_factory=list)  # fast variants tried and failed before it, in order
    cpu_s: float = 0.0
    seconds: float = 0.0
    objects_reused: int = 0
    binding: str = ""  # the binding file's form in the build that produced the module: boxed, canonical, "" as written


def _binding_form(variant_dir: Path) -> str:
    try:
        return str(json.loads((variant_dir / "compile.json").read_text()).get("binding") or "")
    except (OSError, ValueError):
        return ""


def read_builds(build_root: str | Path) -> list[BuildRow]:
    """One row per finished build under ``build_root`` (a build still running at a cut has no result.json and is
    left out); the object cache's and the precompiled header's directories are not builds."""
    rows = []
    root = Path(build_root)
    for res in sorted(root.glob("*/result.json")) if root.is_dir() else []:
        try:
            d = json.loads(res.read_text())
        except (OSError, ValueError):
            continue
        kd, variant = res.parent, d.get("variant") or ("failed" if not d.get("ok") else "?")
        # every fast variant tried writes its log, the one that built the module too
        rows.append(BuildRow(key=kd.name, variant=variant,
                             failed_first=[v for v in FAST_VARIANTS if v != variant and (kd / f"{v}.log").is_file()],
                             cpu_s=float(d.get("cpu_s") or 0.0), seconds=float(d.get("seconds") or 0.0),
                             objects_reused=int(d.get("objects_reused") or 0),
                             binding=_binding_form(kd / variant)))
    return rows


def summarize(rows: list[BuildRow]) -> list[dict]:
    """Per final variant: builds, how many paid a failed fast variant first, median and total CPU and wall seconds."""
    out = []
    for variant in sorted({r.variant for r in rows}, key=lambda v: (v not in FAST_VARIANTS + ("full",), v)):
        rs = [r for r in rows if r.variant == variant]
        out.append({"variant": variant, "builds": len(rs), "after_failed": sum(bool(r.failed_first) for r in rs),
                    "failed_variants": sorted({v for r in rs for v in r.failed_first}),
                    "cpu_median": statistics.median(r.cpu_s for r in rs), "cpu_total": sum(r.cpu_s for r in rs),
                    "wall_median": statistics.median(r.seconds for r in rs),
                    "objects_reused": sum(r.objects_reused for r in rs),
                    "binding": {f or "as written": sum(r.binding == f for r in rs) for f in sorted({r.binding for r in rs})}})
    return out


def breakdown(build_root: str | Path) -> dict:
    """What a batch record keeps: the rows and their summary."""
    rows = read_builds(build_root)
    return {"rows": [asdict(r) for r in rows], "summary": summarize(rows)}


def table(summary: list[dict]) -> list[str]:
    """Markdown lines of ``summarize``'s answer."""
    lines = ["| module built by | builds | after a failed fast variant (which) | CPU s median | CPU s total | "
             "wall s median | objects from the cache | binding file |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in summary:
        lines.append(f"| {s['variant']} | {s['builds']} | {s['after_failed']} ({', '.join(s['failed_variants']) or '-'})"
                     f" | {s['cpu_median']:.1f} | {s['cpu_total']:.0f} | {s['wall_median']:.1f} | {s['objects_reused']} | "
                     + (", ".join(f"{k} {v}" for k, v in s.get("binding", {}).items()) or "-") + " |")
    return lines


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 -m bench.lib.build_breakdown BUILD_ROOT")
    print("\n".join(table(summarize(read_builds(sys.argv[1])))))
