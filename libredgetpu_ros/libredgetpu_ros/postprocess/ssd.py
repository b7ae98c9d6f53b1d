"""SSD box decoding and non-maximum suppression with the semantics of TFLite's
``TFLite_Detection_PostProcess`` op (tensorflow/lite/kernels/detection_postprocess.cc).

Everything comes from the model: the op's options (scales, thresholds, max detections, regular or fast NMS),
the anchors (the op's constant third input) and the small CPU op chain between the boundary and the op
(RESHAPE / CONCATENATION / LOGISTIC / DEQUANTIZE), which is replayed with TFLite's quantized arithmetic.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from libredgetpu_ros.errors import ConfigError, ModelFormatError
from libredgetpu_ros.postprocess.graph import TensorSpec, custom_option, model_label, require_op, take_outputs
from libredgetpu_ros.postprocess.labels import label_of, load_labels
from libredgetpu_ros.postprocess.qops import run_op
from libredgetpu_ros.postprocess.results import Detection

OP_NAME = "TFLite_Detection_PostProcess"


@dataclass(frozen=True, slots=True)
class SsdOptions:
    """The op's custom options (names as in the model)."""

    max_detections: int
    max_classes_per_detection: int
    detections_per_class: int
    nms_score_threshold: float
    nms_iou_threshold: float
    num_classes: int
    y_scale: float
    x_scale: float
    h_scale: float
    w_scale: float
    use_regular_nms: bool

    def validate(self) -> SsdOptions:
        if self.max_detections < 1 or self.max_classes_per_detection < 1 or self.num_classes < 1:
            raise ConfigError(f"ssd options out of range: {self}")
        if not 0.0 <= self.nms_iou_threshold <= 1.0:
            raise ConfigError(f"ssd nms_iou_threshold must be in [0, 1], got {self.nms_iou_threshold}")
        if not 0.0 <= self.nms_score_threshold <= 1.0:
            raise ConfigError(f"ssd score threshold must be in [0, 1], got {self.nms_score_threshold}")
        return self


def decode_boxes(encodings: np.ndarray, anchors: np.ndarray, o: SsdOptions) -> np.ndarray:
    """(N, 4) y/x/h/w encodings + (N, 4) y/x/h/w anchors -> (N, 4) ymin/xmin/ymax/xmax (computed in double,
    stored in float32, as the op does)."""
    e = encodings.astype(np.float64)
    a = anchors.astype(np.float64)
    yc = e[:, 0] / o.y_scale * a[:, 2] + a[:, 0]
    xc = e[:, 1] / o.x_scale * a[:, 3] + a[:, 1]
    half_h = (0.5 * np.exp(e[:, 2] / o.h_scale) * a[:, 2]).astype(np.float32)
    half_w = (0.5 * np.exp(e[:, 3] / o.w_scale) * a[:, 3]).astype(np.float32)
    yc, xc = yc.astype(np.float32), xc.astype(np.float32)
    return np.stack([yc - half_h, xc - half_w, yc + half_h, xc + half_w], axis=1)


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` (N, 4) with every box of ``b`` (M, 4), ymin/xmin/ymax/xmax, in float32 with
    the op's expression order; 0 when either box has no positive area."""
    a_ymin, a_xmin, a_ymax, a_xmax = (v[:, None] for v in a.T)
    b_ymin, b_xmin, b_ymax, b_xmax = b.T
    zero = np.float32(0.0)
    area_a = (a_ymax - a_ymin) * (a_xmax - a_xmin)
    area_b = (b_ymax - b_ymin) * (b_xmax - b_xmin)
    inter = (np.maximum(np.minimum(a_ymax, b_ymax) - np.maximum(a_ymin, b_ymin), zero)
             * np.maximum(np.minimum(a_xmax, b_xmax) - np.maximum(a_xmin, b_xmin), zero))
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / (area_a + area_b - inter)
    return np.where((area_a > zero) & (area_b > zero), iou, zero)


def _greedy_keep(overlaps: np.ndarray, suppressed: np.ndarray) -> np.ndarray:
    """Which of K ranked boxes greedy NMS keeps: box i is kept unless already ``suppressed`` or a kept box
    j < i overlaps it. That recurrence has one solution; iterating it from "keep all" reaches it after as
    many rounds as the longest suppression chain (a few), each one vectorised over the K x K matrix."""
    later = overlaps & np.tri(overlaps.shape[0], k=-1, dtype=bool).T  # [j, i]: j ranked above i
    keep = ~suppressed
    while True:
        updated = ~suppressed & ~(later & keep[:, None]).any(axis=0)
        if np.array_equal(updated, keep):
            return keep
        keep = updated


def nms_single_class(boxes: np.ndarray, scores: np.ndarray, max_out: int, score_threshold: float,
                     iou_threshold: float) -> np.ndarray:
    """Greedy NMS as the op does it; returns selected box indices in decreasing score order (stable ties).

    A box is kept unless its IoU with a kept, higher-ranked box exceeds the threshold, so its fate depends
    only on boxes ranked above it: the ranked list is processed in chunks of a few times ``max_out``
    (usually one chunk suffices), each with one IoU matrix against itself and the boxes kept so far.
    """
    keep = np.flatnonzero(scores >= np.float32(score_threshold))
    order = keep[np.argsort(-scores[keep], kind="stable")]
    threshold = np.float32(iou_threshold)
    chunk = max(4 * max_out, 32)
    selected: list[np.ndarray] = []
    count = 0
    kept_boxes = np.empty((0, 4), dtype=np.float32)
    for first in range(0, order.size, chunk):
        ids = order[first:first + chunk]
        ranked = boxes[ids]
        suppressed = (iou_matrix(ranked, kept_boxes) > threshold).any(axis=1) if count else \
            np.zeros(ids.size, dtype=bool)
        new = np.flatnonzero(_greedy_keep(iou_matrix(ranked, ranked) > threshold, suppressed))
        new = new[:max_out - count]
        selected.append(ids[new])
        count += new.size
        if count >= max_out:
            break
        kept_boxes = np.concatenate([kept_boxes, ranked[new]])
    return np.concatenate(selected) if selected else np.empty(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class RawDetections:
    """Exactly the op's outputs: boxes (max_detections, 4) ymin/xmin/ymax/xmax, classes, scores, count."""

    boxes: np.ndarray
    classes: np.ndarray
    scores: np.ndarray
    count: int


def postprocess(boxes: np.ndarray, class_scores: np.ndarray, o: SsdOptions) -> RawDetections:
    """NMS over decoded ``boxes`` (N, 4) and ``class_scores`` (N, num_classes + background)."""
    label_offset = class_scores.shape[1] - o.num_classes
    scores = class_scores[:, label_offset:]
    out_boxes = np.zeros((o.max_detections, 4), dtype=np.float32)
    out_classes = np.zeros(o.max_detections, dtype=np.float32)
    out_scores = np.zeros(o.max_detections, dtype=np.float32)
    if o.use_regular_nms:
        picked_box, picked_class, picked_score = [], [], []
        for c in range(o.num_classes):
            sel = nms_single_class(boxes, scores[:, c], o.detections_per_class, o.nms_score_threshold,
                                   o.nms_iou_threshold)
            picked_box.append(sel)
            picked_class.append(np.full(sel.size, c))
            picked_score.append(scores[sel, c])
        box_idx = np.concatenate(picked_box)
        cls = np.concatenate(picked_class)
        sc = np.concatenate(picked_score)
        top = np.argsort(-sc, kind="stable")[:o.max_detections]
        n = top.size
        out_boxes[:n], out_classes[:n], out_scores[:n] = boxes[box_idx[top]], cls[top], sc[top]
        return RawDetections(out_boxes, out_classes, out_scores, n)
    per_anchor = min(o.max_classes_per_detection, o.num_classes)
    if per_anchor == 1:
        top_classes = np.argmax(scores, axis=1)[:, None]  # first maximum, like std::max_element
    else:
        top_classes = np.argsort(-scores, axis=1, kind="stable")[:, :per_anchor]
    max_scores = np.take_along_axis(scores, top_classes[:, :1], axis=1)[:, 0]
    sel = nms_single_class(boxes, max_scores, o.max_detections, o.nms_score_threshold, o.nms_iou_threshold)
    rows = np.repeat(sel, per_anchor)[:o.max_detections]
    cols = np.tile(np.arange(per_anchor), sel.size)[:o.max_detections]
    n = rows.size
    out_boxes[:n] = boxes[rows]
    out_classes[:n] = top_classes[rows, cols]
    out_scores[:n] = scores[rows, top_classes[rows, cols]]
    return RawDetections(out_boxes, out_classes, out_scores, n)


class SsdDecoder:
    """Turns the SSD boundary tensors of one model into detections."""

    def __init__(self, model: Any, options: SsdOptions, labels: Mapping[int, str] | None = None) -> None:
        op = require_op(model, OP_NAME, "SSD box decoding")
        if len(op.inputs) < 3:
            raise ModelFormatError(f"{model_label(model)}: {OP_NAME} has {len(op.inputs)} inputs, expected 3")
        self._model = model
        self._op = op
        self.options = options.validate()
        self.labels = dict(labels) if labels is not None else None
        anchors_tensor = model.tensors[op.inputs[2]]
        raw = model.buffer_data(anchors_tensor)
        if raw is None or raw.ndim != 2 or raw.shape[1] != 4:
            raise ModelFormatError(f"{model_label(model)}: {OP_NAME} anchors {anchors_tensor.name!r} are "
                                   "not a constant (N, 4) tensor")
        self.anchors = TensorSpec.of(model, op.inputs[2]).dequantize(raw)
        self._chain, boundary = _chain_to_boundary(model, op.inputs[:2])
        self.specs = [TensorSpec.of(model, i) for i in boundary]
        self._boundary_indices = boundary
        self._fused = _FusedRows.build(model, self._chain, boundary, op.inputs[:2])
        n = self.anchors.shape[0]
        for idx, width in ((op.inputs[0], 4), (op.inputs[1], options.num_classes)):
            shape = model.tensors[idx].shape
            if shape[-2] != n or shape[-1] < width:
                raise ModelFormatError(f"{model_label(model)}: {OP_NAME} input {model.tensors[idx].name!r} "
                                       f"has shape {shape}, expected (1, {n}, >={width}) for {n} anchors")

    @classmethod
    def from_model(cls, model: Any, score_threshold: float | None = None, max_detections: int | None = None,
                   labels: Any = None) -> SsdDecoder:
        op = require_op(model, OP_NAME, "SSD box decoding")

        def opt(key: str) -> Any:
            return custom_option(model, op, key)

        options = SsdOptions(
            max_detections=int(opt("max_detections")),
            max_classes_per_detection=int(opt("max_classes_per_detection")),
            detections_per_class=int(op.custom_options.get("detections_per_class", 100)),
            nms_score_threshold=float(opt("nms_score_threshold")),
            nms_iou_threshold=float(opt("nms_iou_threshold")),
            num_classes=int(opt("num_classes")),
            y_scale=float(opt("y_scale")), x_scale=float(opt("x_scale")),
            h_scale=float(opt("h_scale")), w_scale=float(opt("w_scale")),
            use_regular_nms=bool(op.custom_options.get("use_regular_nms", False)),
        )
        changes = {"nms_score_threshold": score_threshold, "max_detections": max_detections}
        options = dataclasses.replace(options, **{k: v for k, v in changes.items() if v is not None})
        return cls(model, options, load_labels(labels))

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.specs]

    @property
    def num_anchors(self) -> int:
        return int(self.anchors.shape[0])

    def _op_inputs(self, outputs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        arrays = take_outputs(outputs, self.specs, "SsdDecoder")
        env = dict(zip(self._boundary_indices, arrays, strict=True))
        model = self._model
        for op in self._chain:
            env[op.outputs[0]] = run_op(model, op, [env[i] for i in op.inputs if i in env])
        result = []
        for idx in self._op.inputs[:2]:
            value = env[idx]
            if value.dtype.kind != "f":
                value = TensorSpec.of(model, idx).dequantize(value)
            result.append(value.reshape(-1, value.shape[-1]))
        return result[0], result[1]

    def decode_raw(self, outputs: Mapping[str, np.ndarray]) -> RawDetections:
        if self._fused is not None and not self.options.use_regular_nms \
                and self.options.max_classes_per_detection == 1:
            return self._decode_fused(outputs)
        encodings, class_scores = self._op_inputs(outputs)
        boxes = decode_boxes(encodings[:, :4], self.anchors, self.options)
        return postprocess(boxes, class_scores, self.options)

    def _decode_fused(self, outputs: Mapping[str, np.ndarray]) -> RawDetections:
        """Fast path, same results: one class per anchor and fast NMS need only each anchor's best class,
        found on the raw bytes (the chain is monotonic per row) and mapped through per-row lookup tables."""
        fused = self._fused
        o = self.options
        arrays = take_outputs(outputs, self.specs, "SsdDecoder")
        raw_boxes, raw_scores = fused.layout(arrays)
        offset = raw_scores.shape[1] - o.num_classes
        raw_scores = raw_scores[:, offset:]
        best_raw = raw_scores.max(axis=1)
        src = fused.row_source[1]
        best = fused.tables[1][src, best_raw]
        candidates = np.flatnonzero(best >= np.float32(o.nms_score_threshold))
        enc = fused.tables[0][fused.row_source[0][candidates, None], raw_boxes[candidates, :4]]
        boxes = decode_boxes(enc, self.anchors[candidates], o)
        sel = nms_single_class(boxes, best[candidates], o.max_detections, o.nms_score_threshold,
                               o.nms_iou_threshold)
        rows = candidates[sel]
        # First class reaching the best *value* (several raw bytes can map to the same value).
        floor = fused.tie_floor[1][src[rows], best_raw[rows]]
        best_class = np.argmax(raw_scores[rows] >= floor[:, None], axis=1)
        out_boxes = np.zeros((o.max_detections, 4), dtype=np.float32)
        out_classes = np.zeros(o.max_detections, dtype=np.float32)
        out_scores = np.zeros(o.max_detections, dtype=np.float32)
        n = sel.size
        out_boxes[:n], out_classes[:n], out_scores[:n] = boxes[sel], best_class, best[rows]
        return RawDetections(out_boxes, out_classes, out_scores, n)

    def decode(self, outputs: Mapping[str, np.ndarray]) -> list[Detection]:
        raw = self.decode_raw(outputs)
        detections = []
        for i in range(raw.count):
            ymin, xmin, ymax, xmax = (float(v) for v in raw.boxes[i])
            class_id = int(raw.classes[i])
            detections.append(Detection(class_id, label_of(self.labels, class_id), float(raw.scores[i]),
                                        (xmin, ymin, xmax, ymax)))
        return detections


def _chain_to_boundary(model: Any, targets: tuple[int, ...]) -> tuple[list[Any], list[int]]:
    """The CPU ops feeding ``targets`` back to the boundary (graph inputs or Edge TPU op outputs)."""
    chain: dict[int, Any] = {}
    boundary: list[int] = []
    stack = list(targets)
    seen: set[int] = set()
    while stack:
        idx = stack.pop()
        if idx in seen or idx < 0:
            continue
        seen.add(idx)
        producer = model.producer(idx)
        if producer is None or producer.opcode_name == "edgetpu-custom-op":
            if model.buffer_data(model.tensors[idx]) is None:
                boundary.append(idx)
            continue
        chain[producer.index] = producer
        stack.extend(producer.inputs)
    if not boundary:
        raise ModelFormatError(f"{model_label(model)}: {OP_NAME} inputs do not reach the Edge TPU boundary")
    order = list(model.inputs) + [t for op in model.operators for t in op.outputs]
    boundary.sort(key=lambda t: order.index(t) if t in order else len(order))
    return [chain[k] for k in sorted(chain)], boundary


_LAYOUT_OPS = frozenset({"RESHAPE", "SQUEEZE", "EXPAND_DIMS", "CONCATENATION"})
_ELEMENTWISE_OPS = frozenset({"LOGISTIC", "DEQUANTIZE", "QUANTIZE"})


@dataclass(frozen=True)
class _FusedRows:
    """The boundary -> op-input chain folded into layout + one 256-entry table per source tensor.

    Valid when the chain only moves bytes (RESHAPE/CONCATENATION along rows) and maps them element-wise and
    monotonically (requantize, LOGISTIC, DEQUANTIZE), with every row of an op input coming from one source.
    """

    model: Any
    chain: list[Any]
    boundary: list[int]
    targets: tuple[int, ...]
    row_source: tuple[np.ndarray, ...]  # per target: (N,) index of the source tensor of each row
    tables: tuple[np.ndarray, ...]  # per target: (sources, 256) float32 value of each raw byte
    tie_floor: tuple[np.ndarray, ...]  # per target: smallest raw byte with the same value

    @classmethod
    def build(cls, model: Any, chain: list[Any], boundary: list[int],
              targets: tuple[int, ...]) -> _FusedRows | None:
        if any(op.opcode_name not in _LAYOUT_OPS | _ELEMENTWISE_OPS for op in chain):
            return None
        if any(np.dtype(model.tensors[i].dtype) != np.uint8 for i in boundary):
            return None
        shapes = [tuple(model.tensors[i].shape) for i in boundary]
        # Where each op-input element comes from: run the layout ops on (source, position) labels.
        ids = [np.full(shape, b, dtype=np.int64) for b, shape in enumerate(shapes)]
        positions = [np.arange(int(np.prod(shape))).reshape(shape) for shape in shapes]
        src_of = cls._layout_only(model, chain, boundary, ids, targets)
        pos_of = cls._layout_only(model, chain, boundary, positions, targets)
        row_source = []
        for src in src_of:
            rows = src.reshape(-1, src.shape[-1])
            if not (rows == rows[:, :1]).all():
                return None
            row_source.append(rows[:, 0].copy())
        tables = [np.full((len(boundary), 256), np.nan, dtype=np.float32) for _ in targets]
        shortest = min(int(np.prod(s)) for s in shapes)
        for shift in range(0, 256, max(1, min(shortest, 256))):
            probe = [((p + shift) % 256).astype(np.uint8) for p in positions]
            env = dict(zip(boundary, probe, strict=True))
            for op in chain:
                env[op.outputs[0]] = run_op(model, op, [env[i] for i in op.inputs if i in env])
            for t, target in enumerate(targets):
                value = env[target]
                if value.dtype.kind != "f":
                    value = TensorSpec.of(model, target).dequantize(value)
                raw = (pos_of[t] + shift) % 256
                tables[t][src_of[t].ravel(), raw.ravel()] = value.ravel()
        tie_floor = []
        for table, rows in zip(tables, row_source, strict=True):
            used = table[np.unique(rows)]
            if np.isnan(used).any() or (np.diff(used, axis=1) < 0).any():
                return None
            floor = np.empty(table.shape, dtype=np.uint8)
            for b in range(table.shape[0]):
                floor[b] = np.searchsorted(table[b], table[b], side="left")
            tie_floor.append(floor)
        return cls(model, chain, boundary, targets, tuple(row_source), tuple(tables), tuple(tie_floor))

    @staticmethod
    def _layout_only(model: Any, chain: list[Any], boundary: list[int], arrays: list[np.ndarray],
                     targets: tuple[int, ...]) -> list[np.ndarray]:
        env = dict(zip(boundary, arrays, strict=True))
        for op in chain:
            args = [env[i] for i in op.inputs if i in env]
            if op.opcode_name == "CONCATENATION":
                axis = int(op.builtin_options.get("axis", 0)) % len(model.tensors[op.outputs[0]].shape)
                env[op.outputs[0]] = np.concatenate(args, axis=axis)
            elif op.opcode_name in _LAYOUT_OPS:
                env[op.outputs[0]] = args[0].reshape(model.tensors[op.outputs[0]].shape)
            else:
                env[op.outputs[0]] = args[0]
        return [env[t] for t in targets]

    def layout(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """Raw bytes of each op input as (rows, columns)."""
        out = self._layout_only(self.model, self.chain, self.boundary, arrays, self.targets)
        return [a.reshape(-1, a.shape[-1]) for a in out]
