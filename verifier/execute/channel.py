"""The line between the verifier and an execution child: secrets handed out one call at a time, and a clock.

The verifier holds everything a verdict depends on that the candidate could use if it could see it: the seed
of every correctness trial and timed iteration (and, for tasks whose inputs a seed does not reproduce, the
input files), and the wall-clock time of the child's measured brackets. A child asks for each of them over a
Unix socket in its job directory when it reaches the step that needs it, and gets the next one only after it
delivered the step before:

- ``trial i``: the seed of correctness trial ``i`` (its input file written just then, where the task needs
  files). Trial ``i + 1``'s seed does not exist yet: no frame, global, heap or file of the child holds it
  while ModelNew is constructed or while trial ``i`` runs (ANTI_CHEAT rows 12, 20).
- ``timing``: the seeds of the timed iterations, drawn when the trials are over.
- ``build``: an extension the child needs at run time (load_inline arguments the static stage could not read),
  built and scanned on this side (``on_build``: verifier/build/runtime.py) and answered with the binary's path; the
  child never compiles (ANTI_CHEAT class 39).
- ``wall``: a bracket of ``calls`` calls, each on fresh inputs from seeds drawn now, timed by THIS process's
  clock from sending the seeds until the child answers with a float64 sum of every call's outputs
  (``wall_done``). The answer cannot arrive before the work is done (the sums are checked against the
  reference here), and nothing in the child can slow or speed this clock (rows 11, 19).

The candidate can find the socket and speak on it: it can ask out of turn (refused, and recorded: C12; the
verifier's own code in the child then finds its step taken and stops the job), or answer for the child
(sums it cannot know without doing the work). What the channel does not protect: the child's own report
(ops it saw, device times), which stays evidence checked against what this side measures.

Imports: the standard library and verifier.common.contract (the child's side is verifier/child/channel.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import socket
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from verifier.common.contract import SOCKET_FILE, ChildBuild, file_seal


_TRIAL_KEY = re.compile(r"trial(\d{1,6})")
# a bracket's steps (verifier/child/harness_client.py): asking for one, and the messages sent within it
BRACKET_OPS = ("bracket", "armed", "queued", "finished")


def draw_seed() -> int:
    return secrets.randbelow(2**31 - 1) + 1


@dataclass
class Ledger:
    """What the verifier handed out and measured for one job (kept in the verifier's process only)."""

    trial_seeds: dict[int, int] = field(default_factory=dict)
    timing_seeds: list[int] = field(default_factory=list)
    records: dict[str, dict] = field(default_factory=dict)  # the monitors' records, as streamed after each call
    problems: list[str] = field(default_factory=list)  # requests out of turn, malformed lines
    harness_error: str = ""  # the harness's own failure during a bracket (the verifier's, never the candidate's)
    # files of the job directory the verdict reads, sealed as they were handed over (name -> how: KEPT, a sha256, ""
    # when the name was not a regular file then): a trial's output when its record arrived, a shipped input file once
    # written. A file within the job's keep budget is copied once then into a memory file of this process's own
    # (``kept``): the verdict maps those, never the file again; a larger one is sealed by its sha256, checked when read
    sealed: dict[str, str] = field(default_factory=dict)
    kept: dict[str, Kept] = field(default_factory=dict)
    keep_left: int = field(default_factory=lambda: KEEP_BYTES)
    # extensions the child asked for at run time, built and scanned on this side (verifier/build/runtime.py)
    child_builds: list[ChildBuild] = field(default_factory=list)
    # this process's clock (time.monotonic) at the steps the child reached: when the channel opened (before the child
    # started) and closed (after it ended), "trial<i>" when that trial's seed was handed out, "trial<i>.done" when its
    # record arrived, "timing" when the timing seeds were; ``brackets`` counts the brackets clocked. For feedback
    # only (where a run that was stopped had got to: ``progress``), never a verdict's number
    steps: dict[str, float] = field(default_factory=lambda: {"opened": time.monotonic()})
    brackets: int = 0

    def seal(self, job_dir: Path, name: str) -> None:
        """Fix ``job_dir / name`` as handed over now (the first seal stands): its bytes copied into a file of this
        process's own where they fit the keep budget, else its sha256. A link, a directory or nothing is sealed as
        "not a regular file"."""
        if name in self.sealed:
            return
        try:
            fd = os.open(Path(job_dir) / name, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            self.sealed[name] = ""
            return
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self.sealed[name] = ""
            elif st.st_size <= self.keep_left:
                # the identity first: a write while the bytes are copied moves its change time, and the file reads as
                # changed (the bytes kept are what the verdict judges either way)
                own = _copy_own(fd, st.st_size)
                if own is not None:
                    self.kept[name] = Kept(own, _identity(st))
                    self.keep_left -= st.st_size
                    self.sealed[name] = KEPT
        finally:
            os.close(fd)
        if name not in self.sealed:  # beyond the keep budget: its sha256 (a link put there since reads as "")
            self.sealed[name] = file_seal(Path(job_dir) / name)

    def unsealed(self, job_dir: Path, name: str) -> str:
        """Why ``job_dir / name`` is not what the verifier sealed ('' when it is): never sealed, or changed since
        (the job directory is the candidate's to write: an output rewritten after its record was sent, with an
        answer computed later or elsewhere, or an input file rewritten to fit the output). A kept file is changed
        when its inode, size or change time moved (no process sets a change time: a write, a truncation, a new
        file under the name or a utime moves it); its kept bytes are what a verdict reads regardless."""
        want = self.sealed.get(name)
        if want is None:
            return f"{name} was never handed to the verifier"
        if not want:
            return f"{name} was not a regular file when it was handed over"
        path = Path(job_dir) / name
        if want == KEPT:
            try:
                now = _identity(os.lstat(path))
            except OSError:
                now = None
            return "" if now == self.kept[name].identity else f"{name} was changed after it was handed to the verifier"
        if file_seal(path) != want:
            return f"{name} was changed after it was handed to the verifier"
        return ""

    def source(self, job_dir: Path, name: str) -> Path:
        """The path ``torch.load`` reads for a sealed ``name``: the verifier's own copy of its bytes (``mapped``), else
        the file (``unsealed`` said it is the one sealed)."""
        kept = self.kept.get(name)
        if kept is not None and kept.fd is not None:
            return Path(f"/proc/self/fd/{kept.fd}")
        return Path(job_dir) / name

    def mapped(self, name: str) -> bool:
        """Whether ``source(name)`` is the verifier's own copy, which no other process can write: ``torch.load`` may
        map it (``mmap=True``: no second copy of a trial's output, its pages read as the checks reach them) where a
        file of the job directory must be read whole, since its writer may still hold it."""
        kept = self.kept.get(name)
        return kept is not None and kept.fd is not None

    def release(self, name: str) -> None:
        """``name``'s own copy let go once read (a mapping of it lives on with the tensors that use it; its identity
        stays, for ``unsealed``)."""
        kept = self.kept.get(name)
        if kept is not None and kept.fd is not None:
            os.close(kept.fd)
            self.kept[name] = Kept(None, kept.identity)

    def close(self) -> None:
        """Every own copy let go (the job is judged, or was given up)."""
        for name in list(self.kept):
            self.release(name)

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()

    def check(self, job_dir: Path, name: str):
        """``job_dir / name`` as sealed (``source``), once it is what the verifier sealed; raises Unsealed saying
        why not."""
        why = self.unsealed(job_dir, name)
        if why:
            raise Unsealed(why)
        return self.source(job_dir, name)


KEPT = "kept"


@dataclass(frozen=True)
class Kept:
    """A file's bytes as the verifier copied them at its seal, in a memory file of its own (``fd``; None once read:
    ``Ledger.release``), and the file's identity then (``_identity``)."""
    fd: int | None
    identity: tuple


def _keep_bytes() -> int:
    """How many bytes of a job's files the verifier keeps in memory at their seals: a sixty-fourth of the host's
    memory, at most 2 GiB (the outputs of a KernelBench-sized task's trials, a few hundred MB each, fit; past the
    budget a file is hashed instead). A bound on what a job's files can make the verifier hold, whatever the candidate
    writes (a sparse file of any size costs it nothing): eight execution slots keep at most an eighth of the host's
    memory."""
    try:
        phys = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        phys = 8 << 30
    return min(2 << 30, phys // 64)


KEEP_BYTES = _keep_bytes()


def _identity(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


# what a copy is sealed against once made: any write, truncation or growth, and any change of these seals
SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


def _copy_own(fd: int, size: int) -> int | None:
    """The first ``size`` bytes of ``fd`` copied by the kernel into a memory file of this process's own (``memfd``)
    and sealed (``SEALS``), or None where none can be made (the file is then hashed). Sealed, not only private: a
    process of the same user may open another's descriptors through /proc/<pid>/fd (a read-mode ptrace check, which
    the Yama policy does not restrict) where no sandbox hides the verifier's pid, and a copy opened so cannot be
    written, truncated or grown, nor its seals taken off. A file that shrinks while it is copied gets the bytes there
    were (it reads as changed either way). The copy costs about a third of reading the bytes into a buffer and
    loading from that (bench/lib/seal_cost.py)."""
    try:
        own = os.memfd_create("km-kept", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except (OSError, AttributeError):
        return None
    try:
        got = 0
        while got < size and (n := os.sendfile(own, fd, got, size - got)):
            got += n
        os.ftruncate(own, got)
        fcntl.fcntl(own, fcntl.F_ADD_SEALS, SEALS)
        return own
    except OSError:
        os.close(own)
        return None


class Unsealed(Exception):
    """A file of the job directory that a verdict reads is not what the verifier sealed (``Ledger.check``)."""


def progress(ledger: Ledger, n_trials: int) -> str:
    """Where a run that was stopped had got to, on this process's clock (``Ledger.steps``): the time before the first
    trial (import, construction, warm-up), the correctness calls finished and the slowest of them, how long the one
    it was in had run, and the timing stage's brackets. A timeout's feedback quotes it: a kernel seconds a call too
    slow reads differently from one that never returned."""
    st = ledger.steps
    end = st.get("closed", time.monotonic())
    began = [i for i in range(n_trials) if f"trial{i}" in st]
    done = [i for i in began if f"trial{i}.done" in st]
    if not began:
        return (f"It stopped before its first correctness call, {end - st['opened']:.1f} s after the process was "
                f"started (importing your module, building ModelNew or its extensions).")
    parts = [f"{len(done)} of {n_trials} correctness calls finished"]
    took = {i: st[f"trial{i}.done"] - st[f"trial{i}"] for i in done}
    if took:
        slowest = max(took, key=took.get)
        parts[0] += f" (the slowest, call {slowest + 1}, in {took[slowest]:.1f} s)"
    parts.append(f"the first began {st['trial0'] - st['opened']:.1f} s after the process was started")
    running = [i for i in began if i not in done]
    if running and "timing" not in st:
        parts.append(f"call {running[0] + 1} had run {end - st[f'trial{running[0]}']:.1f} s when it was stopped")
    if "timing" in st:
        parts.append(f"the timing stage had run {end - st['timing']:.1f} s, {ledger.brackets} timed "
                     f"bracket{'' if ledger.brackets == 1 else 's'} done")
    return "Where it got to (the verifier's clock): " + "; ".join(parts) + "."


class Driver:
    """The verifier's side of one job's channel: listens in ``job_dir``, serves one child connection in a
    thread, and records what it gave and measured in ``ledger``. ``on_trial(i, seed)`` runs before a trial's
    seed is sent (to ship input files); ``on_bracket(label, send, recv, host_waits)`` runs one clocked bracket
    (verifier/execute/harness.py) on the connection. ``on_build(n, spec)`` builds the ``n``-th extension the child
    asks for at run time (verifier/build/runtime.py ``child_builder``) and returns its ``ChildBuild``; the child
    waits for the answer and loads what was built here."""

    def __init__(self, job_dir: Path, n_trials: int, n_timing: int,
                 on_trial: Callable[[int, int], None] | None = None,
                 on_seed: Callable[[int, int], None] | None = None,
                 on_bracket: Callable | None = None,
                 on_build: Callable[[int, object], ChildBuild] | None = None):
        self.ledger = Ledger()
        self.job_dir = Path(job_dir)
        self.n_trials, self.n_timing = n_trials, n_timing
        self.on_trial = on_trial
        self.on_seed = on_seed  # told every trial's seed as it is handed out (the judge's prefetch: it only queues)
        self.on_bracket = on_bracket
        self.on_build = on_build
        self.path = Path(job_dir) / SOCKET_FILE
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(self.path))
        os.chmod(self.path, 0o666)  # the sandboxed child may run as another uid view
        self._sock.listen(1)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="km-channel", daemon=True)
        self._thread.start()

    def close(self) -> Ledger:
        self.ledger.steps["closed"] = time.monotonic()
        self._stop.set()
        self._thread.join(timeout=30)
        try:
            self._sock.close()
        finally:
            self.path.unlink(missing_ok=True)
        return self.ledger

    def _serve(self) -> None:
        conn = None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
                break
            except socket.timeout:
                continue
            except OSError:
                return
        if conn is None:
            return
        self._sock.close()  # one connection per job: the first is the verifier's code, before any candidate's
        conn.settimeout(0.2)
        buf = [b""]

        def recv(timeout_s: float | None = None) -> dict | None:
            """The next message (None when the child is gone or the job is over; ``{"op": "timeout"}`` when
            ``timeout_s`` passed first)."""
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            while b"\n" not in buf[0]:
                if self._stop.is_set():  # the job is over: what the child sent before it ended is still read
                    try:
                        conn.settimeout(0.05)
                        part = conn.recv(1 << 16)
                    except OSError:
                        return None
                    if not part:
                        return None
                    buf[0] += part
                    continue
                if deadline is not None and time.monotonic() > deadline:
                    return {"op": "timeout"}
                try:
                    part = conn.recv(1 << 16)
                except socket.timeout:
                    continue
                except OSError:
                    return None
                if not part:
                    return None
                buf[0] += part
            line, buf[0] = buf[0].split(b"\n", 1)
            try:
                msg = json.loads(line)
                if not isinstance(msg, dict) or not isinstance(msg.get("op"), str):
                    raise ValueError
                return msg
            except ValueError:
                self.ledger.problems.append(f"malformed message on the channel: {line[:80]!r}")
                return {"op": ""}

        def send(reply: dict, fds: list[int] | None = None) -> None:
            data = (json.dumps(reply) + "\n").encode()
            if fds:  # a file descriptor travels with the message it belongs to (SCM_RIGHTS)
                sent = socket.send_fds(conn, [data], fds)
                if sent < len(data):
                    conn.sendall(data[sent:])
            else:
                conn.sendall(data)

        next_trial, timing_sent = 0, False
        try:
            while (msg := recv()) is not None:
                op = msg["op"]
                if op == "record":  # the monitors' record of one call, kept as first sent
                    key = str(msg.get("key", ""))[:40]
                    if key and key not in self.ledger.records and isinstance(msg.get("record"), dict):
                        self.ledger.records[key] = msg["record"]
                        if (m := _TRIAL_KEY.fullmatch(key)) is not None:  # its output as the record says it is
                            self.ledger.seal(self.job_dir, f"out_{m.group(1)}.pt")
                            self.ledger.steps[f"{key}.done"] = time.monotonic()
                    continue
                reply = None
                if op == "trial" and msg.get("i") == next_trial and next_trial < self.n_trials:
                    seed = draw_seed()
                    self.ledger.trial_seeds[next_trial] = seed
                    self.ledger.steps[f"trial{next_trial}"] = time.monotonic()
                    if self.on_trial is not None:
                        self.on_trial(next_trial, seed)
                        self.ledger.seal(self.job_dir, f"trial_{next_trial}.pt")
                    if self.on_seed is not None:
                        self.on_seed(next_trial, seed)
                    next_trial += 1
                    reply = {"seed": seed}
                elif op == "timing" and not timing_sent and next_trial == self.n_trials:
                    timing_sent = True
                    self.ledger.steps["timing"] = time.monotonic()
                    self.ledger.timing_seeds = [draw_seed() for _ in range(self.n_timing)]
                    reply = {"seeds": self.ledger.timing_seeds}
                elif op == "bracket" and next_trial == self.n_trials and self.on_bracket is not None \
                        and not self.ledger.harness_error:
                    try:
                        self.on_bracket(str(msg.get("label", ""))[:40], send, recv, msg.get("host_waits") is True)
                        self.ledger.brackets += 1
                    except OSError:
                        break
                    except Exception as e:  # noqa: BLE001
                        if type(e).__name__ == "_ChildGone":
                            break
                        self.ledger.harness_error = f"{type(e).__name__}: {str(e)[:400]}"
                        send({"refused": "the harness failed"})
                    continue
                elif op == "build" and self.on_build is not None:  # at any step: construction or a trial
                    try:
                        built = self.on_build(len(self.ledger.child_builds), msg.get("spec"))
                    except Exception as e:  # noqa: BLE001 - the verifier's own build code failed
                        built = ChildBuild(n=len(self.ledger.child_builds),
                                           verifier_error=f"{type(e).__name__}: {str(e)[:300]}")
                    self.ledger.child_builds.append(built)
                    reply = {"ok": built.ok, "key": built.key, "so_path": built.so_path,
                             "error": built.verifier_error or built.error}
                elif self.ledger.harness_error and op in BRACKET_OPS:
                    # the harness failed mid-bracket: the child's own code goes on with the bracket it was in (its
                    # "queued" or "finished" arrives here) or asks for the next one. The verifier's failure, not a
                    # request out of turn (it would have made the verdict a C12 cheat); nothing is handed out
                    reply = {"refused": "the harness failed"}
                else:
                    self.ledger.problems.append(f"request out of turn on the channel: {json.dumps(msg)[:80]!r}")
                    reply = {"refused": "out of turn"}
                send(reply)
        except OSError:
            pass
        conn.close()
