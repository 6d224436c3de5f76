"""Candidate generation: one Generator interface, an OpenAI-compatible client and the built-in teacher.

    Generator            protocol: ``name``; ``generate(messages, n) -> list[str]`` (n raw responses,
                         each meant to hold a ```python block)
    OpenAIGenerator      any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, a hosted API)
    TeacherGenerator     the offline teacher (synth/teacher/writer.py), deterministic, optional planted bugs
    make_generator       the openai generator when generate.base_url is set, else the teacher
    make_candidate       the one place a response becomes a Candidate (one id rule, one extractor)

OpenAIGenerator guarantees: at most ``concurrency`` requests in flight across threads; 429 and 5xx
answers, timeouts and dropped connections are retried up to ``max_retries`` times with exponential
backoff (1 s, 2 s, 4 s ... capped at 30 s, or the server's Retry-After when it sends one); other 4xx
answers raise at once with the server's message; finished responses are cached on disk under
``cache_dir``, keyed by sha256 of (base_url, model, messages, n, temperature), so a re-run sends no
request for a prompt it has already paid for. Not guaranteed: the same text from a sampling server
when the cache is cleared.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

import httpx

from kernelmill.errors import InputError
from kernelmill.schema import Candidate, Message, Task, content_hash
from kernelmill.settings import GenerateSettings
from kernelmill.store import usual_mode
from synth.generate.prompts import reasoning_of_response
from synth.generate.reasoning import template_trace
from synth.teacher import writer as teacher
from verifier.front.extract import extract_code


class Generator(Protocol):
    """What the generate, repair and annotate stages use of a generator (OpenAIGenerator, TeacherGenerator)."""

    name: str  # stored as Candidate.generator; "teacher" for the built-in teacher
    is_llm: bool  # a model writes the text: its reasoning is its own (else the template trace is stored)
    concurrency: int  # requests the stages may have in flight at once

    def generate(self, messages: list[Message], n: int) -> list[str]: ...

    def injected_bug(self, response: str) -> str:
        """The bug this generator planted in one of its responses ("": none, or not a generator that plants)."""
        ...

    def recall(self, response: str, *, bug: str, variant: int) -> None:
        """Take back what an earlier process's generator knew of a stored response (the teacher's planted bug and
        launch variant), so a repair turn written now is consistent with it; a no-op for a model."""
        ...


class GenerationError(RuntimeError):
    """The endpoint kept failing after every retry (the message names it and the last error)."""


# ---------------------------------------------------------------------------- OpenAI-compatible


def _chat_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base if base.endswith("/chat/completions") else base + "/chat/completions"


class OpenAIGenerator:
    """Chat completions over HTTP (httpx), with a concurrency limit, retries, timeouts and a cache."""

    is_llm = True

    def __init__(self, base_url: str, model: str, *, api_key: str = "",
                 concurrency: int = GenerateSettings.concurrency, max_retries: int = GenerateSettings.max_retries,
                 timeout_s: float = GenerateSettings.timeout_s, temperature: float = GenerateSettings.temperature,
                 max_tokens: int = GenerateSettings.max_tokens, cache_dir: str | os.PathLike | None = None,
                 backoff_s: float = GenerateSettings.backoff_s, max_backoff_s: float = 30.0):
        if not base_url:
            raise InputError("generate.base_url", "is empty; set it to an OpenAI-compatible endpoint")
        if not model:
            raise InputError("generate.model", f"is empty; name the model served at {base_url}")
        self.base_url, self.model, self.name = base_url, model, model
        self.url = _chat_url(base_url)
        self.concurrency = max(1, int(concurrency))
        self.max_retries, self.timeout_s, self.temperature = int(max_retries), float(timeout_s), float(temperature)
        self.max_tokens = int(max_tokens)
        self.backoff_s, self.max_backoff_s = float(backoff_s), float(max_backoff_s)
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self._slots = threading.BoundedSemaphore(self.concurrency)
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(headers=headers, timeout=httpx.Timeout(self.timeout_s))
        self.requests_sent = 0  # HTTP requests actually sent (retries included)
        self.cache_hits = 0

    def cache_key(self, messages: list[Message], n: int) -> str:
        payload = json.dumps({"base_url": self.base_url, "model": self.model,
                              "messages": [[m.role, m.content] for m in messages], "n": n,
                              "temperature": self.temperature}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    def _cache_path(self, key: str) -> Path | None:
        return self.cache_dir / key[:2] / f"{key}.json" if self.cache_dir else None

    def _cache_read(self, key: str) -> list[str] | None:
        p = self._cache_path(key)
        if p is None or not p.is_file():
            return None
        try:
            return list(json.loads(p.read_text())["responses"])
        except (ValueError, KeyError, TypeError):
            return None  # a damaged cache entry is refetched, never trusted

    def _cache_write(self, key: str, responses: list[str]) -> None:
        p = self._cache_path(key)
        if p is None:
            return
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-")
        usual_mode(fd)
        with os.fdopen(fd, "w") as f:
            json.dump({"model": self.model, "responses": responses}, f)
        os.replace(tmp, p)

    def _post(self, body: dict) -> dict:
        last = ""
        for attempt in range(self.max_retries + 1):
            wait = min(self.max_backoff_s, self.backoff_s * (2 ** attempt))
            try:
                with self._slots:
                    self.requests_sent += 1
                    r = self._client.post(self.url, json=body)
            except (httpx.TimeoutException, httpx.TransportError) as e:
                last = f"{type(e).__name__}: {e}"
            else:
                if r.status_code == 200:
                    try:
                        return r.json()
                    except ValueError:
                        last = "200 with a body that is not JSON"
                elif r.status_code == 429 or r.status_code >= 500:
                    last = f"HTTP {r.status_code}: {r.text[:200]}"
                    ra = r.headers.get("retry-after")
                    if ra:
                        try:
                            wait = min(self.max_backoff_s, max(0.0, float(ra)))
                        except ValueError:
                            pass
                else:
                    raise InputError(f"generate endpoint {self.url}",
                                     f"HTTP {r.status_code} (not retried): {r.text[:300]}")
            if attempt < self.max_retries:
                time.sleep(wait * (0.9 + 0.2 * random.random()))
        raise GenerationError(f"{self.url}: gave up after {self.max_retries + 1} attempts; last error: {last}")

    def _choices(self, messages: list[Message], n: int) -> list[str]:
        body = {"model": self.model, "messages": [{"role": m.role, "content": m.content} for m in messages],
                "n": n, "temperature": self.temperature}
        if self.max_tokens:
            body["max_tokens"] = self.max_tokens
        choices = self._post(body).get("choices") or []
        if not choices:
            raise GenerationError(f"{self.url}: a 200 answer with no choices")
        return [(c.get("message") or {}).get("content") or "" for c in choices]

    def injected_bug(self, response: str) -> str:
        return ""  # a model plants no bug on purpose

    def recall(self, response: str, *, bug: str, variant: int) -> None:
        return None  # nothing to take back: a model's answer depends on the messages only

    def generate(self, messages: list[Message], n: int) -> list[str]:
        """n responses for the chat (from the cache when this exact request was answered before).

        A server that answers with fewer choices than ``n`` (``transformers serve`` gives one, whatever
        ``n`` says) is asked for the rest one choice per request, those requests sent concurrently
        (within ``concurrency``)."""
        key = self.cache_key(messages, n)
        cached = self._cache_read(key)
        if cached is not None and len(cached) >= n:
            self.cache_hits += 1
            return cached[:n]
        out = self._choices(messages, n)
        if len(out) < n:
            with ThreadPoolExecutor(max_workers=min(n - len(out), self.concurrency)) as pool:
                for more in pool.map(lambda _: self._choices(messages, 1), range(n - len(out))):
                    out += more
        out = out[:n]
        self._cache_write(key, out)
        return out

    def close(self) -> None:
        self._client.close()


# ---------------------------------------------------------------------------- teacher


class TeacherGenerator:
    """The built-in teacher behind the Generator interface.

    First turn (no assistant message yet): sample i of n is the teacher's kernel for the reference in
    the first user message, with launch-geometry variant i, preceded by the template reasoning trace;
    ``round(bug_rate * n)`` samples carry a planted bug (synth.teacher.writer.choose_bug). Repair turn: the
    correct kernel with an explanation that quotes the last user message (the verifier's feedback).
    Tasks it cannot lower get a decline text (synth.teacher.writer.is_decline) and no code.
    Deterministic: same messages, n, backend, bug_rate and seed give the same responses."""

    is_llm = False
    concurrency = 1

    def __init__(self, backend: str, *, bug_rate: float = 0.0, seed: int = 0):
        if backend not in ("cpu", "cuda"):
            raise InputError("backend", f"the teacher writes cpu and cuda kernels, not {backend!r}")
        if not 0.0 <= bug_rate <= 1.0:
            raise InputError("generate.bug_rate", f"must be between 0 and 1, got {bug_rate}")
        self.name, self.backend, self.bug_rate, self.seed = "teacher", backend, float(bug_rate), int(seed)
        self._planted: dict[str, tuple[str, int]] = {}  # response sha -> (bug, variant)
        self._lock = threading.Lock()

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    def injected_bug(self, response: str) -> str:
        """The bug this teacher planted in one of its responses ("" for none or unknown)."""
        return self._planted.get(self._key(response), ("", 0))[0]

    def recall(self, response: str, *, bug: str, variant: int) -> None:
        """Remember a response of an earlier process (a stored candidate: its ``injected_bug`` and
        sample index), so a repair turn written now explains the same bug and keeps the same launch
        geometry as one written in the process that planted it."""
        with self._lock:
            self._planted.setdefault(self._key(response), (bug, variant))

    def _task_for(self, reference: str):
        return Task.from_code(reference, name="task", source="teacher")

    def generate(self, messages: list[Message], n: int) -> list[str]:
        try:
            reference = teacher.reference_from_messages(messages)
        except teacher.TeacherDeclined as e:
            return [teacher.decline_text(str(e))] * n
        first_turn = not any(m.role == "assistant" for m in messages)
        out = []
        for i in range(n):
            try:
                if first_turn:
                    bug = teacher.choose_bug(reference, self.backend, i, n, self.bug_rate, self.seed)
                    text = teacher.first_turn_response(reference, self.backend, bug=bug, variant=i,
                                                       reasoning=template_trace(self._task_for(reference), self.backend))
                    variant = i
                else:
                    prev = next(m.content for m in reversed(messages) if m.role == "assistant")
                    prev_bug, variant = self._planted.get(self._key(prev), ("", 0))
                    feedback = messages[-1].content if messages[-1].role == "user" else ""
                    text, bug = teacher.repair_response(reference, self.backend, feedback, prev_bug, variant), ""
            except teacher.TeacherDeclined as e:
                out.append(teacher.decline_text(str(e)))
                continue
            with self._lock:
                self._planted[self._key(text)] = (bug, variant)
            out.append(text)
        return out


# ---------------------------------------------------------------------------- factory and candidates


def make_generator(gen: GenerateSettings, *, backend: str) -> Generator:
    """The openai generator when ``gen.base_url`` is set (its key from the variable named by
    ``gen.api_key_env``), else the teacher for ``backend`` (``gen.bug_rate``, ``gen.bug_seed``)."""
    if gen.base_url:
        return OpenAIGenerator(gen.base_url, gen.model, api_key=os.environ.get(gen.api_key_env, ""),
                               concurrency=gen.concurrency, max_retries=gen.max_retries, timeout_s=gen.timeout_s,
                               temperature=gen.temperature, max_tokens=gen.max_tokens,
                               cache_dir=gen.cache_dir or None, backoff_s=gen.backoff_s)
    return TeacherGenerator(backend, bug_rate=gen.bug_rate, seed=gen.bug_seed)


def is_declined(generator: Generator, response: str) -> bool:
    """The teacher's answer for a task it cannot lower: no code, never stored as a candidate."""
    return generator.name == "teacher" and teacher.is_decline(response)


def dialogue_id_for(task_id: str, backend: str, generator_name: str, sample: int) -> str:
    """The id of the dialogue that first-turn sample ``sample`` of a task opens."""
    return "d" + content_hash(task_id, backend, generator_name, str(sample))


def make_candidate(task_id: str, backend: str, generator: Generator, response: str, *, dialogue_id: str, turn: int = 0,
                   parent_id: str | None = None, prompt: str = "", reasoning: str | None = None) -> Candidate:
    """The one way a model response becomes a Candidate (the generate and repair stages use it).

    ``code`` is the verifier's extraction (verifier.front.extract.extract_code), or the whole response
    when it holds no program (the verifier's extract stage then records why: that is data too).
    The id is ``Candidate.make_id(task, backend, code, parent_id or dialogue_id)``: the same
    response in the same place of the same dialogue always gets the same id, so a re-run adds
    nothing. ``reasoning`` None: the text the response puts before its code."""
    code = extract_code(response) or response
    return Candidate(candidate_id=Candidate.make_id(task_id, backend, code, parent_id or dialogue_id),
                     task_id=task_id, backend=backend, generator=generator.name, code=code, turn=turn,
                     parent_id=parent_id, dialogue_id=dialogue_id, prompt=prompt, response=response,
                     reasoning=reasoning_of_response(response) if reasoning is None else reasoning,
                     injected_bug=generator.injected_bug(response))
