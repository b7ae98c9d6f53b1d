"""Model file formats: TFLite flatbuffers, FlexBuffers custom options, DarwiNN executables, output layout.

``load_model(path | bytes)`` is the entry point; see docs/formats.md.
"""

from libredgetpu_ros.formats.tflite import (
    Operator,
    Quantization,
    SubgraphLayout,
    Tensor,
    TfliteModel,
    load_model,
)

__all__ = ["Operator", "Quantization", "SubgraphLayout", "Tensor", "TfliteModel", "load_model"]
