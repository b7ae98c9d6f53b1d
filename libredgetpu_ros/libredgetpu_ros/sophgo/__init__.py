"""Sophgo family: author TpuLang graphs without tpu-mlir, write the Top MLIR + weight npz TpuLang writes,
parse them back and run them with NumPy. ROS-free.

    from libredgetpu_ros import sophgo as tpul
    tpul.init("bm1684x")
    x = tpul.Tensor([1, 3, 8, 8], name="x")
    y = tpul.relu(tpul.conv(x, w, out_name="c"), out_name="r")
    tpul.compile_f32("net", [x], [y])      # net_origin.mlir + net_top_f32_all_origin_weight.npz
    tpul.deinit()
"""

from __future__ import annotations

from pathlib import Path

from libredgetpu_ros.sophgo.emitter import emit_mlir, save_module
from libredgetpu_ros.sophgo.graph import Tensor, build_module, current_graph, deinit, init, weights_of
from libredgetpu_ros.sophgo.ir import Module, TpuLangError
from libredgetpu_ros.sophgo.ops import (
    add,
    avgpool2d,
    concat,
    conv,
    conv_int,
    conv_quant,
    matmul,
    matmul_int,
    maxpool2d,
    permute,
    relu,
    reshape,
    softmax,
)
from libredgetpu_ros.sophgo.ops_quant import dequant_int_to_fp, requant_fp, requant_fp_to_int, requant_int

__all__ = [
    "Module", "Tensor", "TpuLangError", "add", "avgpool2d", "build", "compile", "compile_f32", "concat",
    "conv",
    "conv_int", "conv_quant", "deinit", "dequant_int_to_fp", "emit_mlir", "init", "matmul", "matmul_int",
    "maxpool2d", "permute", "relu", "requant_fp", "requant_fp_to_int", "requant_int", "reshape", "save",
    "softmax",
]


def build(name: str, inputs: list[Tensor], outputs: list[Tensor], quantized: bool) -> tuple[Module, dict]:
    """(module, weights) of the current graph, without writing anything."""
    return build_module(name, inputs, outputs, quantized), weights_of(current_graph("compile"))


def save(name: str, inputs: list[Tensor], outputs: list[Tensor], quantized: bool,
         out_dir: str | Path = ".") -> tuple[Path, Path]:
    """Write ``<name>_origin.mlir`` and its weight npz into ``out_dir``; returns both paths."""
    module, weights = build(name, inputs, outputs, quantized)
    return save_module(module, weights, out_dir)


def compile(name: str, inputs: list[Tensor], outputs: list[Tensor], cmp: bool = True, refs: object = None,
            mode: str = "f32", dynamic: bool = False, asymmetric: bool = False, no_save: bool = False,
            opt: int = 2, **_ignored: object) -> tuple[Path, Path]:
    """TpuLang's ``compile`` up to the origin MLIR (a TOP_QUANTIZED module) in the current directory.

    Deployment arguments (``opt``, ``dynamic``, ...) are accepted for source compatibility and ignored:
    lowering to a chip needs Sophgo's toolchain.
    """
    return save(name, inputs, outputs, quantized=True)


def compile_f32(name: str, inputs: list[Tensor], outputs: list[Tensor], cmp: bool = True, refs: object = None,
                mode: str = "f32", dynamic: bool = False, opt: int = 2, no_save: bool = False,
                **_ignored: object) -> tuple[Path, Path]:
    """TpuLang's ``compile_f32`` up to the origin MLIR (a TOP_F32 module) in the current directory."""
    return save(name, inputs, outputs, quantized=False)
