"""Issue 27's harsh network in the suite: 40 % loss, 20 % duplication, 0-200 ms jitter (reordering) and 1 %
single-byte corruption, both directions, through the impairment proxy; two seeds of each workload
(regression, small-batch regression, classification), all at once, each bounded. Every run must end with
losses, evaluation metrics and weights bit-identical to the same training without a network, every batch
executed exactly once, corrupted datagrams seen and rejected by their integrity tag. The small-batch
workload runs once more per seed with a shared key: HMAC tags, and the claim's challenge round trip (issue
30) under the same loss, duplication and corruption.
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
    runs = asyncio.run(impaired.run_seeds(SEEDS, keyed=("small batches",)))
    assert len(runs) == 4 * len(SEEDS)
    for run in runs:
        assert run.error == "" and run.identical, run
        problem = impaired.workloads(run.seed)[run.workload.removesuffix(" (HMAC)")]
        assert run.worker["executed"]["Batch"] == len(problem.batches) + 1, run  # + the evaluation batch
        assert run.proxy["up dropped"] > 0 and run.proxy["down dropped"] > 0, run.proxy
        assert run.retransmissions > 0
    keyed = [r for r in runs if r.workload.endswith("(HMAC)")]
    assert all(r.worker["sessions"].get("claimed") == 1 and r.worker["refused"]["CHALLENGE"] >= 1
               for r in keyed), [r.worker for r in keyed]  # (the release is best effort: 2 s of tries)
    corrupted = sum(r.proxy.get("up corrupted", 0) for r in runs)
    caught = sum(r.worker["rejected"].get("integrity", 0) for r in runs)
    assert corrupted > 0 and caught > 0  # corruption happened, and the worker's tag check caught it
