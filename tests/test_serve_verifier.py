"""The verifier as a reward service: a real `kernelmill serve-verifier` (cpu backend) in a subprocess, called over
HTTP with real candidates from bench/lib/fixtures.py. Only the client's retry test uses a fake server (it says so)."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.lib import fixtures as fx
from kernelmill.errors import InputError
from kernelmill.schema import Verdict, task_id_for
from verifier.serve.client import ServiceError, VerifierClient, VerifyItem, parse_request

ROOT = Path(__file__).resolve().parent.parent
# cheap verification: no torch.compile timing of the reference, few timed calls
FAST = ["verify.time_torch_compile=false", "verify.timing_trials=5", "verify.run_timeout_s=60"]
WRONG_RELU = fx.cpu_candidate("return ext.relu(x.t().contiguous()).view(x.shape)")  # transposed: wrong values
CRASHING = fx.cpu_candidate("ext.segv(x)\nreturn x")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    record: Path
    log: Path

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.record.read_text().splitlines()] if self.record.exists() else []

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_server(tmp: Path, *args: str, sets: list[str] = FAST) -> Server:
    """`kernelmill serve-verifier --backend cpu` on a free port, once /health answers (the test session's
    KERNELMILL_HOME, so builds are shared with the other tests)."""
    port = free_port()
    record, log = tmp / "served.jsonl", tmp / "server.log"
    cmd = [sys.executable, "-m", "flows.cli", "serve-verifier", "--port", str(port), "--backend", "cpu",
           "--record", str(record), *args, *[x for s in sets for x in ("--set", s)]]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(f"http://127.0.0.1:{port}", proc, record, log)
    deadline = time.monotonic() + 180  # importing torch and fastapi on a busy 2-core machine
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"serve-verifier exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(server.url + "/health", timeout=5) as r:
                if json.loads(r.read())["status"] == "ok":
                    return server
        except (OSError, ValueError):
            time.sleep(0.5)
    server.stop()
    raise AssertionError(f"serve-verifier did not answer /health in 180 s:\n{log.read_text()}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # calls close at 4 items, or 1.5 s after the first request: requests sent together meet in one call
    s = start_server(tmp_path_factory.mktemp("serve"), "--max-batch", "4", "--max-wait-ms", "1500")
    yield s
    s.stop()


def post(url: str, body: bytes | str) -> tuple[int, dict]:
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(url + "/verify", data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_batch_gets_one_verdict_per_item_in_order_and_copies_are_verified_once(server):
    client = VerifierClient(server.url)
    before = client.health()
    assert before["backend"] == "cpu" and before["verifier"] == "local"
    tid = task_id_for(fx.RELU_TASK)
    items = [VerifyItem(completion=fx.HONEST_RELU, reference_code=fx.RELU_TASK),
             VerifyItem(completion=f"Here it is:\n```python\n{WRONG_RELU}\n```", reference_code=fx.RELU_TASK),
             VerifyItem(completion=CRASHING, task_id=tid),
             VerifyItem(completion="I cannot write this kernel.", task_id=tid),
             VerifyItem(completion=fx.HONEST_RELU, task_id=tid, candidate_id="my-copy")]
    response = client.verify(items, tasks={tid: fx.RELU_TASK})
    v = response.verdicts
    assert all(isinstance(x, Verdict) for x in v) and len(v) == 5
    assert [x.status for x in v] == ["pass", "wrong", "crash", "extract_error", "pass"]
    assert [x.stage_reached for x in v[:4]] == ["timing", "correctness", "correctness", "extract"]
    assert v[0].reward > v[1].reward > v[3].reward and v[0].correct and not v[1].correct
    assert v[0].speedup_eager is not None and v[0].trials >= 5 and v[0].task_id == tid
    assert "mismatch" in v[1].feedback.lower() or "wrong" in v[1].feedback.lower()
    assert v[4].candidate_id == "my-copy" and v[4].reward == v[0].reward  # the copy got the first one's verdict
    assert response.batch.items == 5 and response.batch.verified == 4
    served = [r for r in server.records() if r["batch_id"] == response.batch.batch_id]
    assert [(r["candidate_id"], r["reward"]) for r in served] == [(x.candidate_id, x.reward) for x in v]
    after = client.health()
    assert after["items"] - before["items"] == 5 and after["verified"] - before["verified"] == 4
    # the server logs a line per answered request (README: "The verifier as a reward service")
    line = f"5 item(s) in batch {response.batch.batch_id} (5 items, 4 verified"
    assert any(ln.startswith("POST /verify from 127.0.0.1:") and line in ln and "pass 2" in ln
               for ln in server.log.read_text().splitlines()), server.log.read_text()[-2000:]


@pytest.mark.parametrize("body,status,field", [
    ("{not json", 400, "body"),
    ("[]", 422, "body"),
    ("{}", 422, "items"),
    ('{"items": []}', 422, "items"),
    ('{"itemz": [{"completion": "x"}]}', 422, "itemz"),
    ('{"items": [{"reference_code": "R"}]}', 422, "items[0].completion"),
    ('{"items": [{"completion": 3, "reference_code": "R"}]}', 422, "items[0].completion"),
    ('{"items": [{"completion": "x"}]}', 422, "items[0]"),
    ('{"items": [{"completion": "x", "task_id": "t0000"}]}', 422, "items[0].task_id"),
    ('{"items": [{"completion": "x", "reference_code": "R", "task_id": "t0000"}]}', 422, "items[0].task_id"),
    ('{"items": [{"completion": "x", "reference_code": "R", "score": 1}]}', 422, "items[0].score"),
    ('{"items": [{"completion": "x", "reference_code": "R"}], "backend": "musa"}', 422, "backend"),
    ('{"items": [{"completion": "x", "reference_code": "R"}], "tasks": ["R"]}', 422, "tasks"),
])
def test_a_bad_request_is_a_4xx_naming_its_field_and_the_server_goes_on(server, body, status, field):
    code, answer = post(server.url, body)
    assert code == status and answer["detail"]["field"] == field, answer
    assert VerifierClient(server.url).health()["status"] == "ok"


def test_a_cuda_request_to_a_server_without_a_gpu_is_refused_naming_the_backend(server):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ServiceError) as e:
        VerifierClient(server.url).verify([VerifyItem(completion="x", reference_code=fx.RELU_TASK)], backend="cuda")
    assert e.value.status == 422 and e.value.field == "backend" and "CUDA" in str(e.value)


def test_requests_sent_together_are_verified_in_one_call(server):
    client = VerifierClient(server.url)
    start = threading.Barrier(4)
    batches: dict[int, object] = {}

    def send(i: int) -> None:
        start.wait()
        r = client.verify([VerifyItem(completion=f"no code, answer {i}", reference_code=fx.RELU_TASK)])
        batches[i] = r.batch

    threads = [threading.Thread(target=send, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({b.batch_id for b in batches.values()}) == 1
    assert all(b.requests == 4 and b.items == 4 for b in batches.values())


def test_a_client_that_goes_away_does_not_take_the_server_down(server):
    host, port = server.url.removeprefix("http://").split(":")
    body = json.dumps({"items": [{"completion": "gone before the answer", "reference_code": fx.RELU_TASK}]}).encode()
    with socket.create_connection((host, int(port))) as s:  # a whole request, then the client leaves
        s.sendall(b"POST /verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
    with socket.create_connection((host, int(port))) as s:  # half a request, then the client leaves
        s.sendall(b"POST /verify HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"items\": [")
    r = VerifierClient(server.url).verify([VerifyItem(completion="still here", reference_code=fx.RELU_TASK)])
    assert r.verdicts[0].status == "extract_error"
    assert server.proc.poll() is None


@pytest.mark.slow
def test_a_server_on_ray_verifies_through_the_cluster(tmp_path):
    """`--ray local`: the same service with its calls on a Ray cluster this process starts (verifier/ray_pool.py)."""
    s = start_server(tmp_path, "--ray", "local")
    try:
        client = VerifierClient(s.url)
        assert client.health()["verifier"] == "ray local"
        r = client.verify([VerifyItem(completion=fx.HONEST_RELU, reference_code=fx.RELU_TASK),
                           VerifyItem(completion="no kernel here", reference_code=fx.RELU_TASK)])
        assert [v.status for v in r.verdicts] == ["pass", "extract_error"] and r.verdicts[0].reward > 0
        assert [x["reward"] for x in s.records()] == [v.reward for v in r.verdicts]
    finally:
        s.stop()


def test_the_command_refuses_a_cuda_backend_without_a_gpu_naming_it():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out = subprocess.run([sys.executable, "-m", "flows.cli", "serve-verifier", "--backend", "cuda",
                          "--port", str(free_port())], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2 and "--backend cuda" in out.stderr, out.stderr


def test_parse_request_names_the_item_whose_task_id_does_not_match_its_program():
    good = parse_request({"items": [{"completion": "x", "reference_code": fx.RELU_TASK,
                                     "task_id": task_id_for(fx.RELU_TASK)}]})
    assert good.items[0].task_id == task_id_for(fx.RELU_TASK) and good.backend == ""
    with pytest.raises(InputError) as e:
        parse_request({"items": [{"completion": "x", "task_id": "t1"},
                                 {"completion": "y", "reference_code": fx.RELU_TASK, "task_id": "relu"}]})
    assert e.value.what == "items[1].task_id"


# ---------------------------------------------------------------------------- the client's retries (a fake server)


class _Flaky(http.server.BaseHTTPRequestHandler):
    """A FAKE server, for the client's retries only: answers 503 to the first ``fail`` requests, 422 when the
    path says so, else a well-formed response with one verdict."""

    fail = 2
    seen: list[str] = []

    def do_POST(self):  # noqa: N802  (http.server's name)
        self.rfile.read(int(self.headers["Content-Length"]))
        type(self).seen.append(self.path)
        if self.path == "/bad/verify":
            return self._send(422, {"detail": {"field": "items[0].completion", "problem": "required"}})
        if len(type(self).seen) <= type(self).fail:
            return self._send(503, {"detail": {"field": "verifier", "problem": "busy"}})
        self._send(200, {"verdicts": [{"candidate_id": "c1", "status": "pass", "reward": 1.0, "correct": True,
                                       "versions": {"torch": "x"}}],
                         "batch": {"batch_id": 7, "requests": 1, "items": 1, "verified": 1, "seconds": 0.1}})

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # quiet
        pass


def test_the_client_retries_5xx_and_lost_connections_with_backoff_but_not_4xx():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    slept: list[float] = []
    try:
        _Flaky.seen = []
        r = VerifierClient(url, retries=3, backoff_s=0.5, sleep=slept.append).verify([VerifyItem("x", task_id="t1")])
        assert slept == [0.5, 1.0] and len(_Flaky.seen) == 3  # two 503s, then the answer
        assert r.verdicts[0].status == "pass" and r.verdicts[0].versions == {"torch": "x"} and r.batch.batch_id == 7
        _Flaky.seen, slept[:] = [], []
        with pytest.raises(ServiceError) as e:
            VerifierClient(url + "/bad", retries=3, sleep=slept.append).verify([VerifyItem("x", task_id="t1")])
        assert e.value.status == 422 and e.value.field == "items[0].completion"
        assert len(_Flaky.seen) == 1 and slept == []  # a wrong request is not sent again
    finally:
        httpd.shutdown()
        httpd.server_close()
    slept.clear()
    with pytest.raises(ServiceError) as e:  # nobody listens there any more
        VerifierClient(url, retries=2, backoff_s=0.1, sleep=slept.append).health()
    assert slept == [0.1, 0.2] and "3 attempts" in str(e.value)
