"""Classification: dequantize the boundary's class probabilities and take the top k with labels."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from libredgetpu_ros.errors import ConfigError, ModelFormatError
from libredgetpu_ros.postprocess.graph import TensorSpec, model_label, take_outputs
from libredgetpu_ros.postprocess.labels import label_of, load_labels
from libredgetpu_ros.postprocess.results import ClassScore


def _score_tensor(model: Any) -> int:
    """The class-score tensor: the single output of the Edge TPU op if compiled, else the graph output."""
    edgetpu = [op for op in model.operators if op.opcode_name == "edgetpu-custom-op"]
    candidates = list(edgetpu[-1].outputs) if edgetpu else list(model.outputs)
    if len(candidates) != 1:
        where = "Edge TPU op outputs" if edgetpu else "graph outputs"
        raise ModelFormatError(f"{model_label(model)}: a classifier needs one class-score tensor, found "
                               f"{len(candidates)} {where}")
    tensor = model.tensors[candidates[0]]
    if int(np.prod(tensor.shape)) != tensor.shape[-1]:
        raise ModelFormatError(f"{model_label(model)}: class-score tensor {tensor.name!r} has shape "
                               f"{tensor.shape}, expected (1, classes)")
    return candidates[0]


class Classifier:
    """Top-k classes from a classifier's score tensor (softmax probabilities, quantized)."""

    def __init__(self, spec: TensorSpec, labels: Mapping[int, str] | None = None) -> None:
        self.spec = spec
        self.labels = dict(labels) if labels is not None else None

    @classmethod
    def from_model(cls, model: Any, labels: Any = None) -> Classifier:
        return cls(TensorSpec.of(model, _score_tensor(model)), load_labels(labels))

    @property
    def input_names(self) -> list[str]:
        return [self.spec.name]

    @property
    def num_classes(self) -> int:
        return self.spec.shape[-1]

    def scores(self, outputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """All class scores, dequantized, as a (classes,) float32 array."""
        (raw,) = take_outputs(outputs, [self.spec], "Classifier")
        return self.spec.dequantize(raw.reshape(-1))

    def top_k(self, outputs: Mapping[str, np.ndarray], k: int = 5,
              threshold: float = 0.0) -> list[ClassScore]:
        """The ``k`` best classes with score >= ``threshold``, best first (ties: lower class id first)."""
        if k < 1:
            raise ConfigError(f"top_k needs k >= 1, got {k}")
        scores = self.scores(outputs)
        k = min(k, scores.size)
        # Every class scoring at least the k-th best score, not argpartition's k: with ties at the cut it
        # keeps an arbitrary one of the tied classes. Candidates come in id order; the lexsort is stable.
        kth = np.partition(scores, scores.size - k)[scores.size - k]
        candidates = np.flatnonzero(scores >= kth)
        best = candidates[np.lexsort((candidates, -scores[candidates]))][:k]
        return [ClassScore(int(i), label_of(self.labels, int(i)), float(scores[i]))
                for i in best if scores[i] >= threshold]
