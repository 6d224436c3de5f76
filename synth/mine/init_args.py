"""Deduce the constructor arguments of a mined ``Model`` and write them as ``get_init_inputs()`` source.

Runs inside the sandbox's forked children (synth/mine/input_sandbox.py), never in the parent.
:func:`construct` first tries the repository's own calls of the class (synth/mine/callsites.py:
``ResNet(BasicBlock, [2, 2, 2, 2])``), then finds constructor arguments from signatures, defaults,
annotations, name conventions and the error messages of failed attempts: an attribute-recording
namespace (:class:`RecordingConfig`) for config objects, a dataclass of the program built from its own
defaults, a module instance or class for arguments the module calls (``fn``, ``norm_layer``, ``block``),
keyword arguments a ``**kwargs`` constructor passes on. Keyword-only parameters are guessed like
positional ones and passed by keyword. Every value comes with a *value spec* that :func:`render_spec`
writes back as source.

Also here, shared with synth/mine/input_synthesis.py and synth/mine/input_sandbox.py: :class:`DeductionFailed`
(stage, reason and error of a failed deduction), :func:`is_memory_error`, :func:`required_params`.

Deduction is heuristic: a module whose constructor needs values it cannot guess is counted as not
deduced (reason ``init_failed``). This file uses only the standard library at import time (torch is
imported inside the sandbox).
"""

from __future__ import annotations

import ast
import collections.abc
import inspect
import re
import traceback
import typing
from dataclasses import dataclass

from synth.mine.own_clock import own_clock  # budgets on the clock a busy machine does not advance


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
def _boolish(low_name: str) -> bool:
    """A flag by its name (``use_bias``, ``causal``), not a count (``num_residual_streams``)."""
    return bool(re.search(_BOOL_RE, low_name)) and not re.match(r"(n|num|max|min)_", low_name) \
        and not re.search(r"size|dim|streams|count|depth", low_name)


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
    if _boolish(low):
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


# Constructor parameters that are other modules. An instance (``PreNorm(dim, fn)``, ``Residual(fn)``) is
# a GELU: it keeps the shape and is not the identity, so the task still computes something of its own.
# A factory (``norm_layer=nn.LayerNorm``, ``act_layer``, ``block``) is called with whatever the module
# passes: nn.Identity accepts any arguments, LayerNorm and GELU take the usual ones of their kind.
_MODULE_RE = (r"^(fn|func|function|net|module|sublayer|submodule|inner|body|wrapped|layer|model|backbone)$"
              r"|_(fn|net|module)$")
_FACTORY_RE = r"_layer$|_cls$|_class$|^block$|_block$|^block_type$|_factory$|_fn_cls$"
MODULE_INSTANCE, MODULE_FACTORY, LONG_LIST, TRIPLE, MODULE_LINEAR = 3, 4, 5, 6, 7
_NO_ATTRIBUTE_ERR = re.compile(r"'(\w+)' object has no attribute '(\w+)'")
LINEAR_ATTRIBUTES = frozenset(("weight", "bias", "in_features", "out_features"))


def _named_like(pattern: str, low_name: str) -> bool:
    return bool(re.search(pattern, low_name)) and not re.match(r"(n|num|max|min|dim|d)_", low_name)


def module_value(low_name: str, factory: bool):
    """(value, spec) of a module argument named ``low_name``: an instance, or a class when ``factory``."""
    import torch.nn as nn

    if factory:
        src = "LayerNorm" if "norm" in low_name else "GELU" if re.search(r"act|nonlin", low_name) else "Identity"
        return getattr(nn, src), {"k": "expr", "src": f"torch.nn.{src}"}
    return nn.GELU(), {"k": "expr", "src": "torch.nn.GELU()"}


def _param_spec(param, ns: dict, base: int, variant: int, depth: int = 0, overrides: dict | None = None):
    """(value, spec) for one required constructor parameter. ``variant`` 1 asks for a list, 2 for a
    recording config object (``overrides``: attribute values learnt from earlier errors), 3 for a module
    instance, 4 for a module class (see ``module_value``)."""
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
    if variant == MODULE_LINEAR:  # the module reads fn.weight / fn.in_features: a layer with weights,
        # wider than the guessed sizes so that what they bound (a low rank, a head count) fits
        return nn.Linear(2 * base, 2 * base), {"k": "expr", "src": f"torch.nn.Linear({2 * base}, {2 * base})"}
    callable_ann = ann is collections.abc.Callable or origin is collections.abc.Callable or (  # `act: Callable`
        isinstance(ann, str) and re.fullmatch(r"(typing\.|collections\.abc\.)?Callable(\[.*\])?", ann) is not None)
    if variant == MODULE_INSTANCE or (variant == 0 and (
            isinstance(ann, type) and issubclass(ann, nn.Module) or _named_like(_MODULE_RE, low) or callable_ann)):
        return module_value(low, factory=False)
    if variant == MODULE_FACTORY or (variant == 0 and _named_like(_FACTORY_RE, low)):
        return module_value(low, factory=True)
    if variant == 2:
        rc = RecordingConfig(base, overrides)
        return rc, {"k": "recording", "obj": rc}
    want_list = origin in (list, tuple) or ann in (list, tuple) or variant in (1, LONG_LIST, TRIPLE)
    empty = ann is inspect.Parameter.empty
    if ann is bool or (empty and _boolish(low)):
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
        lst = [v] * {LONG_LIST: 4, TRIPLE: 3}.get(variant, 2)  # four stages (ResNet layers) when two were too few
        as_tuple = origin is tuple or ann is tuple or variant in (LONG_LIST, TRIPLE)  # asserts often say "tuple"
        value = tuple(lst) if as_tuple else lst
        return value, {"k": "lit", "src": repr(value)}
    return v, {"k": "lit", "src": repr(v)}


def required_params(sig):
    req, kwonly = [], []
    for p in sig.parameters.values():
        if p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        (kwonly if p.kind == p.KEYWORD_ONLY else req).append(p)
    return req, kwonly


def _build_class(cls, ns, base, depth):
    """Instantiate a (config) class of the program from its own defaults plus guesses."""
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
    """A failed deduction: its stage, reason and error; ``line`` is the mined program's source line
    where the last attempt failed (used to tell which constructor argument was called)."""

    def __init__(self, stage: str, reason: str, error: str = "", line: str = ""):
        self.stage, self.reason, self.error, self.line = stage, reason, error, line
        super().__init__(f"{stage}/{reason}: {error}")


def is_memory_error(e: BaseException) -> bool:
    return isinstance(e, MemoryError) or "can't allocate memory" in str(e) or "out of memory" in str(e).lower()


_ITERABLE_ERR = re.compile(r"'int' object is not (iterable|subscriptable)|object of type 'int' has no len")
_NOT_A_CONFIG_ERR = re.compile(r"'(int|float|str|bool|NoneType|type)' object has no attribute")
NOT_CALLABLE_ERR = re.compile(r"'(int|float|str|bool|list|tuple)' object is not callable")
PROGRAM_FILE = "program.py"  # the file name the sandbox loads a mined program from


def failing_line(e: BaseException) -> str:
    """The source line of the mined program (not torch's) where ``e`` was raised; "" when none."""
    lines = [f.line or "" for f in traceback.extract_tb(e.__traceback__) if f.filename.endswith(PROGRAM_FILE)]
    return lines[-1] if lines else ""


def params_named_in(line: str, names: list[str]) -> list[str]:
    """The parameter names a failing line calls: ``self.fn(x)`` names ``fn``, ``block(dim)`` names
    ``block``; then any other parameter name the line mentions."""
    called = re.findall(r"(?:self\.)?(\w+)\s*\(", line)
    first = [n for n in called if n in names]
    return first or [n for n in names if re.search(rf"\b{re.escape(n)}\b", line)]


def _fix_constructor(e: Exception, params, pairs, variants: list[int], overrides: list[dict]) -> bool:
    """Change one constructor guess from an error; False when the error gives no hint."""
    msg = str(e)
    m = _NO_ATTRIBUTE_ERR.search(msg)
    if m and m.group(2) in LINEAR_ATTRIBUTES:  # 'GELU' object has no attribute 'weight': a Linear instead
        for i, (v, _) in enumerate(pairs):
            if type(v).__name__ == m.group(1) and variants[i] != MODULE_LINEAR:
                variants[i] = MODULE_LINEAR
                return True
    if NOT_CALLABLE_ERR.search(msg):  # a plain value where the module calls a class: block(dim)
        names = [p.name for i, p in enumerate(params) if variants[i] not in (MODULE_INSTANCE, MODULE_FACTORY)]
        for name in params_named_in(failing_line(e), names):
            variants[[p.name for p in params].index(name)] = MODULE_FACTORY
            return True
    wants_tuple = re.search(r"(\w+) (?:needs|must|should) (?:to )?be (?:a )?(?:tuple|list)(?: of (?:length )?(\d+))?", msg)
    if wants_tuple or "cannot unpack non-iterable int" in msg:
        names = [p.name for i, p in enumerate(params) if variants[i] in (0, 1) and i < len(pairs)
                 and isinstance(pairs[i][0], (int, list)) and not isinstance(pairs[i][0], bool)]
        hit = [n for n in names if wants_tuple and n == wants_tuple.group(1)] or params_named_in(failing_line(e), names)
        if hit:
            i = [p.name for p in params].index(hit[0])
            variants[i] = LONG_LIST if wants_tuple and wants_tuple.group(2) in (None, "4") else 1
            if wants_tuple and wants_tuple.group(2) == "3":
                variants[i] = TRIPLE
            return True
    if re.search(r"(list|tuple) index out of range", msg):
        for i in range(len(params)):
            if variants[i] == 1 or (i < len(pairs) and isinstance(pairs[i][0], (list, tuple)) and variants[i] == 0):
                variants[i] = LONG_LIST
                return True
    if _ITERABLE_ERR.search(msg):
        for i, (v, _) in enumerate(pairs):  # a config attribute read just before it was indexed
            if isinstance(v, RecordingConfig) and v._last and not isinstance(overrides[i].get(v._last), list):
                got = v._guessed.get(v._last)
                if isinstance(got, int) and not isinstance(got, bool):
                    overrides[i][v._last] = [got, got]
                    return True
        ints = [i for i, p in enumerate(params) if variants[i] == 0 and i < len(pairs) and isinstance(pairs[i][0], int)]
        plural = [i for i in ints if params[i].name.endswith("s")] or ints
        if plural:
            variants[plural[0]] = 1
            return True
    if _NOT_A_CONFIG_ERR.search(msg):
        for i, (v, _) in enumerate(pairs):  # config.sub.attr where config.sub was guessed as a number
            if isinstance(v, RecordingConfig) and v._last and overrides[i].get(v._last) != _NESTED \
                    and not isinstance(v._guessed.get(v._last), RecordingConfig):
                overrides[i][v._last] = _NESTED
                return True
        order = sorted(range(len(params)), key=lambda i: not re.search(r"conf|cfg|args|opt|param|setting",
                                                                        params[i].name + str(params[i].annotation), re.I))
        for i in order:
            if variants[i] != 2:
                variants[i] = 2
                return True
    return False


_MISSING_ARGS_ERR = re.compile(r"missing \d+ required (?:keyword-only |positional )?arguments?: (.*)")
# an assertion that names a keyword the constructor passes on: "`depth` must be passed in for `Encoder`"
_MUST_PASS_ERR = re.compile(r"[`'\"](\w+)[`'\"] (?:must|needs to) be (?:passed|given|specified|provided|set)")


def _add_missing_kwargs(msg: str, params: list, variants: list[int], overrides: list[dict]) -> bool:
    """A constructor that passes ``**kwargs`` on to another one that needs ``depth``: add ``depth`` as a
    keyword argument of its own (the names come from the inner call's TypeError)."""
    m = _MISSING_ARGS_ERR.search(msg)
    known = {p.name for p in params}
    names = re.findall(r"'(\w+)'", m.group(1)) if m else _MUST_PASS_ERR.findall(msg)
    names = [n for n in names if n not in known]
    for n in names:
        params.append(inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY))
        variants.append(0)
        overrides.append({})
    return bool(names)


def _add_named_optionals(msg: str, sig, params: list, variants: list[int], overrides: list[dict]) -> bool:
    """``assert exists(depth), 'depth, heads, and mlp_dim must be supplied'``: optional parameters
    (default None) that an assertion names are guessed too, passed by keyword."""
    known = {p.name for p in params}
    named = [p.name for p in sig.parameters.values() if p.default is None and p.name not in known
             and re.search(rf"\b{re.escape(p.name)}\b", msg)]
    for n in named:
        params.append(inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY))
        variants.append(0)
        overrides.append({})
    return bool(named)


@dataclass
class InitArg:
    """One constructor argument: passed by keyword when ``keyword`` (a keyword-only parameter)."""
    name: str
    keyword: bool
    value: object
    spec: dict


MAX_SITE_PARAMS = 25_000_000  # a call site that builds a bigger model (ResNet-152, ViT-L) is not a task


def _int_attribute(modules: list, name: str) -> int | None:
    """The integer attribute ``name`` of the first of these modules or their submodules that has one."""
    for m in modules:
        for sub in m.modules():
            v = getattr(sub, name, None)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
    return None


def _from_site(Model, sig, ns: dict, site: dict, base: int):
    """(model, init args) built the way one call site of the repository builds it, arguments it leaves
    to local variables guessed; None when the call does not fit the signature or the model is huge."""
    params = [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(site["args"]) > len(positional):
        return None
    given = {p.name: src for p, src in zip(positional, site["args"])}
    takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
    for k, src in site["kwargs"].items():
        if k in given or (k not in sig.parameters and not takes_kwargs):
            return None
        if k in sig.parameters and sig.parameters[k].kind == sig.parameters[k].POSITIONAL_ONLY:
            return None
        given[k] = src
    # keyword arguments that go to **kwargs (Encoder(dim=512, depth=6) passing them on to its base)
    params += [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY) for k in given if k not in sig.parameters]
    import torch.nn as nn

    values = {k: eval(src, ns) for k, src in given.items() if src is not None}  # noqa: S307 - inside the sandbox
    modules = [v for v in values.values() if isinstance(v, nn.Module)]
    args, skipped = [], False
    for p in params:
        src = given.get(p.name)
        if src is not None:
            value, spec = values[p.name], {"k": "expr", "src": src}
        elif p.name in given or p.default is p.empty:
            value, spec = _param_spec(p, ns, base, 0)
            known = _int_attribute(modules, p.name)
            if known is not None and isinstance(value, int):
                # a wrapper's `dim` is its model's: AutoregressiveLatent(net=TransformerWrapper(...), dim=...)
                value, spec = known, {"k": "lit", "src": repr(known)}
        else:
            skipped = skipped or p.kind != p.KEYWORD_ONLY  # later positional ones go by keyword
            continue
        keyword = p.kind == p.KEYWORD_ONLY or skipped
        if keyword and p.kind == p.POSITIONAL_ONLY:
            return None
        args.append(InitArg(p.name, keyword, value, spec))
    model = Model(*[a.value for a in args if not a.keyword], **{a.name: a.value for a in args if a.keyword})
    if sum(t.numel() for t in model.parameters()) > MAX_SITE_PARAMS:
        return None
    return model, args


def construct(Model, ns: dict, bases: list[int], deadline: float, forced: dict[str, int] | None = None,
              sites: list[dict] = ()):
    """Yield (model, init args, base) for each constructor attempt that succeeds.

    First the repository's own calls of the class (``sites``, see synth/mine/callsites.py), then
    guesses: required positional and keyword-only parameters are guessed alike; keyword-only ones are
    passed by keyword (the task file then wraps the constructor, see synth/mine/miner.py). ``forced`` maps
    parameter names to a variant (see ``_param_spec``) learnt from a failed forward call. ``deadline`` is read
    on synth.mine.own_clock's clock, which a busy machine does not advance."""
    sig = inspect.signature(Model)
    req, kwonly = required_params(sig)
    params = req + kwonly
    takes_kwargs = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
    forced = forced or {}
    last, built = "", False
    for site in sites if not forced else ():
        if own_clock() > deadline:
            break
        try:
            made = _from_site(Model, sig, ns, site, bases[0])
        except Exception as e:  # noqa: BLE001 - mined code raises anything
            if is_memory_error(e):
                raise DeductionFailed("init", "memory", str(e)[:300])
            last = f"{type(e).__name__}: {str(e)[:300]}"
            continue
        if made is not None:
            built = True
            yield made[0], made[1], bases[0]
    for base in bases:
        variants = [forced.get(p.name, 0) for p in params]
        overrides: list[dict] = [{} for _ in params]
        for _ in range(2 * len(params) + 12):
            if own_clock() > deadline:
                raise DeductionFailed("init", "init_failed", "out of time: " + last)
            pairs = []
            try:
                for i, p in enumerate(params):
                    pairs.append(_param_spec(p, ns, base, variants[i], overrides=overrides[i]))
                model = Model(*[v for (v, _), p in zip(pairs, params) if p.kind != p.KEYWORD_ONLY],
                              **{p.name: v for (v, _), p in zip(pairs, params) if p.kind == p.KEYWORD_ONLY})
            except Exception as e:  # noqa: BLE001 - mined code raises anything
                if is_memory_error(e):
                    raise DeductionFailed("init", "memory", str(e)[:300])
                last = f"{type(e).__name__}: {str(e)[:300]}"
                if takes_kwargs and _add_missing_kwargs(str(e), params, variants, overrides):
                    continue
                if isinstance(e, AssertionError) and _add_named_optionals(str(e), sig, params, variants, overrides):
                    continue
                if _fix_constructor(e, params, pairs, variants, overrides):
                    continue
                break
            built = True
            yield model, [InitArg(p.name, p.kind == p.KEYWORD_ONLY, v, spec) for (v, spec), p in zip(pairs, params)], base
            break
    if not built:
        raise DeductionFailed("init", "init_failed", last or "no constructor attempt succeeded")
