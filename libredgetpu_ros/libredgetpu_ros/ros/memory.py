"""Process-wide allocator tuning for nodes that pass multi-MB messages (weight matrices, camera frames).

No ROS imports: :func:`retain_large_allocations` must run in a node's ``main()`` before ``rclpy.init`` so
that rclpy's and Fast DDS's threads allocate under the same rules.
"""

from __future__ import annotations

import ctypes
import os
import platform

MALLOC_TUNING_VAR = "LIBREDGETPU_ROS_MALLOC_TUNING"
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc <malloc.h> mallopt parameters
# The largest M_MMAP_THRESHOLD glibc accepts on 64-bit (HEAP_MAX_SIZE / 2): covers requests up to N ~ 2896.
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 64 << 20  # freed heap kept for reuse before glibc returns the top of a heap to the OS


def retain_large_allocations() -> bool:
    """Serve multi-MB blocks from the heap and keep them for reuse (glibc, process-wide); True if applied.

    Why (measured on the control node): one N = 1024 ``set_weights`` request passes through ~12 MB of fresh
    buffers in the node (Fast DDS's received sample, rmw's C message, rclpy's ``array.array``). By default
    glibc maps each of those with ``mmap`` and unmaps it on ``free``, so every call page-faults ~3000 new
    pages (~5 ms of a ~12 ms round trip; 0 faults with this). Camera frames (~1 MB) gain too (measured on a
    bare subscriber: DDS reader -> callback 2.2 -> 0.7 ms per 640x480 frame; whether through the mmap or the
    heap-trim threshold was not separated). The cost: up to ``TRIM_THRESHOLD`` of freed memory stays mapped.
    No-op off glibc or with ``LIBREDGETPU_ROS_MALLOC_TUNING=0``.
    """
    if os.environ.get(MALLOC_TUNING_VAR, "1") == "0" or platform.libc_ver()[0] != "glibc":
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # mallopt returns 1 on success; setting the mmap threshold also stops glibc's dynamic adjustment of it.
    mmap_ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    trim_ok = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    return bool(mmap_ok and trim_ok)
