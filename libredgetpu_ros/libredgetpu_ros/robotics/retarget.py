"""A new compiled template from a re-parameterised one, without ``edgetpu_compiler``.

The executables' parameter blobs are views into the compiled file, so the file with a ``ParameterSet``'s
blobs written at the same byte positions is a compiled model carrying the new values (the instructions are
unchanged; they never encoded the values). The twin gets the same int8 values in its tensors, so the written
template loads like any other (its colour / template bytes agree with its twin). Every output is re-read and
checked before it is returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from libredgetpu_ros.errors import ModelFormatError
from libredgetpu_ros.reparam import (
    BLOB_KIND_OF,
    ParameterSet,
    patch_twin_content,
    twin_tensor_span,
    view_offset,
)
from libredgetpu_ros.robotics.template import COMPILED_SUFFIX, SIDECAR_SUFFIX, RoboticsTemplate


@dataclass(frozen=True)
class RetargetedTemplate:
    compiled: bytes
    twin: bytes
    changed: dict[str, int]  # blob kind -> bytes that differ from the source


def retarget(template: RoboticsTemplate, parameters: ParameterSet) -> RetargetedTemplate:
    """The compiled and twin file contents of ``template`` carrying ``parameters``."""
    from libredgetpu_ros.formats import load_model

    if template.compiled is None:
        raise ModelFormatError(f"template {template.name}: no compiled model "
                               f"({template.name}{COMPILED_SUFFIX}) to retarget; only the CPU twin exists")
    data = template.compiled.data
    out = bytearray(data)
    changed: dict[str, int] = {}
    for exe in template.package().executables:
        kind = BLOB_KIND_OF[exe.type]
        blob = parameters.blob(kind)
        if blob is None or not exe.parameters.nbytes:
            continue
        start = view_offset(data, exe.parameters)
        if not 0 <= start <= len(data) - exe.parameters.nbytes or blob.size != exe.parameters.nbytes:
            raise ModelFormatError(f"{template.compiled_path}: the {kind!r} parameters are not a plain span "
                                   f"of the file; cannot rewrite them in place")
        changed[kind] = int(np.count_nonzero(np.frombuffer(exe.parameters, np.uint8) != blob))
        out[start:start + blob.size] = blob.tobytes()
    compiled = bytes(out)
    written = load_model(compiled)  # re-read: the new file must parse and hold exactly the new blobs
    for exe in written.darwinn(written.edgetpu_ops()[0]).executables:
        blob = parameters.blob(BLOB_KIND_OF[exe.type])
        if blob is not None and exe.parameters.nbytes and not np.array_equal(
                np.frombuffer(exe.parameters, np.uint8), blob):
            raise ModelFormatError(f"{template.compiled_path}: rewritten parameters do not read back")
    twin_model = template.twin
    spans = {i: twin_tensor_span(twin_model, i) for i in parameters.twin}
    twin = patch_twin_content(bytes(twin_model.data), spans, parameters.twin)
    return RetargetedTemplate(compiled, twin, changed)


def output_names(out: Path) -> tuple[Path, Path | None, Path | None]:
    """(compiled, twin, sidecar) paths for ``-o OUT``: a ``NAME_edgetpu.tflite`` output gets the twin
    ``NAME.tflite`` and the sidecar ``NAME_edgetpu.json`` beside it (a loadable template); any other name gets
    the compiled model alone."""
    out = Path(out)
    if not out.name.endswith(COMPILED_SUFFIX):
        return out, None, None
    base = out.name[: -len(COMPILED_SUFFIX)]
    return out, out.with_name(base + ".tflite"), out.with_name(base + SIDECAR_SUFFIX)
