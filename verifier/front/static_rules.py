"""The rule tables of the static scan (verifier/front/static.py): which torch calls and Tensor methods only
allocate, view, describe or query state (``TORCH_ALLOWED``, ``TORCH_QUERIES``, ``TENSOR_METHOD_ALLOWED``), which
imports, calls and attributes decide a cheat code by themselves (``IMPORT_CODES``, ``CALL_CODES``, ``ATTR_CODES``),
which modules are judged by the names used of them (``USE_JUDGED``), and what of sys, os, numpy and path objects a
kernel program may touch.
Data only: the scan's functions read these; a rule that needs more than a name lookup lives in static.py.
Imports: verifier.cheats and static_kinds's path classes.
"""

from __future__ import annotations

from verifier import cheats
from verifier.front.static_kinds import PATH_CLASSES

# torch.X calls that ask what the process, the build or a tensor's metadata is and compute nothing (the thread
# pool's size, a backend's availability, the default dtype, whether a value is a tensor): no data is read or
# written, wherever they run (forward included). torch.cuda.X and torch.utils.X are allowed as a whole
# (static_program.is_torch_compute), so are the queries of torch.backends.<name> in BACKEND_QUERIES.
TORCH_QUERIES = {
    "get_num_threads", "get_num_interop_threads", "get_default_dtype", "get_default_device", "is_grad_enabled",
    "is_inference_mode_enabled", "is_tensor", "is_storage", "is_floating_point", "is_complex", "is_conj", "is_neg",
    "is_signed", "is_same_size", "get_device", "typename", "are_deterministic_algorithms_enabled",
    "is_deterministic_algorithms_warn_only_enabled", "get_deterministic_debug_mode", "get_float32_matmul_precision",
    "is_anomaly_enabled", "is_anomaly_check_nan_enabled", "is_autocast_enabled", "is_autocast_cpu_enabled",
    "get_autocast_dtype", "get_autocast_gpu_dtype", "get_autocast_cpu_dtype", "is_warn_always_enabled",
    "cpu.is_available", "cpu.device_count", "cpu.current_device", "xpu.is_available", "mps.is_available",
    "mps.device_count", "accelerator.is_available", "accelerator.device_count", "accelerator.current_accelerator",
    "accelerator.current_device_index", "jit.is_scripting", "jit.is_tracing", "compiler.is_compiling",
    "compiler.is_dynamo_compiling",
}
# torch.backends.<name>.X that only report (``torch.backends.cudnn.is_available()``, ``.version()``); the setters and
# context managers of torch.backends change global state and stay outside this list
BACKEND_QUERIES = {"is_available", "is_built", "version", "is_acceptable", "get_cpu_capability",
                   "is_flash_attention_available", "flash_sdp_enabled", "mem_efficient_sdp_enabled",
                   "math_sdp_enabled", "cudnn_sdp_enabled", "get_fastpath_enabled"}
# torch.X / torch.cuda.X / F.X calls that allocate, view, describe or synchronise: never compute.
TORCH_ALLOWED = TORCH_QUERIES | {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "tensor", "as_tensor", "Size", "device", "dtype", "no_grad", "inference_mode", "numel",
    "set_grad_enabled", "finfo", "iinfo", "Tensor",
    # decorators that mark a function for TorchScript, the compiler or FX and compute nothing (a model's helper that
    # launches the kernel, written so that the model stays scriptable)
    "jit.ignore", "jit.unused", "jit.export", "compiler.disable", "_dynamo.disable", "fx.wrap",
    # and one that lets torch.compile put the launcher in its graph as one opaque call (eager: the function itself)
    "compiler.allow_in_graph",
    "cuda.current_stream", "cuda.synchronize", "cuda.current_device", "cuda.is_available", "cuda.device",
    "cuda.get_device_properties", "cuda.device_count", "cuda.get_device_capability", "cuda.default_stream",
    "utils.cpp_extension.load_inline", "cpp_extension.load_inline", "load_inline",
    "nn.Parameter", "nn.Module", "nn.ModuleList", "nn.ParameterList", "nn.init.kaiming_uniform_",
    "nn.init.uniform_", "nn.init.zeros_", "nn.init.ones_", "nn.init.normal_", "nn.init.xavier_uniform_",
    # views and copies that move data without computing on it
    "flatten", "unflatten", "reshape", "squeeze", "unsqueeze", "permute", "transpose", "narrow", "split", "chunk",
    "unbind", "cat", "concat", "concatenate", "stack", "as_strided", "empty_strided",
    "movedim", "moveaxis", "swapaxes", "swapdims", "empty_permuted",
    "ravel", "broadcast_to", "tensor_split", "hsplit", "vsplit", "dsplit", "atleast_1d", "atleast_2d", "atleast_3d",
    "diagonal", "t", "adjoint",
    # every input expanded to the common shape: expand's views, no element read or written
    "broadcast_tensors", "meshgrid",
    # the function forms of the tensor methods allowed below (a copy, a view), and a complex tensor's views as
    # (real, imaginary) pairs and back
    "clone", "select", "detach", "split_with_sizes", "view_as_real", "view_as_complex", "real", "imag",
    # shapes and dtypes: arithmetic on sizes and type promotion, no tensor data read
    "broadcast_shapes", "result_type", "promote_types", "can_cast",
    # a profiler range around the candidate's own work: it labels, computes nothing (the runtime's ``profiler::``
    # namespace, verifier/common/ops.py), and the ops inside it are watched as any others
    "autograd.profiler.record_function", "profiler.record_function",
    # autocast regions and the decorators that set one up around a custom autograd Function's forward (the
    # torch.cuda.amp spellings pass as torch.cuda.*): they change which dtype PyTorch's own ops pick, compute nothing
    # themselves, and the ops inside them are judged as any others
    "autocast", "amp.autocast", "amp.custom_fwd", "amp.custom_bwd", "cpu.amp.autocast",
}
# torch's private functions that only answer a query, the way a public one on TORCH_ALLOWED does: the current
# stream's raw handle (inductor's ``get_raw_stream``, what torch.cuda.current_stream().cuda_stream gives). Neither
# PyTorch compute nor touching torch internals (static_tamper.private_torch), however they are reached
PRIVATE_TORCH_QUERIES = {"_C._cuda_getCurrentRawStream"}
TORCH_ALLOWED |= PRIVATE_TORCH_QUERIES
# Tensor methods that allocate, view, convert or describe; any other Tensor method is compute.
TENSOR_METHOD_ALLOWED = {
    "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset", "data_ptr", "element_size",
    "is_contiguous", "contiguous", "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten",
    "squeeze", "unsqueeze", "permute", "transpose", "t", "expand", "expand_as", "narrow", "select", "split",
    "chunk", "unbind", "as_strided", "to", "cuda", "cpu", "float", "half", "bfloat16", "double", "int", "long",
    "bool", "type", "type_as", "detach", "requires_grad_", "new_empty", "new_zeros", "new_ones", "new_full",
    "new_tensor", "empty_like", "zero_", "fill_", "copy_", "clone", "item", "tolist", "get_device",
    "register_buffer", "register_parameter", "parameters", "buffers", "named_parameters", "children",
    "modules", "state_dict", "load_state_dict", "eval", "train", "apply", "register_module", "add_module", "as_subclass",
    "movedim", "moveaxis", "swapaxes", "swapdims", "is_floating_point", "is_complex", "is_signed", "is_pinned",
    "is_same_size", "new_empty_strided", "resize_",
    # views and their in-place forms (a strided window: unfold, diagonal), splits (frontier answers write them)
    "ravel", "squeeze_", "unsqueeze_", "t_", "transpose_", "unfold", "diagonal", "broadcast_to", "tensor_split",
    "hsplit", "vsplit", "dsplit", "split_with_sizes", "adjoint",
    # the caching allocator's bookkeeping: the block stays reserved until the stream's queued work is done
    "record_stream",
    # the tensor's storage, for its address and size (``x.untyped_storage().data_ptr()``, ``.nbytes()``): a query;
    # what is done with the storage's bytes is judged on it (static_judges ``STORAGE_QUERIES``)
    "untyped_storage", "storage",
}
# Module-level imports and calls that reach outside the sandbox, by cheat code.
IMPORT_CODES = {
    "gc": cheats.C15, "inspect": cheats.C15, "pickle": cheats.C15, "io": cheats.C15,
    "_thread": cheats.C09, "concurrent": cheats.C09, "asyncio": cheats.C09,
    "subprocess": cheats.C17, "socket": cheats.C17, "multiprocessing": cheats.C17, "ctypes": cheats.C17,
    "signal": cheats.C17, "urllib": cheats.C17, "http": cheats.C17, "requests": cheats.C17,
    "resource": cheats.C17, "importlib": cheats.C11, "builtins": cheats.C11, "verifier": cheats.C11,
    "kernelmill": cheats.C11, "random": cheats.C12, "numpy.random": cheats.C12,
    # files and what reads them (expected outputs, the job's seeds)
    "glob": cheats.C15, "fileinput": cheats.C15, "linecache": cheats.C15,
    "zipfile": cheats.C15, "tarfile": cheats.C15, "sqlite3": cheats.C15, "shelve": cheats.C15, "dbm": cheats.C15,
    "tracemalloc": cheats.C15,
    # the operating system, other processes, raw memory
    "mmap": cheats.C17, "cffi": cheats.C17, "pty": cheats.C17, "fcntl": cheats.C17, "select": cheats.C17,
    "selectors": cheats.C17, "ssl": cheats.C17, "ftplib": cheats.C17, "smtplib": cheats.C17,
    "xmlrpc": cheats.C17, "webbrowser": cheats.C17,
    # code built or run at run time, interpreter hooks
    "marshal": cheats.C11, "types": cheats.C11, "code": cheats.C11, "codeop": cheats.C11, "runpy": cheats.C11,
    "dis": cheats.C11, "copyreg": cheats.C11, "atexit": cheats.C11, "faulthandler": cheats.C11,
    "sysconfig": cheats.C11, "pydoc": cheats.C11, "pkgutil": cheats.C11, "zipimport": cheats.C11,
}
# Modules judged by what the code does with them, not by the import: the names listed read or build something
# (a lock, the path of a tool, a path's name); any other use is the row's finding where it is. An import nothing
# uses is still the row's finding at the import: the scan cannot see what it is for.
USE_JUDGED = {
    "threading": (cheats.C09, {"Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore", "Event", "local",
                               "get_ident", "get_native_id", "current_thread", "main_thread", "TIMEOUT_MAX"}),
    "shutil": (cheats.C17, {"which", "get_terminal_size"}),
    "pathlib": (cheats.C15, {c.split(".")[1] for c in PATH_CLASSES}),
    # a directory of its own for the build (`build_directory=tempfile.mkdtemp()`): nothing in it is read back;
    # temporary files, which the program writes and reads, keep the row's finding
    "tempfile": (cheats.C15, {"mkdtemp", "gettempdir", "gettempprefix", "TemporaryDirectory"}),
    "site": (cheats.C11, {"getsitepackages", "getusersitepackages", "getuserbase", "USER_SITE", "USER_BASE",
                          "ENABLE_USER_SITE", "PREFIXES"}),
}
_JUDGED_WHY = {cheats.C09: " (work on another thread)", cheats.C17: " (the file system or the operating system)",
               cheats.C15: " (files)", cheats.C11: " (the interpreter's import machinery)"}
# what reads or writes files through a path object (pathlib): the first set whatever the object is (no other
# object of a kernel program has such methods), the second on what the scan knows is a path
PATH_IO_ANY = {"read_text": cheats.C15, "read_bytes": cheats.C15, "iterdir": cheats.C15, "rglob": cheats.C15,
               "readlink": cheats.C15, "write_text": cheats.C17, "write_bytes": cheats.C17, "unlink": cheats.C17,
               "rmdir": cheats.C17, "symlink_to": cheats.C17, "hardlink_to": cheats.C17, "lchmod": cheats.C17}
PATH_IO = {**PATH_IO_ANY, "open": cheats.C15, "glob": cheats.C15, "walk": cheats.C15, "touch": cheats.C17,
           "rename": cheats.C17, "replace": cheats.C17, "chmod": cheats.C17, "link_to": cheats.C17}
# sys.X / os.X a kernel may touch; any other is a reach into the interpreter (C11) or the system (C17)
SYS_ALLOWED = {"version", "version_info", "platform", "maxsize", "float_info", "int_info", "byteorder",
               "getrecursionlimit", "hexversion", "implementation", "executable", "prefix", "base_prefix",
               "exec_prefix", "base_exec_prefix", "flags", "getsizeof", "getdefaultencoding",
               "getfilesystemencoding", "api_version", "float_repr_style", "abiflags",
               # the streams as values (print(..., file=sys.stderr), sys.stdout.flush()); replacing them is a write
               "stdout", "stderr"}
# sys.X that reach frames and tracebacks (the verifier's objects): C15; any other sys.X outside SYS_ALLOWED is C11
SYS_FRAMES = {"_getframe", "exc_info", "exception", "last_traceback", "last_value", "last_exc", "_current_frames"}
OS_ALLOWED = {"environ", "getenv", "path", "cpu_count", "makedirs", "sep", "name", "getpid", "linesep", "pathsep",
              "fspath",
              # a path's name (the working directory's), as os.path and pathlib.Path.cwd give; what lists or opens
              # it is judged where it is (os.listdir, open: C15)
              "getcwd"}
# names that are introspection or code building even when not called directly (``f = getattr; f(...)``)
REFLECTIVE_NAMES = {"eval": cheats.C11, "exec": cheats.C11, "compile": cheats.C11, "__import__": cheats.C11,
                    "setattr": cheats.C11, "delattr": cheats.C11, "globals": cheats.C15, "locals": cheats.C15,
                    "vars": cheats.C15, "breakpoint": cheats.C11, "memoryview": cheats.C15}
# numpy calls allowed in ModelNew's methods: dtypes and scalar helpers (sizes, constants); numpy arrays of the
# inputs are host compute (C01), numpy file reading is C15 wherever it is
NUMPY_FORWARD_OK = {"prod", "ceil", "floor", "sqrt", "log2", "log", "exp", "pi", "e", "inf", "float32", "float16",
                    "float64", "int32", "int64", "int8", "uint8", "bool_", "dtype", "finfo", "iinfo", "isscalar",
                    "round", "abs", "maximum", "minimum", "min", "max", "power", "gcd", "lcm", "sign", "isnan",
                    "isinf", "isfinite", "cbrt", "rsqrt", "nan"}
FILE_READERS = ("numpy.load", "numpy.loadtxt", "numpy.genfromtxt", "numpy.fromfile", "numpy.memmap", "numpy.save",
                "numpy.savez", "numpy.savetxt", "numpy.lib.", "torch.load", "torch.save", "torch.from_file",
                "torch.serialization.", "torch.storage.", "torch.UntypedStorage.from_file")
CALL_CODES = {
    "open": cheats.C15, "sys._getframe": cheats.C15, "globals": cheats.C15, "locals": cheats.C15,
    "__import__": cheats.C11, "eval": cheats.C11, "exec": cheats.C11, "compile": cheats.C11,
    "time.sleep": cheats.C17, "os.system": cheats.C17, "os.fork": cheats.C17, "os.popen": cheats.C17,
    "os.kill": cheats.C17, "os.remove": cheats.C17, "os.unlink": cheats.C17, "os.execv": cheats.C17,
    "os.execl": cheats.C17, "os.spawnl": cheats.C17, "os.listdir": cheats.C15, "os.walk": cheats.C15,
    "os.write": cheats.C18, "os.fdopen": cheats.C18, "os.open": cheats.C15, "os.dup2": cheats.C18,
    "torch.manual_seed": cheats.C12, "torch.seed": cheats.C12, "torch.initial_seed": cheats.C12,
    "torch.get_rng_state": cheats.C12, "torch.set_rng_state": cheats.C12, "torch.cuda.manual_seed": cheats.C12,
    "torch.cuda.manual_seed_all": cheats.C12, "torch.random.manual_seed": cheats.C12,
    "torch.cuda.get_rng_state": cheats.C12, "torch.cuda.set_rng_state": cheats.C12, "torch.random.seed": cheats.C12,
    "torch.random.initial_seed": cheats.C12, "torch.random.get_rng_state": cheats.C12,
    "torch.random.set_rng_state": cheats.C12, "torch.default_generator.get_state": cheats.C12,
    "torch.default_generator.set_state": cheats.C12, "torch.default_generator.manual_seed": cheats.C12,
    "torch.default_generator.seed": cheats.C12, "torch.default_generator.initial_seed": cheats.C12,
    "numpy.random.seed": cheats.C12, "numpy.random.get_state": cheats.C12, "numpy.random.set_state": cheats.C12,
    "random.seed": cheats.C12, "random.getstate": cheats.C12, "random.setstate": cheats.C12,
    # code built for forward to run (a compiled or scripted function): C01 wherever it is built, construction and
    # the import included, where PyTorch compute that runs there is not (static_program.Program.add)
    **dict.fromkeys(("torch.compile", "torch.jit.script", "torch.jit.trace"), cheats.C01),
}
TORCH_BUILDS_CODE = {name for name, code in CALL_CODES.items() if code == cheats.C01}
ATTR_CODES = {"sys.__stdout__": cheats.C18, "sys.modules": cheats.C11,
              "__builtins__": cheats.C11, "__subclasses__": cheats.C15, "__globals__": cheats.C15,
              "f_back": cheats.C15, "f_locals": cheats.C15,
              # an operator called below the Python dispatch key and the profiler (``op.redispatch(keys, ...)``):
              # neither monitor sees it
              "redispatch": cheats.C11, "DispatchKeySet": cheats.C11}
