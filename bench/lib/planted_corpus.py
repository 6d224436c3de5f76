"""A synthetic corpus of candidate files with planted near-copies and its ground truth, for measuring a
deduper's recall (bench/bench_dedup.py): ``n`` files (Python + a CUDA source string, like real candidates).
About 60% are originals: 1-3 kernels each, random compositions of kernel layouts (one thread per element,
grid-stride, float4-vectorised, per-row reduction) and 4-8-step expression chains; the rest are planted copies
of an earlier original with every user identifier renamed, the block size changed, the layout reformatted,
comments added and in half the cases one expression step rewritten.

    docs, origin = synthetic_corpus(1000)   # origin[i]: the original doc i copies, i itself for an original

Deterministic for a seed. Not a model of real duplicates' frequency: the share of copies is ``copy_share``.
"""

from __future__ import annotations

import random

EXPRS = ["fmaxf({v}, 0.0f)", "1.0f / (1.0f + expf(-{v}))", "tanhf({v})", "{v} * {c}", "{v} + {c}",
         "sqrtf(fabsf({v}) + {c})", "{v} > 0.0f ? {v} : {c} * {v}", "0.5f * {v} * (1.0f + erff({v} * 0.70710678f))",
         "logf(1.0f + expf({v}))", "fminf(fmaxf({v}, -{c}), {c})", "{v} * rsqrtf({v} * {v} + {c})",
         "expf({v}) - {c}", "{v} * {v} * {v}", "sinf({v}) * cosf({v})", "powf(fabsf({v}), {c})", "floorf({v} * {c})"]
LAYOUTS = ("simple", "grid", "vec4", "rowreduce")
WORDS = ["data", "buf", "tmp", "acc", "val", "res", "src", "dst", "inp", "out", "elem", "arr", "ptr", "idx",
         "cnt", "num", "len", "total", "scale", "shift", "alpha", "beta", "gamma", "delta", "first", "second"]


FUNCS = ["expf", "tanhf", "sinf", "cosf", "sqrtf", "fabsf", "logf", "erff", "rsqrtf", "floorf", "ceilf",
         "log1pf", "__expf", "__logf"]
FUNCS2 = ["fmaxf", "fminf", "powf", "__fdividef", "atomicMax"][:4]
OPS = ["+", "-", "*", "/"]


def _expr(rng: random.Random, depth: int) -> str:
    """A random float expression over the previous value {V}: a tree of math calls and operators."""
    if depth == 0 or rng.random() < 0.25:
        return "{V}" if rng.random() < 0.7 else f"{rng.uniform(0.1, 3):.3f}f"
    r = rng.random()
    if r < 0.4:
        return f"{rng.choice(FUNCS)}({_expr(rng, depth - 1)})"
    if r < 0.55:
        return f"{rng.choice(FUNCS2)}({_expr(rng, depth - 1)}, {_expr(rng, depth - 1)})"
    if r < 0.65:
        return f"({_expr(rng, depth - 1)} > 0.0f ? {_expr(rng, depth - 1)} : {_expr(rng, depth - 1)})"
    return f"({_expr(rng, depth - 1)} {rng.choice(OPS)} {_expr(rng, depth - 1)})"


def _chain(rng: random.Random) -> list[str]:
    """4-8 elementwise steps; each reads the previous step's value through the {V} placeholder.

    30% of the steps are one of the classic activations (EXPRS), the rest random expression trees, so
    originals share idioms but rarely a whole body."""
    return [rng.choice(EXPRS).format(v="{V}", c=f"{rng.uniform(0.1, 3):.3f}f") if rng.random() < 0.3
            else _expr(rng, 3) for _ in range(rng.randint(4, 8))]


def render(spec: dict, names: dict, compact: bool, comments: bool) -> str:
    """One candidate file: 1-3 kernels (spec["parts"]) launched in turn by one wrapper."""
    files = [_render_one(dict(part, threads=spec["threads"]), {**names, "k": f"{names['k']}{j}"}, compact, comments)
             for j, part in enumerate(spec["parts"])]
    # keep the first file's frame and splice the other kernels + launches into its CUDA source
    head, kern0, tail, _ = files[0]
    extra_k = "".join(f[1] for f in files[1:])
    extra_launch = "".join(f[3] for f in files[1:])
    src = "#include <torch/extension.h>\n" + kern0 + extra_k + tail.replace("@@LAUNCHES@@", extra_launch)
    lit = repr(src) if compact else '"""\n' + src + '"""'
    return head.replace("@@SRC@@", lit)


def _render_one(spec: dict, names: dict, compact: bool, comments: bool):
    n = names
    nl = "" if compact else "\n"
    ind = "" if compact else "    "
    sp = "" if compact else " "
    cm = (lambda text: f"// {text}\n") if comments else (lambda text: "")
    body_lines = []
    v = n["v"]
    for i, _ in enumerate(spec["chain"]):
        e = spec["chain_tpl"][i].replace("{V}", v if i == 0 else n["t"] + str(i - 1))
        body_lines.append(f"{ind}{ind}float {n['t']}{i}{sp}={sp}{e};{nl}")
    last = f"{n['t']}{len(spec['chain']) - 1}"
    body = "".join(body_lines)
    if spec["layout"] == "simple":
        kern = (f"__global__ void {n['k']}(const float* {n['x']}, float* {n['y']}, int {n['n']}){sp}{{{nl}"
                f"{cm('one thread per element')}{ind}int {n['i']}{sp}={sp}blockIdx.x{sp}*{sp}blockDim.x{sp}+{sp}threadIdx.x;{nl}"
                f"{ind}if{sp}({n['i']}{sp}<{sp}{n['n']}){sp}{{{nl}{ind}{ind}float {v}{sp}={sp}{n['x']}[{n['i']}];{nl}{body}"
                f"{ind}{ind}{n['y']}[{n['i']}]{sp}={sp}{last};{nl}{ind}}}{nl}}}{nl}")
    elif spec["layout"] == "grid":
        kern = (f"__global__ void {n['k']}(const float* __restrict__ {n['x']}, float* __restrict__ {n['y']}, int {n['n']}){sp}{{{nl}"
                f"{cm('grid-stride loop')}{ind}for{sp}(int {n['i']}{sp}={sp}blockIdx.x{sp}*{sp}blockDim.x{sp}+{sp}threadIdx.x;{sp}"
                f"{n['i']}{sp}<{sp}{n['n']};{sp}{n['i']}{sp}+={sp}blockDim.x{sp}*{sp}gridDim.x){sp}{{{nl}"
                f"{ind}{ind}float {v}{sp}={sp}__ldg(&{n['x']}[{n['i']}]);{nl}{body}{ind}{ind}{n['y']}[{n['i']}]{sp}={sp}{last};{nl}{ind}}}{nl}}}{nl}")
    elif spec["layout"] == "vec4":
        lanes = "".join(f"{ind}{ind}{{ float {v}{sp}={sp}{n['q']}.{c};{nl}{body}{ind}{ind}{n['r']}.{c}{sp}={sp}{last}; }}{nl}" for c in "xyzw")
        kern = (f"__global__ void {n['k']}(const float4* {n['x']}, float4* {n['y']}, int {n['n']}){sp}{{{nl}"
                f"{cm('float4 lanes')}{ind}int {n['i']}{sp}={sp}blockIdx.x{sp}*{sp}blockDim.x{sp}+{sp}threadIdx.x;{nl}"
                f"{ind}if{sp}({n['i']}{sp}>={sp}{n['n']}){sp}return;{nl}{ind}float4 {n['q']}{sp}={sp}{n['x']}[{n['i']}];{nl}"
                f"{ind}float4 {n['r']};{nl}{lanes}{ind}{n['y']}[{n['i']}]{sp}={sp}{n['r']};{nl}}}{nl}")
    else:
        kern = (f"__global__ void {n['k']}(const float* {n['x']}, float* {n['y']}, int {n['n']}){sp}{{{nl}"
                f"{cm('one block per row, shared-memory sum')}{ind}extern __shared__ float {n['s']}[];{nl}"
                f"{ind}float {n['a']}{sp}={sp}0.0f;{nl}"
                f"{ind}for{sp}(int {n['i']}{sp}={sp}threadIdx.x;{sp}{n['i']}{sp}<{sp}{n['n']};{sp}{n['i']}{sp}+={sp}blockDim.x){sp}{{{nl}"
                f"{ind}{ind}float {v}{sp}={sp}{n['x']}[blockIdx.x{sp}*{sp}{n['n']}{sp}+{sp}{n['i']}];{nl}{body}{ind}{ind}{n['a']}{sp}+={sp}{last};{nl}{ind}}}{nl}"
                f"{ind}{n['s']}[threadIdx.x]{sp}={sp}{n['a']};{nl}{ind}__syncthreads();{nl}"
                f"{ind}for{sp}(int {n['o']}{sp}={sp}blockDim.x{sp}/{sp}2;{sp}{n['o']}{sp}>{sp}0;{sp}{n['o']}{sp}>>={sp}1){sp}{{{nl}"
                f"{ind}{ind}if{sp}(threadIdx.x{sp}<{sp}{n['o']}){sp}{n['s']}[threadIdx.x]{sp}+={sp}{n['s']}[threadIdx.x{sp}+{sp}{n['o']}];{nl}"
                f"{ind}{ind}__syncthreads();{nl}{ind}}}{nl}{ind}if{sp}(threadIdx.x{sp}=={sp}0){sp}{n['y']}[blockIdx.x]{sp}={sp}{n['s']}[0];{nl}}}{nl}")
    launch = (f"{ind}{n['k']}<<<({n['n']}{sp}+{sp}{spec['threads'] - 1}){sp}/{sp}{spec['threads']},{sp}{spec['threads']}>>>"
              f"({n['x']}.data_ptr<float>(),{sp}{n['y']}.data_ptr<float>(),{sp}{n['n']});{nl}")
    wrapper = (f"torch::Tensor {n['f']}(torch::Tensor {n['x']}){sp}{{{nl}{ind}auto {n['y']}{sp}={sp}torch::empty_like({n['x']});{nl}"
               f"{ind}int {n['n']}{sp}={sp}{n['x']}.numel();{nl}{launch}@@LAUNCHES@@{ind}return {n['y']};{nl}}}{nl}")
    py_cm = "# generated kernel\n" if comments else ""
    head = (f"import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n{py_cm}"
            f"{n['src']} = @@SRC@@\n{n['mod']} = load_inline(name='{n['mod']}', cpp_sources='torch::Tensor {n['f']}(torch::Tensor {n['x']});', "
            f"cuda_sources={n['src']}, functions=['{n['f']}'])\n\n"
            f"class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
            f"    def forward(self, {n['x']}):\n        return {n['mod']}.{n['f']}({n['x']}.contiguous())\n")
    return head, kern, wrapper, launch


def _names(rng: random.Random) -> dict:
    keys = ["k", "f", "x", "y", "n", "i", "v", "t", "q", "r", "s", "a", "o", "src", "mod"]
    words = rng.sample(WORDS, len(keys))
    return {k: f"{w}_{rng.randint(0, 99)}" if k not in ("t",) else w + "_" for k, w in zip(keys, words)}


def iter_corpus(n: int, seed: int = 0, copy_share: float = 0.4):
    """(document, index of the original it copies or its own index) for n documents, streamed.

    A planted copy takes an earlier original, renames every user identifier, changes the block
    size, reformats it (compact or not), may add comments, and in half the cases rewrites one
    step of one kernel's expression chain (an edit a copy-paste-modify makes)."""
    rng = random.Random(seed)
    specs = []
    for i in range(n):
        if specs and rng.random() < copy_share:
            j = rng.randrange(len(specs))
            orig, base = specs[j]
            spec = {"parts": [dict(p) for p in base["parts"]], "threads": rng.choice([128, 256, 512, 1024])}
            if rng.random() < 0.5:
                part = rng.choice(spec["parts"])
                chain = list(part["chain"])
                chain[rng.randrange(len(chain))] = _chain(rng)[0]
                part["chain"] = part["chain_tpl"] = chain
            yield render(spec, _names(rng), compact=rng.random() < 0.5, comments=rng.random() < 0.5), orig
        else:
            parts = []
            for _ in range(rng.randint(1, 3)):
                chain = _chain(rng)
                parts.append({"layout": rng.choice(LAYOUTS), "chain": chain, "chain_tpl": chain})
            spec = {"parts": parts, "threads": rng.choice([128, 256, 512, 1024])}
            specs.append((i, spec))
            yield render(spec, _names(rng), compact=False, comments=False), i


def synthetic_corpus(n: int, seed: int = 0, copy_share: float = 0.4) -> tuple[list[str], list[int]]:
    """n documents and, for each, the index of the original it copies (its own index if original)."""
    docs, origin = [], []
    for d, o in iter_corpus(n, seed, copy_share):
        docs.append(d)
        origin.append(o)
    return docs, origin
