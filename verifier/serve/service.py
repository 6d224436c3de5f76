"""The verifier as a reward service: `kernelmill serve-verifier`, an HTTP server an RL trainer calls per step.

    POST /verify   {"items": [{"completion", "reference_code" | "task_id", "candidate_id"?}], "tasks"?, "backend"?}
                   -> {"verdicts": [Verdict, ...], "batch": {batch_id, requests, items, verified, seconds}}
    GET  /health   -> {"status": "ok", "backend", "verifier", "pending", "batches", "requests", "items", "verified"}

The contract (dataclasses, validation naming the bad field) is verifier/serve/client.py's; a verdict is
``kernelmill.schema.Verdict``, all of it, as the verify stage stores it. Verification is one call of the verifier's
one entry (``verifier.entry.verify``), in this process or on the Ray cluster it is given.

What it guarantees:
- requests that arrive within ``max_wait_ms`` of the first one waiting (up to ``max_items`` items; a larger request
  is one call of its own) are verified together, in one call of the entry (compiles overlap, one execution pool),
  which verifies identical (task, backend, program) once (each copy gets the verdict under its own id);
- verification runs in one worker thread, never on the event loop: /health answers while a batch runs, and calls
  follow one another (the verifier owns the machine's cores and its device while it runs);
- every item gets its verdict, whatever the candidate does (a crash, a hang, a fork bomb are verdicts: the
  verifier's guarantee); a malformed request is a 4xx naming its field and never reaches the verifier; a client
  that disconnects loses its answer, nothing else (its items may still be verified with the batch);
- the verifier's own failure (no compiler, a Ray cluster gone) is a 503 for the requests of that call, and the
  server goes on serving.

What it does not do: authenticate (bind it to 127.0.0.1 or a private network: a request runs the task program it
sends in this process, as the verifier runs every reference), queue without bound (a client waits as long as the
batches before its own take), or persist anything but the optional record file (one JSON line per item answered).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from kernelmill.errors import InputError
from kernelmill.schema import Candidate, Task, Verdict, task_id_for
from verifier import entry
from verifier.common.config import VerifyConfig, resolve_backend
from verifier.entry import RayTarget, VerifyStats
from verifier.front.extract import extract_code
from verifier.serve.client import BatchInfo, VerifyRequest, VerifyResponse, parse_request, to_plain

log = logging.getLogger("kernelmill.serve_verifier")

Items = list[tuple[Task, Candidate]]


def _verify(items: Items, config: VerifyConfig, ray: RayTarget | None) -> tuple[list[Verdict], VerifyStats]:
    """One call of the verifier's one entry: identical programs once, here or on Ray."""
    stats = VerifyStats()
    return entry.verify(items, config=config, ray=ray, stats=stats), stats


# ---------------------------------------------------------------------------- requests -> verifier items


class TaskBook:
    """Reference programs by task id (``kernelmill.schema.task_id_for``), the last ``size`` seen, so that a
    client may send a program once and name it by id afterwards."""

    def __init__(self, size: int = 4096):
        self.size = size
        self._tasks: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, reference_code: str) -> str:
        tid = task_id_for(reference_code)
        with self._lock:
            self._tasks[tid] = reference_code
            self._tasks.move_to_end(tid)
            while len(self._tasks) > self.size:
                self._tasks.popitem(last=False)
        return tid

    def get(self, task_id: str) -> str | None:
        with self._lock:
            return self._tasks.get(task_id)


def request_items(req: VerifyRequest, backend: str, book: TaskBook) -> Items:
    """The verifier's (Task, Candidate) pairs of a request; InputError naming the item whose task is unknown.
    A candidate's code is the verifier's extraction of the completion (the whole text when it holds none:
    the extract stage then says why), its id the content id unless the item names one."""
    for program in req.tasks.values():
        book.add(program)
    out = []
    for i, it in enumerate(req.items):
        ref = it.reference_code or req.tasks.get(it.task_id) or book.get(it.task_id)
        if ref is None:
            raise InputError(f"items[{i}].task_id", f"unknown task {it.task_id!r}: send its reference_code (in the "
                                                    "item or in 'tasks')")
        tid = book.add(ref)
        task = Task(task_id=tid, name=tid, source="service", level=0, reference_code=ref)
        code = extract_code(it.completion) or it.completion
        cid = it.candidate_id or Candidate.make_id(tid, backend, code)
        out.append((task, Candidate(candidate_id=cid, task_id=tid, backend=backend, generator="service", code=code,
                                    response=it.completion)))
    return out


# ---------------------------------------------------------------------------- the micro-batcher


@dataclass
class _Pending:
    items: Items
    future: asyncio.Future


@dataclass
class ServiceStats:
    batches: int = 0
    requests: int = 0
    items: int = 0
    verified: int = 0  # distinct programs verified
    failed_batches: int = 0


class VerifierFailure(RuntimeError):
    """The verifier itself failed on a call (not a candidate's verdict)."""


class MicroBatcher:
    """Collects requests into verification calls: the first waiting request opens a call, which closes
    ``max_wait_ms`` later or once it holds ``max_items`` items (a larger request is one call of its own);
    calls run one at a time in a worker thread."""

    def __init__(self, config: VerifyConfig, *, ray: RayTarget | None = None, max_items: int = 64,
                 max_wait_ms: float = 50.0, record: Path | None = None):
        self.config = config
        self.ray = ray
        self.max_items = max(1, max_items)
        self.max_wait_s = max(0.0, max_wait_ms) / 1000.0
        self.record = record
        self.stats = ServiceStats()
        self._queue: asyncio.Queue[_Pending] | None = None
        self._task: asyncio.Task | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="km-verify")

    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def pending(self) -> int:
        return self._queue.qsize() if self._queue else 0

    async def submit(self, items: Items) -> tuple[list[Verdict], BatchInfo]:
        fut = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(items, fut))
        return await fut

    async def _collect(self) -> list[_Pending]:
        loop = asyncio.get_running_loop()
        first = await self._queue.get()
        group, n = [first], len(first.items)
        deadline = loop.time() + self.max_wait_s
        while n < self.max_items:
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                p = await asyncio.wait_for(self._queue.get(), left)
            except asyncio.TimeoutError:
                break
            group.append(p)
            n += len(p.items)
        return [p for p in group if not p.future.done()]  # a request whose handler was cancelled is dropped

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            group = await self._collect()
            if not group:
                continue
            self.stats.batches += 1
            batch_id = self.stats.batches
            items = [it for p in group for it in p.items]
            t0 = time.perf_counter()
            try:
                verdicts, stats = await loop.run_in_executor(self._pool, _verify, items, self.config, self.ray)
            except Exception as e:  # noqa: BLE001  (the verifier's failure, never a candidate's verdict)
                self.stats.failed_batches += 1
                log.exception("verification call %d failed", batch_id)
                for p in group:
                    if not p.future.done():
                        p.future.set_exception(VerifierFailure(f"{type(e).__name__}: {e}"))
                continue
            info = BatchInfo(batch_id=batch_id, requests=len(group), items=len(items), verified=stats.programs,
                             seconds=round(time.perf_counter() - t0, 3))
            self.stats.requests += len(group)
            self.stats.items += len(items)
            self.stats.verified += stats.programs
            start = 0
            for p in group:
                if not p.future.done():
                    p.future.set_result((verdicts[start:start + len(p.items)], info))
                start += len(p.items)
            self._write_record(info, items, verdicts)

    def _write_record(self, info: BatchInfo, items: Items, verdicts: list[Verdict]) -> None:
        """One JSON line per item to the record file: what the service answered, for audit and tests."""
        if not self.record:
            return
        with self.record.open("a") as f:
            for (task, _), v in zip(items, verdicts):
                f.write(json.dumps({"batch_id": info.batch_id, "candidate_id": v.candidate_id, "task_id": task.task_id,
                                    "status": v.status, "reward": v.reward}) + "\n")


# ---------------------------------------------------------------------------- the app


def _problem(status: int, field_name: str, problem: str) -> JSONResponse:
    return JSONResponse({"detail": {"field": field_name, "problem": problem}}, status_code=status)


def request_line(client: str, items: int, info: BatchInfo, verdicts: list[Verdict]) -> str:
    """The line the server prints per answered request: who asked, how much, which batch, what came out."""
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.status] = counts.get(v.status, 0) + 1
    return (f"POST /verify from {client}: {items} item(s) in batch {info.batch_id} ({info.items} items, "
            f"{info.verified} verified, {info.seconds:g} s): " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())))


def create_app(config: VerifyConfig, *, backend: str = "cpu", ray: RayTarget | None = None, max_items: int = 64,
               max_wait_ms: float = 50.0, record: str | Path | None = None, echo=None) -> FastAPI:
    """The FastAPI app of the service. ``backend``: the default for requests that name none (resolved:
    cpu or cuda); ``ray``: the cluster verification runs on (None: this process); ``echo``: called with
    :func:`request_line` of every answered request (``serve`` prints it)."""
    backend = resolve_backend(backend)
    where = f"ray {ray.address}" if ray else "local"
    batcher = MicroBatcher(config, ray=ray, max_items=max_items, max_wait_ms=max_wait_ms,
                           record=Path(record) if record else None)
    book = TaskBook()

    @asynccontextmanager
    async def lifespan(_app):
        batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title="kernelmill verifier", lifespan=lifespan)

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "backend": backend, "verifier": where, "pending": batcher.pending,
                **dataclasses.asdict(batcher.stats)}

    @app.post("/verify")
    async def verify(request: Request):
        try:
            body = json.loads(await request.body() or b"null")
        except ValueError as e:
            return _problem(400, "body", f"not JSON: {e}")
        try:
            req = parse_request(body)
            want = req.backend or backend
            if want != backend:
                resolve_backend(want)  # a cuda request to a server without a GPU is refused here
            items = request_items(req, want, book)
        except InputError as e:
            return _problem(422, "backend" if e.what.startswith("--backend") else e.what, e.problem)
        try:
            verdicts, info = await batcher.submit(items)
        except VerifierFailure as e:
            return _problem(503, "verifier", f"the verifier failed on this batch (not your candidates): {e}")
        if echo is not None:
            client = f"{request.client.host}:{request.client.port}" if request.client else "?"
            echo(request_line(client, len(items), info, verdicts))
        return JSONResponse(to_plain(VerifyResponse(verdicts=verdicts, batch=info)))

    app.state.batcher = batcher
    return app


def serve(config: VerifyConfig, *, host: str = "127.0.0.1", port: int = 8770, backend: str = "cpu",
          ray: RayTarget | None = None, max_items: int = 64, max_wait_ms: float = 50.0,
          record: str | Path | None = None) -> None:
    """Serve until interrupted (uvicorn, one process: the verifier's pools live in it)."""
    import uvicorn

    app = create_app(config, backend=backend, ray=ray, max_items=max_items, max_wait_ms=max_wait_ms, record=record,
                     echo=lambda line: print(line, flush=True))
    where = f"ray {ray.address}" if ray else "local"
    print(f"kernelmill serve-verifier: http://{host}:{port} (backend {resolve_backend(backend)}, verifier {where}, "
          f"calls of up to {max_items} items or {max_wait_ms:g} ms)", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)
