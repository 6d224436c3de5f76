"""Model export: a policy in bf16, carried as files of bounded size, and back as an fp32 model directory.

    round_to_bf16(model)                 weights rounded to bf16 values in place (the model stays fp32)
    pack_policy(model, tok, dest)        bf16 safetensors + tokenizer, tarred, cut into ``policy.tar.NN`` parts
    unpack_policy(src, dest)             those parts -> an fp32 model directory with the same values
    export_bf16(ckpt_or_out, dest)       a checkpoint (or a training output's latest) as a bf16 model directory
    fp32_copy(src, dest)                 a bf16 model directory as an fp32 one (skipped when dest has a model)
    write_parts(blob, dest, prefix)      any bytes as ``<prefix>.NN`` parts
    save_rl_arm(dest, arm, out)          an RL run's newest checkpoint, bf16 parts + trainer state less the optimizer
    resume_rl_arm(src, arm, out)         those back as ``out/ckpt-<step>`` that train_rl resumes from; the step
    pack_loop_state(work, dest)          a loop benchmark's work directory (no checkpoints) as ``loop_state.tar.NN``
    unpack_loop_state(src, work)         those parts back; phases whose model was not carried are run again

Why parts: a machine that hands back files of at most 16 MiB each (a GPU box's output folder) carries a 15M-parameter
model as two parts. Round first (round_to_bf16), then a run that goes on in fp32 and a later one that unpacks the
bf16 parts start from exactly the same weights. Every model directory written has the serving files
(train.model.write_serving_files: chat template, tokenizer). Not kept: optimizer state.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
from pathlib import Path

from kernelmill.errors import InputError

PART_BYTES = 15_000_000  # under 16 MiB per file
ARM_STATE = "arm_state.pt"  # save_rl_arm: an arm's step, retry buffer, prompt cursor and RNG


def round_to_bf16(model) -> None:
    """Round the weights to bf16 values in place (the model stays fp32): the policy a run goes on with is
    then exactly the one a later call unpacks from the bf16 copy of pack_policy."""
    import torch

    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())


def write_parts(blob: bytes, dest: Path, prefix: str) -> list[Path]:
    """``blob`` as ``<prefix>.NN`` files of PART_BYTES under ``dest``, earlier parts of that prefix removed first."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob(f"{prefix}.*"):
        old.unlink()
    parts = []
    for n, i in enumerate(range(0, len(blob), PART_BYTES)):
        parts.append(dest / f"{prefix}.{n:02d}")
        parts[-1].write_bytes(blob[i: i + PART_BYTES])
    return parts


def pack_policy(model, tok, dest: Path) -> list[Path]:
    """``model`` (rounded by round_to_bf16 first) as bf16 safetensors with its tokenizer, tarred and cut into
    ``policy.tar.NN`` parts under ``dest``; the caller's model is left in fp32."""
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


def unpack_policy(src: Path, dest: Path) -> Path:
    """pack_policy's parts under ``src`` as an fp32 model directory at ``dest`` (the same values); returns ``dest``."""
    from train.model import load_pretrained, write_serving_files

    parts = sorted(Path(src).glob("policy.tar.*"))
    if not parts:
        raise InputError(str(src), "no policy.tar.* parts (written by pack_policy)")
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts))) as tar:
            tar.extractall(tmp, filter="data")
        model, tok = load_pretrained(Path(tmp) / "policy")
        model.float().save_pretrained(str(dest))
        write_serving_files(dest, tok)
    return dest


def export_bf16(ckpt_or_out: Path, dest: Path) -> Path:
    """The checkpoint ``ckpt_or_out`` (a model directory, or a training output: its latest checkpoint) as a bf16
    model directory at ``dest``; returns ``dest``."""
    import torch

    from train.model import load_pretrained, resolve_model_dir, write_serving_files

    model, tok = load_pretrained(resolve_model_dir(ckpt_or_out))
    model.to(torch.bfloat16).save_pretrained(str(dest))
    write_serving_files(dest, tok)
    return dest


def fp32_copy(src: Path, dest: Path) -> Path:
    """The model directory ``src`` (e.g. export_bf16's) as an fp32 model directory at ``dest`` with the same values,
    written once (a ``dest`` that already holds a model is kept); returns ``dest``."""
    from train.model import load_pretrained, write_serving_files

    if not (dest / "config.json").is_file():
        model, tok = load_pretrained(src)
        model.float().save_pretrained(str(dest))
        write_serving_files(dest, tok)
    return dest


def _left_behind(name: str) -> bool:
    """What the loop state leaves behind: checkpoints (the RL and RFT outputs; an arm's evaluation is what counts),
    the fp32 m0 (rebuilt from m0_bf16), the SFT output and its training corpus (rebuilt or not needed)."""
    parts = Path(name).parts
    return (any(p.startswith(("ckpt-", ".tmp-ckpt-")) for p in parts) or parts[:1] in (("m0",), ("sft",), ("corpus",))
            or name.endswith(".pyc"))


def pack_loop_state(work: Path, dest: Path) -> list[Path]:
    """``work`` (less :func:`_left_behind`) as ``loop_state.tar.NN`` parts of PART_BYTES under ``dest``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=3) as tar:
        for p in sorted(work.rglob("*")):
            rel = p.relative_to(work).as_posix()
            if p.is_file() and not _left_behind(rel):
                tar.add(str(p), arcname=rel, recursive=False)
    return write_parts(buf.getvalue(), dest, "loop_state.tar")


def unpack_loop_state(src: Path, work: Path) -> None:
    """The parts of :func:`pack_loop_state` under ``src`` into ``work``. A loop round's phase whose model (a
    checkpoint, not carried) is gone runs again: its record names that model, and the loop's runner counts a
    step whose model is gone as not done."""
    parts = sorted(Path(src).glob("loop_state.tar.*"))
    if not parts:
        raise InputError(str(src), "no loop_state.tar.* parts (written by pack_loop_state)")
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts)), mode="r:gz") as tar:
        tar.extractall(work, filter="data")


def save_rl_arm(dest: Path, arm: str, out: Path) -> None:
    """The newest checkpoint of the RL run ``out`` for a later device call: its weights rounded to bf16 (pack_policy
    parts) and the trainer state train_rl resumes from, less the optimizer (AdamW's moments are twice the weights:
    over what a device call carries back)."""
    import torch

    from train.model import latest_checkpoint, load_pretrained, load_trainer_state

    ck = latest_checkpoint(out)
    model, tok = load_pretrained(ck)
    round_to_bf16(model)
    pack_policy(model, tok, dest)
    st = load_trainer_state(ck)
    torch.save({"arm": arm, "stage": "rl", "step": st["step"], "buffer": st["buffer"], "cursor": st["cursor"],
                "rng": st["rng"]}, dest / ARM_STATE)


def resume_rl_arm(src: Path, arm: str, out: Path) -> int:
    """save_rl_arm's files under ``src`` laid out as ``out/ckpt-<step>`` (train_rl resumes from it, AdamW fresh);
    returns the step. Raises InputError when they were saved for another arm."""
    import torch

    from train.model import STATE_FILE as CKPT_STATE

    st = torch.load(Path(src) / ARM_STATE, map_location="cpu", weights_only=False)
    if st["arm"] != arm:
        raise InputError(str(src), f"saved for arm {st['arm']!r}, but the first arm here is {arm!r}")
    shutil.rmtree(out, ignore_errors=True)
    ck = out / f"ckpt-{int(st['step']):07d}"
    unpack_policy(src, ck)
    torch.save(st, ck / CKPT_STATE)
    return int(st["step"])
