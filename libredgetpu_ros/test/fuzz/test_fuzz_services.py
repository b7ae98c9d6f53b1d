"""CI fuzzing of what the nodes' services take (``service_targets.py``): readout and embedding database
files (metadata text or array bytes mutated, 1,000 cases each) and requests to the live services of five
nodes (their CDR bytes mutated, 1,000 cases); 5 s and 1 GiB per case; only typed ``InputError``s may escape
the loaders, and no request may reach the service guard's ``internal error``. Long runs: docs/reliability.md
section 13."""

from __future__ import annotations

import pytest

from .harness import check_budget
from .service_targets import targets

CASES = 1000
TIME_LIMIT_S, MEMORY_LIMIT_MB = 5.0, 1024  # per case; bench_fuzz_budget.py --suite services runs the same


@pytest.fixture(scope="module")
def file_targets(tmp_path_factory):
    return targets(tmp_path_factory.mktemp("service-seeds"), ["readout", "embedding_db"])


@pytest.mark.parametrize("name", ["readout", "embedding_db"])
def test_learned_state_file_fuzz_budget(file_targets, name):
    check_budget(file_targets[name], CASES, time_limit_s=TIME_LIMIT_S, memory_limit_mb=MEMORY_LIMIT_MB,
                 min_refused=CASES // 10, min_accepted=CASES // 100)


@pytest.mark.ros
def test_service_request_fuzz_budget(tmp_path):
    import rclpy.logging

    # The target's rclpy.init(--log-level fatal) sets rcutils' process-wide default logger level; later tests
    # in this process read what their nodes log (capfd), so the default level is put back afterwards.
    default_level = rclpy.logging.get_logger_effective_level("libredgetpu_ros_no_such_logger")
    try:
        check_budget(targets(tmp_path, ["service_requests"])["service_requests"], CASES,
                     time_limit_s=TIME_LIMIT_S, memory_limit_mb=MEMORY_LIMIT_MB, min_refused=CASES // 10,
                     min_accepted=CASES // 100)
    finally:
        rclpy.logging.set_logger_level("", default_level)
