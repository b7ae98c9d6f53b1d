"""Compiler-free re-parameterisation: new int8 values into a loaded model's parameter blobs and CPU twin,
versioned and published atomically. One mechanism for MatMul's ``set_weights``, the spot tracker's colour,
the pattern tracker's template (see docs/robotics.md)."""

from libredgetpu_ros.reparam.store import (
    BLOB_KIND_OF,
    SIGN_FLIP,
    BlobPatch,
    ParameterSet,
    ParameterStore,
    ParameterTarget,
    device_to_int8,
    int8_to_device,
    make_patch,
)
from libredgetpu_ros.reparam.twin import patch_twin_content, twin_tensor_span, view_offset

__all__ = ["BLOB_KIND_OF", "SIGN_FLIP", "BlobPatch", "ParameterSet", "ParameterStore", "ParameterTarget",
           "device_to_int8", "int8_to_device", "make_patch", "patch_twin_content", "twin_tensor_span",
           "view_offset"]
