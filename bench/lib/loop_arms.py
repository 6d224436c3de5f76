"""The loop benchmark's ablation arms (bench/bench_loop_gpu.py): each arm is what a round trains (loop.train) and
which RL stabiliser is off (train.prime_echo, train.retry, train.mirrorpop), every other one on; and the start an
arm shares with the first one (its evaluated model 0 and round-1 pool), so arms that differ only in how round 1
trains sample and verify once. Measurement harness only: the product's loop (orchestrator/loop.py) knows nothing of
arms. Imports the product (kernelmill, orchestrator)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from kernelmill.errors import InputError
from kernelmill.settings import Settings
from kernelmill.store import read_records, write_records
from orchestrator import ledger
from orchestrator.ledger import copy_sub_run
from orchestrator.loop import LOOP, _read_metrics

LOOP_ARMS: dict[str, dict[str, object]] = {
    "rft": {"loop.train": "rft"},
    "rl": {"loop.train": "rl"},
    "rl_no_prime_echo": {"loop.train": "rl", "train.prime_echo": False},
    "rl_no_retry": {"loop.train": "rl", "train.retry": False},
    "rl_no_mirrorpop": {"loop.train": "rl", "train.mirrorpop": False},
}


def share_start(src: Path, dst: Path) -> None:
    """Start the loop run ``dst`` from run ``src``'s evaluated model 0 and its round-1 pool (the tasks table,
    the sub-runs ``loop/eval-0`` and ``loop/round-1/pool`` with their records, noted as shared, and model 0's
    metrics line), so arms that differ only in how round 1 trains (RFT, RL, RL with a stabiliser off) sample
    and verify once. The caller promises the same tasks, model 0 and sampling settings; nothing here checks
    them. Copies nothing that ``dst`` already has."""
    s_loop, d_loop = src / LOOP, dst / LOOP
    subs = {"eval-0": ledger.EVAL_STEPS, "round-1/pool": ledger.POOL_STEPS}
    if not all(ledger.done(s_loop / sub, step) for sub, steps in subs.items() for step in steps):
        raise InputError(f"loop run {src}", "has no evaluated model 0 and round-1 pool to share")
    if not read_records(dst, "tasks"):
        write_records(dst, "tasks", read_records(src, "tasks"))
    for sub in subs:
        copy_sub_run(s_loop / sub, d_loop / sub, note=f"shared from {src}")
    if 0 not in _read_metrics(d_loop / "metrics.jsonl"):
        with open(d_loop / "metrics.jsonl", "a") as f:
            f.write(json.dumps(_read_metrics(s_loop / "metrics.jsonl")[0]) + "\n")


def with_arm(s: Settings, arm: str) -> Settings:
    """``s`` with the ablation arm ``arm`` applied (a tag after ``@`` ignored: ``rl_no_retry@b`` is the arm again under
    another name): loop.train and the RL stabiliser switches over what ``s`` holds; "": ``s`` unchanged.
    InputError naming the arm and the choices for an unknown one."""
    if not arm:
        return s
    base = arm.split("@", 1)[0]
    if base not in LOOP_ARMS:
        raise InputError("arm", f"unknown arm {base!r}; known: {', '.join(LOOP_ARMS)}")
    sets = LOOP_ARMS[base]
    loop = {k.split(".", 1)[1]: v for k, v in sets.items() if k.startswith("loop.")}
    train = {k.split(".", 1)[1]: v for k, v in sets.items() if k.startswith("train.")}
    # every stabiliser on unless the arm switches it off: arms differ from each other in one switch only
    train = {"prime_echo": True, "retry": True, "mirrorpop": True, **train}
    return dataclasses.replace(s, loop=dataclasses.replace(s.loop, **loop),
                               train=dataclasses.replace(s.train, **train))
