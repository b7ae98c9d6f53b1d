"""PersonLab multi-pose decoding, as Google's ``PosenetDecoderOp`` does it (google-coral/edgetpu
``src/cpp/posenet/posenet_decoder{,_op}.cc``), on the three boundary tensors of a PoseNet model.

Inputs (NHWC, still quantized): heatmap logits (17 channels), short-range offsets (2x17: all y then all x)
and mid-range offsets (2x2x16: forward y, forward x, backward y, backward x), on a grid of ``stride`` pixels.
The decoder works in grid units (offsets are divided by the stride while dequantizing) and scales the result
back to model-input pixels at the end.

Vectorised where the C++ loops: candidate roots come from a max-filter over the whole heatmap, and the pose
graph walk runs for a batch of roots at once. The keypoint graph is a tree, so the order in which the C++
priority queue pops keypoints never changes a keypoint's position; only parents must precede children.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from libredgetpu_ros.errors import ConfigError, ModelFormatError
from libredgetpu_ros.postprocess.graph import TensorSpec, custom_option, model_label, require_op, take_outputs
from libredgetpu_ros.postprocess.results import Keypoint, Pose

KEYPOINT_NAMES: tuple[str, ...] = (
    "nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
    "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee",
    "right_knee", "left_ankle", "right_ankle",
)
NUM_KEYPOINTS = len(KEYPOINT_NAMES)
# Forward edges (parent, child) of the pose tree; the backward edges are the same pairs reversed.
FORWARD_EDGES: tuple[tuple[int, int], ...] = (
    (0, 1), (1, 3), (0, 2), (2, 4), (0, 5), (5, 7), (7, 9), (5, 11), (11, 13), (13, 15),
    (0, 6), (6, 8), (8, 10), (6, 12), (12, 14), (14, 16),
)
NUM_EDGES = len(FORWARD_EDGES)
LOCAL_MAXIMUM_RADIUS = 1
REFINEMENT_STEPS = 5
OP_NAME = "PosenetDecoderOp"


@dataclass(frozen=True, slots=True)
class PoseDecoderOptions:
    """Decoder parameters, read from the PosenetDecoderOp custom options (``nms_radius`` in pixels)."""

    max_detections: int
    score_threshold: float
    stride: int
    nms_radius: float

    def validate(self) -> PoseDecoderOptions:
        if self.max_detections < 1:
            raise ConfigError(f"posenet max_detections must be >= 1, got {self.max_detections}")
        if not 0.0 <= self.score_threshold < 1.0:
            raise ConfigError(f"posenet score_threshold must be in [0, 1), got {self.score_threshold}")
        if self.stride < 1:
            raise ConfigError(f"posenet stride must be >= 1, got {self.stride}")
        if not self.nms_radius >= 0.0:
            raise ConfigError(f"posenet nms_radius must be >= 0, got {self.nms_radius}")
        return self


def _edge_channels() -> np.ndarray:
    """Mid-offset (y, x) channels of each of the 32 directed edges, indexed like the C++ edge list.

    The C++ shifts backward edges by 16 only when ``edge_id > kNumEdges`` (not ``>=``), so the first backward
    edge (left_eye -> nose) reads channels (16, 32). Reproduced on purpose: we match the reference decoder.
    """
    channels = np.empty((2 * NUM_EDGES, 2), dtype=np.int64)
    for edge_id in range(2 * NUM_EDGES):
        shifted = edge_id + NUM_EDGES if edge_id > NUM_EDGES else edge_id
        channels[edge_id] = (shifted, NUM_EDGES + shifted)
    return channels


def _walk_schedules() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each root keypoint, the 16 steps of its tree walk: parent, child, mid-offset (y, x) channels and
    the child's depth below the root."""
    directed = list(FORWARD_EDGES) + [(child, parent) for parent, child in FORWARD_EDGES]
    channels = _edge_channels()
    parents = np.empty((NUM_KEYPOINTS, NUM_KEYPOINTS - 1), dtype=np.intp)
    children = np.empty_like(parents)
    mid_channels = np.empty((NUM_KEYPOINTS, NUM_KEYPOINTS - 1, 2), dtype=np.intp)
    depths = np.empty_like(parents)
    for root in range(NUM_KEYPOINTS):
        seen, frontier, step, depth = {root}, [root], 0, 0
        while frontier:
            depth += 1  # breadth first: every parent is placed before its children
            nxt = []
            for parent in frontier:
                for edge_id, (src, dst) in enumerate(directed):
                    if src == parent and dst not in seen:
                        seen.add(dst)
                        nxt.append(dst)
                        parents[root, step], children[root, step] = parent, dst
                        mid_channels[root, step] = channels[edge_id]
                        depths[root, step] = depth
                        step += 1
            frontier = nxt
    return parents, children, mid_channels, depths


_PARENTS, _CHILDREN, _MID_CHANNELS, _DEPTH = _walk_schedules()
# Per (root, step): parent, child, mid-offset y/x channels, short-offset y/x channels of the child.
_STEPS = np.concatenate([_PARENTS[..., None], _CHILDREN[..., None], _MID_CHANNELS, _CHILDREN[..., None],
                         NUM_KEYPOINTS + _CHILDREN[..., None]], axis=-1)
_KEYPOINT_IDS = np.arange(NUM_KEYPOINTS)


def _logodds(p: float) -> np.float32:
    # Same expression (and double precision) as the C++ Logodds().
    return np.float32(-np.log(1.0 / (p + 1e-6) - 1.0))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.float32(1.0) / (np.float32(1.0) + np.exp(-x))


class _Sampler:
    """Bilinear sampling of an (H, W, C) float32 tensor at per-row points and channels, as the C++ does it.

    Points are always inside the grid (every position the decoder produces is clamped). The C++ reads the
    ceil corner, which equals the floor corner on a grid line; we instead always read floor + 1 from a
    copy padded by one edge row/column. Where they differ the lerp weight of that corner is exactly 0, so
    every result is bit-identical and the corner offsets become constants.
    """

    def __init__(self, tensor: np.ndarray) -> None:
        h, w, c = tensor.shape
        padded = np.empty((h + 1, w + 1, c), dtype=np.float32)
        padded[:h, :w] = tensor
        padded[h, :w] = tensor[h - 1]
        padded[:, w] = padded[:, w - 1]
        self.flat = padded.ravel()
        self.strides = np.array([(w + 1) * c, c], dtype=np.float32)  # float32 matmul: exact below 2^24
        # Corner offsets indexed [x corner, y corner]: each lerp then reads contiguous blocks.
        self.corners = np.array([[0, (w + 1) * c], [c, (w + 1) * c + c]], dtype=np.intp)[:, :, None, None]

    def offsets(self, channels: np.ndarray) -> np.ndarray:
        """Flat offsets of the 4 corners x ``channels`` (B, k) from a cell's origin: (2, 2, k, B). Computed
        once per batch of points and reused while the points move."""
        return self.corners + channels.T

    def __call__(self, points: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """``points``: (2, B) y/x rows in the grid (>= 0); returns (k, B) float32, k from ``offsets``.

        Points along the last axis keep every elementwise op on contiguous rows (small trailing axes make
        NumPy's broadcasting loops several times slower). Same products and sums as the C++:
        (1 - ly) * ((1 - lx) * tl + lx * tr) + ly * ((1 - lx) * bl + lx * br).
        """
        lerp, low = np.modf(points)  # exact for points >= 0
        rest = 1.0 - lerp  # a Python float keeps float32 and is cheaper than a NumPy scalar
        v = self.flat[offsets + (self.strides @ low).astype(np.intp)]  # (2, 2, k, B): [x corner, y corner]
        rows = rest[1] * v[0] + lerp[1] * v[1]  # along x, for the top and bottom rows
        return rest[0] * rows[0] + lerp[0] * rows[1]


@dataclass(frozen=True, slots=True)
class RawPoses:
    """Decoder output as arrays: ``keypoints`` (N, 17, 2) as (y, x) model-input pixels, ``keypoint_scores``
    (N, 17) and ``scores`` (N,), sorted by decreasing pose score (the PosenetDecoderOp output order)."""

    keypoints: np.ndarray
    keypoint_scores: np.ndarray
    scores: np.ndarray


def find_candidates(logits: np.ndarray, shorts: np.ndarray, min_logit: np.float32,
                    radius: int = LOCAL_MAXIMUM_RADIUS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Root candidates: heatmap local maxima (no neighbour in the window is larger) at or above ``min_logit``.

    Returns (points (M, 2) y/x refined by the short offsets and clamped to the grid, keypoint ids (M,),
    scores (M,)), sorted by decreasing score.
    """
    h, w, _ = logits.shape
    window_max = logits.copy()  # separable max filter: rows, then columns (max is exact in any order)
    for axis in (0, 1):
        source = window_max.copy()
        for shift in range(1, radius + 1):
            lead = [slice(None)] * 3
            lag = [slice(None)] * 3
            lead[axis], lag[axis] = slice(shift, None), slice(None, -shift)
            np.maximum(window_max[tuple(lead)], source[tuple(lag)], out=window_max[tuple(lead)])
            np.maximum(window_max[tuple(lag)], source[tuple(lead)], out=window_max[tuple(lag)])
    ys, xs, ids = np.nonzero((logits >= min_logit) & (logits >= window_max))
    scores = logits[ys, xs, ids]
    order = np.argsort(-scores, kind="stable")
    ys, xs, ids, scores = ys[order], xs[order], ids[order], scores[order]
    points = np.empty((ids.size, 2), dtype=np.float32)
    points[:, 0] = ys + shorts[ys, xs, ids]
    points[:, 1] = xs + shorts[ys, xs, NUM_KEYPOINTS + ids]
    return _clamp(points, np.array([h - 1.0, w - 1.0], dtype=np.float32)), ids, scores


def _clamp(points: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Clamp y/x points into [0, high] in place (np.clip's wrapper costs more than the work here)."""
    np.minimum(points, high, out=points)
    return np.maximum(points, np.float32(0.0), out=points)


def _step(points: np.ndarray, displacement: np.ndarray, high: np.ndarray) -> None:
    """``points = clamp(points + displacement, 0, high)`` in place, in two NumPy calls."""
    np.minimum(points + displacement, high, out=points)
    np.maximum(points, np.float32(0.0), out=points)


def _decode_batch(roots: np.ndarray, root_ids: np.ndarray, heat: _Sampler, shorts: _Sampler,
                  mids: _Sampler, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Walk the pose tree from a batch of roots; returns (keypoints (B, 17, 2) y/x grid, logits (B, 17)).

    All edges at the same depth of their root's tree are independent, so each depth level is one
    vectorised step over every (root, edge) pair of the batch (at most 8 levels instead of 16 edges). The
    heatmap is sampled once at the end, at all keypoints of all roots.
    """
    b = roots.shape[0]
    points = np.empty((2, b, NUM_KEYPOINTS), dtype=np.float32)  # y/x planes: see _Sampler.__call__
    points[:, np.arange(b), root_ids] = roots.T
    high = high[:, None]
    depth = _DEPTH[root_ids]
    # Every (root, step) pair, grouped by depth level; their indices and sampling offsets are computed once.
    by_level = np.argsort(depth, axis=None, kind="stable")
    bounds = np.searchsorted(depth.ravel()[by_level], np.arange(1, int(depth.max(initial=0)) + 2))
    r, step = np.divmod(by_level, NUM_KEYPOINTS - 1)
    steps = _STEPS[root_ids[r], step]
    parent, child = steps[:, 0], steps[:, 1]
    mid_offsets, short_offsets = mids.offsets(steps[:, 2:4]), shorts.offsets(steps[:, 4:6])
    for first, last in itertools.pairwise(bounds):
        level = slice(first, last)
        rows = r[level]
        pos = points[:, rows, parent[level]]
        _step(pos, mids(pos, mid_offsets[..., level]), high)
        for _ in range(REFINEMENT_STEPS):
            _step(pos, shorts(pos, short_offsets[..., level]), high)
        points[:, rows, child[level]] = pos
    logits = heat(points.reshape(2, -1), heat.offsets(np.tile(_KEYPOINT_IDS, b)[:, None]))
    return points.transpose(1, 2, 0), logits.reshape(b, NUM_KEYPOINTS)


def decode_poses(heatmap_logits: np.ndarray, short_offsets: np.ndarray, mid_offsets: np.ndarray,
                 options: PoseDecoderOptions, batch: int = 64) -> RawPoses:
    """Decode float tensors (H, W, C) already in grid units (offsets divided by the stride).

    Roots are decoded ``batch`` at a time: a walk's cost is set by its depth levels, barely by its number
    of roots (a first small batch, to skip roots the first poses suppress, measured slower on 2 people).
    The C++ sequence of NMS test -> decode -> accept is then replayed over the batch in root order.
    """
    h, w, _ = heatmap_logits.shape
    high = np.array([h - 1.0, w - 1.0], dtype=np.float32)
    heat, shorts, mids = _Sampler(heatmap_logits), _Sampler(short_offsets), _Sampler(mid_offsets)
    min_logit = _logodds(options.score_threshold)
    cand_points, cand_ids, _ = find_candidates(heatmap_logits, short_offsets, min_logit)
    nms_radius = np.float32(options.nms_radius) / np.float32(options.stride)
    sq_radius = nms_radius * nms_radius
    threshold = np.float32(options.score_threshold)

    poses = np.empty((options.max_detections, NUM_KEYPOINTS, 2), dtype=np.float32)
    kp_scores = np.empty((options.max_detections, NUM_KEYPOINTS), dtype=np.float32)
    count = 0
    alive = np.ones(len(cand_ids), dtype=bool)
    while count < options.max_detections:
        if count:  # drop roots inside the NMS disk of an accepted pose's same keypoint
            delta = cand_points[:, None, :] - poses[:count][:, cand_ids].transpose(1, 0, 2)
            alive &= ~((delta * delta).sum(-1) <= sq_radius).any(1)
        todo = np.flatnonzero(alive)[:batch]
        if todo.size == 0:
            break
        alive[todo] = False
        points, logits = _decode_batch(cand_points[todo], cand_ids[todo], heat, shorts, mids, high)
        scores = _sigmoid(logits)
        accept = scores.mean(axis=1, dtype=np.float32) >= threshold
        # Replay the C++ root loop over the batch: only accepted poses change later decisions, so loop over
        # those (<= max_detections), each one suppressing the later roots near its same keypoint.
        roots, root_ids = cand_points[todo], cand_ids[todo]
        while count < options.max_detections:
            pick = np.flatnonzero(accept)
            if pick.size == 0:
                break
            i = pick[0]
            poses[count], kp_scores[count] = points[i], scores[i]
            count += 1
            delta = points[i, root_ids] - roots
            accept &= (delta * delta).sum(-1) > sq_radius
            accept[:i + 1] = False
    poses, kp_scores = poses[:count], kp_scores[:count]
    final = _soft_keypoint_nms(poses, kp_scores, sq_radius)
    order = np.argsort(-final, kind="stable")
    order = order[final[order] >= threshold]
    return RawPoses(poses[order] * np.float32(options.stride), kp_scores[order], final[order])


def _soft_keypoint_nms(poses: np.ndarray, kp_scores: np.ndarray, sq_radius: np.float32) -> np.ndarray:
    """Re-score each pose as the mean of its keypoint scores, leaving out keypoints that lie within the NMS
    radius of the same keypoint of a higher-scoring pose."""
    n = poses.shape[0]
    if n == 0:
        return np.empty(0, dtype=np.float32)
    order = np.argsort(-kp_scores.mean(axis=1, dtype=np.float32), kind="stable")
    ranked = poses[order]
    delta = ranked[:, None] - ranked[None, :]
    near = (delta * delta).sum(-1) <= sq_radius  # (n, n, 17)
    earlier = np.tri(n, k=-1, dtype=bool)[:, :, None]
    occluded = (near & earlier).any(axis=1)
    kept = np.where(occluded, np.float32(0.0), kp_scores[order])
    final = np.empty(n, dtype=np.float32)
    final[order] = kept.sum(axis=1, dtype=np.float32) / np.float32(NUM_KEYPOINTS)
    return final


class PoseDecoder:
    """Decodes the PoseNet boundary tensors of one model into poses (model-input pixels)."""

    def __init__(self, heatmaps: TensorSpec, short_offsets: TensorSpec, mid_offsets: TensorSpec,
                 options: PoseDecoderOptions) -> None:
        self.specs = (heatmaps, short_offsets, mid_offsets)
        self.options = options.validate()

    @classmethod
    def from_model(cls, model: Any, max_detections: int | None = None, score_threshold: float | None = None,
                   nms_radius: float | None = None) -> PoseDecoder:
        """Read the decoder op's inputs and options from a PoseNet model (compiled or CPU twin)."""
        op = require_op(model, OP_NAME, "PoseNet pose decoding")
        if len(op.inputs) < 3:
            raise ModelFormatError(f"{model_label(model)}: {OP_NAME} has {len(op.inputs)} inputs, expected 3")
        specs = [TensorSpec.of(model, i) for i in op.inputs[:3]]
        for spec, channels in zip(specs, (NUM_KEYPOINTS, 2 * NUM_KEYPOINTS, 4 * NUM_EDGES), strict=True):
            if len(spec.shape) != 4 or spec.shape[0] != 1 or spec.shape[3] != channels:
                raise ModelFormatError(f"{model_label(model)}: {OP_NAME} input {spec.name!r} has shape "
                                       f"{spec.shape}, expected (1, H, W, {channels})")
        if len({s.shape[1:3] for s in specs}) != 1:
            raise ModelFormatError(f"{model_label(model)}: {OP_NAME} inputs disagree on the grid size")
        options = PoseDecoderOptions(
            max_detections=int(custom_option(model, op, "max_detections")),
            score_threshold=float(custom_option(model, op, "score_threshold")),
            stride=int(custom_option(model, op, "stride")),
            nms_radius=float(custom_option(model, op, "nms_radius")),
        )
        options = options_with(options, max_detections=max_detections, score_threshold=score_threshold,
                               nms_radius=nms_radius)
        return cls(*specs, options=options)

    @property
    def input_names(self) -> list[str]:
        """Boundary tensor names this decoder consumes (heatmaps, short offsets, mid offsets)."""
        return [s.name for s in self.specs]

    def set_options(self, **changes: Any) -> None:
        """Change options at run time (validated first; the old options stay on error)."""
        self.options = options_with(self.options, **changes)

    def decode_raw(self, outputs: Mapping[str, np.ndarray]) -> RawPoses:
        heat_q, short_q, mid_q = take_outputs(outputs, self.specs, "PoseDecoder")
        heat_spec, short_spec, mid_spec = self.specs
        inv_stride = 1.0 / self.options.stride
        return decode_poses(heat_spec.dequantize(heat_q[0]), short_spec.dequantize(short_q[0], inv_stride),
                            mid_spec.dequantize(mid_q[0], inv_stride), self.options)

    def decode(self, outputs: Mapping[str, np.ndarray]) -> list[Pose]:
        raw = self.decode_raw(outputs)
        poses = []
        for points, scores, score in zip(raw.keypoints.tolist(), raw.keypoint_scores.tolist(),
                                         raw.scores.tolist(), strict=True):
            keypoints = [Keypoint(name, k, yx[1], yx[0], s)
                         for k, (name, yx, s) in enumerate(zip(KEYPOINT_NAMES, points, scores, strict=True))]
            poses.append(Pose(keypoints, score))
        return poses


def options_with(options: PoseDecoderOptions, **changes: Any) -> PoseDecoderOptions:
    """``options`` with the non-None ``changes`` applied, validated."""
    updates = {k: v for k, v in changes.items() if v is not None}
    unknown = set(updates) - {f.name for f in dataclasses.fields(PoseDecoderOptions)}
    if unknown:
        raise ConfigError(f"unknown posenet option(s): {', '.join(sorted(unknown))}")
    return dataclasses.replace(options, **updates).validate()
