"""Deduce the constructor arguments of a mined ``Model`` and write them as ``get_init_inputs()`` source.

Runs inside the sandbox's forked children (synth/input_sandbox.py), never in the parent.
:func:`construct` finds constructor arguments from signatures, defaults, annotations, name conventions
and the error messages of failed attempts: an attribute-recording namespace (:class:`RecordingConfig`)
for config objects, a dataclass of the program built from its own defaults. Every guessed value comes
with a *value spec* that :func:`render_spec` writes back as source.

Also here, shared with synth/input_synthesis.py and synth/input_sandbox.py: :class:`DeductionFailed`
(stage, reason and error of a failed deduction), :func:`is_memory_error`, :func:`required_params`.

Deduction is heuristic: a module whose constructor needs values it cannot guess is counted as not
deduced (reason ``init_failed``). This file uses only the standard library at import time (torch is
imported inside the sandbox).
"""

from __future__ import annotations

import re
import time


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


# ============================================================================ guessing values

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


def required_params(sig):
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

    req, kwonly = required_params(inspect.signature(cls))
    vals, specs = [], []
    for p in req:
        v, s = _param_spec(p, ns, base, 0, depth)
        vals.append(v)
        specs.append(s)
    kw, kwspecs = {}, {}
    for p in kwonly:
        kw[p.name], kwspecs[p.name] = _param_spec(p, ns, base, 0, depth)
    return cls(*vals, **kw), {"k": "call", "callee": cls.__name__, "args": specs, "kwargs": kwspecs}


def finalize_spec(spec: dict) -> dict:
    if spec["k"] == "recording":
        return spec["obj"].frozen_spec()
    if spec["k"] == "call":
        return {**spec, "args": [finalize_spec(a) for a in spec["args"]],
                "kwargs": {k: finalize_spec(v) for k, v in spec["kwargs"].items()}}
    return spec


class DeductionFailed(Exception):
    def __init__(self, stage: str, reason: str, error: str = ""):
        self.stage, self.reason, self.error = stage, reason, error
        super().__init__(f"{stage}/{reason}: {error}")


def is_memory_error(e: BaseException) -> bool:
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
    req, kwonly = required_params(sig)
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
                if is_memory_error(e):
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
