"""Serve a trained checkpoint behind an OpenAI-compatible endpoint: ``transformers serve``, or, where fastapi and
uvicorn are missing (the GPU image), :class:`LocalModelServer` (standard library, in-process).

    kernelmill serve-model CHECKPOINT [--host 127.0.0.1] [--port 8000] [--device auto] [--continuous-batching]
    kernelmill generate RUN_DIR --set generate.base_url=http://127.0.0.1:8000/v1 --set generate.model=MODEL

The server is the one ``transformers serve CHECKPOINT`` starts (``transformers.cli.serve.Serve``, FastAPI + uvicorn;
endpoints /v1/chat/completions, /v1/completions, /v1/models, /health), run in a child process. It is started through
that class rather than the ``transformers`` command because the command's module also imports what ``transformers
chat`` needs and checks PyPI for updates; an offline GPU box has neither. What it needs beyond transformers: fastapi,
uvicorn, pydantic, openai and accelerate (pinned in pyproject.toml; ``transformers serve`` loads with a
``device_map``).

What a served kernelmill checkpoint sees: the chat template of train/data.py (written into every checkpoint by
train/model.py, and by :func:`prepare_checkpoint` into one saved before that; weights are never touched), so a
request's messages become exactly the token ids the trainer trained on; generation stops at ``<|end|>``; a request's
``temperature`` samples (0: greedy), with no top-k or top-p cut.

What ``transformers serve`` does not do, and how kernelmill copes:
- ``n`` > 1 is ignored (one choice per request): the OpenAI client asks again for the missing choices, concurrently
  (synth/generate/generators.py).
- Without ``--continuous-batching`` requests run one at a time on one inference thread; with it they are batched
  (paged attention), and the first request's temperature holds for every request until the server restarts.
- ``/v1/models`` lists models of the Hugging Face cache, not the served directory, and answers 500 when that cache
  folder does not exist: the child gets an empty cache folder in that case.
- The model name a request must carry is the checkpoint path exactly as the server was started with
  (:attr:`ModelServer.model`); any other name is refused with HTTP 400.

:class:`LocalModelServer` serves the same chat endpoint from this process with the trainer's own batched sampler
(its docstring says what it handles and what not).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kernelmill.errors import InputError

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the OS's choice; another process may take it before use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def prepare_checkpoint(path: str | Path) -> tuple[Path, list[str]]:
    """The model directory to serve (a checkpoint, or a training output's latest checkpoint) and what
    was changed in it: a kernelmill checkpoint (it has trainer_state.pt) saved without train/data.py's
    chat template gets the template and the serving generation config (weights untouched). Any other
    model directory is served as it is and must bring its own chat template."""
    from train.data import CHAT_TEMPLATE
    from train.model import STATE_FILE, resolve_model_dir, write_serving_files

    ckpt = resolve_model_dir(path).resolve()
    cfg = ckpt / "tokenizer_config.json"
    template = ckpt / "chat_template.jinja"
    have = template.read_text() if template.is_file() else ""
    if not have and cfg.is_file():
        have = json.loads(cfg.read_text()).get("chat_template") or ""
    if have == CHAT_TEMPLATE:
        return ckpt, []
    if not (ckpt / STATE_FILE).is_file():
        if not have:
            raise InputError(f"model {ckpt}", "has no chat template, and is no kernelmill checkpoint to give one")
        return ckpt, []
    from transformers import AutoTokenizer

    write_serving_files(ckpt, AutoTokenizer.from_pretrained(str(ckpt)))
    return ckpt, ["chat template of train/data.py and the serving generation config written"]


class ModelServer:
    """``transformers serve`` for one model directory, in a child process (its own process group).

    ``start()`` returns once GET /v1/models answers 200, or raises RuntimeError with the end of the
    server's log when the child exits or ``timeout_s`` passes first. ``stop()`` ends the child's
    process group (SIGTERM, then SIGKILL after 10 s). Usable as a context manager."""

    def __init__(self, model_dir: str | Path, *, host: str = "127.0.0.1", port: int = 0, device: str = "auto",
                 continuous_batching: bool = False, log_path: str | Path | None = None, timeout_s: float = 300.0,
                 extra_args: dict | None = None):
        self.model = str(Path(model_dir).resolve())
        self.host, self.port = host, int(port) or free_port(host)
        self.device, self.continuous_batching = device, continuous_batching
        self.timeout_s = timeout_s
        self.extra_args = dict(extra_args or {})
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkdtemp(prefix="km-serve-")) / "server.log"
        self.proc: subprocess.Popen | None = None
        self.ready_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def settings(self) -> list[str]:
        """The ``--set`` overrides that point the generation stage at this server."""
        return [f"generate.base_url={self.base_url}", f"generate.model={self.model}"]

    def _env(self) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env.setdefault("HF_HUB_OFFLINE", "1")  # a local directory: nothing to fetch
        env.setdefault("HF_HUB_DISABLE_UPDATE_CHECK", "1")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        from huggingface_hub import constants

        if not Path(env.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE).is_dir():
            empty = self.log_path.parent / "hf-hub-cache"  # /v1/models scans it and answers 500 when it is missing
            empty.mkdir(parents=True, exist_ok=True)
            env["HF_HUB_CACHE"] = str(empty)
        return env

    def start(self) -> "ModelServer":
        import httpx

        args = {"model": self.model, "host": self.host, "port": self.port, "device": self.device,
                "continuous_batching": self.continuous_batching, "parent_pid": os.getpid(), **self.extra_args}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        t0 = time.time()
        self.proc = subprocess.Popen([sys.executable, "-m", "train.serve", json.dumps(args)], stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self._env(),
                                     cwd=str(REPO_ROOT), start_new_session=True)
        log.close()
        url = f"http://{self.host}:{self.port}/v1/models"
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"transformers serve exited with {self.proc.returncode} before answering:\n"
                                   + self.log_tail())
            try:
                if httpx.get(url, timeout=5.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() - t0 > self.timeout_s:
                self.stop()
                raise RuntimeError(f"transformers serve did not answer {url} within {self.timeout_s:.0f} s:\n"
                                   + self.log_tail())
            time.sleep(0.5)
        self.ready_s = round(time.time() - t0, 1)
        return self

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        except ProcessLookupError:
            pass

    def __enter__(self) -> "ModelServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class LocalModelServer:
    """An OpenAI-compatible chat endpoint served from this process with the standard library's HTTP server
    and the trainer's own batched sampler (train/rollout.sample): what a box without fastapi and uvicorn
    (the GPU image) uses in place of ``transformers serve``. Same interface as :class:`ModelServer`.

    POST /v1/chat/completions takes messages, ``n`` (all n choices come back in one answer), ``temperature``
    (0: greedy) and ``max_tokens``; GET /v1/models lists the one model. Concurrent requests are batched:
    a worker thread takes every request that arrives within ``batch_wait_s`` of the first (up to
    ``max_batch`` sequences) into one left-padded ``generate`` call per (temperature, max_tokens). The
    prompt is :func:`train.data.encode_chat` of the messages (the checkpoint's chat template, exactly).
    Every request is logged as ``POST /v1/chat/completions <status>`` to ``log_path``. A request never
    runs past the model's positions (train.rollout.context_limit): ``max_tokens`` is cut to the room its
    prompt leaves (``finish_reason`` "length" when the cut ends it), and a prompt that leaves no room gets
    an empty answer with "length" (vLLM answers 400 there; the repair stage would stop on that, while an
    empty answer is judged like any answer without code).

    Not handled: streaming, stop strings, top-p / top-k (sampling is from softmax(logits / temperature)),
    tools, other endpoints."""

    continuous_batching = False

    def __init__(self, model_dir: str | Path, *, host: str = "127.0.0.1", port: int = 0, device: str = "auto",
                 log_path: str | Path | None = None, max_batch: int = 256, batch_wait_s: float = 0.05, **_ignored):
        self.model = str(Path(model_dir).resolve())
        self.host, self.port = host, int(port) or free_port(host)
        self.device, self.max_batch, self.batch_wait_s = device, int(max_batch), float(batch_wait_s)
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkdtemp(prefix="km-serve-")) / "server.log"
        self.ready_s: float | None = None
        self.requests = 0
        self._httpd = None
        self._threads: list = []

    base_url = ModelServer.base_url
    settings = ModelServer.settings
    log_tail = ModelServer.log_tail

    def _log(self, line: str) -> None:
        with self._log_lock, open(self.log_path, "a") as f:
            f.write(time.strftime("%H:%M:%S ") + line + "\n")

    def start(self) -> "LocalModelServer":
        import queue
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from train.model import load_pretrained
        from verifier.common.config import resolve_backend

        t0 = time.time()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_lock = threading.Lock()
        model, tok = load_pretrained(self.model)
        self._model, self._tok = model.to(resolve_backend(self.device, "loop.device", device_index=True)).eval(), tok
        self._queue: queue.Queue = queue.Queue()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt, *args):  # the request line goes to the server's log, not stderr
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                server._log(f"{self.command} {self.path} {code}")

            def do_GET(self):
                if self.path.rstrip("/") in ("/v1/models", "/health"):
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                try:
                    req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                    if req.get("model") != server.model:
                        return self._send(400, {"error": {"message": f"model {req.get('model')!r} is not served "
                                                                     f"here; this server serves {server.model}"}})
                    job = server._submit(req)
                except (ValueError, KeyError, TypeError) as e:
                    return self._send(400, {"error": {"message": f"bad request: {e}"}})
                job["done"].wait()
                if "error" in job:
                    return self._send(500, {"error": {"message": job["error"]}})
                self._send(200, job["answer"])

        self._httpd = ThreadingHTTPServer((self.host, self.port), Handler)
        self._httpd.daemon_threads = True
        self._threads = [threading.Thread(target=self._httpd.serve_forever, daemon=True),
                         threading.Thread(target=self._batches, daemon=True)]
        for th in self._threads:
            th.start()
        self.ready_s = round(time.time() - t0, 1)
        self._log(f"serving {self.model} at {self.base_url} (in-process, ready in {self.ready_s} s)")
        return self

    def _submit(self, req: dict) -> dict:
        import threading

        from train import data as D
        from train.rollout import context_limit

        msgs = [{"role": m["role"], "content": m["content"]} for m in req["messages"]]
        ids, _ = D.encode_chat(self._tok, msgs, add_generation_prompt=True)
        max_tokens = int(req.get("max_tokens") or 256)
        limit = context_limit(self._model)
        if limit is not None and len(ids) + max_tokens > limit:
            self._log(f"prompt of {len(ids)} tokens: max_tokens {max_tokens} cut to {max(0, limit - len(ids))} "
                      f"(the model has {limit} positions)")
            max_tokens = max(0, limit - len(ids))
        job = {"ids": ids, "n": max(1, int(req.get("n") or 1)), "temperature": float(req.get("temperature", 1.0)),
               "max_tokens": max_tokens, "done": threading.Event()}
        self._queue.put(job)
        return job

    def _batches(self) -> None:
        """The worker: gather requests, sample them in batches, answer each."""
        import queue

        while True:
            job = self._queue.get()
            if job is None:
                return
            jobs, seqs = [job], job["n"]
            deadline = time.time() + self.batch_wait_s
            while seqs < self.max_batch:
                try:
                    nxt = self._queue.get(timeout=max(0.0, deadline - time.time()))
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                jobs.append(nxt)
                seqs += nxt["n"]
            by_kind: dict = {}
            for j in jobs:
                by_kind.setdefault((j["temperature"], j["max_tokens"]), []).append(j)
            for (temp, max_tokens), group in by_kind.items():
                try:
                    self._answer(group, temp, max_tokens)
                except Exception as e:  # noqa: BLE001 - the requests get a 500 with the reason; the server goes on
                    for j in group:
                        j["error"] = f"{type(e).__name__}: {e}"[:500]
                for j in group:
                    j["done"].set()

    def _answer(self, jobs: list[dict], temp: float, max_tokens: int) -> None:
        from train.rollout import decode_response, sample

        from train.rollout import Sampled

        contexts = [j["ids"] for j in jobs for _ in range(j["n"])]
        outs = [] if max_tokens > 0 else [Sampled(ids=[], logps=[], closed=False) for _ in contexts]
        for i in range(0, len(contexts) if max_tokens > 0 else 0, self.max_batch):
            outs += sample(self._model, self._tok, contexts[i:i + self.max_batch], max_new_tokens=max_tokens,
                           temperature=temp if temp > 0 else 1.0, greedy=temp <= 0)
        pos = 0
        for j in jobs:
            mine = outs[pos:pos + j["n"]]
            pos += j["n"]
            self.requests += 1
            j["answer"] = {
                "id": f"chatcmpl-{self.requests}", "object": "chat.completion", "created": int(time.time()),
                "model": self.model,
                "choices": [{"index": i, "message": {"role": "assistant", "content": decode_response(self._tok, o.ids)},
                             "finish_reason": "stop" if o.closed else "length"} for i, o in enumerate(mine)],
                "usage": {"prompt_tokens": len(j["ids"]), "completion_tokens": sum(len(o.ids) for o in mine),
                          "total_tokens": len(j["ids"]) * j["n"] + sum(len(o.ids) for o in mine)}}

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._queue.put(None)
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd = None
        self._model = None  # the weights go with the server (the trainer may need the memory next)

    def __enter__(self) -> "LocalModelServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def transformers_serve_available() -> bool:
    """Whether ``transformers serve`` can run here (it needs fastapi and uvicorn; the GPU image has neither)."""
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("fastapi", "uvicorn"))


def end_with_parent(parent_pid: int, poll_s: float = 1.0) -> threading.Thread:
    """A daemon thread that ends this process's group once ``parent_pid`` is no longer its parent (the parent
    ended, however: SIGKILL, SIGTERM without cleanup, a crash): a server in its own session is otherwise left
    serving, holding its port, memory and cores, after the run that started it is gone."""
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_s)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    t = threading.Thread(target=watch, name="end-with-parent", daemon=True)
    t.start()
    return t


def _serve_forever(args: dict) -> None:
    """The child: what ``transformers serve MODEL --host H --port P --device D [--continuous-batching]``
    runs, with the model pinned (``force_model``: loaded now, never unloaded); it ends with its parent."""
    from transformers.cli.serve import Serve

    if args.get("parent_pid"):
        end_with_parent(int(args.pop("parent_pid")))
    Serve(force_model=args.pop("model"), log_level=args.pop("log_level", "info"), **args)


if __name__ == "__main__":
    _serve_forever(json.loads(sys.argv[1]))
