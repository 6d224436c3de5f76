"""The execution child's side of the channel (verifier/execute/channel.py is the verifier's): connected before any
candidate code is imported; it asks for each trial's seed when it reaches that trial, streams the monitors' records
and asks the harness for clocked brackets (verifier/child/harness_client.py). Imports: the standard library and
verifier.common.contract.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from verifier.common.contract import SOCKET_FILE


class Channel:
    """The child's side: connected before any candidate code is imported. Every call blocks until the
    verifier answers; a refusal (the step was already taken, by other code of this process) raises."""

    def __init__(self, job_dir: Path):
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(str(Path(job_dir) / SOCKET_FILE))
        self._buf = b""
        self.fds: list[int] = []  # file descriptors the verifier sent (the harness's shared memory)

    def _ask(self, msg: dict) -> dict:
        self._sock.sendall((json.dumps(msg) + "\n").encode())
        while b"\n" not in self._buf:
            part, fds, _, _ = socket.recv_fds(self._sock, 1 << 16, 4)
            self.fds += fds
            if not part:
                raise ConnectionError("the verifier closed the channel")
            self._buf += part
        line, self._buf = self._buf.split(b"\n", 1)
        reply = json.loads(line)
        if "refused" in reply:
            raise ConnectionRefusedError(f"the verifier refused {msg.get('op')!r}: {reply['refused']} (the channel was "
                                         "used by other code in this process)")
        return reply

    def trial_seed(self, i: int) -> int:
        return int(self._ask({"op": "trial", "i": i})["seed"])

    def timing_seeds(self) -> list[int]:
        return [int(s) for s in self._ask({"op": "timing"})["seeds"]]

    def record(self, key: str, record: dict) -> None:
        """Stream the monitors' record of one call as soon as it is filled: the verifier keeps the first one
        sent under each key, so an edit made later in this process changes nothing."""
        self._sock.sendall((json.dumps({"op": "record", "key": key, "record": record}) + "\n").encode())

    def build(self, spec: dict) -> dict:
        """Ask the verifier to build an extension this process needs at run time (load_inline arguments the static
        stage could not read): it builds and scans it on its side and answers ``ok``, ``key``, ``so_path`` and
        ``error`` (verifier/build/runtime.py). Blocks for the whole build."""
        return self._ask({"op": "build", "spec": spec})

    def ask(self, msg: dict) -> dict:
        return self._ask(msg)

    def close(self) -> None:
        self._sock.close()
