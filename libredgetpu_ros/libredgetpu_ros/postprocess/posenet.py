"""PersonLab multi-pose decoding, as Google's ``PosenetDecoderOp`` does it (google-coral/edgetpu
``src/cpp/posenet/posenet_decoder{,_op}.cc``), on the three boundary tensors of a PoseNet model.

Inputs (NHWC, still quantized): heatmap logits (17 channels), short-range offsets (2x17: all y then all x)
and mid-range offsets (2x2x16: forward y, forward x, backward y, backward x), on a grid of ``stride`` pixels.
The decoder works in grid units (offsets are divided by the stride while dequantizing) and scales the result
back to model-input pixels at the end.

Vectorised where the C++ loops: candidate roots are found among all above-threshold cells at once, and the
pose graph walk runs for a batch of roots at once, one depth level per step (see docs/postprocessing.md for
what makes it fast). The keypoint graph is a tree, so the order in which the C++
priority queue pops keypoints never changes a keypoint's position; only parents must precede children.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from libredgetpu_ros.errors import ConfigError, InputError, ModelFormatError
from libredgetpu_ros.postprocess.graph import TensorSpec, custom_option, model_label, require_op, take_outputs
from libredgetpu_ros.postprocess.posenet_sampler import Sampler, Workspace, dequantized_padded, padded_copy
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
# Per (root, step), field-major: parent, child, mid-offset y/x channels, short-offset y/x channels of the
# child, depth. Field-major so that each field of a batch's pairs is a contiguous row (see _decode_batch).
_STEPS = np.stack([_PARENTS, _CHILDREN, _MID_CHANNELS[..., 0], _MID_CHANNELS[..., 1], _CHILDREN,
                   NUM_KEYPOINTS + _CHILDREN, _DEPTH]).reshape(7, -1)
_DEPTH_KEYS = _DEPTH.astype(np.uint8)
_ROOT_DEPTH = _DEPTH.max(axis=1)
_MAX_DEPTH = int(_ROOT_DEPTH.max())
_KEYPOINT_IDS = np.arange(NUM_KEYPOINTS)
_KEYPOINT_COUNT = np.intp(NUM_KEYPOINTS)  # an intp, as ndarray.mean divides by
# Depth levels walked for every root of a batch. Only roots at an ankle have an 8th level; they are usually
# weak and inside the NMS disk of an accepted pose's ankle, so their last level is walked on demand.
EAGER_DEPTH = 7


def _logodds(p: float) -> np.float32:
    # Same expression (and double precision) as the C++ Logodds().
    return np.float32(-np.log(1.0 / (p + 1e-6) - 1.0))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.float32(1.0) / (np.float32(1.0) + np.exp(-x))


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
    h, w, k = logits.shape
    flat = logits.reshape(-1)
    index = np.flatnonzero(flat >= min_logit)  # 1-D: np.nonzero of the 3-D mask costs ~10x more
    scores = flat[index]
    ys, rest = np.divmod(index, w * k)
    # Local maxima, tested only at the cells above the threshold (a few % of the heatmap): the largest of
    # their window, read from a copy padded with -inf (so the window is clipped to the grid, as in C++).
    pw = w + 2 * radius
    padded = np.full((h + 2 * radius, pw, k), -np.inf, dtype=np.float32)
    padded[radius:h + radius, radius:w + radius] = logits
    window = np.arange(-radius, radius + 1)
    neighbours = ((window[:, None] * pw + window) * k).reshape(-1, 1)
    centre = index + (ys * 2 * radius + (pw + 1) * radius) * k  # the same cell in the padded copy
    keep = padded.reshape(-1)[neighbours + centre].max(axis=0) <= scores
    ys, rest, scores = ys[keep], rest[keep], scores[keep]
    order = np.argsort(-scores, kind="stable")
    ys, rest, scores = ys[order], rest[order], scores[order]
    xs, ids = np.divmod(rest, k)
    offsets = shorts.reshape(-1)
    at = (ys * w + xs) * (2 * k) + ids  # the y short offset of each candidate; x is k channels later
    points = np.empty((ids.size, 2), dtype=np.float32)
    points[:, 0] = ys + offsets[at]
    points[:, 1] = xs + offsets[at + k]
    return _clamp(points, np.array([h - 1.0, w - 1.0], dtype=np.float32)), ids, scores


def _clamp(points: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Clamp y/x points into [0, high] in place (np.clip's wrapper costs more than the work here)."""
    np.minimum(points, high, out=points)
    return np.maximum(points, np.float32(0.0), out=points)


class _Walk:
    """The pose-tree walks of a batch of roots, run a range of depth levels at a time.

    All edges at the same depth of their root's tree are independent, so each depth level is one
    vectorised step over every (root, edge) pair of the batch (at most 8 levels instead of 16 edges).
    """

    def __init__(self, roots: np.ndarray, root_ids: np.ndarray, high: np.ndarray) -> None:
        b = roots.shape[0]
        # y/x planes over (root, keypoint) flattened: gathers and scatters are single index arrays.
        self.points = np.empty((2, b * NUM_KEYPOINTS), dtype=np.float32)
        self.points[:, np.arange(0, b * NUM_KEYPOINTS, NUM_KEYPOINTS) + root_ids] = roots.T
        self.high = high[:, None]
        # Every (root, step) pair, grouped by depth level (uint8 keys: NumPy's stable sort is a radix sort).
        by_level = np.argsort(_DEPTH_KEYS[root_ids], axis=None, kind="stable")
        self.rows, step = np.divmod(by_level, NUM_KEYPOINTS - 1)
        self.steps = _STEPS[:, root_ids[self.rows] * (NUM_KEYPOINTS - 1) + step]  # (7, pairs), by level
        # Level L (from 1) is pairs bounds[L - 1]:bounds[L]; nodes are the flat parent/child indices.
        self.bounds = np.searchsorted(self.steps[6], np.arange(1, int(self.steps[6, -1]) + 2)).tolist()
        self.nodes = self.rows * NUM_KEYPOINTS + self.steps[:2]

    def advance(self, mids: Sampler, shorts: Sampler, first: int, last: int,
                rows: np.ndarray | None = None) -> None:
        """Walk depth levels ``first``..``last`` (inclusive) of all roots, or of those in mask ``rows``."""
        for level in range(first, min(last, len(self.bounds) - 1) + 1):
            pairs = slice(self.bounds[level - 1], self.bounds[level])
            steps, nodes = self.steps[:, pairs], self.nodes[:, pairs]
            if rows is not None:
                keep = rows[self.rows[pairs]]
                steps, nodes = steps[:, keep], nodes[:, keep]
            if nodes.shape[1] == 0:
                continue
            ws = Workspace(nodes.shape[1], self.high)
            pos = self.points[:, nodes[0]]
            # Offsets per level, not sliced from one batch-wide array: contiguous operands add faster.
            mids.step(pos, mids.offsets(steps[2:4]), ws)
            refine = shorts.offsets(steps[4:6])
            for _ in range(REFINEMENT_STEPS):
                shorts.step(pos, refine, ws)
            self.points[:, nodes[1]] = pos

    def keypoint_scores(self, heat: Sampler, rows: np.ndarray) -> np.ndarray:
        """Sigmoid of the heatmap at all keypoints of the roots ``rows`` (indices): (len(rows), 17)."""
        at = (rows[:, None] * NUM_KEYPOINTS + _KEYPOINT_IDS).reshape(-1)
        logits = heat(self.points[:, at], heat.offsets(np.tile(_KEYPOINT_IDS, rows.size)[None]))
        return _sigmoid(logits.reshape(rows.size, NUM_KEYPOINTS))

    def keypoints(self, row: int) -> np.ndarray:
        """(17, 2) y/x grid positions of root ``row``'s pose."""
        return self.points[:, row * NUM_KEYPOINTS:(row + 1) * NUM_KEYPOINTS].T


def _mean_score(scores: np.ndarray) -> np.ndarray:
    """``scores.mean(axis=1, dtype=np.float32)``, bit for bit (same sum, then the same float64 division by
    an intp count), without the wrapper's overhead."""
    total = np.add.reduce(scores, axis=1, dtype=np.float32)
    return np.true_divide(total, _KEYPOINT_COUNT, out=total, casting="unsafe")


def decode_poses(heatmap_logits: np.ndarray, short_offsets: np.ndarray, mid_offsets: np.ndarray,
                 options: PoseDecoderOptions, batch: int = 64) -> RawPoses:
    """Decode float tensors (H, W, C) already in grid units (offsets divided by the stride).

    Non-finite values or mismatched shapes raise ``InputError`` (a NaN point would otherwise index far
    outside the grid); the quantized path (``PoseDecoder.decode_raw``) cannot produce either."""
    tensors = {"heatmap_logits": heatmap_logits, "short_offsets": short_offsets, "mid_offsets": mid_offsets}
    for name, tensor in tensors.items():
        if np.ndim(tensor) != 3:
            raise InputError(f"decode_poses: {name} must be (H, W, C), got shape {np.shape(tensor)}")
        bad = ~np.isfinite(tensor)
        if bad.any():
            raise InputError(f"decode_poses: {name} has {int(bad.sum())} non-finite value(s)")
    grid = heatmap_logits.shape[:2]
    k = heatmap_logits.shape[2]
    if short_offsets.shape != (*grid, 2 * k) or mid_offsets.shape[:2] != grid:
        raise InputError(f"decode_poses: shapes {heatmap_logits.shape}, {short_offsets.shape}, "
                         f"{mid_offsets.shape} do not match (H, W, K), (H, W, 2K), (H, W, 4 * edges)")
    return _decode(*(padded_copy(t) for t in (heatmap_logits, short_offsets, mid_offsets)), options, batch)


def _decode(heat_padded: np.ndarray, shorts_padded: np.ndarray, mids_padded: np.ndarray,
            options: PoseDecoderOptions, batch: int = 64) -> RawPoses:
    """``decode_poses`` on tensors already padded by one row and column (see ``padded_copy``).

    Roots are decoded ``batch`` at a time: a walk's cost is set by its depth levels, barely by its number
    of roots (a first small batch, to skip roots the first poses suppress, measured slower on 2 people).
    Levels deeper than ``EAGER_DEPTH`` are walked only for the roots the replay reaches unsuppressed. The
    C++ sequence of NMS test -> decode -> accept is replayed over the batch in root order.
    """
    heat, shorts, mids = Sampler(heat_padded), Sampler(shorts_padded), Sampler(mids_padded)
    h, w, _ = heat.tensor.shape
    high = np.array([h - 1.0, w - 1.0], dtype=np.float32)
    min_logit = _logodds(options.score_threshold)
    cand_points, cand_ids, _ = find_candidates(heat.tensor, shorts.tensor, min_logit)
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
        roots, root_ids = cand_points[todo], cand_ids[todo]
        walk = _Walk(roots, root_ids, high)
        walk.advance(mids, shorts, 1, EAGER_DEPTH)
        complete = _ROOT_DEPTH[root_ids] <= EAGER_DEPTH
        scores = np.zeros((todo.size, NUM_KEYPOINTS), dtype=np.float32)
        done = np.flatnonzero(complete)
        scores[done] = walk.keypoint_scores(heat, done)
        accept = complete & (_mean_score(scores) >= threshold)
        # Replay the C++ root loop over the batch. Only accepted poses change later decisions, so loop over
        # those (<= max_detections), each one suppressing the later roots near its same keypoint; a root
        # not walked to the end yet is finished (with all other unsuppressed ones) when the loop reaches it.
        pending = np.ones(todo.size, dtype=bool)
        while count < options.max_detections:
            pick = np.flatnonzero(pending & (accept | ~complete))
            if pick.size == 0:
                break
            i = pick[0]
            if not complete[i]:
                late = pending & ~complete
                walk.advance(mids, shorts, EAGER_DEPTH + 1, _MAX_DEPTH, late)
                rows = np.flatnonzero(late)
                scores[rows] = walk.keypoint_scores(heat, rows)
                accept[rows] = _mean_score(scores[rows]) >= threshold
                complete[rows] = True
                continue
            poses[count], kp_scores[count] = walk.keypoints(i), scores[i]
            delta = poses[count, root_ids] - roots
            count += 1
            pending &= (delta * delta).sum(-1) > sq_radius
            pending[:i + 1] = False
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
    order = np.argsort(-_mean_score(kp_scores), kind="stable")
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
        return _decode(dequantized_padded(heat_spec, heat_q[0]),
                       dequantized_padded(short_spec, short_q[0], inv_stride),
                       dequantized_padded(mid_spec, mid_q[0], inv_stride), self.options)

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
