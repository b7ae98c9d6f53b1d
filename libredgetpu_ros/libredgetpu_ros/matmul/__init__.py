"""Runtime weight-swapping matrix multiplication on compiled Dense(N) Edge TPU templates (docs/matmul.md)."""

from libredgetpu_ros.matmul.blob import build_blob, parse_blob
from libredgetpu_ros.matmul.engine import MatMulEngine, SwapReport
from libredgetpu_ros.matmul.template import DenseTemplate, load_template

__all__ = ["DenseTemplate", "MatMulEngine", "SwapReport", "build_blob", "load_template", "parse_blob"]
