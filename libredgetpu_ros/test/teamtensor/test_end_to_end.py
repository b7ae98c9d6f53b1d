"""End-to-end training over loopback against ``libredgetpu-ros tt-worker`` in another process.

Each problem runs twice against the same worker process: directly, and through the impairment proxy
(20 % loss, 10 % duplication, 10 % reordering, up to 1 ms delay, both directions, seeded). Both runs must
give bit-identical losses, evaluation metrics and weights, equal to the same training done in this
process with the worker's NumPy code, and converge below the stated thresholds.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.teamtensor.wire import Metric

from .._helpers import load_helper

pytestmark = [pytest.mark.timeout(120)]

HERE = Path(__file__).resolve().parent


training = load_helper(HERE / "_training.py")
proxy = load_helper(HERE / "_proxy.py")

IMPAIRED = proxy.Impairment(loss=0.2, duplicate=0.1, reorder=0.1, delay=(0.0, 0.001))
# Convergence thresholds (evaluation batch of 500 held-out samples; initial values in the comments).
REGRESSION_MSE = 1e-4  # from ~3 with zero weights
CLASSIFICATION_CE = 0.2  # from ~0.69 (chance)
CLASSIFICATION_ACCURACY = 0.95  # from ~0.5


async def _direct_and_impaired(worker, problem):
    direct = await training.train_remote(worker.address, problem, pipeline=1)
    p = proxy.ImpairmentProxy(worker.address, IMPAIRED, seed=7)
    front = await p.start()
    try:
        impaired = await training.train_remote(front, problem, pipeline=2)  # ASN_DP 2: fresh managers
    finally:
        p.close()
    return direct, impaired, p.stats


def _assert_identical(a, b) -> None:
    assert a.losses == b.losses
    assert a.evaluation == b.evaluation
    assert all(np.array_equal(x, y) for x, y in zip(a.weights, b.weights, strict=True))


@pytest.mark.parametrize("make_problem", [training.regression, training.classification],
                         ids=["regression", "classification"])
def test_training_converges_and_is_identical_with_and_without_impairment(make_problem):
    problem = make_problem()
    with training.worker_process() as worker:
        direct, impaired, impaired_stats = asyncio.run(_direct_and_impaired(worker, problem))
    reference = training.train_local(problem)

    # The network did its worst and the protocol repaired it.
    assert impaired_stats["up dropped"] > 10 and impaired_stats["down dropped"] > 10
    assert impaired_stats["up duplicated"] > 5 and impaired_stats["up reordered"] > 5
    assert impaired.retransmissions > 10  # (the direct run may retransmit too: a busy 2-core machine)
    assert worker.stats["duplicates"] > 0
    assert worker.stats["executed"]["Batch"] == 2 * (len(problem.batches) + 1)  # each batch exactly once

    _assert_identical(direct, impaired)
    # Trained weights equal what the same code computes here, and what the worker reported (GET_MD).
    assert all(np.array_equal(x, y) for x, y in zip(direct.weights, reference.weights, strict=True))
    assert direct.losses == [float(np.float32(v)) for v in reference.losses]
    assert direct.evaluation == {m: float(np.float32(v)) for m, v in reference.evaluation.items()}

    ev = direct.evaluation
    if problem.name == "regression":
        assert ev[Metric.MSE] < REGRESSION_MSE, ev
        assert direct.losses[0] > 100 * ev[Metric.MSE]
    else:
        assert ev[Metric.CROSS_ENTROPY] < CLASSIFICATION_CE, ev
        assert ev[Metric.ACCURACY] >= CLASSIFICATION_ACCURACY, ev
