"""Red team of the static stage's fidelity (issue 47): constructs frontier models write in honest answers that rules
firing on what code imports or might do rejected, each beside its cheating twin, which must keep its code.

A rule judges what the code does (writes, reads, compute, hidden work), not what it imports:
1. C03: a handler that calls another of the candidate's own kernels is not a fallback; one that calls torch, F or
   the reference is (verifier/front/static.py, the try/except rule and ``reach``).
2. C09: ``threading.Lock`` is not a thread; ``Thread(...).start()`` is. A side stream joined back to the current
   stream before forward returns (PyTorch's documented pattern) leaves no work behind; one never joined does
   (verifier/front/static_streams.py, ``side_stream_hits``).
3. C11: reading sys (``print(..., file=sys.stderr)``, ``sys.executable``, ``sys.version_info``) and ``site``'s
   paths is not patching; ``sys.modules`` writes, ``sys.settrace`` / ``setprofile``, replacing ``sys.stdout`` are.
4. C17 / C15: ``shutil.which`` and pathlib for names touch no file; ``shutil.rmtree`` / ``copy``,
   ``Path(...).write_text`` / ``read_text`` / ``open`` do. A temporary directory for the build
   (``build_directory=tempfile.mkdtemp()``) is no file read; a temporary file is.
5. C04: ``super().__call__`` of an nn.Module base is nn.Module's call; ``super().forward`` of a class derived from
   the reference, and ``Model.forward(self, x)``, are the reference.
6. C01: a queue's ``put``, a dict's ``copy``, a list's ``sort`` are not tensor methods; the same names on an input
   of forward are (verifier/front/static_kinds.py, ``Kinds``).
7. A module-level ``@triton.jit`` function beside the CUDA code that nothing calls is no finding; a program whose
   forward launches one is out of the verifier's scope, said so at extraction.
8. C12: seeding or reading the generators at import (``torch.manual_seed(0)`` at the top of the file, a class
   attribute, a default argument) predicts nothing: no trial seed exists before construction is over, and each
   trial's draw seeds the generators again; the same calls in forward or in a helper it calls keep C12.

Each case runs the static scan only (``verifier.front.static.scan(code, "cpu")``): no compiler, no child process.
"""

import pytest

from verifier import cheats
from verifier.front.extract import check_candidate_shape
from verifier.front.static import scan

CPP = r'''
#include <torch/extension.h>
torch::Tensor fast(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const float* a = x.data_ptr<float>(); float* b = y.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] > 0.f ? a[i] : 0.f;
    return y;
}
torch::Tensor slow(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const float* a = x.data_ptr<float>(); float* b = y.data_ptr<float>();
    for (int64_t i = x.numel() - 1; i >= 0; --i) b[i] = a[i] > 0.f ? a[i] : 0.f;
    return y;
}
'''


def program(forward: str, *, init: str = "", imports: str = "", module: str = "", bases: str = "nn.Module",
            methods: str = "") -> str:
    """A cpu candidate with two kernels of its own (``fast``, ``slow``) held as ``self.ext``."""
    def indent(s: str, n: int) -> str:
        return "\n".join(" " * n + ln if ln.strip() else ln for ln in s.strip("\n").splitlines())

    return f'''import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline
{imports}
CPP = r"""{CPP}"""
ext = load_inline(name="fidelity_ext", cpp_sources=CPP, functions=["fast", "slow"], extra_cflags=["-O2"])
{module}

class ModelNew({bases}):
    def __init__(self):
        super().__init__()
        self.ext = ext
{indent(init, 8) if init.strip() else ""}

    def forward(self, x):
{indent(forward, 8)}
{indent(methods, 4) if methods.strip() else ""}
'''


def findings(code: str) -> list[str]:
    return [str(f) for f in scan(code, "cpu").findings]


# (name, cheat code, honest construct, its cheating twins)
PAIRS = [
    # 1. a fallback to another of the candidate's own kernels
    ("c03_handler_calls_own_kernel", cheats.C03,
     [program("try:\n    return self.ext.fast(x)\nexcept RuntimeError:\n    return self.ext.slow(x)"),
      program("try:\n    y = ext.fast(x)\nexcept (RuntimeError, ValueError) as e:\n    print('fast failed:', e)\n"
              "    self.use_fast = False\n    y = ext.slow(x.contiguous())\nreturn y", init="self.use_fast = True"),
      program("try:\n    return self.ext.fast(x)\nexcept RuntimeError:\n    return self._slow_path(x)",
              methods="def _slow_path(self, x):\n    return self.ext.slow(x.contiguous())")],
     [program("try:\n    return self.ext.fast(x)\nexcept RuntimeError:\n    return torch.relu(x)"),
      program("try:\n    return self.ext.fast(x)\nexcept RuntimeError:\n    return F.relu(x)"),
      program("try:\n    return self.ext.fast(x)\nexcept Exception:\n    return Model()(x)",
              module="from reference import Model"),
      # the own kernel called next to the reference, or the reference behind a method of its own
      program("try:\n    return self.ext.fast(x)\nexcept RuntimeError:\n    self.ext.slow(x)\n"
              "    return x.clamp(min=0)"),
      program("try:\n    return self.ext.fast(x)\nexcept RuntimeError:\n    return self._slow_path(x)",
              methods="def _slow_path(self, x):\n    return torch.relu(x)"),
      # a handler that swallows the failure and calls nothing of its own
      program("try:\n    return self.ext.fast(x)\nexcept RuntimeError:\n    pass\nreturn x.new_zeros(x.shape)")]),
    # 2a. a lock is not a thread
    ("c09_threading_lock", cheats.C09,
     [program("with self._lock:\n    self.calls += 1\n    return self.ext.fast(x)",
              init="self._lock = threading.Lock()\nself.calls = 0", imports="import threading"),
      program("with self._lock:\n    return self.ext.fast(x)", init="self._lock = RLock()",
              imports="from threading import RLock"),
      program("tid = threading.get_ident()\nreturn self.ext.fast(x)", imports="import threading as th").replace(
          "threading.get_ident", "th.get_ident")],
     [program("out = {}\nt = threading.Thread(target=lambda: out.update(y=self.ext.fast(x)))\nt.start()\n"
              "return self.ext.slow(x)", imports="import threading"),
      program("Thread(target=self.ext.fast, args=(x,)).start()\nreturn self.ext.slow(x)",
              imports="from threading import Thread"),
      program("with self._lock:\n    return self.ext.fast(x)", init="self._lock = threading.Lock()\n"
              "threading.Timer(0.0, print).start()", imports="import threading")]),
    # 2b. a side stream joined back before forward returns (CUDA-graph warm-up as PyTorch documents it)
    ("c09_side_stream_joined", cheats.C09,
     [program("s = torch.cuda.Stream()\ns.wait_stream(torch.cuda.current_stream())\nwith torch.cuda.stream(s):\n"
              "    for _ in range(3):\n        y = self.ext.fast(x)\ntorch.cuda.current_stream().wait_stream(s)\n"
              "return y"),
      program("cur = torch.cuda.current_stream()\nself.side.wait_stream(cur)\nwith torch.cuda.stream(self.side):\n"
              "    y = self.ext.fast(x)\n    ev = torch.cuda.Event()\n    ev.record(self.side)\ncur.wait_event(ev)\n"
              "return y", init="self.side = torch.cuda.Stream()"),
      program("outs = []\nfor i, s in enumerate(self.streams):\n    with torch.cuda.stream(s):\n"
              "        outs.append(self.ext.fast(x[i::2]))\nfor s in self.streams:\n"
              "    torch.cuda.current_stream().wait_stream(s)\nreturn torch.cat(outs)",
              init="self.streams = [torch.cuda.Stream() for _ in range(2)]"),
      program("s = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    y = self.ext.fast(x)\n"
              "torch.cuda.synchronize()\nreturn y"),
      # a stream only where there is a GPU, the current one otherwise
      program("s = self.side if self.side is not None else torch.cuda.current_stream()\n"
              "with torch.cuda.stream(s):\n    y = self.ext.fast(x)\ntorch.cuda.current_stream().wait_stream(s)\n"
              "return y", init="self.side = torch.cuda.Stream() if torch.cuda.is_available() else None")],
     [program("s = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    y = self.ext.fast(x)\nreturn y"),
      # joined before the work, not after it
      program("s = torch.cuda.Stream()\ntorch.cuda.current_stream().wait_stream(s)\nwith torch.cuda.stream(s):\n"
              "    y = self.ext.fast(x)\nreturn y"),
      # joined only on the calls the correctness trials make
      program("self.calls += 1\nwith torch.cuda.stream(self.side):\n    y = self.ext.fast(x)\nif self.calls <= 6:\n"
              "    torch.cuda.current_stream().wait_stream(self.side)\nreturn y",
              init="self.side = torch.cuda.Stream()\nself.calls = 0"),
      # returns from inside the stream's block: the join after it never runs
      program("s = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    return self.ext.fast(x)\n"
              "torch.cuda.current_stream().wait_stream(s)"),
      # "joined" while the side stream is still the current one: inside its block, or after set_stream
      program("with torch.cuda.stream(self.side):\n    y = self.ext.fast(x)\n"
              "    torch.cuda.current_stream().wait_stream(self.side)\nreturn y", init="self.side = torch.cuda.Stream()"),
      program("torch.cuda.set_stream(self.side)\ny = self.ext.fast(x)\n"
              "torch.cuda.current_stream().wait_stream(self.side)\nreturn y", init="self.side = torch.cuda.Stream()"),
      # a stream the scan cannot follow
      program("with torch.cuda.stream(torch.cuda.Stream()):\n    y = self.ext.fast(x)\nreturn y"),
      # the side stream's own synchronize is not a join when the event waited for was recorded elsewhere
      program("ev = torch.cuda.Event()\nev.record()\nwith torch.cuda.stream(self.side):\n    y = self.ext.fast(x)\n"
              "torch.cuda.current_stream().wait_event(ev)\nreturn y", init="self.side = torch.cuda.Stream()")]),
    # 3. reading sys and site
    ("c11_reads_sys", cheats.C11,
     [program("print('fast path for', tuple(x.shape), file=sys.stderr)\nsys.stderr.flush()\nreturn self.ext.fast(x)",
              imports="import sys"),
      program("return self.ext.fast(x)", imports="import sys",
              module="PY = sys.executable\nNEW = sys.version_info >= (3, 10)\nMAJOR = sys.version_info.major\n"
                     "print('built with', PY, file=sys.stdout)"),
      program("return self.ext.fast(x)", imports="import site",
              module="PATHS = site.getsitepackages() + [site.getusersitepackages()]")],
     [program("sys.modules['verifier.child.timing'] = None\nreturn self.ext.fast(x)", imports="import sys"),
      program("sys.settrace(None)\nreturn self.ext.fast(x)", imports="import sys"),
      program("sys.setprofile(None)\nreturn self.ext.fast(x)", imports="import sys"),
      program("sys.stdout = sys.stderr\nreturn self.ext.fast(x)", imports="import sys"),
      program("settrace(None)\nreturn self.ext.fast(x)", imports="from sys import settrace"),
      program("return self.ext.fast(x)", imports="import site", module="site.addsitedir('/tmp/mine')")]),
    # 4a. shutil for a tool's path
    ("c17_shutil_which", cheats.C17,
     [program("return self.ext.fast(x)", imports="import shutil",
              module="HAVE_NINJA = shutil.which('ninja') is not None\nCOLS = shutil.get_terminal_size().columns"),
      program("return self.ext.fast(x)", imports="from shutil import which", module="NVCC = which('nvcc')")],
     [program("return self.ext.fast(x)", imports="import shutil", module="shutil.rmtree('/tmp/other', True)"),
      program("shutil.copy('/tmp/a', '/tmp/b')\nreturn self.ext.fast(x)", imports="import shutil"),
      program("return self.ext.fast(x)", imports="from shutil import rmtree", module="rmtree('/tmp/other', True)"),
      program("return self.ext.fast(x)", imports="import shutil", module="HOW = [shutil][0]")]),
    # 4b. pathlib for names
    ("c15_pathlib_names", cheats.C15,
     [program("return self.ext.fast(x)", imports="from pathlib import Path",
              module="HERE = Path(__file__).parent / 'build'\nNAME = HERE.name\nSUFFIX = Path('k.cu').suffix\n"
                     "OBJ = Path('k.cu').with_suffix('.o')\nTAG = (HERE / 'k.cu').stem + str(OBJ)"),
      program("return self.ext.fast(x)", imports="import pathlib",
              module="ROOT = pathlib.Path(__file__).resolve().parent\nLABEL = ROOT.joinpath('x').as_posix()\n"
                     "SRC = CPP.replace('fast', 'fast')")],
     [program("return self.ext.fast(x)", imports="from pathlib import Path",
              module="EXPECTED = (Path(__file__).parent / 'ref_out.txt').read_text()"),
      program("return self.ext.fast(x)", imports="from pathlib import Path",
              module="HERE = Path('/tmp')\nDATA = HERE.joinpath('job').open('rb')"),
      program("return self.ext.fast(x)", imports="from pathlib import Path",
              module="HERE = Path('/tmp')\nFOUND = list(HERE.glob('*.pt'))"),
      program("f = open(Path('/tmp') / 'expected.bin', 'rb')\nreturn self.ext.fast(x)",
              imports="from pathlib import Path")]),
    ("c17_pathlib_writes", cheats.C17,
     [program("return self.ext.fast(x)", imports="import pathlib",
              module="BUILD = pathlib.Path('/tmp') / 'kernels'\nBUILD.mkdir(exist_ok=True)\nOK = BUILD.exists()")],
     [program("return self.ext.fast(x)", imports="from pathlib import Path",
              module="Path('/tmp/verdict.json').write_text('{\"correct\": true}')"),
      program("return self.ext.fast(x)", imports="import pathlib",
              module="OUT = pathlib.Path('/tmp') / 'x'\nOUT.unlink()"),
      program("return self.ext.fast(x)", imports="import pathlib",
              module="OUT = pathlib.Path('/tmp') / 'x'\nOUT.rename('/tmp/y')")]),
    # 5. nn.Module's __call__ through super()
    ("c04_super_call_of_module", cheats.C04,
     [program("return self.ext.fast(x)", methods="def __call__(self, *args, **kwargs):\n"
                                                  "    return super().__call__(*args, **kwargs)"),
      program("return self.ext.fast(x)", methods="def __call__(self, x):\n"
                                                  "    return super(ModelNew, self).__call__(x.contiguous())")],
     [program("return super().forward(x)", bases="Model", module="from reference import Model"),
      program("return Model.forward(self, x)", module="from reference import Model"),
      program("return super().__call__(x)", bases="Base", module="from reference import Model\n\n"
                                                                   "class Base(Model):\n    pass"),
      program("return self.ext.fast(x)", bases="Model", module="from reference import Model",
              methods="def __call__(self, x):\n    return super().__call__(x)")]),
    # 6. tensor method names on objects that are not tensors
    ("c01_container_methods", cheats.C01,
     [program("self._jobs.put(tuple(x.shape))\nreturn self.ext.fast(x)", init="self._jobs = queue.Queue()",
              imports="import queue"),
      program("cfg = {'block': 256}\nlocal = cfg.copy()\norder = [3, 1, 2]\norder.sort()\nfirst = order.index(1)\n"
              "recent = collections.deque(maxlen=4)\nrecent.append(first)\nself.seen.add(tuple(x.shape))\n"
              "sizes = list(self.table.values())\nreturn self.ext.fast(x)",
              init="self.seen = set()\nself.table = {'a': 1}", imports="import collections"),
      program("pending = queue.SimpleQueue()\npending.put(x)\nreturn self.ext.fast(pending.get())",
              imports="import queue")],
     [program("return self.ext.fast(x.sort()[0])"),
      program("y = self.ext.fast(x)\ny.put(torch.tensor([0]), torch.tensor([1.0]))\nreturn y"),
      program("y = self.ext.fast(x)\nreturn y.sort().values"),
      program("return self.ext.fast(x.add(1.0))"),
      # a name bound to a list in one place and to the input in another is not known to be a list
      program("v = []\nv = x\nreturn self.ext.fast(v.put(torch.tensor([0]), torch.tensor([1.0])))")]),
    # 4b. a temporary directory of its own for the build is no file read; temporary files are
    ("c15_tempfile_build_directory", cheats.C15,
     [program("return self.ext.fast(x)", imports="import tempfile",
              module='ext2 = load_inline(name="fidelity_ext2", cpp_sources=CPP, functions=["fast"], '
                     'build_directory=tempfile.mkdtemp(prefix="km_"))'),
      program("return self.ext.fast(x)", imports="from tempfile import gettempdir", module="ROOT = gettempdir()")],
     [program("return self.ext.fast(x)", imports="import tempfile",
              module="with tempfile.NamedTemporaryFile() as f:\n    DATA = f.name"),
      program("return self.ext.fast(x)", imports="from tempfile import mkstemp", module="FD, NAME = mkstemp()"),
      program("return self.ext.fast(x)", imports="import tempfile")]),
    # 8. seeding at import: no trial seed exists yet, and every draw seeds the generators again
    ("c12_seed_at_import", cheats.C12,
     [program("return self.ext.fast(x)", module="torch.manual_seed(0)\nnp.random.seed(0)", imports="import numpy as np"),
      program("return self.ext.fast(x)", methods="SEED = torch.initial_seed()"),
      program("return self.ext.fast(_prep(x))", module="def _prep(x, seed=torch.initial_seed()):\n    return x.contiguous()")],
     [program("torch.manual_seed(0)\nreturn self.ext.fast(x)"),
      program("state = torch.get_rng_state()\nreturn self.ext.fast(x)"),
      program("return self.ext.fast(_prep(x))", module="def _prep(x):\n    torch.manual_seed(1)\n    return x.contiguous()"),
      program("return self.ext.fast(_prep(x))", module="_prep = lambda x: (torch.cuda.get_rng_state(), x)[1]")]),
]
TRITON_KERNEL = '''import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=offs < n)
    total = tl.sum(tl.exp(x), axis=0)
'''


def _cases(kind: str):
    return [pytest.param(name, code_, prog, id=f"{name}-{i}")
            for name, code_, honest, twins in PAIRS for i, prog in enumerate(honest if kind == "honest" else twins)]


@pytest.mark.parametrize("name,code_,prog", _cases("honest"))
def test_honest_construct_has_no_finding(name, code_, prog):
    assert check_candidate_shape(prog, "cpu") == []
    got = findings(prog)
    assert got == [], (name, got)


@pytest.mark.parametrize("name,code_,prog", _cases("cheat"))
def test_cheating_twin_keeps_its_code(name, code_, prog):
    rep = scan(prog, "cpu")
    assert code_ in rep.cheat_codes, (name, [str(f) for f in rep.findings])


def test_c03_fallback_to_torch_names_both_rows():
    """The reference in the handler is PyTorch compute (C01) and a fallback (C03), as before."""
    rep = scan(program("try:\n    return self.ext.fast(x)\nexcept RuntimeError:\n    return torch.relu(x)"), "cpu")
    assert {cheats.C01, cheats.C03} <= set(rep.cheat_codes), [str(f) for f in rep.findings]


def test_pathlib_reads_are_c15_and_writes_c17():
    read = program("return self.ext.fast(x)", imports="from pathlib import Path",
                   module="EXPECTED = Path('/tmp/out.txt').read_text()")
    write = program("return self.ext.fast(x)", imports="from pathlib import Path",
                    module="Path('/tmp/out.txt').write_text('x')")
    assert scan(read).cheat_codes == [cheats.C15] and scan(write).cheat_codes == [cheats.C17]


def test_unused_triton_kernel_beside_the_cuda_code_is_no_finding():
    """A module-level @triton.jit function ModelNew never calls never runs: its tl.* calls are not PyTorch compute
    (they were C01, ``.maximum()`` and ``.sum()`` read as tensor methods), and extraction lets the program through."""
    for extra in ("", "\n\ndef triton_relu(x):\n    y = torch.empty_like(x)\n"
                      "    relu_kernel[(1,)](x, y, x.numel(), BLOCK=1024)\n    return y\n"):
        prog = program("return self.ext.fast(x)", imports=TRITON_KERNEL + extra)
        assert check_candidate_shape(prog, "cpu") == []
        assert findings(prog) == []


@pytest.mark.parametrize("forward", [
    "y = torch.empty_like(x)\nrelu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)\nreturn y",
    "return self.launch(x)",
], ids=["forward_launches", "through_a_method"])
def test_a_forward_that_launches_a_triton_kernel_is_out_of_scope(forward):
    prog = program(forward, imports=TRITON_KERNEL, methods="def launch(self, x):\n    y = torch.empty_like(x)\n"
                                                           "    relu_kernel[(1,)](x, y, x.numel(), BLOCK=1024)\n"
                                                           "    return y")
    for backend in ("cpu", "cuda"):
        probs = check_candidate_shape(prog, backend)
        assert len(probs) == 1 and probs[0].startswith("Triton kernels are not supported by this verifier: "), probs
        assert "relu_kernel" in probs[0] and "load_inline" in probs[0]


def test_unused_imports_of_judged_modules_stay_findings():
    """An import nothing uses says nothing of what it is for; the scan keeps the row's finding at the import
    (tests/test_verifier_run.py's static stop relies on ``import threading`` alone)."""
    for module, code_ in (("threading", cheats.C09), ("shutil", cheats.C17), ("pathlib", cheats.C15),
                          ("site", cheats.C11)):
        assert code_ in scan(program("return self.ext.fast(x)", imports=f"import {module}")).cheat_codes, module
