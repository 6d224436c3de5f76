"""The openai backend over real HTTP: a local chat-completions server (127.0.0.1, http.server) that
fails on purpose. Only the LLM itself is fake here (nothing hosted can run in CI); the client, the
sockets, the retries, the timeouts and the on-disk cache are the real ones."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kernelmill.errors import InputError
from kernelmill.schema import Message
from kernelmill.settings import GenerateSettings
from synth.generate.generators import GenerationError, OpenAIGenerator, TeacherGenerator, make_generator


class ChatServer:
    """Speaks POST /v1/chat/completions. ``script`` is a list of actions consumed one per request:
    an int status code to answer with, "sleep" to stall past the client's timeout, or "ok"."""

    def __init__(self, script=(), sleep_s=1.5, retry_after=None):
        self.script = list(script)
        self.sleep_s, self.retry_after = sleep_s, retry_after
        self.requests: list[dict] = []
        self.times: list[float] = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                    server.times.append(time.monotonic())
                    action = server.script.pop(0) if server.script else "ok"
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                left = [False]

                def leave():  # the request's work is over: counted out before any byte of the answer is sent (a
                    # client that has its answer may start its next request before this thread runs on)
                    if not left[0]:
                        left[0] = True
                        with server.lock:
                            server.in_flight -= 1
                try:
                    if action == "sleep":
                        time.sleep(server.sleep_s)
                        action = "ok"
                    elif action == "slow":
                        time.sleep(0.3)
                        action = "ok"
                    leave()
                    if isinstance(action, int):
                        self.send_response(action)
                        if server.retry_after is not None:
                            self.send_header("Retry-After", str(server.retry_after))
                        self.send_header("Content-Type", "application/json")
                        self.end_headers()
                        self.wfile.write(json.dumps({"error": {"message": f"status {action}"}}).encode())
                        return
                    last = body["messages"][-1]["content"]
                    choices = [{"index": i, "message": {"role": "assistant",
                                                        "content": f"answer {i} to {last[:20]}\n```python\nx = {i}\n```"}}
                               for i in range(body.get("n", 1))]
                    data = json.dumps({"id": "x", "object": "chat.completion", "model": body["model"],
                                       "choices": choices}).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and hung up, as intended
                finally:
                    leave()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


MSGS = [Message("system", "be brief"), Message("user", "write a kernel")]


def make(url, tmp_path, **kw):
    opts = dict(api_key="sk-test", concurrency=2, max_retries=4, timeout_s=5.0, temperature=0.0,
                cache_dir=tmp_path / "cache", backoff_s=0.05)
    opts.update(kw)
    return OpenAIGenerator(url, "test-model", **opts)


def test_retries_429_and_500_then_succeeds_with_backoff(tmp_path):
    with ChatServer(script=[429, 500, 503]) as srv:
        gen = make(srv.url, tmp_path)
        out = gen.generate(MSGS, 2)
    assert len(out) == 2 and out[0].startswith("answer 0") and "```python" in out[1]
    assert len(srv.requests) == 4  # three failures, then the answer
    assert srv.requests[-1]["path"] == "/v1/chat/completions"
    assert srv.requests[-1]["auth"] == "Bearer sk-test"
    assert srv.requests[-1]["body"]["n"] == 2 and srv.requests[-1]["body"]["model"] == "test-model"
    gaps = [b - a for a, b in zip(srv.times, srv.times[1:])]
    assert gaps[1] > gaps[0] * 1.3 and gaps[2] > gaps[1] * 1.3  # exponential, not constant, waits


def test_retry_after_header_is_honoured(tmp_path):
    with ChatServer(script=[429], retry_after=0.4) as srv:
        gen = make(srv.url, tmp_path)
        gen.generate(MSGS, 1)
    assert len(srv.requests) == 2
    assert srv.times[1] - srv.times[0] >= 0.35


def test_timeout_is_retried(tmp_path):
    with ChatServer(script=["sleep"], sleep_s=6.0) as srv:
        gen = make(srv.url, tmp_path, timeout_s=1.0)
        t0 = time.monotonic()
        out = gen.generate(MSGS, 1)
        elapsed = time.monotonic() - t0
    assert out and out[0].startswith("answer 0")
    assert len(srv.requests) == 2
    assert elapsed < 5.0  # the client gave up on the stalled request instead of waiting it out


def test_gives_up_after_max_retries(tmp_path):
    with ChatServer(script=[500] * 10) as srv:
        gen = make(srv.url, tmp_path, max_retries=2)
        with pytest.raises(GenerationError, match="3 attempts"):
            gen.generate(MSGS, 1)
    assert len(srv.requests) == 3


def test_client_error_is_not_retried(tmp_path):
    with ChatServer(script=[401]) as srv:
        gen = make(srv.url, tmp_path)
        with pytest.raises(InputError, match="401"):
            gen.generate(MSGS, 1)
    assert len(srv.requests) == 1


def test_cache_hit_sends_no_request_and_survives_a_new_client(tmp_path):
    with ChatServer() as srv:
        first = make(srv.url, tmp_path).generate(MSGS, 2)
        assert len(srv.requests) == 1
        again = make(srv.url, tmp_path)  # a re-run: a fresh client over the same cache dir
        assert again.generate(MSGS, 2) == first
        assert len(srv.requests) == 1 and again.cache_hits == 1
        # a different request (another temperature or prompt) is a miss
        make(srv.url, tmp_path, temperature=0.7).generate(MSGS, 2)
        make(srv.url, tmp_path).generate(MSGS + [Message("user", "again")], 2)
        assert len(srv.requests) == 3
    assert list((tmp_path / "cache").rglob("*.json"))


def test_concurrency_limit_holds_across_threads(tmp_path):
    with ChatServer(script=["slow"] * 6) as srv:
        # a generous timeout: a 0.3 s answer must never be retried, even on a loaded CI machine
        gen = make(srv.url, tmp_path, concurrency=2, cache_dir=None, timeout_s=10.0)
        threads = [threading.Thread(target=gen.generate, args=([Message("user", f"p{i}")], 1)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(srv.requests) == 6
    assert srv.max_in_flight == 2


def test_make_generator_picks_backend_from_config(tmp_path, monkeypatch):
    monkeypatch.setenv("KM_TEST_KEY", "sk-env")
    gen = make_generator(GenerateSettings(base_url="http://127.0.0.1:9/v1", model="m", api_key_env="KM_TEST_KEY",
                                          cache_dir=str(tmp_path)), backend="cpu")
    assert isinstance(gen, OpenAIGenerator) and gen.name == "m" and gen.url.endswith("/v1/chat/completions")
    assert gen._client.headers["Authorization"] == "Bearer sk-env"
    teacher = make_generator(GenerateSettings(base_url="", bug_rate=0.5, bug_seed=3), backend="cpu")
    assert isinstance(teacher, TeacherGenerator) and teacher.name == "teacher" and teacher.bug_rate == 0.5
    assert teacher.seed == 3  # the bug seed is its own setting (it was run.nnsmith_seed)
    with pytest.raises(InputError, match="generate.model"):
        make_generator(GenerateSettings(base_url="http://127.0.0.1:9/v1", model=""), backend="cpu")
