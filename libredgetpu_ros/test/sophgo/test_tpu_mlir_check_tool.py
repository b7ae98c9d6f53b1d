"""tools/tpu_mlir_check.py without the tpu-mlir wheel: which line of a tool's output is reported, how the
cmodel's outputs are compared, and that the deployment cases build (the run itself: make tpu-mlir-check)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

TOOL = Path(__file__).resolve().parents[3] / "tools" / "tpu_mlir_check.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("tpu_mlir_check", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_tool_message_is_the_assertion_not_a_stack_frame(tool) -> None:
    codegen = ("in cmodel, enable profile.\n"
               "ERROR: ASSERT /workspace/bm1684x/src/atomic/atomic_rqdq_gen_cmd.c: "
               "atomic_rq_f32mode_gen_cmd: 51: f2i_mode != ROUND_HALF_UP && f2i_mode != ROUND_HALF_DOWN\n"
               "ASSERT info: none.\n"
               "/x/tpuc-opt(+0xf36281) [0x55a8dc4e0281]\n #0 0x000055c0aa22e403 (/x/tpuc-opt+0xf18403)\n")
    message = tool.tool_message(codegen)
    assert message.startswith("ERROR: ASSERT") and "ROUND_HALF_UP" in message
    lowering = ("ASSERT executed at/__w/tpu-mlir/lib/Conversion/TopToTpu/BM1684X/MatMul.cpp:1283\n"
                "ASSERT INFO:input output should be quantized\nOperation:\n")
    assert tool.tool_message(lowering) == "ASSERT INFO:input output should be quantized"


def test_compare_integers_exactly_floats_with_tolerance_and_nan_holes_apart(tool) -> None:
    ours = {"q": np.array([1, 2, 3], np.int8), "f": np.array([0.0, 1.0, 2.0], np.float32)}
    assert tool.compare(ours, {"q": np.array([1, 2, 3], np.int8), "f": ours["f"] + 1e-7})[0]
    assert not tool.compare(ours, {"q": np.array([1, 2, 4], np.int8), "f": ours["f"]})[0]
    assert not tool.compare(ours, {"q": ours["q"], "f": ours["f"] + 1e-3})[0]
    assert tool.compare(ours, {"q": ours["q"], "f": ours["f"] + 1e-3}, atol=2e-3)[0]
    # the bm1684x cmodel's NaN for an empty ceil-mode average window, where ours is 0: reported, not failed
    ok, note = tool.compare(ours, {"q": ours["q"], "f": np.array([np.nan, 1.0, 2.0], np.float32)})
    assert ok and "1 empty-window NaN" in note
    assert not tool.compare(ours, {"q": ours["q"], "f": np.array([0.0, np.nan, 2.0], np.float32)})[0]


def test_pipeline_is_mlir_shells_and_the_cases_build(tool, tmp_path: Path) -> None:
    names = [step.name for step in tool.steps("net", "INT8")]
    assert names == ["top", "lowering", "tpu-opt", "codegen"]
    lowering = " ".join(tool.steps("net", "INT8")[1].args)
    assert "chip=bm1684x mode=INT8" in lowering and "--convert-top-to-tpu=" in lowering
    assert tool.steps("net", "F32")[3].args[1].startswith("--codegen=model_file=net_f32.bmodel")
    case = tool.ceil_pool_case(tmp_path, np.random.default_rng(0))
    assert case.mode == "F32" and case.mlir.exists() and case.weights.exists() and len(case.inputs) == 2


def test_random_families_build_and_run_on_our_executor(tool, tmp_path: Path) -> None:
    """tools/tpu_mlir_families.py without the wheel: every family builds graphs our executor runs (or
    refuses with a TpuLangError naming why), with the inputs the cmodel run would get."""
    from libredgetpu_ros.sophgo.executor import execute
    from libredgetpu_ros.sophgo.ir import TpuLangError
    from libredgetpu_ros.sophgo.parser import load_mlir

    from libredgetpu_ros import sophgo as tpul

    spec = importlib.util.spec_from_file_location("tpu_mlir_families", TOOL.with_name("tpu_mlir_families.py"))
    families = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = families
    try:
        spec.loader.exec_module(families)
        rng = np.random.default_rng(3)
        built = 0
        for name, build in families.FAMILIES.items():
            for index in range(3):
                try:
                    case = build(f"{name}_{index}", rng, tmp_path)
                except TpuLangError as exc:
                    tpul.deinit()
                    assert "is not supported" in str(exc)
                    continue
                with np.load(case.weights) as data:
                    weights = {k: data[k] for k in data.files}
                outputs = execute(load_mlir(case.mlir), weights, case.inputs[0])
                assert outputs and all(v.size for v in outputs.values())
                built += 1
        assert built >= 12
    finally:
        sys.modules.pop(spec.name, None)
        sys.modules.pop("tpu_mlir_random", None)
