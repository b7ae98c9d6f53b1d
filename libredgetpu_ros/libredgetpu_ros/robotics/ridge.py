"""The reservoir readout's ridge regression and its error measure (``reservoir.ReservoirComputer.fit``).

The features are made and the normal equations summed over blocks of :data:`BLOCK_ROWS` rows, with the
caller's cancel check between them, so a cancel waits for one block or the solve, not for the whole fit
(measured at the reservoir node's largest fit: bench/results/reservoir_fit_cancel.md); and the features are
never held whole.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from libredgetpu_ros.errors import InputError

BLOCK_ROWS = 2048  # feature rows per block of the normal equations


def ridge_fit(rows: Callable[[int, int], np.ndarray], target: np.ndarray, ridge: float,
              check: Callable[[], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(``W`` (K, F), its prediction (T, K)) minimising ``|x W^T - target|^2 + ridge * T * |W|^2``, with the
    features ``x`` (T, F) made a block at a time by ``rows(start, stop)`` (never whole: they were as large
    as the states); ``check()`` before each block (of the sums, then of the prediction) and before the solve
    (it raises to stop). InputError when the system is singular or the weights are not finite."""
    count = len(target)
    gram = rhs = None
    for start in range(0, count, BLOCK_ROWS):
        if check is not None:
            check()
        stop = min(start + BLOCK_ROWS, count)
        block = rows(start, stop)
        if gram is None:
            gram, rhs = np.zeros((block.shape[1],) * 2), np.zeros((block.shape[1], target.shape[1]))
        gram += block.T @ block
        rhs += block.T @ target[start:stop]
    if gram is None:
        raise InputError("readout fit has no samples")
    gram[np.diag_indices_from(gram)] += ridge * count
    if check is not None:
        check()  # the solve is the one part a cancel waits for whole (not the blocks)
    try:
        weights = np.linalg.solve(gram, rhs).T
    except np.linalg.LinAlgError as exc:
        raise InputError(f"readout fit is singular ({exc}); raise ridge above {ridge}") from exc
    if not np.isfinite(weights).all():
        raise InputError("readout fit produced NaN/inf weights; raise ridge or check the data")
    prediction = np.empty((count, weights.shape[0]))
    for start in range(0, count, BLOCK_ROWS):
        if check is not None:
            check()
        stop = min(start + BLOCK_ROWS, count)
        prediction[start:stop] = rows(start, stop) @ weights.T
    return weights, prediction


def nrmse(prediction: np.ndarray, target: np.ndarray) -> float:
    """Root mean square error over the targets' standard deviation, averaged over output columns. A
    constant target column has no spread to normalise by: InputError (NRMSE undefined)."""
    prediction = np.asarray(prediction, dtype=np.float64).reshape(len(target), -1)
    target = np.asarray(target, dtype=np.float64).reshape(len(target), -1)
    check_spread(target, "target")
    std = target.std(axis=0)
    return float(np.mean(np.sqrt(np.mean((prediction - target) ** 2, axis=0)) / std))


def check_spread(target: np.ndarray, name: str) -> None:
    """InputError naming the first column of ``target`` (T, K) that is constant (or has < 2 steps)."""
    if len(target) < 2:
        raise InputError(f"{name} has {len(target)} step(s): NRMSE needs a spread")
    spread = np.ptp(target, axis=0)
    scale = np.maximum(np.abs(target).max(axis=0), 1.0)
    flat = np.flatnonzero(spread <= 1e-12 * scale)
    if flat.size:
        raise InputError(f"{name} column {int(flat[0])} is constant ({target[0, flat[0]]!r} at every step): "
                         f"its NRMSE is undefined and a readout fitted to it predicts nothing")
