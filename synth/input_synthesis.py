"""Deduce how to build and call a mined module, inside a sandbox, then filter and scale it.

The parent never executes mined code. :class:`SandboxPool` starts one *zygote* process per worker
(``python -I`` on this file) that imports torch once and then, for every job, forks a fresh child.
The child puts itself in its own process group, works in an empty temporary folder, sends its
stdout/stderr to /dev/null, limits its address space (RLIMIT_AS: the memory the zygote already maps
plus ``memory_bytes``) and writes one JSON result file; the zygote kills the whole group when the job
runs past its timeout. A forked child is a fresh process: the only state it shares with the zygote is
the imported torch, never another job's code.

Jobs:
    deduce    load the program, find constructor arguments (signatures, defaults, annotations, name
              conventions, error messages of failed attempts: an attribute-recording namespace for
              config objects, a dataclass built from its own defaults), find forward inputs (first
              layer of the module, then error messages such as "mat1 and mat2 shapes cannot be
              multiplied" or "expected input[...] to have 16 channels"), scale free dimensions toward
              ``target_numel``, then apply the filters in FILTERS order
    run_file  write the finished KernelBench program to its own file, run it with runpy, return the
              output shapes

Not protected against: code that escapes through already-open file descriptors of the zygote (none
are passed but the pipes), kernel-level resource exhaustion other than memory (threads, disk), or a
module that detects it is being probed. Deduction is heuristic: a module that needs inputs it cannot
guess is counted as not deduced.

This file uses only the standard library at import time (torch is imported inside the sandbox).
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

FILTERS = ("float_output", "no_io_or_randomness", "deterministic", "input_dependent", "runtime")


# ============================================================================ parent side


class SandboxPool:
    """``workers`` zygotes; ``run(job)`` is thread-safe and returns the child's JSON result.

    A zygote that stops answering is killed and replaced; the job then reports reason "sandbox_lost"."""

    def __init__(self, workers: int = 2, memory_bytes: int = 4 << 30):
        self.memory_bytes = int(memory_bytes)
        self._free: queue.Queue = queue.Queue()
        self._all: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        for _ in range(max(1, workers)):
            self._free.put(self._start())  # torch imports in the zygotes while the caller parses files

    def _start(self) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-I", "-u", os.path.abspath(__file__), "--zygote"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, start_new_session=True)
        with self._lock:
            self._all.append(p)
        return p

    def run(self, job: dict) -> dict:
        job = {**job, "memory_bytes": self.memory_bytes}
        z = self._free.get()
        try:
            if z is None or z.poll() is not None:
                z = self._start()
            result: dict = {}

            def talk() -> None:
                z.stdin.write(json.dumps(job) + "\n")
                z.stdin.flush()
                line = z.stdout.readline()
                if line:
                    result.update(json.loads(line))

            t = threading.Thread(target=talk, daemon=True)
            t.start()
            t.join(float(job.get("timeout_s", 20)) + 60)  # the zygote enforces the timeout; this is a backstop
            if not result:
                self._kill(z)
                z = None
                return {"status": "fail", "stage": "sandbox", "reason": "sandbox_lost", "error": "zygote did not answer"}
            return result
        finally:
            self._free.put(z)

    def _kill(self, z: subprocess.Popen) -> None:
        try:
            os.killpg(z.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        z.wait()

    def close(self) -> None:
        with self._lock:
            procs, self._all = self._all, []
        for p in procs:  # zygotes hold no state worth a clean exit; one may still be importing torch
            if p.poll() is None:
                self._kill(p)
            for stream in (p.stdin, p.stdout):
                try:
                    stream.close()
                except OSError:
                    pass

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ============================================================================ value specs
# A value spec is how a constructor argument is written into get_init_inputs(): JSON-able dicts
#   {"k": "lit", "src": "64"}                   a Python literal
#   {"k": "expr", "src": "nn.ReLU"}             an expression over the program's names
#   {"k": "call", "callee": "Cfg", "args": [...], "kwargs": {...}}
#   {"k": "ns", "fields": {"hidden_size": spec}}  types.SimpleNamespace(...)


def render_spec(spec: dict) -> str:
    k = spec["k"]
    if k in ("lit", "expr"):
        return spec["src"]
    if k == "call":
        parts = [render_spec(a) for a in spec["args"]] + [f"{n}={render_spec(v)}" for n, v in spec["kwargs"].items()]
        return f"{spec['callee']}({', '.join(parts)})"
    if k == "ns":
        return "types.SimpleNamespace(" + ", ".join(f"{n}={render_spec(v)}" for n, v in spec["fields"].items()) + ")"
    raise ValueError(f"unknown value spec {spec!r}")


def spec_needs_types(spec: dict) -> bool:
    if spec["k"] == "ns":
        return True
    if spec["k"] == "call":
        return any(spec_needs_types(a) for a in spec["args"]) or any(spec_needs_types(v) for v in spec["kwargs"].values())
    return False


# ============================================================================ sandbox side: guessing values

_INT_RULES = [
    (r"num_attention_heads|n_?heads?$|num_heads|nhead|^heads$", [4, 8, 2, 1]),
    (r"kernel", [3, 1, 5]),
    (r"stride", [1, 2]),
    (r"dilation|groups", [1]),
    (r"padding|^pad$", [1, 0]),
    (r"max_len|max_seq|seq_len|max_position|block_size|context|max_length|n_positions|n_ctx", [1024, 4096]),
    (r"vocab|num_embeddings|n_tokens|num_tokens|n_vocab", [1000, 100]),
    (r"(num_|n_)?(layers|blocks)$|depth|n_layer", [2, 1]),
    (r"reduction|ratio|expan|mult|factor", [4, 2]),
    (r"classes|labels|n_out|num_out", [10, 16]),
    (r"window|patch", [4, 2]),
]
_FLOAT_RULES = [
    (r"eps|epsilon", 1e-5), (r"drop|^p$|prob|rate", 0.0), (r"momentum", 0.1), (r"temp|tau", 1.0),
    (r"^base$|theta", 10000.0), (r"init|range|std", 0.02), (r"scale|alpha|beta|gamma|slope|lr|weight", 1.0),
]
_BOOL_RE = r"bias|affine|^use_|^is_|^has_|^with_|enable|causal|residual|inplace|batch_first|norm_first|pre_norm|learn|bidirectional|^return_|flag|track"
_STR_RULES = [(r"(^|_)act($|_)|activation|nonlin", "relu"), (r"padding_mode", "zeros"), (r"(^|_)mode$", "nearest"),
              (r"^norm$|norm_type", "batch"), (r"^pool$|pool_type", "avg"), (r"^init$|init_mode", "normal")]
_CONFIG_RE = r"^(config|cfg|args|opt|opts|hparams|params|conf|hp|settings|options|model_args|model_config)$"


def _int_guess(name: str, base: int) -> int:
    low = name.lower()
    for pat, values in _INT_RULES:
        if re.search(pat, low):
            return values[0]
    return base


def guess_value(name: str, base: int):
    """A plausible plain value for a config attribute or constructor argument named ``name``."""
    low = name.lower()
    if re.search(_BOOL_RE, low):
        return True
    for pat, v in _FLOAT_RULES:
        if re.search(pat, low) and not re.search(r"size|dim|num|heads|channels|features", low):
            return v
    if re.search(r"(^|_)act($|_)|activation", low):
        return "gelu"
    return _int_guess(name, base)


_NESTED = "<nested config>"


class RecordingConfig:
    """A config object that answers any attribute with a guess by name and remembers the guesses."""

    def __init__(self, base: int, overrides: dict | None = None):
        object.__setattr__(self, "_guessed", {})
        object.__setattr__(self, "_base", base)
        object.__setattr__(self, "_overrides", {} if overrides is None else overrides)  # from earlier errors
        object.__setattr__(self, "_last", None)  # the attribute read last: the likely culprit of an error

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        g = self._guessed
        if name not in g:
            v = self._overrides.get(name)
            if v is None:
                v = guess_value(name, self._base)
            if v == _NESTED or (v is not None and re.search(r"(^|_)(config|cfg)$", name.lower())):
                v = RecordingConfig(self._base)  # config.vision_config.hidden_size
            g[name] = v
        object.__setattr__(self, "_last", name)
        return g[name]

    def __getitem__(self, name: str):
        return self.__getattr__(name)

    def get(self, name: str, default=None):
        if default is not None and name not in self._guessed and name not in self.__dict__:
            self._guessed[name] = default
        return getattr(self, name)

    def __contains__(self, name: str) -> bool:
        return True

    def frozen_spec(self) -> dict:
        import ast

        fields = {}
        for k, v in self._guessed.items():
            if isinstance(v, RecordingConfig):
                fields[k] = v.frozen_spec()
                continue
            try:
                if ast.literal_eval(repr(v)) == v:
                    fields[k] = {"k": "lit", "src": repr(v)}
            except (ValueError, SyntaxError):
                pass  # not plain data: the module sets it itself, or the task fails its run-from-file check
        return {"k": "ns", "fields": fields}


def _annotation_type(param, ns: dict):
    a = param.annotation
    if isinstance(a, str):
        try:
            a = eval(a, ns)  # noqa: S307 - runs inside the sandbox, on the mined program's own names
        except Exception:
            return a
    return a


def _param_spec(param, ns: dict, base: int, variant: int, depth: int = 0, overrides: dict | None = None):
    """(value, spec) for one required constructor parameter. ``variant`` 1 asks for a list, 2 for a
    recording config object (``overrides``: attribute values learnt from earlier errors)."""
    import inspect
    import typing

    import torch.nn as nn

    name = param.name
    low = name.lower()
    ann = _annotation_type(param, ns)
    origin = typing.get_origin(ann)
    if origin is typing.Union:
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        ann = args[0] if args else ann
        origin = typing.get_origin(ann)
    if isinstance(ann, type) and ann.__module__ == ns.get("__name__") and depth < 3 and not issubclass(ann, nn.Module):
        return _build_class(ann, ns, base, depth + 1)
    if isinstance(ann, type) and issubclass(ann, nn.Module) or re.search(r"_layer$|_cls$|_class$|^block$", low):
        src = "nn.LayerNorm" if "norm" in low else "nn.ReLU"
        return eval(src, {"nn": nn}), {"k": "expr", "src": "torch." + src}
    if variant == 2:
        rc = RecordingConfig(base, overrides)
        return rc, {"k": "recording", "obj": rc}
    want_list = origin in (list, tuple) or ann in (list, tuple) or variant == 1
    empty = ann is inspect.Parameter.empty
    if ann is bool or (empty and re.search(_BOOL_RE, low)):
        return True, {"k": "lit", "src": "True"}
    dim_like = re.search(r"size|dim|num|heads|channels|features", low)
    if ann is float or (empty and not want_list and not dim_like and any(re.search(p, low) for p, _ in _FLOAT_RULES)):
        v = float(next((v for p, v in _FLOAT_RULES if re.search(p, low)), 1.0))
        return v, {"k": "lit", "src": repr(v)}
    str_rule = next((v for p, v in _STR_RULES if re.search(p, low)), None)
    if ann is str or (empty and not want_list and not dim_like and str_rule is not None):
        v = str_rule or "default"
        return v, {"k": "lit", "src": repr(v)}
    if empty and re.search(_CONFIG_RE, low):
        rc = RecordingConfig(base, overrides)
        return rc, {"k": "recording", "obj": rc}
    v = _int_guess(name, base)
    if want_list:
        lst = [v, v]
        return (tuple(lst) if origin is tuple or ann is tuple else lst), {"k": "lit", "src": repr(tuple(lst) if origin is tuple or ann is tuple else lst)}
    return v, {"k": "lit", "src": repr(v)}


def _required_params(sig):
    import inspect

    req, kwonly = [], []
    for p in sig.parameters.values():
        if p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        (kwonly if p.kind == p.KEYWORD_ONLY else req).append(p)
    return req, kwonly


def _build_class(cls, ns, base, depth):
    """Instantiate a (config) class of the program from its own defaults plus guesses."""
    import inspect

    req, kwonly = _required_params(inspect.signature(cls))
    vals, specs = [], []
    for p in req:
        v, s = _param_spec(p, ns, base, 0, depth)
        vals.append(v)
        specs.append(s)
    kw, kwspecs = {}, {}
    for p in kwonly:
        kw[p.name], kwspecs[p.name] = _param_spec(p, ns, base, 0, depth)
    return cls(*vals, **kw), {"k": "call", "callee": cls.__name__, "args": specs, "kwargs": kwspecs}


def _finalize_spec(spec: dict) -> dict:
    if spec["k"] == "recording":
        return spec["obj"].frozen_spec()
    if spec["k"] == "call":
        return {**spec, "args": [_finalize_spec(a) for a in spec["args"]],
                "kwargs": {k: _finalize_spec(v) for k, v in spec["kwargs"].items()}}
    return spec


class DeductionFailed(Exception):
    def __init__(self, stage: str, reason: str, error: str = ""):
        self.stage, self.reason, self.error = stage, reason, error
        super().__init__(f"{stage}/{reason}: {error}")


def _is_memory_error(e: BaseException) -> bool:
    return isinstance(e, MemoryError) or "can't allocate memory" in str(e) or "out of memory" in str(e).lower()


_ITERABLE_ERR = re.compile(r"'int' object is not (iterable|subscriptable)|object of type 'int' has no len")
_NOT_A_CONFIG_ERR = re.compile(r"'(int|float|str|bool|NoneType|type)' object has no attribute")


def _fix_constructor(e: Exception, req, pairs, variants: list[int], overrides: list[dict]) -> bool:
    """Change one constructor guess from an error; False when the error gives no hint."""
    msg = str(e)
    if _ITERABLE_ERR.search(msg):
        for i, (v, _) in enumerate(pairs):  # a config attribute read just before it was indexed
            if isinstance(v, RecordingConfig) and v._last and not isinstance(overrides[i].get(v._last), list):
                got = v._guessed.get(v._last)
                if isinstance(got, int) and not isinstance(got, bool):
                    overrides[i][v._last] = [got, got]
                    return True
        ints = [i for i, p in enumerate(req) if variants[i] == 0 and i < len(pairs) and isinstance(pairs[i][0], int)]
        plural = [i for i in ints if req[i].name.endswith("s")] or ints
        if plural:
            variants[plural[0]] = 1
            return True
    if _NOT_A_CONFIG_ERR.search(msg):
        for i, (v, _) in enumerate(pairs):  # config.sub.attr where config.sub was guessed as a number
            if isinstance(v, RecordingConfig) and v._last and overrides[i].get(v._last) != _NESTED \
                    and not isinstance(v._guessed.get(v._last), RecordingConfig):
                overrides[i][v._last] = _NESTED
                return True
        order = sorted(range(len(req)), key=lambda i: not re.search(r"conf|cfg|args|opt|param|setting",
                                                                     req[i].name + str(req[i].annotation), re.I))
        for i in order:
            if variants[i] != 2:
                variants[i] = 2
                return True
    return False


def construct(Model, ns: dict, bases: list[int], deadline: float):
    """Yield (model, init specs, base) for each constructor attempt that succeeds."""
    import inspect

    sig = inspect.signature(Model)
    req, kwonly = _required_params(sig)
    if kwonly:
        raise DeductionFailed("init", "keyword_only_args", ", ".join(p.name for p in kwonly))
    last, built = "", False
    for base in bases:
        variants = [0] * len(req)
        overrides: list[dict] = [{} for _ in req]
        for _ in range(2 * len(req) + 12):
            if time.monotonic() > deadline:
                raise DeductionFailed("init", "init_failed", "out of time: " + last)
            pairs = []
            try:
                for i, p in enumerate(req):
                    pairs.append(_param_spec(p, ns, base, variants[i], overrides=overrides[i]))
                model = Model(*[v for v, _ in pairs])
            except Exception as e:  # noqa: BLE001 - mined code raises anything
                if _is_memory_error(e):
                    raise DeductionFailed("init", "memory", str(e)[:300])
                last = f"{type(e).__name__}: {str(e)[:300]}"
                if _fix_constructor(e, req, pairs, variants, overrides):
                    continue
                break
            built = True
            yield model, pairs, base
            break
    if not built:
        raise DeductionFailed("init", "init_failed", last or "no constructor attempt succeeded")


# ============================================================================ sandbox side: forward inputs


class InputGuess:
    def __init__(self, kind: str, shape: list[int], hi: int = 2):
        self.kind, self.shape, self.hi = kind, list(shape), hi

    def key(self):
        return (self.kind, tuple(self.shape), self.hi)

    def copy(self) -> "InputGuess":
        return InputGuess(self.kind, self.shape, self.hi)

    def make(self, gen):
        import torch

        if self.kind == "int":
            return torch.randint(0, max(self.hi, 1), self.shape, generator=gen)
        return torch.randn(self.shape, generator=gen)

    def as_dict(self, name: str) -> dict:
        return {"name": name, "kind": self.kind, "shape": self.shape, "hi": self.hi,
                "dtype": "int64" if self.kind == "int" else "float32"}


def first_layer_hint(model, base: int) -> InputGuess:
    """An input guess from the first layer the module registers (or from its parameters)."""
    import torch.nn as nn

    for m in model.modules():
        if isinstance(m, (nn.Conv1d, nn.ConvTranspose1d)):
            return InputGuess("float", [2, m.in_channels, 32])
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
            return InputGuess("float", [2, m.in_channels, 16, 16])
        if isinstance(m, (nn.Conv3d, nn.ConvTranspose3d)):
            return InputGuess("float", [2, m.in_channels, 8, 8, 8])
        if isinstance(m, nn.Embedding):
            return InputGuess("int", [2, 16], m.num_embeddings)
        if isinstance(m, nn.Linear):
            return InputGuess("float", [2, 16, m.in_features])
        if isinstance(m, nn.LayerNorm):
            return InputGuess("float", [2, 16, *m.normalized_shape])
        if isinstance(m, (nn.BatchNorm2d, nn.InstanceNorm2d)):
            return InputGuess("float", [2, m.num_features, 16, 16])
        if isinstance(m, (nn.BatchNorm1d, nn.InstanceNorm1d)):
            return InputGuess("float", [2, m.num_features, 32])
        if isinstance(m, nn.GroupNorm):
            return InputGuess("float", [2, m.num_channels, 16, 16])
        if isinstance(m, nn.RNNBase):
            return InputGuess("float", [2, 16, m.input_size] if m.batch_first else [16, 2, m.input_size])
        if isinstance(m, nn.MultiheadAttention):
            return InputGuess("float", [2, 16, m.embed_dim] if m.batch_first else [16, 2, m.embed_dim])
    for p in list(model.parameters()) + list(model.buffers()):
        if p.dim() == 1 and p.numel() > 1:
            return InputGuess("float", [2, 16, p.shape[0]])
    return InputGuess("float", [2, 16, base])


def _dims_of(shape_text: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", shape_text)]


def adjust_inputs(guesses: list[InputGuess], msg: str, model) -> bool:
    """Change the guesses in place from an error message; False when the message gives no hint."""
    def set_last(value: int, old: int | None = None) -> bool:
        for g in guesses:
            if g.kind == "float" and (old is None or g.shape[-1] == old):
                g.shape[-1] = value
                return True
        return False

    def set_rank(rank: int) -> bool:
        changed = False
        for g in guesses:
            if g.kind == "float" and len(g.shape) != rank:
                g.shape = _shape_of_rank(rank, g.shape[1] if len(g.shape) > 3 else g.shape[-1])
                changed = True
        return changed

    m = re.search(r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", msg)
    if m:
        return set_last(int(m.group(3)), int(m.group(2))) or set_last(int(m.group(3)))
    m = re.search(r"expected input\[([^\]]*)\] to have (\d+) channels", msg)
    if m:
        seen = _dims_of(m.group(1))  # an unbatched input shows up with a leading 1 added
        for g in guesses:
            if g.kind == "float" and len(g.shape) > 1:
                if len(seen) != len(g.shape) and len(seen) > 2:
                    g.shape = [2, int(m.group(2))] + seen[2:]
                else:
                    g.shape[1] = int(m.group(2))
                return True
    m = re.search(r"running_mean should contain \d+ elements not (\d+)", msg) or re.search(
        r"Expected (?:weight|bias) to be (?:a vector )?of size equal to the number of channels in input.*?(\d+)", msg)
    if m:
        for g in guesses:
            if g.kind == "float" and len(g.shape) > 1:
                g.shape[1] = int(m.group(1))
                return True
    m = re.search(r"normalized_shape=\[([^\]]*)\], expected input with shape \[\*, ([^\]]*)\]", msg)
    if m:
        tail = _dims_of(m.group(2))
        for g in guesses:
            if g.kind == "float":
                g.shape = (g.shape[: max(1, len(g.shape) - len(tail))] + tail)
                return True
    m = re.search(r"Expected (\d)D \(unbatched\) or (\d)D \(batched\) input", msg) or re.search(
        r"Expected (\d)D or (\d)D input", msg, re.I) or re.search(r"expected (\d)D or (\d)D input", msg)
    if m:
        return set_rank(max(int(m.group(1)), int(m.group(2))))
    m = re.search(r"[Ee]xpected (\d)D input \(got (\d)D input\)", msg) or re.search(r"Expected (\d)D .*input.*got", msg)
    if m:
        return set_rank(int(m.group(1)))
    m = re.search(r"(?:not enough|too many) values to unpack \(expected (\d+)", msg)
    if m:
        return set_rank(int(m.group(1)))
    m = re.search(r"Dimension out of range \(expected to be in range of \[-(\d+), (\d+)\], but got (-?\d+)\)", msg)
    if m:
        need = abs(int(m.group(3))) + (1 if int(m.group(3)) >= 0 else 0)
        return set_rank(max(need, int(m.group(1)) + 1))
    m = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (\d+)", msg)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        for g in guesses:
            if g.kind == "float":
                for d in range(len(g.shape) - 1, -1, -1):
                    if g.shape[d] in (a, b) and d > 0:
                        g.shape[d] = b if g.shape[d] == a else a
                        return True
    if re.search(r"scalar type[s]? (Long|Int)|Expected tensor for argument #1 'indices'|expected scalar type Long|"
                 r"tensors used as indices must be long|only integer tensors", msg):
        for g in guesses:
            if g.kind == "float":
                g.kind, g.shape = "int", g.shape[:2] if len(g.shape) > 2 else g.shape
                g.hi = min([e.num_embeddings for e in model.modules() if hasattr(e, "num_embeddings")] or [2])
                return True
    if "index out of range in self" in msg:
        for g in guesses:
            if g.kind == "int" and g.hi > 2:
                g.hi = 2
                return True
    return False


def _shape_of_rank(rank: int, c: int) -> list[int]:
    """Feature size c last for ranks up to 3 ([N, L, C]), second for images and volumes ([N, C, H, W])."""
    if rank >= 4:
        return [2, c] + [16] * (rank - 2)
    return {1: [c], 2: [2, c], 3: [2, 16, c]}.get(rank, [c])


def _fallbacks(n: int, dims: list[int]) -> list[list[InputGuess]]:
    return [[InputGuess("float", _shape_of_rank(rank, d)) for _ in range(n)] for rank in (3, 2, 4, 1, 5) for d in dims]


def _forward_params(model):
    import inspect

    sig = inspect.signature(model.forward)
    req, kwonly = _required_params(sig)
    if kwonly:
        raise DeductionFailed("forward", "keyword_only_args", ", ".join(p.name for p in kwonly))
    names = [p.name for p in req]
    if not names:  # forward(self, input_ids=None, ...): feed the first optional positional parameter
        optional = [p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        names = optional[:1] or (["x"] if any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values()) else [])
    return names


def run_forward(model, guesses: list[InputGuess], seed: int):
    import torch

    gen = torch.Generator().manual_seed(seed)
    xs = [g.make(gen) for g in guesses]
    with torch.no_grad():
        return xs, model(*xs)


def deduce_inputs(model, base: int, init_ints: list[int], deadline: float, max_attempts: int = 40):
    """(input names, guesses, output) of the first forward call that runs; DeductionFailed otherwise."""
    names = _forward_params(model)
    hint = first_layer_hint(model, base)
    guesses = [hint.copy() for _ in names]
    plans = _fallbacks(len(names), list(dict.fromkeys([hint.shape[-1], *init_ints, base])))
    seen, last = set(), ""
    for _ in range(max_attempts):
        if time.monotonic() > deadline:
            break
        seen.add(tuple(g.key() for g in guesses))
        try:
            _, out = run_forward(model, guesses, 0)
            return names, guesses, out
        except Exception as e:  # noqa: BLE001
            if _is_memory_error(e):
                raise DeductionFailed("forward", "memory", str(e)[:300])
            last = f"{type(e).__name__}: {str(e)[:300]}"
            trial = [g.copy() for g in guesses]
            if adjust_inputs(trial, str(e), model) and tuple(g.key() for g in trial) not in seen:
                guesses = trial
                continue
            while plans and tuple(g.key() for g in plans[0]) in seen:
                plans.pop(0)
            if not plans:
                break
            guesses = plans.pop(0)
    raise DeductionFailed("forward", "forward_failed", last or "no forward attempt succeeded")


# ============================================================================ sandbox side: outputs, scaling, filters


def flatten_outputs(out) -> list:
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flatten_outputs(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in flatten_outputs(o)]
    return [out]


def _numel_metric(guesses, out) -> int:
    import torch

    n = [1]
    for g in guesses:
        p = 1
        for d in g.shape:
            p *= d
        n.append(p)
    n += [t.numel() for t in flatten_outputs(out) if isinstance(t, torch.Tensor)]
    return max(n)


def scale_inputs(model, guesses, out, target_numel: int, deadline: float, max_forward_s: float):
    """Double free dimensions (those whose doubling still runs) until the largest input or output
    would pass ``target_numel``. Returns (guesses, out)."""
    moves = [("batch",)] + [(i, d) for i, g in enumerate(guesses) for d in range(len(g.shape))]

    def apply(gs, move):
        gs = [g.copy() for g in gs]
        if move == ("batch",):
            b = gs[0].shape[0] if gs[0].shape else None
            for g in gs:
                if g.shape and g.shape[0] == b:
                    g.shape[0] *= 2
        else:
            i, d = move
            gs[i].shape[d] *= 2
        return gs

    def ok(gs):
        t0 = time.perf_counter()
        try:
            _, o = run_forward(model, gs, 0)
        except Exception:  # noqa: BLE001
            return None, 0.0
        return o, time.perf_counter() - t0

    live = list(moves)
    i = 0
    while live and time.monotonic() < deadline:
        move = live[i % len(live)]
        trial = apply(guesses, move)
        if _numel_metric(trial, out) > target_numel:
            live.remove(move)
            continue
        o, dt = ok(trial)
        if o is None or dt > max_forward_s / 4 or _numel_metric(trial, o) > target_numel:
            live.remove(move)
            continue
        guesses, out = trial, o
        i += 1
    return guesses, out


class _IOWatch:
    """sys.addaudithook recorder of file, socket and process events while ``active``."""

    EVENTS = ("open", "socket.", "subprocess.", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.remove",
              "os.rename", "os.mkdir", "shutil.", "urllib.")

    def __init__(self):
        self.active = False
        self.events: list[str] = []
        self.ignore = tuple(p for p in {sys.prefix, sys.base_prefix, sys.exec_prefix} if p)
        sys.addaudithook(self.hook)

    def hook(self, event: str, args) -> None:
        if not self.active or not event.startswith(self.EVENTS):
            return
        if event == "open" and args and isinstance(args[0], str) and args[0].startswith(self.ignore):
            return  # lazy imports of installed modules
        self.events.append(f"{event}{args!r}"[:200])


def _rng_state():
    import random

    import torch

    state = [torch.get_rng_state(), random.getstate()]
    np = sys.modules.get("numpy")
    if np is not None:
        state.append(np.random.get_state()[1].copy())
    return state


def _same_state(a, b) -> bool:
    import torch

    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor):
            if not torch.equal(x, y):
                return False
        elif hasattr(x, "shape"):
            if not (x == y).all():
                return False
        elif x != y:
            return False
    return True


def _same_outputs(a, b) -> bool:
    """Bitwise equality of two outputs (CPU, one thread: a deterministic module repeats exactly)."""
    import torch

    fa, fb = flatten_outputs(a), flatten_outputs(b)
    if len(fa) != len(fb):
        return False
    for x, y in zip(fa, fb):
        if isinstance(x, torch.Tensor):
            if not isinstance(y, torch.Tensor) or x.shape != y.shape or not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


def apply_filters(model, guesses, out, watch: _IOWatch, max_forward_s: float, min_forward_s: float) -> tuple[str | None, str, float]:
    """(first failed filter or None, detail, forward seconds) in FILTERS order, at the final shapes."""
    import torch

    leaves = flatten_outputs(out)
    tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
    if not tensors:
        return "float_output", "forward returns no tensor", 0.0
    bad = [type(t).__name__ if not isinstance(t, torch.Tensor) else str(t.dtype) for t in leaves
           if t is not None and not (isinstance(t, torch.Tensor) and t.is_floating_point())]
    if bad:
        return "float_output", "non floating-point outputs: " + ", ".join(bad), 0.0
    if any(not torch.isfinite(t).all() for t in tensors):
        return "float_output", "outputs hold NaN or inf", 0.0
    before = _rng_state()
    watch.active = True
    try:
        run_forward(model, guesses, 1)
    finally:
        watch.active = False
    if watch.events:
        return "no_io_or_randomness", "file/network/process access in forward: " + watch.events[0], 0.0
    if not _same_state(before, _rng_state()):
        return "no_io_or_randomness", "forward draws random numbers", 0.0
    xs, a = run_forward(model, guesses, 1)
    _, b = run_forward(model, guesses, 1)
    if not _same_outputs(a, b):
        return "deterministic", "two eval-mode runs on the same inputs disagree", 0.0
    _, c = run_forward(model, guesses, 2)
    if _same_outputs(a, c):
        return "input_dependent", "output does not change when the inputs change", 0.0
    times = []
    for seed in (3, 4, 5):
        t0 = time.perf_counter()
        run_forward(model, guesses, seed)
        times.append(time.perf_counter() - t0)
    best = min(times)
    if not (min_forward_s <= best <= max_forward_s):
        return "runtime", f"forward takes {best * 1e3:.3f} ms, outside [{min_forward_s * 1e3:g}, {max_forward_s * 1e3:g}] ms", best
    return None, "", best


def _output_specs(out) -> list[dict]:
    import torch

    return [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
            for t in flatten_outputs(out) if isinstance(t, torch.Tensor)]


def _load_program(code: str, filename: str) -> dict:
    import importlib.util

    with open(filename, "w") as f:
        f.write(code)
    spec = importlib.util.spec_from_file_location("mined_program", os.path.abspath(filename))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["mined_program"] = mod
    spec.loader.exec_module(mod)
    return vars(mod)


def job_deduce(job: dict) -> dict:
    """The child's work for a ``deduce`` job (see module docstring)."""
    import torch

    deadline = time.monotonic() + float(job["budget_s"])
    watch = _IOWatch()
    try:
        ns = _load_program(job["program"], "program.py")
    except Exception as e:  # noqa: BLE001
        return {"status": "fail", "stage": "load", "reason": "memory" if _is_memory_error(e) else "load_failed",
                "error": f"{type(e).__name__}: {str(e)[:300]}"}
    Model = ns["Model"]
    last: DeductionFailed | None = None
    try:
        for model, pairs, base in construct(Model, ns, [32, 64, 16, 8], deadline):
            model.eval()
            ints = [v for v, _ in pairs if isinstance(v, int) and not isinstance(v, bool) and v > 1]
            try:
                names, guesses, out = deduce_inputs(model, base, ints, deadline)
            except DeductionFailed as e:
                if e.reason == "memory":
                    raise
                last = e
                continue
            guesses, out = scale_inputs(model, guesses, out, int(job["target_numel"]), deadline, float(job["max_forward_s"]))
            failed, detail, seconds = apply_filters(model, guesses, out, watch, float(job["max_forward_s"]),
                                                    float(job.get("min_forward_s", 0.0)))
            specs = [_finalize_spec(s) for _, s in pairs]
            result = {"init_args": [render_spec(s) for s in specs], "needs_types": any(spec_needs_types(s) for s in specs),
                      "inputs": [g.as_dict(n) for n, g in zip(names, guesses)], "outputs": _output_specs(out),
                      "forward_s": seconds, "torch_threads": torch.get_num_threads()}
            if failed:
                return {"status": "fail", "stage": "filter", "reason": failed, "error": detail, **result}
            return {"status": "ok", **result}
    except DeductionFailed as e:
        last = e
    except Exception as e:  # noqa: BLE001
        last = DeductionFailed("forward", "memory" if _is_memory_error(e) else "crash", f"{type(e).__name__}: {str(e)[:300]}")
    last = last or DeductionFailed("init", "init_failed", "")
    return {"status": "fail", "stage": last.stage, "reason": last.reason, "error": last.error}


def job_run_file(job: dict) -> dict:
    """Run a finished KernelBench program from its own file; report the output specs."""
    import runpy

    import torch

    with open("task.py", "w") as f:
        f.write(job["program"])
    try:
        g = runpy.run_path(os.path.abspath("task.py"), run_name="kernelbench_task")
        torch.manual_seed(0)
        model = g["Model"](*g["get_init_inputs"]()).eval()
        with torch.no_grad():
            out = model(*g["get_inputs"]())
    except Exception as e:  # noqa: BLE001
        return {"status": "fail", "stage": "run_file", "reason": "run_file_failed", "error": f"{type(e).__name__}: {str(e)[:300]}"}
    return {"status": "ok", "outputs": _output_specs(out)}


# ============================================================================ zygote


def _vm_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _child(job: dict, result_path: str) -> None:
    import resource

    res: dict
    try:
        os.setpgid(0, 0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        limit = _vm_bytes() + int(job["memory_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        import torch

        torch.set_num_threads(int(job.get("threads", 1)))
        res = job_deduce(job) if job["mode"] == "deduce" else job_run_file(job)
    except BaseException as e:  # noqa: BLE001 - everything must end in a result
        res = {"status": "fail", "stage": job.get("mode", "?"), "reason": "memory" if _is_memory_error(e) else "crash",
               "error": f"{type(e).__name__}: {str(e)[:300]}"}
    try:
        with open(result_path + ".tmp", "w") as f:
            json.dump(res, f, default=str)
        os.rename(result_path + ".tmp", result_path)
    finally:
        os._exit(0)


def fork_and_run(job: dict) -> dict:
    """Fork a child for one job, enforce the timeout on its whole process group, return its result."""
    workdir = tempfile.mkdtemp(prefix="kernelmill-sbx-")
    result_path = os.path.join(workdir, "result.json")
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.chdir(workdir)
        _child(job, result_path)
    deadline = t0 + float(job.get("timeout_s", 20))
    status = None
    try:
        while True:
            wpid, status = os.waitpid(pid, os.WNOHANG)
            if wpid:
                break
            if time.monotonic() > deadline:
                for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                    try:
                        target()
                    except (ProcessLookupError, PermissionError):
                        pass
                os.waitpid(pid, 0)
                return {"status": "fail", "stage": job["mode"], "reason": "timeout",
                        "error": f"no result within {job.get('timeout_s')} s", "seconds": time.monotonic() - t0}
            time.sleep(0.005)
        try:
            os.killpg(pid, signal.SIGKILL)  # stray grandchildren
        except (ProcessLookupError, PermissionError):
            pass
        if os.path.exists(result_path):
            with open(result_path) as f:
                res = json.load(f)
        else:
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
            res = {"status": "fail", "stage": job["mode"], "reason": "crash", "error": f"child died (signal {sig})"}
        res["seconds"] = time.monotonic() - t0
        return res
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def zygote_main() -> None:
    import torch  # noqa: F401 - imported once here so that every forked child starts with it

    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            res = fork_and_run(json.loads(line))
        except Exception as e:  # noqa: BLE001
            res = {"status": "fail", "stage": "sandbox", "reason": "crash", "error": repr(e)[:300]}
        sys.stdout.write(json.dumps(res, default=str) + "\n")
        sys.stdout.flush()


if __name__ == "__main__" and sys.argv[1:] == ["--zygote"]:
    zygote_main()
