"""CI fuzzing of the Team Tensor worker's model acceptance and memory budget (issue 27): 1,500 seeded
mutations of ASN_MD packets, each accepted model trained on a batch of its largest input, each case limited
to 5 s and 1 GiB of address space; only typed refusals are allowed, and the worker must never fail inside
(see teamtensor_targets.py). Also: the issue's padding bomb is refused under the same limits. Issue 30:
1,500 mutated seed framing packets (never silence, no amplification) and 1,000 replay plans against a keyed
worker whose owner went silent (never taken over); both targets fail on the code before the fixes."""

from __future__ import annotations

import numpy as np
from libredgetpu_ros.errors import InputError
from libredgetpu_ros.teamtensor import packets
from libredgetpu_ros.teamtensor.model import ModelSpec, conv2d
from libredgetpu_ros.teamtensor.wire import Metric

from .harness import check_budget, run_guarded
from .teamtensor_targets import consume_model, targets

CASES = 1500
SEED_CASES, CLAIM_CASES = 1500, 1000


def test_teamtensor_model_fuzz_budget():
    check_budget(targets()["teamtensor_model"], CASES, time_limit_s=5.0, memory_limit_mb=1024,
                 min_refused=CASES // 4, min_accepted=CASES // 20)


def test_teamtensor_seed_framing_fuzz_budget():
    check_budget(targets()["teamtensor_seed"], SEED_CASES, time_limit_s=5.0, memory_limit_mb=1024,
                 min_refused=SEED_CASES // 4, min_accepted=SEED_CASES // 20)


def test_teamtensor_replayed_claims_fuzz_budget():
    check_budget(targets()["teamtensor_claim"], CLAIM_CASES, time_limit_s=5.0, memory_limit_mb=1024,
                 min_refused=CLAIM_CASES // 100, min_accepted=CLAIM_CASES // 2)


def test_the_padding_bomb_is_refused_within_the_limits():
    bomb = ModelSpec([conv2d(np.ones((1, 1, 1, 1), np.float32), None, pad=20000, stride=60000, out_width=1,
                             out_height=1)], [Metric.MSE])
    outcome = run_guarded(consume_model, packets.encode_request(packets.AssignModel(1, 1, bomb)),
                          (InputError,), time_limit_s=5.0, memory_limit_mb=1024)
    assert outcome.kind == "refused" and "BAD_MODEL" in outcome.message, outcome
