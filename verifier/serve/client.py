"""The reward service's contract and its client: what `kernelmill serve-verifier` takes and answers.

The request and the response are the dataclasses below, JSON both ways; a verdict is the store's
``kernelmill.schema.Verdict``, every field (``to_json`` on the server, ``from_row`` here), so a trainer
reads the same record the verify stage writes. The server (verifier/serve/service.py) validates a request with
:func:`parse_request`, which names the field that is wrong; this module is the standard library plus
the schema, so a trainer imports it without the server's packages (FastAPI, uvicorn).

    client = VerifierClient("http://127.0.0.1:8770")
    response = client.verify([VerifyItem(completion=text, reference_code=task_program)])
    response.verdicts[0].status, response.verdicts[0].reward

The client retries what a retry can fix: a refused or dropped connection, a timeout and a 5xx answer,
with exponential backoff (``retries`` more attempts); a 4xx answer (the request is wrong) raises
:class:`ServiceError` at once with the server's message. It does not resume a batch: a request that
timed out is sent again whole (the server verifies it again; identical code compiles once, from its
build cache).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable

from kernelmill.errors import InputError
from kernelmill.schema import Verdict, from_row, task_id_for

BACKENDS = ("cpu", "cuda")


@dataclass
class VerifyItem:
    """One model answer to judge. Its task is ``reference_code``, or ``task_id`` naming a program sent in the
    request's ``tasks`` (or in an earlier request to the same server). ``candidate_id`` names the verdict
    (default: the content id ``Candidate.make_id(task, backend, code)``)."""

    completion: str
    task_id: str = ""
    reference_code: str = ""
    candidate_id: str = ""


@dataclass
class VerifyRequest:
    items: list[VerifyItem]
    tasks: dict[str, str] = field(default_factory=dict)  # task id -> reference program, sent once per request
    backend: str = ""  # "" = the server's backend


@dataclass
class BatchInfo:
    """The verification call a request's items went through (the server batches requests that arrive close
    together into one call)."""

    batch_id: int
    requests: int  # requests whose items were in the call
    items: int  # items in the call
    verified: int  # distinct (task, backend, code) verified: copies share one verdict
    seconds: float


@dataclass
class VerifyResponse:
    verdicts: list[Verdict]  # one per item, in item order
    batch: BatchInfo


class ServiceError(RuntimeError):
    """The service refused a request (4xx: ``field`` names what is wrong) or stayed unreachable / failing."""

    def __init__(self, message: str, *, status: int = 0, field: str = ""):
        super().__init__(message)
        self.status = status
        self.field = field


# ---------------------------------------------------------------------------- JSON both ways


def _finite(x: Any) -> Any:
    """JSON without NaN / Infinity (not JSON): a non-finite float becomes null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def to_plain(record: Any) -> dict:
    """A request, response or verdict as JSON-ready data (dict fields stay objects)."""
    return _finite(dataclasses.asdict(record))


def _str(obj: dict, key: str, where: str, *, default: str | None = None) -> str:
    v = obj.get(key, default)
    if not isinstance(v, str):
        raise InputError(f"{where}.{key}", "required, a string" if v is None else f"must be a string, got "
                                                                                f"{type(v).__name__}")
    return v


def parse_request(obj: Any) -> VerifyRequest:
    """A request from its JSON; InputError naming the field (``items[2].completion``) when it is malformed.
    Structure only: whether a program runs is the verifier's question (its verdict says so)."""
    if not isinstance(obj, dict):
        raise InputError("body", "must be a JSON object with an 'items' list")
    unknown = sorted(set(obj) - {"items", "tasks", "backend"})
    if unknown:
        raise InputError(unknown[0], "unknown field (known: items, tasks, backend)")
    backend = _str(obj, "backend", "request", default="").strip()
    if backend and backend not in BACKENDS:
        raise InputError("backend", f"must be one of {', '.join(BACKENDS)}, got {backend!r}")
    tasks = obj.get("tasks") or {}
    if not isinstance(tasks, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tasks.items()):
        raise InputError("tasks", "must be an object of task id -> reference program (strings)")
    items = obj.get("items")
    if not isinstance(items, list) or not items:
        raise InputError("items", "required, a non-empty list of {completion, reference_code | task_id}")
    known = {f.name for f in dataclasses.fields(VerifyItem)}
    out = []
    for i, it in enumerate(items):
        where = f"items[{i}]"
        if not isinstance(it, dict):
            raise InputError(where, "must be an object")
        extra = sorted(set(it) - known)
        if extra:
            raise InputError(f"{where}.{extra[0]}", f"unknown field (known: {', '.join(sorted(known))})")
        item = VerifyItem(completion=_str(it, "completion", where), task_id=_str(it, "task_id", where, default=""),
                          reference_code=_str(it, "reference_code", where, default=""),
                          candidate_id=_str(it, "candidate_id", where, default=""))
        if not item.reference_code and not item.task_id:
            raise InputError(where, "needs reference_code, or task_id naming a program of 'tasks'")
        if item.reference_code and item.task_id and item.task_id != task_id_for(item.reference_code):
            raise InputError(f"{where}.task_id", f"{item.task_id!r} is not the id of its reference_code "
                                                 f"({task_id_for(item.reference_code)!r}, schema.task_id_for)")
        out.append(item)
    return VerifyRequest(items=out, tasks=dict(tasks), backend=backend)


def parse_response(obj: dict) -> VerifyResponse:
    """The typed response (verdicts as ``kernelmill.schema.Verdict``)."""
    return VerifyResponse(verdicts=[from_row(Verdict, v) for v in obj["verdicts"]], batch=BatchInfo(**obj["batch"]))


# ---------------------------------------------------------------------------- client


class VerifierClient:
    """HTTP client of a `kernelmill serve-verifier` server: ``verify`` (POST /verify) and ``health`` (GET /health).

    ``timeout_s`` bounds one attempt (a batch of uncached kernels on a busy server takes minutes: compile
    and timing); ``retries`` more attempts follow a connection error, timeout or 5xx, after ``backoff_s``,
    doubling each time."""

    def __init__(self, url: str, *, timeout_s: float = 900.0, retries: int = 4, backoff_s: float = 1.0,
                 sleep: Callable[[float], None] = time.sleep):
        if not url.startswith(("http://", "https://")):
            raise InputError("url", f"must start with http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self._sleep = sleep

    def verify(self, items: list[VerifyItem], *, tasks: dict[str, str] | None = None,
               backend: str = "") -> VerifyResponse:
        """Verdicts for ``items`` in their order (one call of the server's verifier, shared with other
        requests that arrived close by)."""
        req = VerifyRequest(items=list(items), tasks=dict(tasks or {}), backend=backend)
        return parse_response(self._call("POST", "/verify", to_plain(req)))

    def health(self) -> dict:
        return self._call("GET", "/health", None)

    def _call(self, method: str, path: str, body: dict | None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self._sleep(self.backoff_s * 2 ** (attempt - 1))
            req = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                    return json.loads(r.read())
            except urllib.error.HTTPError as e:
                detail = _detail(e)
                if e.code < 500:  # the request is wrong: sending it again changes nothing
                    raise ServiceError(f"{self.url}{path}: HTTP {e.code}: {detail.get('field', '')}: "
                                       f"{detail.get('problem', detail)}", status=e.code,
                                       field=str(detail.get("field", ""))) from None
                last = f"HTTP {e.code}: {detail}"
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
                last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
        raise ServiceError(f"{self.url}{path}: no answer after {self.retries + 1} attempts (last: {last})")


def _detail(e: urllib.error.HTTPError) -> dict:
    try:
        body = json.loads(e.read() or b"{}")
    except (ValueError, OSError):
        return {"problem": e.reason}
    d = body.get("detail", body) if isinstance(body, dict) else body
    return d if isinstance(d, dict) else {"problem": d}
