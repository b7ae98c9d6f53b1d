"""Classifier.top_k ties (issue 18 item 8): equal scores come out lower class id first, as documented,
including at the k-th place, where argpartition used to keep an arbitrary one of the tied classes."""

from __future__ import annotations

import numpy as np
import pytest
from libredgetpu_ros.postprocess.classify import Classifier
from libredgetpu_ros.postprocess.graph import TensorSpec


def _classifier(n: int) -> Classifier:
    return Classifier(TensorSpec("scores", (1, n), np.dtype(np.uint8), 1 / 256, 0))


def _ids(classifier: Classifier, raw: np.ndarray, k: int) -> list[int]:
    return [c.class_id for c in classifier.top_k({"scores": raw.reshape(1, -1)}, k=k)]


def test_all_equal_scores_give_the_lowest_ids():
    raw = np.full(1001, 7, np.uint8)
    for k in (1, 2, 5, 10, 1001):
        assert _ids(_classifier(1001), raw, k) == list(range(k))


def test_ties_at_the_cut_keep_the_lower_ids():
    raw = np.zeros(1001, np.uint8)
    raw[[900, 3, 500, 42, 7]] = 200  # five tied best
    raw[[999, 600]] = 250  # two better ones
    assert _ids(_classifier(1001), raw, 4) == [600, 999, 3, 7]
    assert _ids(_classifier(1001), raw, 7) == [600, 999, 3, 7, 42, 500, 900]


@pytest.mark.parametrize("seed", range(20))
def test_matches_a_stable_sort_on_random_scores_with_many_ties(seed):
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 6, 1001, dtype=np.uint8)  # 6 distinct values: ties everywhere
    k = int(rng.integers(1, 50))
    expected = sorted(range(1001), key=lambda i: (-int(raw[i]), i))[:k]
    assert _ids(_classifier(1001), raw, k) == expected
