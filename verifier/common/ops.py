"""What counts as PyTorch compute: the aten ops ModelNew.forward may dispatch (allocation, views, copies,
descriptions) and the name of the aten op an ATen C++ entry point is for. Read by the child's monitors (what
they record) and by the judge and the binary's scans (what decides C01). Imports: torch.
"""

from __future__ import annotations

import re

import torch

# aten ops that allocate, view, copy or describe: the only ones ModelNew.forward may dispatch.
ALLOWED_ATEN = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "ones",
    "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "fill_", "zero_", "view", "_unsafe_view",
    "reshape", "_reshape_alias", "as_strided", "expand", "expand_as", "permute", "transpose", "t", "unsqueeze",
    "squeeze", "flatten", "unflatten", "select", "slice", "narrow", "split", "split_with_sizes", "chunk", "unbind",
    "alias", "detach", "clone", "copy_", "_to_copy", "to", "contiguous", "lift_fresh", "lift_fresh_copy",
    "_local_scalar_dense", "resize_", "resize_as_", "view_as", "is_same_size", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "numel", "dim", "record_stream", "item", "_has_compatible_shallow_copy_type",
    "resolve_conj", "resolve_neg", "lift", "empty_permuted", "set_", "result_type", "is_pinned", "size", "stride",
    "is_contiguous", "as_strided_", "_nested_tensor_from_mask_left_aligned",
    # views the profiler records by their own name around the permute / transpose that does them (Tensor.movedim,
    # moveaxis, swapaxes, swapdims); dtype promotion on dtypes alone
    "movedim", "moveaxis", "swapaxes", "swapdims", "promote_types", "can_cast",
    # the same views and copies by the names the profiler records around them (Tensor.T, .mT, .H, reshape_as,
    # type_as (a conversion: rounding is judged apart), torch.concat, torch.tensor's detach_), their in-place forms,
    # strided windows (unfold, diagonal) and splits
    "numpy_T", "mT", "mH", "matrix_H", "adjoint", "reshape_as", "type_as", "concat", "concatenate", "detach_",
    "ravel", "broadcast_to", "tensor_split", "hsplit", "vsplit", "dsplit", "atleast_1d", "atleast_2d", "atleast_3d",
    "squeeze_", "unsqueeze_", "t_", "transpose_", "unfold", "diagonal", "unsafe_split", "unsafe_chunk",
    "scalar_tensor",
    # every input expanded to the common shape (``torch.broadcast_tensors``, ``torch.meshgrid``): the profiler
    # records each by its own name around the expands that make the views
    "broadcast_tensors", "meshgrid",
    # a complex tensor's views as (real, imaginary) pairs and back, and its parts
    "view_as_real", "view_as_complex", "real", "imag",
    # copies that move data without computing on it, and dropout (the identity in eval mode, where models run)
    "cat", "stack", "dropout", "feature_dropout", "alpha_dropout",
    # F.pad with a constant fill: x and the fill in a new tensor. ``pad`` is the composite the profiler records
    # around the op that does the work; the gathering modes still show theirs (reflection_pad*, replication_pad*)
    "pad", "constant_pad_nd",
}


# the allowed ops that make new tensor data out of other data (copies, concatenations, a constant pad): a forward of
# nothing else beside its own calls could hand back PyTorch's data movement as the whole answer (a pixel shuffle
# done by permute().contiguous(), the own function only checking the input), so on the cpu backend, where no share
# of device time tells, the knockout run asks whose tensor data the output is (verifier/judge/verdict.py)
MOVES_DATA = frozenset({"aten::clone", "aten::copy_", "aten::_to_copy", "aten::to", "aten::contiguous", "aten::cat",
                        "aten::stack", "aten::concat", "aten::concatenate", "aten::constant_pad_nd", "aten::pad"})

# operator namespaces that mark or describe and compute nothing: the profiler's record_function scopes
NON_COMPUTE_NAMESPACES = frozenset({"profiler"})
# what a TorchScript graph executor runs as one profiler event (oneDNN Graph's partitions, NNC's and nvFuser's fusion
# groups): PyTorch's compute, under no operator's name
FUSION_GROUP = re.compile(r"^(?:LlgaPartition|TensorExprGroup|TensorExprDynamicGroup|CudaFusionGroup|FusionGroup)(?:_\w*)?$")


def forbidden(ops) -> list[str]:
    """The PyTorch compute among ``ops`` (what a monitor recorded: ``ns::op`` names, the candidate's own operators
    already left out): deny by default. An aten op outside ``ALLOWED_ATEN``, an operator of any other namespace
    (``mkldnn::``, ``mkl::``, ``quantized::``, a library's: each computes) but the profiler's markers, and a
    TorchScript fusion group's event."""
    out = set()
    for o in ops:
        ns, sep, name = o.partition("::")
        if not sep:
            if FUSION_GROUP.match(o):
                out.add(o)
        elif ns == "aten":
            if name not in ALLOWED_ATEN:
                out.add(o)
        elif ns not in NON_COMPUTE_NAMESPACES:
            out.add(o)
    return sorted(out)


def aten_op_of(name: str) -> str | None:
    """The aten op an ATen C++ entry point is named for: ``add_Tensor`` -> ``add``, ``empty_memory_format`` ->
    ``empty``, ``mm`` -> ``mm``; None when no aten op has that name (``getCurrentDeviceProperties``)."""
    aten = torch.ops.aten

    def packet(n: str):
        try:
            return getattr(aten, n)
        except (AttributeError, RuntimeError):
            return None

    if packet(name) is not None:
        return name
    for i, ch in enumerate(name):
        if ch == "_" and 0 < i < len(name) - 1:
            p = packet(name[:i])
            if p is not None and name[i + 1:] in p.overloads():
                return name[:i]
    return None
