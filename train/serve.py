"""Serve a trained checkpoint behind an OpenAI-compatible endpoint: ``transformers serve``.

    kernelmill serve-model CHECKPOINT [--host 127.0.0.1] [--port 8000] [--device auto] [--continuous-batching]
    kernelmill generate RUN_DIR --set generate.base_url=http://127.0.0.1:8000/v1 --set generate.model=MODEL

The server is the one ``transformers serve CHECKPOINT`` starts (``transformers.cli.serve.Serve``,
FastAPI + uvicorn; endpoints /v1/chat/completions, /v1/completions, /v1/models, /health), run in a
child process. It is started through that class rather than the ``transformers`` command because the
command's module also imports what ``transformers chat`` needs and checks PyPI for updates; an
offline GPU box has neither. What it needs beyond transformers: fastapi, uvicorn, pydantic, openai
(kernelmill's own dependencies) and accelerate (``transformers serve`` always loads with a
``device_map``).

What a served kernelmill checkpoint sees: the chat template of train/data.py (written into every
checkpoint by train/model.py, and by :func:`prepare_checkpoint` into one saved before that), so a
request's messages become exactly the token ids the trainer trained on; generation stops at
``<|end|>``; a request's ``temperature`` samples (0: greedy), with no top-k or top-p cut.

What ``transformers serve`` does not do, and how kernelmill copes:
- ``n`` > 1 is ignored (one choice per request): the OpenAI client asks again for the missing
  choices, concurrently (synth/generate/generators.py).
- Without ``--continuous-batching`` requests run one at a time on one inference thread; with it they
  are batched (paged attention), and the first request's temperature holds for every request
  until the server restarts.
- ``/v1/models`` lists models of the Hugging Face cache, not the served directory, and answers 500
  when that cache folder does not exist: the child gets an empty cache folder in that case.
- The model name a request must carry is the checkpoint path exactly as the server was started with
  (:attr:`ModelServer.model`); any other name is refused with HTTP 400.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
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
                "continuous_batching": self.continuous_batching, **self.extra_args}
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


def _serve_forever(args: dict) -> None:
    """The child: what ``transformers serve MODEL --host H --port P --device D [--continuous-batching]``
    runs, with the model pinned (``force_model``: loaded now, never unloaded)."""
    from transformers.cli.serve import Serve

    Serve(force_model=args.pop("model"), log_level=args.pop("log_level", "info"), **args)


if __name__ == "__main__":
    _serve_forever(json.loads(sys.argv[1]))
