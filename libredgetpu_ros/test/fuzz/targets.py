"""Fuzz targets of the model readers (TFLite, FlexBuffers, DarwiNN), seeded with the real fixture models.

Each target runs the reader and then what a consumer does with the result (``inspect``'s JSON and text,
``plan``'s dry run, the output relayout), because that is where a file that parses can still blow up.
``test_fuzz_readers.py`` runs a bounded budget of each in CI; for a long run::

    nice -n 19 .venv/bin/python libredgetpu_ros/test/fuzz/targets.py --cases 40000 --seed 1 [--target NAME]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

try:
    from .harness import FuzzTarget, long_run
except ImportError:  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from harness import FuzzTarget, long_run

from libredgetpu_ros.errors import InputError

TFLITE_SEEDS = (
    "ssd/ssd_mobilenet_v1_coco_quant_postprocess_head_layers.tflite",  # CPU, FlexBuffers custom op
    "matmul/dense_256_edgetpu.tflite",  # Edge TPU, parameter caching pair
    "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite",  # tiled 1x1x1001 output
    "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite",  # tiled outputs + custom op
)
DARWINN_SEEDS = (*TFLITE_SEEDS[1:],
                 "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_1_of_2_edgetpu.tflite")  # 3 inputs


def _address(view: memoryview) -> int:
    return np.frombuffer(view, np.uint8).ctypes.data if len(view) else 0


def _structure_ranges(model_data: memoryview, package: memoryview | None,
                      model: object) -> list[tuple[int, int]]:
    """Byte ranges (relative to ``model_data``) of the DarwiNN executables' tables: each executable minus
    its parameter blob, where mutations hit sizes, dims and hints instead of weights."""
    from libredgetpu_ros.formats.darwinn import read_package

    base = _address(model_data)
    ranges = []
    packages = [read_package(package)] if package is not None else [
        model.darwinn(op) for op in model.edgetpu_ops()]  # type: ignore[attr-defined]
    for pkg in packages:
        for exe in pkg.executables:
            start, end = _address(exe.data) - base, _address(exe.data) - base + len(exe.data)
            p0 = _address(exe.parameters) - base if len(exe.parameters) else end
            p1 = p0 + len(exe.parameters)
            ranges += [(start, min(p0, end)), (p1, end)]
    return [(a, b) for a, b in ranges if b > a]


# -- TFLite ------------------------------------------------------------------------------------------------
def consume_tflite(data: bytes) -> None:
    from libredgetpu_ros.cli.inspect_cmd import render_text, summarize, to_json
    from libredgetpu_ros.edgetpu.plan import plan_model
    from libredgetpu_ros.formats import load_model

    model = load_model(data)
    for t in model.tensors:
        model.buffer_data(t)
    summary = summarize(model)
    to_json(summary)
    render_text(summary)
    if model.edgetpu_ops():
        plan_model(data)


def _tflite_hot(data: bytes) -> list[tuple[int, int]]:
    from libredgetpu_ros.formats import load_model

    model = load_model(data)
    ranges = [(0, 4096), (len(data) - 4096, len(data))]
    for op in model.operators:
        if op.custom_options_raw is not None:
            start = _address(op.custom_options_raw) - _address(model.data)
            end = start + len(op.custom_options_raw)
            ranges += [(start - 8, start + 512), (end - 256, end)]
    return ranges + _structure_ranges(model.data, None, model)


# -- FlexBuffers -------------------------------------------------------------------------------------------
def consume_flex(data: bytes) -> None:
    from libredgetpu_ros.cli.inspect_cmd import _plain
    from libredgetpu_ros.formats.flex import decode_flexbuffer

    json.dumps(decode_flexbuffer(data, "fuzz"), default=_plain)
    decode_flexbuffer(data, "fuzz", keep_views=True)


def _synthetic_flex() -> list[bytes]:
    """Option maps with every value kind the reader handles (the fixtures only use a few)."""
    import flatbuffers.flexbuffers as fb

    b = fb.Builder()
    with b.Map():
        b.Int("int", -5)
        b.UInt("uint", 70000)
        b.Float("float", 0.25)
        b.Bool("bool", True)
        b.String("string", "posenet")
        b.Blob("blob", bytes(range(40)))
        b.IndirectInt("iint", 1 << 40)
        b.IndirectFloat("ifloat", 1.5)
        b.TypedVectorFromElements("ints", [1, 2, 3])
        b.TypedVectorFromElements("floats", [1.0, 2.0])
        b.FixedTypedVectorFromElements("int3", [1, 2, 3])
        with b.Vector("mixed"):
            b.Int(1)
            b.String("two")
            with b.Map():
                b.Null("nothing")
                b.Int("k", 9)
    small = fb.Builder()
    small.MapFromElements({"a": 1, "b": [1.0, 2.0], "c": "x" * 300})
    return [bytes(b.Finish()), bytes(small.Finish())]


def _short_wrapper(options: bytes) -> bytes:
    """An Edge TPU op's options map with its keys and values but a 512-byte package string: the map is
    what the FlexBuffers reader walks; a megabyte of package would only slow every case down."""
    import flatbuffers.flexbuffers as fb
    from libredgetpu_ros.formats.flex import decode_flexbuffer

    b = fb.Builder()
    with b.Map():
        for key, value in decode_flexbuffer(options, "seed", keep_views=True).items():
            if isinstance(value, memoryview):
                b.String(key, str(value[:512], "latin-1"))
            elif isinstance(value, list):
                b.TypedVectorFromElements(key, value)
            else:
                b.Int(key, value)
    return bytes(b.Finish())


def flex_seeds(fixtures: Callable[[str], Path]) -> list[bytes]:
    from libredgetpu_ros.formats import load_model

    seeds = []
    for name in (TFLITE_SEEDS[0], TFLITE_SEEDS[3], TFLITE_SEEDS[1]):
        for op in load_model(fixtures(name)).operators:
            if op.custom_options_raw is not None:
                raw = bytes(op.custom_options_raw)
                seeds.append(_short_wrapper(raw) if op.is_edgetpu else raw)
    return seeds + _synthetic_flex()


def _flex_hot(data: bytes) -> list[tuple[int, int]]:
    return [(0, 256), (len(data) - 512, len(data))]  # the root and the map are at the end


# -- DarwiNN -----------------------------------------------------------------------------------------------
def consume_darwinn(data: bytes) -> None:
    from libredgetpu_ros.edgetpu.executor import schedule
    from libredgetpu_ros.edgetpu.plan import plan_executable
    from libredgetpu_ros.formats.darwinn import read_package
    from libredgetpu_ros.formats.layout import relayout_output

    package = read_package(data)
    for exe in package.executables:
        schedule(exe)
        for layer in exe.output_layers:
            relayout_output(np.zeros(layer.size_bytes, np.uint8), layer)
    plan_executable(package.runnable)


def darwinn_seeds(fixtures: Callable[[str], Path]) -> list[bytes]:
    """The bare ``DWN1`` packages of the Edge TPU fixtures (key "4" of the op's FlexBuffers options)."""
    from libredgetpu_ros.formats import load_model
    from libredgetpu_ros.formats.flex import decode_flexbuffer

    seeds = []
    for name in DARWINN_SEEDS:
        model = load_model(fixtures(name))
        for op in model.edgetpu_ops():
            seeds.append(bytes(decode_flexbuffer(op.custom_options_raw, name, keep_views=True)["4"]))
    return seeds


def _darwinn_hot(data: bytes) -> list[tuple[int, int]]:
    return [(0, 512), *_structure_ranges(memoryview(data), memoryview(data), None)]


def targets(fixtures: Callable[[str], Path]) -> dict[str, FuzzTarget]:
    """The three reader targets; ``fixtures(relative name) -> Path`` finds the seed models."""
    typed = (InputError,)
    return {
        "tflite": FuzzTarget("tflite", [fixtures(n).read_bytes() for n in TFLITE_SEEDS], consume_tflite,
                             typed, _tflite_hot),
        "flexbuffers": FuzzTarget("flexbuffers", flex_seeds(fixtures), consume_flex, typed, _flex_hot),
        "darwinn": FuzzTarget("darwinn", darwinn_seeds(fixtures), consume_darwinn, typed, _darwinn_hot),
    }


def _all_targets(names: list[str] | None) -> dict[str, FuzzTarget]:
    """The reader targets plus the other files' targets that ``names`` asks for (all when None)."""
    from libredgetpu_ros.fixtures import fixture

    all_targets = targets(fixture)
    if not names or {"mcap_bag", "sqlite_bag", "compressed_bag"} & set(names):
        import tempfile

        from bag_targets import targets as bag_targets  # the bag readers (bag_targets.py)

        all_targets |= bag_targets(Path(tempfile.mkdtemp(prefix="bag-seeds-")))
    if not names or "teamtensor_model" in names:
        from teamtensor_targets import targets as teamtensor_targets  # the Team Tensor worker's models

        all_targets |= teamtensor_targets()
    if not names or {"tpulang_mlir", "tpulang_npz"} & set(names):
        from tpulang_targets import targets as tpulang_targets  # TpuLang MLIR and npz (tpulang_targets.py)

        all_targets |= tpulang_targets(fixture)
    return all_targets


def main() -> int:
    return long_run("long fuzz run of the model and bag readers", _all_targets, cases=40_000,
                    time_limit_s=5.0, memory_limit_mb=1024)


if __name__ == "__main__":
    sys.exit(main())
