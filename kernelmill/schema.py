"""The single source of truth for every kernelmill record and its Arrow schema.

Records are plain dataclasses built from the standard library only, so the verifier (which must run
on a GPU box with nothing but torch) can import them. The Arrow schema of each record is derived
from its type annotations by :func:`arrow_schema`; pyarrow is imported lazily there.

Type mapping (annotation -> Arrow):
    str -> string, int -> int64, float -> float64, bool -> bool_,
    list[X] -> list<X>, a nested record -> struct, Optional[X] -> nullable X,
    dict -> string holding canonical JSON (free-form fields such as ``annotations``).

Every record has an ``id_field``; rows are keyed by that content hash, which is what makes writes
idempotent (see kernelmill.store).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import json
import typing
from dataclasses import dataclass, field
from typing import Any, Optional

# ---------------------------------------------------------------------------- hashing helpers


def content_hash(*parts: str, n: int = 16) -> str:
    """Stable hex digest of the given strings (order matters)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:n]


def normalise_source(code: str) -> str:
    """Source with comments, blank lines and formatting removed (via ``ast.unparse``).

    Two programs that differ only in layout or comments normalise to the same string. Code that
    does not parse is returned stripped, unchanged otherwise."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code.strip()
    # drop docstrings: they don't change what a program computes
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def task_id_for(reference_code: str) -> str:
    """A task's id: the content hash of its normalised reference program."""
    return "t" + content_hash(normalise_source(reference_code))


# ---------------------------------------------------------------------------- records


@dataclass
class TensorSpec:
    name: str
    shape: list[int]
    dtype: str


@dataclass
class Origin:
    """Where a task came from. Unused fields stay empty strings."""
    repo: str = ""
    path: str = ""
    commit: str = ""
    license: str = ""
    class_name: str = ""
    seed: str = ""  # nnsmith seed or generator settings


@dataclass
class OpCount:
    op: str
    count: int


@dataclass
class Task:
    task_id: str
    name: str
    source: str  # github, nnsmith, kernelbench, teacher, seed
    level: int
    reference_code: str
    origin: Origin = field(default_factory=Origin)
    input_specs: list[TensorSpec] = field(default_factory=list)
    output_specs: list[TensorSpec] = field(default_factory=list)
    init_inputs: str = "[]"  # repr of get_init_inputs() when it is plain data, for prompts
    op_histogram: list[OpCount] = field(default_factory=list)
    flops: int = 0
    bytes_moved: int = 0
    floor_time_us: float = 0.0  # roofline floor on the device spec named in annotations
    difficulty: float = 0.0  # curriculum order key (level and size); lower is easier
    annotations: dict = field(default_factory=dict)  # per-op shapes, tolerances, device spec, reasoning

    id_field: typing.ClassVar[str] = "task_id"

    @classmethod
    def from_code(cls, reference_code: str, *, name: str, source: str, level: int = 0,
                  origin: Origin | None = None, **kw: Any) -> "Task":
        return cls(task_id=task_id_for(reference_code), name=name, source=source, level=level,
                   reference_code=reference_code, origin=origin or Origin(), **kw)


@dataclass
class Candidate:
    candidate_id: str
    task_id: str
    backend: str  # cuda, cpu (musa planned)
    generator: str
    code: str
    turn: int = 0
    parent_id: Optional[str] = None
    dialogue_id: str = ""
    prompt: str = ""
    response: str = ""  # the raw model response the code was extracted from
    reasoning: str = ""
    injected_bug: str = ""  # teacher only: the bug it planted on purpose ("" for none)

    id_field: typing.ClassVar[str] = "candidate_id"

    @staticmethod
    def make_id(task_id: str, backend: str, code: str, parent_id: str | None = None) -> str:
        return "c" + content_hash(task_id, backend, code, parent_id or "")


@dataclass
class Verdict:
    candidate_id: str
    task_id: str = ""
    backend: str = ""
    # the verifier stage that decided the verdict, in order: extract, static, compile, correctness (a crash,
    # timeout or cheat before the trials were over, a wrong output), runtime, timing (a crash or timeout
    # after the trials, the timed outputs; every pass); "none" only on a verdict no verifier wrote
    # (verifier/engine.py says what each stage covers)
    stage_reached: str = "none"
    # short outcome code: the candidate's (pass, extract_error, illegal, compile_error, wrong, crash, timeout,
    # cheat), the verifier's own (verifier_error) or the task's (task_error: its reference output does not
    # depend on its inputs); the last two are never rewarded, never in a corpus or a pass rate (NOT_JUDGED)
    status: str = ""
    compiled: bool = False
    correct: bool = False
    cheats: list[str] = field(default_factory=list)  # cheat codes: verifier/cheats.py, docs/ANTI_CHEAT.md
    fallback_ops: list[str] = field(default_factory=list)  # forbidden torch/aten ops found
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None
    trials: int = 0
    runtime_us: Optional[float] = None
    eager_us: Optional[float] = None
    compile_us: Optional[float] = None  # torch.compile of the reference
    speedup_eager: Optional[float] = None
    speedup_compile: Optional[float] = None
    # the 95% interval of speedup_eager: a percentile bootstrap over the harness's brackets of the candidate and of
    # the eager reference (verifier/execute/brackets.py ``interval``); None where either had fewer than two brackets
    speedup_lo: Optional[float] = None
    speedup_hi: Optional[float] = None
    launch_us: Optional[float] = None  # launch-inclusive: host call start to device idle, one call at a time
    eager_launch_us: Optional[float] = None
    own_kernel_share: Optional[float] = None  # cuda: share of forward device time in the candidate's own kernels
    foreign_kernels: list[str] = field(default_factory=list)  # cuda: the largest other kernels (family: name)
    # what each legality policy says of this candidate (verify.legality picks the one ``status`` follows):
    # strict = no torch compute in forward; partial = torch compute allowed beside own kernels doing work.
    # None where the candidate stopped before the question could be answered (extraction, compile, a crash).
    pass_strict: Optional[bool] = None
    pass_partial: Optional[bool] = None
    reward: float = 0.0
    feedback: str = ""
    compile_log: str = ""
    device: str = ""
    versions: dict = field(default_factory=dict)
    stage_seconds: dict = field(default_factory=dict)

    id_field: typing.ClassVar[str] = "candidate_id"

    @property
    def judged(self) -> bool:
        """Whether the verdict says something about the candidate (not a verifier or task fault)."""
        return self.status not in NOT_JUDGED


# statuses that are no sample of the candidate: no reward, no corpus row, no pass rate; counted apart
NOT_JUDGED = ("verifier_error", "task_error")


@dataclass
class Message:
    role: str
    content: str


@dataclass
class TurnVerdict:
    candidate_id: str
    stage_reached: str
    status: str
    correct: bool
    reward: float
    speedup_eager: Optional[float] = None


@dataclass
class Dialogue:
    dialogue_id: str
    task_id: str
    backend: str
    generator: str
    messages: list[Message] = field(default_factory=list)
    turn_verdicts: list[TurnVerdict] = field(default_factory=list)
    first_turn_reward: float = 0.0
    final_reward: float = 0.0
    num_turns: int = 0
    solved: bool = False

    id_field: typing.ClassVar[str] = "dialogue_id"


@dataclass
class SFTRow:
    id: str
    task_id: str
    messages: list[Message]
    source: str
    generator: str
    backend: str
    level: int
    num_turns: int
    final_reward: float
    speedup_eager: Optional[float] = None
    dialogue_id: str = ""

    id_field: typing.ClassVar[str] = "id"


@dataclass
class RFTRow:
    id: str
    task_id: str
    prompt: str
    completion: str
    candidate_id: str
    generator: str
    backend: str
    level: int
    correct: bool
    stage_reached: str
    reward: float
    speedup_eager: Optional[float] = None

    id_field: typing.ClassVar[str] = "id"


@dataclass
class RLRow:
    id: str
    task_id: str
    prompt: str
    reference_code: str
    test_spec: dict  # input specs, tolerances, trials: what the verifier needs to score a sample
    level: int
    difficulty: float
    pass_rate: float
    n_samples: int
    backend: str

    id_field: typing.ClassVar[str] = "id"


# Table name -> record type. The corpus directory and the DuckDB views use these names.
TABLES: dict[str, type] = {
    "tasks": Task,
    "candidates": Candidate,
    "verdicts": Verdict,
    "dialogues": Dialogue,
    "sft": SFTRow,
    "rft": RFTRow,
    "rl": RLRow,
}

# ---------------------------------------------------------------------------- Arrow mapping


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.lru_cache(maxsize=None)
def _fields(cls: type) -> tuple:
    """(name, type) of each field, resolved once per record type (row conversion is a hot path)."""
    hints = _hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))


def _arrow_type(tp: Any):
    import pyarrow as pa

    origin = typing.get_origin(tp)
    if origin is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _arrow_type(args[0])
    if origin in (list, typing.List):
        (arg,) = typing.get_args(tp)
        return pa.list_(_arrow_type(arg))
    if tp is str:
        return pa.string()
    if tp is bool:
        return pa.bool_()
    if tp is int:
        return pa.int64()
    if tp is float:
        return pa.float64()
    if tp is dict or origin is dict:
        return pa.string()  # canonical JSON
    if dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        return pa.struct([pa.field(f.name, _arrow_type(hints[f.name])) for f in dataclasses.fields(tp)])
    raise TypeError(f"no Arrow mapping for {tp!r}")


def arrow_schema(cls: type):
    """The pyarrow schema of a record type."""
    import pyarrow as pa

    hints = _hints(cls)
    return pa.schema([pa.field(f.name, _arrow_type(hints[f.name]), nullable=True) for f in dataclasses.fields(cls)])


def _identity(v: Any) -> Any:
    return v


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) is typing.Union:
        return [a for a in typing.get_args(tp) if a is not type(None)][0], True
    return tp, False


# Row conversion is a hot path (corpus writes and reads): the converter for each type is built once.
@functools.lru_cache(maxsize=None)
def _encoder(tp: Any):
    """A function turning a value of type ``tp`` into its plain (Arrow-ready) form."""
    tp, _ = _unwrap_optional(tp)
    origin = typing.get_origin(tp)
    if origin in (list, typing.List):
        enc = _encoder(typing.get_args(tp)[0])
        if enc is _identity:
            return lambda v: None if v is None else list(v)
        return lambda v: None if v is None else [enc(x) for x in v]
    if tp is dict or origin is dict:
        return lambda v: None if v is None else json.dumps(v, sort_keys=True, default=str)
    if dataclasses.is_dataclass(tp):
        encs = tuple((name, _encoder(t)) for name, t in _fields(tp))
        return lambda v: None if v is None else {name: enc(getattr(v, name)) for name, enc in encs}
    return _identity


@functools.lru_cache(maxsize=None)
def _decoder(tp: Any):
    """The inverse of :func:`_encoder`; missing lists and dicts come back empty, not None."""
    tp, optional = _unwrap_optional(tp)
    origin = typing.get_origin(tp)
    if origin in (list, typing.List):
        dec = _decoder(typing.get_args(tp)[0])
        empty = None if optional else []
        if dec is _identity:
            return lambda v: empty if v is None else list(v)
        return lambda v: empty if v is None else [dec(x) for x in v]
    if tp is dict or origin is dict:
        empty = None if optional else {}
        return lambda v: empty if v is None else (json.loads(v) if isinstance(v, str) else dict(v))
    if dataclasses.is_dataclass(tp):
        decs = tuple((name, _decoder(t)) for name, t in _fields(tp))
        return lambda v: None if v is None else tp(**{name: dec(v[name]) for name, dec in decs if name in v})
    return _identity


def to_row(record: Any) -> dict:
    """A record as a plain dict matching its Arrow schema (dict fields become JSON strings)."""
    return _encoder(type(record))(record)


def from_row(cls: type, row: dict) -> Any:
    """Rebuild a record from a row produced by :func:`to_row` (or read back from Parquet)."""
    return _decoder(cls)(row)


def to_table(records: list, cls: type | None = None):
    """A pyarrow Table of records of one type, with that type's schema."""
    import pyarrow as pa

    if cls is None:
        if not records:
            raise ValueError("to_table needs cls when records is empty")
        cls = type(records[0])
    return pa.Table.from_pylist([to_row(r) for r in records], schema=arrow_schema(cls))


def from_table(cls: type, table) -> list:
    return [from_row(cls, r) for r in table.to_pylist()]


def record_id(record: Any) -> str:
    return getattr(record, type(record).id_field)


def to_json(record: Any) -> str:
    """Human/machine-readable JSON of a record (dict fields stay objects)."""
    return json.dumps(dataclasses.asdict(record), sort_keys=True, default=str)
