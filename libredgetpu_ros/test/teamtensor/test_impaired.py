"""Issue 27's harsh network in the suite: 40 % loss, 20 % duplication, 0-200 ms jitter (reordering) and 1 %
single-byte corruption, both directions, through the impairment proxy; two seeds of each workload
(regression, small-batch regression, classification), all at once, each bounded. Every run must end with
losses, evaluation metrics and weights bit-identical to the same training without a network, every batch
executed exactly once, corrupted datagrams seen and rejected by their integrity tag.
The 20-seed version with times and retransmissions: bench/longrun_teamtensor_impaired.py (docs/teamtensor.md).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from .._helpers import load_helper

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

impaired = load_helper(Path(__file__).resolve().parent / "_impaired.py")
SEEDS = [1, 2]


def test_harsh_network_training_is_bit_identical_to_no_network():
    runs = asyncio.run(impaired.run_seeds(SEEDS))
    assert len(runs) == 3 * len(SEEDS)
    for run in runs:
        assert run.error == "" and run.identical, run
        problem = impaired.workloads(run.seed)[run.workload]
        assert run.worker["executed"]["Batch"] == len(problem.batches) + 1, run  # + the evaluation batch
        assert run.proxy["up dropped"] > 0 and run.proxy["down dropped"] > 0, run.proxy
        assert run.retransmissions > 0
    corrupted = sum(r.proxy.get("up corrupted", 0) for r in runs)
    caught = sum(r.worker["rejected"].get("integrity", 0) for r in runs)
    assert corrupted > 0 and caught > 0  # corruption happened, and the worker's tag check caught it
