"""Shape inference for the Top ops, shared by the builder (at call time) and the executor (MLIR from a file).

Every error names the op and the argument: ``conv 'c1': input has 3 channels, weight expects 2 * group``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from libredgetpu_ros.sophgo.ir import TpuLangError

MAX_ELEMENTS = 1 << 28  # per tensor (padded inputs included): refuse before allocating
MAX_ATTR_INT = 1 << 20  # strides, pads, dilations, kernel sizes


def _fail(where: str, message: str) -> TpuLangError:
    return TpuLangError(f"{where}: {message}")


def check_size(shape: Sequence[int], where: str, what: str) -> list[int]:
    """``shape`` as a list, unless it holds more than MAX_ELEMENTS elements."""
    count = 1
    for d in shape:
        count *= int(d)
    if count > MAX_ELEMENTS:
        raise _fail(where, f"{what} {list(shape)} has {count} elements, more than the {MAX_ELEMENTS} allowed")
    return list(shape)


def int_list(value: object, length: int, where: str, arg: str, minimum: int) -> list[int]:
    """A list of ``length`` integers >= ``minimum``; error naming ``arg`` otherwise."""
    try:
        items = [int(v) for v in value]  # type: ignore[union-attr]
        ok = all(float(v) == int(v) for v in value)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise _fail(where, f"{arg} must be a list of {length} integers, got {value!r}") from None
    if not ok or len(items) != length:
        raise _fail(where, f"{arg} must be a list of {length} integers, got {value!r}")
    if any(v < minimum for v in items):
        raise _fail(where, f"{arg} {items} must be >= {minimum}")
    if any(abs(v) > MAX_ATTR_INT for v in items) and arg not in ("new_shape", "shape"):
        raise _fail(where, f"{arg} {items} has a value above {MAX_ATTR_INT}")
    return items


def window_out(size: int, pad_begin: int, pad_end: int, extent: int, stride: int, where: str,
               axis: str) -> int:
    """Output length of a sliding window (floor rule; a pool's ``ceil_mode`` is already in its end pads,
    :func:`pool_pads`); error when the (dilated) window does not fit the padded input."""
    span = size + pad_begin + pad_end - extent
    if span < 0:
        raise _fail(where, f"window of {extent} along {axis} is larger than the padded input "
                           f"({size} + pads {pad_begin}/{pad_end})")
    return span // stride + 1


def conv_shape(x: Sequence[int], w: Sequence[int], stride: list[int], dilation: list[int], pads: list[int],
               group: int, where: str) -> list[int]:
    """[N, OC, OH, OW] of an NCHW conv; ``pads`` = [top, left, bottom, right] (TpuLang's order)."""
    if len(x) != 4:
        raise _fail(where, f"input must be 4-D NCHW, got shape {list(x)}")
    if len(w) != 4:
        raise _fail(where, f"weight must be 4-D [oc, ic/group, kh, kw], got shape {list(w)}")
    if group < 1:
        raise _fail(where, f"group must be >= 1, got {group}")
    if x[1] != w[1] * group:
        raise _fail(where,
                    f"input has {x[1]} channels, weight expects {w[1]} * group {group} = {w[1] * group}")
    if w[0] % group:
        raise _fail(where, f"weight has {w[0]} output channels, not a multiple of group {group}")
    kh = dilation[0] * (w[2] - 1) + 1
    kw = dilation[1] * (w[3] - 1) + 1
    oh = window_out(x[2], pads[0], pads[2], kh, stride[0], where, "height")
    ow = window_out(x[3], pads[1], pads[3], kw, stride[1], where, "width")
    check_size([x[0], x[1], x[2] + pads[0] + pads[2], x[3] + pads[1] + pads[3]], where, "padded input")
    return check_size([x[0], w[0], oh, ow], where, "output")


def pool_window(x: Sequence[int], kernel: list[int], stride: list[int],
                pads: list[int]) -> tuple[list[int], list[int], list[int]]:
    """(kernel, stride, pads) a pool runs with. An empty kernel (TpuLang's ``kernel=None`` prints
    ``kernel_shape = []``) is a global pool: tpu-mlir's shape inference sets the kernel to the input's spatial
    size, strides 1 and pads 0, whatever strides and pads were given."""
    if kernel:
        return kernel, stride, pads
    return [int(x[2]), int(x[3])], [1, 1], [0, 0, 0, 0]


def ceil_mode_pad(size: int, pad_begin: int, kernel: int, stride: int) -> int:
    """The bottom/right padding tpu-mlir adds for ``ceil_mode`` (its MaxPool/AvgPool shape inference).

    It rounds ``size + 2 * pad_begin - kernel`` (the begin pad counted twice, as if both were equal) up to a
    multiple of the stride with extra end padding, drops ``ceil_mode`` and applies the floor rule to the new
    pads. So a [3, 2] pool with strides [3, 2] and pads [1, 1, 0, 0] of a 7x8 input is 2x4 (the ceil formula
    gives 3x5), and a window may lie wholly in the added padding."""
    span = size + 2 * pad_begin - kernel
    remain = span % stride if span > 0 else 0  # C++ '%': never positive for a negative span
    return stride - remain if remain else 0


def pool_pads(x: Sequence[int], kernel: list[int], stride: list[int], pads: list[int],
              ceil_mode: bool) -> list[int]:
    """[top, left, bottom, right] pads after tpu-mlir moves ``ceil_mode`` into the bottom/right pads."""
    if not ceil_mode:
        return list(pads)
    return [pads[0], pads[1], pads[2] + ceil_mode_pad(x[2], pads[0], kernel[0], stride[0]),
            pads[3] + ceil_mode_pad(x[3], pads[1], kernel[1], stride[1])]


def pool_shape(x: Sequence[int], kernel: list[int], stride: list[int], pads: list[int], ceil_mode: bool,
               where: str, kind: str | None = None) -> list[int]:
    """The pool's output shape; with ``kind`` (``top.MaxPool`` / ``top.AvgPool``) the pools tpu-mlir 1.30.2
    deploys wrong to bm1684x are refused too (see below)."""
    if len(x) != 4:
        raise _fail(where, f"input must be 4-D NCHW, got shape {list(x)}")
    if pads[0] >= kernel[0] or pads[2] >= kernel[0] or pads[1] >= kernel[1] or pads[3] >= kernel[1]:
        raise _fail(where, f"pad {pads} must be smaller than the kernel {kernel}")
    full = pool_pads(x, kernel, stride, pads, ceil_mode)
    for axis, name in ((0, "height"), (1, "width")):
        # measured: float and int8 avgpools and int8 maxpools go wrong with any pad there (a float maxpool
        # only with a begin pad, refused alike to keep one rule)
        if kind and kernel[axis] == x[2 + axis] and stride[axis] > 1 and full[axis] + full[axis + 2] > 0:
            # tpu-mlir 1.30.2's bm1684x backend mis-computes such a pool (a window as wide as the input,
            # stride > 1, padded): its simulator's values are neither this pool nor any padding of it, while
            # its Top interpreter agrees with us. Refused rather than deployed wrong (docs/sophgo.md).
            raise _fail(where, f"a kernel as large as the input's {name} ({kernel[axis]}) with stride "
                               f"{stride[axis]} > 1 and padding {[full[axis], full[axis + 2]]} is not "
                               f"supported: tpu-mlir 1.30.2 deploys it wrong on bm1684x (use stride 1 or no "
                               f"padding there)")
    oh = window_out(x[2], full[0], full[2], kernel[0], stride[0], where, "height")
    ow = window_out(x[3], full[1], full[3], kernel[1], stride[1], where, "width")
    check_size([x[0], x[1], x[2] + full[0] + full[2] + stride[0], x[3] + full[1] + full[3] + stride[1]],
               where, "padded input")
    return check_size([x[0], x[1], oh, ow], where, "output")


def matmul_shape(a: Sequence[int], b: Sequence[int], left_t: bool, right_t: bool, out_t: bool,
                 where: str) -> list[int]:
    if out_t:
        # tpu-mlir 1.30.2 ignores the flag: its interpreter and the bm1684x simulator give the untransposed
        # product (different numbers, even on a non-square result), and without right_transpose its codegen
        # fails. A graph using it would not compute on the chip what it says: refused.
        raise _fail(where, "output_transpose=True is not supported: tpu-mlir 1.30.2 ignores it on bm1684x "
                           "(the deployed chip returns the untransposed product); transpose with permute")
    if left_t:
        # the same for the input: the chip multiplies the untransposed input when the shapes allow it
        # (measured: 3/3 square cases), tpu-mlir's shape inference fails otherwise (MatMul.cpp:328)
        raise _fail(where, "input_transpose=True is not supported: tpu-mlir 1.30.2 ignores it on bm1684x "
                           "(the deployed chip multiplies the untransposed input); transpose with permute")
    if len(a) < 2 or len(b) < 2:
        raise _fail(where, f"input {list(a)} and right {list(b)} must both be at least 2-D")
    m, k = (a[-1], a[-2]) if left_t else (a[-2], a[-1])
    k2, n = (b[-1], b[-2]) if right_t else (b[-2], b[-1])
    if k != k2:
        raise _fail(where, f"input's reduced dimension {k} does not match right's {k2} "
                           f"(input {list(a)}, right {list(b)})")
    try:
        batch = list(np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2])))
    except ValueError:
        raise _fail(where,
                    f"batch dimensions of input {list(a)} and right {list(b)} do not broadcast") from None
    return check_size(batch + ([n, m] if out_t else [m, n]), where, "output")


def broadcast_shape(a: Sequence[int], b: Sequence[int], where: str) -> list[int]:
    try:
        return check_size(np.broadcast_shapes(tuple(a), tuple(b)), where, "output")
    except ValueError:
        raise _fail(where, f"shapes {list(a)} and {list(b)} do not broadcast") from None


def concat_shape(shapes: list[Sequence[int]], axis: int, where: str) -> list[int]:
    if not shapes:
        raise _fail(where, "inputs is empty")
    rank = len(shapes[0])
    ax = axis + rank if axis < 0 else axis
    if not 0 <= ax < rank:
        raise _fail(where, f"axis {axis} is out of range for rank {rank}")
    for shape in shapes[1:]:
        if len(shape) != rank or any(shape[i] != shapes[0][i] for i in range(rank) if i != ax):
            raise _fail(where, f"inputs {[list(s) for s in shapes]} differ outside axis {axis}")
    out = list(shapes[0])
    out[ax] = sum(s[ax] for s in shapes)
    return out


def reshape_shape(x: Sequence[int], new_shape: Sequence[int], where: str) -> list[int]:
    total = math.prod(int(d) for d in x)
    out = [int(d) for d in new_shape]
    out = [x[i] if d == 0 and i < len(x) else d for i, d in enumerate(out)]
    if out.count(-1) > 1 or any(d < -1 or d == 0 for d in out):
        raise _fail(where, f"new_shape {list(new_shape)} may hold one -1 and otherwise positive sizes")
    known = math.prod(d for d in out if d != -1)
    if -1 in out:
        if known == 0 or total % known:
            raise _fail(where, f"cannot reshape {list(x)} ({total} elements) to {list(new_shape)}")
        out[out.index(-1)] = total // known
    elif known != total:
        raise _fail(where, f"cannot reshape {list(x)} ({total} elements) to {list(new_shape)} ({known})")
    return out


def permute_shape(x: Sequence[int], order: Sequence[int], where: str) -> list[int]:
    if sorted(int(o) for o in order) != list(range(len(x))):
        raise _fail(where, f"order {list(order)} is not a permutation of the {len(x)} axes of {list(x)}")
    return [x[int(o)] for o in order]


def axis_in_range(axis: int, rank: int, where: str) -> int:
    ax = axis + rank if axis < 0 else axis
    if not 0 <= ax < rank:
        raise _fail(where, f"axis {axis} is out of range for rank {rank}")
    return ax
