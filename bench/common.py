"""What the benchmarks share: print a result table and keep it under bench/results (or --out)."""

from __future__ import annotations

import re
from pathlib import Path


def emit(text: str, out_dir: str, filename: str) -> None:
    """Print ``text``; when ``out_dir`` is given, also write it there as ``filename``."""
    print(text, flush=True)
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / filename).write_text(text)


def device_name() -> str:
    """The first GPU's name, or "cpu" without one (torch imported here: the CPU-side commands do not need it)."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def default_results(prefix: str) -> str:
    """bench/results/<prefix>_<device tag>.md: h100 / h200, or the device's name in word characters."""
    dev = device_name().lower()
    tag = "h100" if "h100" in dev else "h200" if "h200" in dev else re.sub(r"\W+", "_", dev)
    return str(Path(__file__).resolve().parent / "results" / f"{prefix}_{tag}.md")


FAMILIES_FILE = "families.json"  # task_id -> op combination (and tier) of a procedural corpus


def write_family_corpus(out: Path, tables: dict[str, list], fams: dict, n_tasks: int) -> int:
    """A procedural benchmark corpus at ``out``: each table's records (kernelmill.store), replacing older
    parquet files, and ``families.json``; returns its size in bytes. Two programs with one task_id stop it."""
    import json

    from kernelmill import store

    if len(fams) != n_tasks:
        raise SystemExit(f"make-corpus: {n_tasks - len(fams)} task programs share a task_id")
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*/*.parquet"):
        old.unlink()
    for table, records in tables.items():
        store.write_records(out, table, records)
    (out / FAMILIES_FILE).write_text(json.dumps(fams, sort_keys=True, indent=0))
    return sum(p.stat().st_size for p in out.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------- a policy carried between device calls

PART_BYTES = 15_000_000  # under the 16 MiB per file that the device tool brings back from $OUT


def round_to_bf16(model) -> None:
    """Round the weights to bf16 values in place (the model stays fp32): the policy a run goes on with is
    then exactly the one a later call unpacks from the bf16 copy of pack_policy."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())


def pack_policy(model, tok, dest: Path) -> list[Path]:
    """``model`` (rounded by round_to_bf16 first) as bf16 safetensors with its tokenizer, tarred and cut into
    ``policy.tar.NN`` parts of PART_BYTES under ``dest``: a 15M-parameter model is two files."""
    import io
    import tarfile
    import tempfile

    import torch

    from train.model import write_serving_files

    buf = io.BytesIO()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "policy"
        model.to(torch.bfloat16).save_pretrained(str(d))
        model.float()
        write_serving_files(d, tok)
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(str(d), arcname="policy")
    return write_parts(buf.getvalue(), dest, "policy.tar")


def write_parts(blob: bytes, dest: Path, prefix: str) -> list[Path]:
    """``blob`` as ``<prefix>.NN`` files of PART_BYTES under ``dest`` (what the device tool carries back), earlier
    parts of that prefix removed first."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob(f"{prefix}.*"):
        old.unlink()
    parts = []
    for n, i in enumerate(range(0, len(blob), PART_BYTES)):
        parts.append(dest / f"{prefix}.{n:02d}")
        parts[-1].write_bytes(blob[i: i + PART_BYTES])
    return parts


def unpack_policy(src: Path, dest: Path) -> Path:
    """pack_policy's parts under ``src`` as an fp32 model directory at ``dest`` (the same values)."""
    import io
    import tarfile
    import tempfile

    from train.model import load_pretrained, write_serving_files

    parts = sorted(Path(src).glob("policy.tar.*"))
    if not parts:
        raise SystemExit(f"{src}: no policy.tar.* parts (written by pack_policy)")
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts))) as tar:
            tar.extractall(tmp, filter="data")
        model, tok = load_pretrained(Path(tmp) / "policy")
        model.float().save_pretrained(str(dest))
        write_serving_files(dest, tok)
    return dest
