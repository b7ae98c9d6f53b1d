"""Shared pytest configuration: fixture lookup, the ``hardware`` and ``ros`` markers, the ``ros_env`` fixture,
tests that need ROS skipped where ROS is missing, and the durations record of ``make test-slowest``.

``ros`` is set here, not only by hand, so the fast lane (``make test-fast``: ``-m "not ros and not slow"``)
and the other-Python lane (tools/test_python_versions.sh) can rely on it: a test that uses the ``ros_env``
fixture (directly or through another fixture) or whose own source mentions ``rclpy`` is marked ``ros``.
Where rclpy (or a ROS message package) cannot be imported, a test failing on exactly that import is
reported as skipped with the reason, not as an error.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import signal
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest


def _use_the_real_package() -> None:
    """Make ``libredgetpu_ros`` the Python package, not the ROS package folder of the same name.

    With ``--import-mode=importlib`` pytest imports this file as ``libredgetpu_ros.test.conftest`` and
    first registers the folder ``<repo>/libredgetpu_ros`` (no ``__init__.py``) as module ``libredgetpu_ros``;
    ``python -m pytest`` from the repository root does the same through ``sys.path[0]``. Submodules still
    resolve through the editable install, but ``libredgetpu_ros.__version__`` / ``__file__`` would not.
    """
    current = sys.modules.get("libredgetpu_ros")
    if current is not None and getattr(current, "__file__", None):
        return
    package_dir = None
    for entry in sys.path:
        candidate = Path(entry or ".").resolve() / "libredgetpu_ros"
        if (candidate / "__init__.py").is_file():
            package_dir = candidate
            break
    if package_dir is None:  # editable install: its finder knows where the sources are
        spec = importlib.util.find_spec("libredgetpu_ros.errors")
        if spec is None or spec.origin is None:
            return
        package_dir = Path(spec.origin).parent
    spec = importlib.util.spec_from_file_location("libredgetpu_ros", package_dir / "__init__.py",
                                                  submodule_search_locations=[str(package_dir)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["libredgetpu_ros"] = module
    spec.loader.exec_module(module)


_use_the_real_package()

from libredgetpu_ros.fixtures import FixtureMissingError  # noqa: E402
from libredgetpu_ros.fixtures import fixture as _fixture  # noqa: E402
from libredgetpu_ros.fixtures import fixtures_dir as _fixtures_dir  # noqa: E402

from ._ros_env import RosTestEnv, fastdds_shm_names, log_tail, next_domain_id, remove_dead_fastdds_shm  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    """This pytest process's own device-lock folder (edgetpu/locks.py: ``$XDG_RUNTIME_DIR``).

    Simulated Edge TPUs take the same flock()s as real ones, under names like "simulated" or "broker-auto";
    in the shared folder, two pytest processes (the xdist workers of `make test-fast`, or two people's runs
    on one machine) opening the same name at once would see "in use by another process". Each process, an
    xdist worker too, gets its folder; the child processes a test starts inherit it.
    """
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="libredgetpu_ros_pytest_run.")
    previous = os.environ.get("XDG_RUNTIME_DIR")
    os.environ["XDG_RUNTIME_DIR"] = folder

    def restore() -> None:
        if previous is None:
            os.environ.pop("XDG_RUNTIME_DIR", None)
        else:
            os.environ["XDG_RUNTIME_DIR"] = previous
        shutil.rmtree(folder, ignore_errors=True)

    config.add_cleanup(restore)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-hardware", action="store_true", default=False,
                     help="run tests marked 'hardware' (needs a real accelerator attached)")


# Fixtures that start ROS: a test using one (directly or through another fixture) is a ``ros`` test.
ROS_FIXTURES = frozenset({"ros_env"})
# Top-level packages that come with ROS (rclpy, the generated messages, launch): absent on the other Pythons.
ROS_PACKAGES = frozenset({"rclpy", "rosidl_runtime_py", "rosidl_parser", "rpyutils", "builtin_interfaces",
                          "std_msgs", "sensor_msgs", "geometry_msgs", "visualization_msgs", "diagnostic_msgs",
                          "vision_msgs", "lifecycle_msgs", "rcl_interfaces", "composition_interfaces",
                          "libredgetpu_ros_interfaces", "launch", "launch_ros", "launch_testing",
                          "ament_index_python", "ros2cli", "rosbag2_py", "unique_identifier_msgs",
                          "action_msgs", "service_msgs", "type_description_interfaces"})


def _starts_ros(item: pytest.Item) -> bool:
    if ROS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    function = getattr(item, "function", None)
    if function is None:
        return False
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return False
    return "rclpy" in source


# Tests marked ``slow`` here rather than in their files: each takes more than ~1 s of CPU (or a subprocess
# per case, a fuzz budget, a kill-at-every-point loop), so the fast lane leaves them to `make test`, which
# runs them all. Entries are ``<file under test/>::<function>`` (every parametrization) or
# ``...::<function>[<id>]`` (that case only); test_conftest_marks.py checks that each still names a test.
# Chosen from a `make test-fast --durations` run (`make test-slowest` lists the slowest files).
SLOW_TESTS = frozenset({
    "bags/test_bag_qos_budget.py::test_a_large_real_bag_opens",
    "bags/test_bag_qos_budget.py::test_bag_repair_drops_the_profiles_over_the_bag_total_and_the_copy_opens",
    "bags/test_bag_qos_budget.py::test_many_topics_at_the_per_topic_cap_refused_after_a_few",
    "edgetpu/test_broker.py::test_a_matmul_engine_and_a_camera_model_take_turns_on_one_device",
    "femto/test_femto_differential.py::test_loader_fuzz_matches_femtorun",
    "femto/test_femto_differential.py::test_loader_fuzz_raw_text",
    "femto/test_femto_hostile_text.py::test_large_iospec_on_the_c_loader_gets_femtorun_verdict",
    "fuzz/test_fuzz_readers.py::test_reader_fuzz_budget",
    "fuzz/test_fuzz_services.py::test_learned_state_file_fuzz_budget",
    "fuzz/test_fuzz_teamtensor.py::test_teamtensor_replayed_claims_fuzz_budget",
    "fuzz/test_fuzz_text.py::test_text_reader_fuzz_budget",
    "ingenic/test_mgk_malformed.py::test_every_truncation_of_the_elf_part",
    "ingenic/test_mgk_malformed.py::test_fuzzed_mutations_give_typed_errors_never_a_traceback_or_hang",
    "ingenic/test_mgk_synthetic.py::test_fuzzed_tables_parse_or_give_config_errors",
    "matmul/test_jit_cache.py::test_numba_imported_on_open_and_cached_in_user_folder",
    "robotics/test_reservoir.py::test_one_step_ahead_prediction_of_known_systems",
    "robotics/test_retarget_kill.py::test_a_kill_at_any_point_leaves_a_template_that_loads",
    "robotics/test_robotics_kernels.py::test_kernels_compiled_on_open_and_cached_in_the_user_folder",
    "robotics/test_spot_reference.py::test_track_equals_independent_references_on_the_scene_grid",
    "robotics/test_spot_validity.py::test_small_targets_on_textured_walls_are_valid_and_right",
    "robotics/test_ttc.py::test_approach_from_5m_at_1mps_gives_ttc_in_seconds",
    "robotics/test_ttc.py::test_no_contact_coming_gives_no_ttc",
    "sophgo/test_tpulang_hardening.py::test_a_huge_op_name_is_not_echoed_whole",
    "sophgo/test_tpulang_hardening.py::test_export_and_replay_failing_part_way_keep_the_previous_pair",
    "sophgo/test_tpulang_hardening.py::test_kill_9_mid_write_never_leaves_a_partial_output",
    "sophgo/test_tpulang_hardening.py::test_unused_npz_array_is_never_loaded",
    "sophgo/test_tpulang_properties.py::test_conv_f32_matches_loop_reference",
    "teamtensor/test_codec.py::test_reliable_trailer_layout_and_every_single_byte_corruption_is_caught",
    "teamtensor/test_end_to_end.py::test_training_converges_and_is_identical_with_and_without_impairment",
    "teamtensor/test_fuzz.py::test_worker_survives_ten_thousand_invalid_datagrams",
    "teamtensor/test_worker.py::test_a_worker_filled_to_its_limits_keeps_less_than_its_memory_bound",
    "test_atomicio.py::test_kill_9_mid_write_never_leaves_a_partial_file",
    "test_layers.py::test_no_import_cycles",
    "test_layers.py::test_no_import_goes_up_or_sideways",
    "test_npyfile.py::test_weights_npy_lying_about_its_shape_is_one_error_line",
    "tools/test_docs_commands.py::test_every_named_subcommand_runs_its_help",
    "tools/test_pictures.py::test_committed_picture_is_current[looming]",
})
_TEST_DIR = Path(__file__).resolve().parent


# What this session collected (before -m/-k deselect anything): ``<file>::<function>`` and the SLOW_TESTS
# entries that matched a test, for test_conftest_marks.py's check of ``[<id>]`` entries.
collected_functions: set[str] = set()
matched_slow: set[str] = set()


def _test_function(item: pytest.Item) -> str | None:
    """``<file under test/>::<function>`` of ``item``; None for an item outside this folder."""
    try:
        file = Path(item.path).resolve().relative_to(_TEST_DIR).as_posix()
    except ValueError:
        return None
    return f"{file}::{getattr(item, 'originalname', item.name)}"


def listed_slow(item: pytest.Item) -> str | None:
    """The SLOW_TESTS entry naming ``item`` (its function, or its one parametrized case), else None."""
    function = _test_function(item)
    if function is None:
        return None
    case = f"{function.rsplit('::', 1)[0]}::{item.name}"
    return next((entry for entry in (function, case) if entry in SLOW_TESTS), None)


# A ROS test that fails is run once more (pytest-rerunfailures) before it counts as failed: its helper
# processes meet over DDS discovery, and on a loaded machine a new client's first reply can be lost (Fast
# DDS drops a reply whose reader the server has not matched yet: "failed to send response (timeout)") or a
# discovery can outlast a wait. A second failure fails the run; every rerun is listed in the summary
# (RERUN lines) so a test that needs it is seen and mended. The other tests get no rerun, and neither does
# a failure that reports a crash (CRASH_PATTERNS: a process killed by a fault signal, a fatal Python
# error): a crash that comes 1 run in 10 is a bug to see, not a race to ride out.
ROS_RERUNS, ROS_RERUN_DELAY_S = 1, 1.0
CRASH_PATTERNS = (r"Fatal Python error", r"Segmentation fault", r"core dumped",
                  r"\b(?:exit|exit code|exit status|returncode|return code|rc)[ =:]*-(?:4|6|7|8|11)\b")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rerun = (pytest.mark.flaky(reruns=ROS_RERUNS, reruns_delay=ROS_RERUN_DELAY_S,
                               rerun_except=list(CRASH_PATTERNS))
             if config.pluginmanager.hasplugin("rerunfailures") else None)
    for item in items:
        # markers, not item.keywords: every test under test/ros/ has the keyword "ros" (its folder's name)
        if item.get_closest_marker("ros") is None and _starts_ros(item):
            item.add_marker(pytest.mark.ros)
        if rerun is not None and item.get_closest_marker("ros") and item.get_closest_marker("flaky") is None:
            item.add_marker(rerun)
        collected_functions.add(_test_function(item) or "")
        entry = listed_slow(item)
        if entry is not None:
            matched_slow.add(entry)
            item.add_marker(pytest.mark.slow)
    if config.getoption("--run-hardware"):
        return
    skip = pytest.mark.skip(reason="needs a real accelerator; run with --run-hardware")
    for item in items:
        if "hardware" in item.keywords:
            item.add_marker(skip)


def is_ros_package(module: str) -> bool:
    """A module of ROS: the packages above, or any interface package (``*_msgs``, ``*_srvs``, ...)."""
    top = module.split(".")[0]
    return top in ROS_PACKAGES or top.endswith(("_msgs", "_srvs", "_interfaces"))


def missing_ros_module(exc: BaseException | None) -> str | None:
    """The ROS package whose absence raised ``exc`` (a ModuleNotFoundError, possibly chained), else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ModuleNotFoundError) and is_ros_package(exc.name or ""):
            return exc.name
        exc = exc.__cause__ or exc.__context__
    return None


_ROS_MISSING = importlib.util.find_spec("rclpy") is None


def _skip_when_ros_is_missing(exc: BaseException) -> None:
    name = missing_ros_module(exc) if _ROS_MISSING else None
    if name is not None:
        pytest.skip(f"needs ROS: no module {name!r} for this Python ({sys.version.split()[0]})")


def _skipping_missing_ros() -> Generator[None, Any, Any]:
    """The body of the setup and call wrappers below."""
    try:
        return (yield)
    except Exception as exc:
        _skip_when_ros_is_missing(exc)
        raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    return (yield from _skipping_missing_ros())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    return (yield from _skipping_missing_ros())


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    """A test module that cannot be imported for want of ROS is skipped with the reason, not an error."""
    report = yield
    if _ROS_MISSING and report.failed:
        named = re.findall(r"No module named '([\w.]+)'", str(report.longrepr))
        missing = next((name for name in named if is_ros_package(name)), None)
        if missing is not None:
            report.outcome = "skipped"
            report.longrepr = (str(collector.path), 0,
                               f"Skipped: needs ROS: no module {missing!r} for this Python")
    return report


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The shared fixtures folder; a missing folder fails the test (never skips)."""
    try:
        return _fixtures_dir()
    except FixtureMissingError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def fixture_path():
    """``fixture_path("posenet/x.tflite")`` -> Path; a missing file fails the test with where it looked."""

    def lookup(relative: str) -> Path:
        try:
            return _fixture(relative)
        except FixtureMissingError as exc:
            pytest.fail(str(exc), pytrace=False)

    return lookup


# --------------------------------------------------------------------------------------------------------
# ROS tests: `ros_env` (its environment and helper processes: _ros_env.py) and the one rerun a ROS test gets.
# --------------------------------------------------------------------------------------------------------

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    report = outcome.get_result()
    # A NumPy scalar recorded with record_property (a max of an array) cannot cross to the pytest-xdist
    # controller (execnet serializes plain Python values only: the worker crashed): sent as its Python value.
    report.user_properties = [(name, value.item() if type(value).__module__ == "numpy" else value)
                              for name, value in report.user_properties]
    ros = getattr(item, "funcargs", {}).get("ros_env")
    if report.when == "call" and isinstance(ros, RosTestEnv):
        # Failed test: show every helper's log; passed test: only those that crashed (teardown fails it).
        for title, text in ros.log_sections(only_unexpected=not report.failed):
            report.sections.append((title, text))
        item.stash[_ROS_CALL_FAILED] = report.failed


_ROS_CALL_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def ros_env(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A private localhost-only ROS setup for one test (mark such tests ``@pytest.mark.ros``).

    Attributes: ``domain_id`` (distinct per test), ``log_dir`` (ROS_LOG_DIR), ``env`` (for subprocesses:
    the localhost-only settings, the domain id, PYTHONUNBUFFERED=1); ``spawn(args, name)`` starts a helper
    process logging to a file; ``init_rclpy()`` returns a fresh initialised ``rclpy.context.Context``.
    The same variables are set in ``os.environ`` for the test. Teardown shuts contexts down, stops the
    processes and removes the Fast DDS shared-memory files they left behind.
    """
    from libredgetpu_ros.ros.environment import localhost_only_environ

    shm_before = fastdds_shm_names()
    domain_id = next_domain_id()
    log_dir = tmp_path / "ros_log"
    env = localhost_only_environ(domain_id=domain_id, log_dir=str(log_dir))
    env["PYTHONUNBUFFERED"] = "1"
    for key, value in env.items():
        if os.environ.get(key) != value:
            monkeypatch.setenv(key, value)
    ros = RosTestEnv(domain_id=domain_id, log_dir=log_dir, env=env, work_dir=tmp_path)
    try:
        yield ros
    finally:
        dead = ros._teardown()
        remove_dead_fastdds_shm(shm_before)
    if dead and not request.node.stash.get(_ROS_CALL_FAILED, False):
        details = "\n\n".join(
            f"--- {s.name} (exit {s.proc.returncode}): {s.log_path}\n{log_tail(s.log_path)}" for s in dead)
        pytest.fail(f"helper process(es) died unexpectedly during the test:\n{details}", pytrace=False)


# --------------------------------------------------------------------------------------------------------
# Seconds per test file (setup + call + teardown of its tests), merged into $LIBREDGETPU_ROS_DURATIONS when
# set: `make test` / `make test-fast` keep build/test-durations.json, `make test-slowest` lists the top 20.
# --------------------------------------------------------------------------------------------------------

_file_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    _file_seconds[path] = _file_seconds.get(path, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("LIBREDGETPU_ROS_DURATIONS")
    if not target or not _file_seconds or session.config.getoption("collectonly"):
        return
    if hasattr(session.config, "workerinput"):
        return  # a pytest-xdist worker: the controller gets every report too and writes the record once
    import json

    from libredgetpu_ros.atomicio import atomic_write_text

    path = Path(target)
    try:
        record = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        record = {}  # a damaged record is rebuilt from this run
    if not isinstance(record, dict):
        record = {}
    # files of this run replace their old entries (a filtered run, -k/-m, records what it ran)
    record.update({name: round(seconds, 3) for name, seconds in _file_seconds.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record, indent=1, sort_keys=True) + "\n")


_PROCESS_SIGNALS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}


@pytest.fixture(autouse=True)
def _signal_dispositions_restored() -> Generator[None, Any, Any]:
    """Every test starts and ends with Python's own SIGINT / SIGTERM dispositions. A run started in the
    background by a non-interactive shell inherits SIGINT ignored (Python then keeps it ignored), and a
    node's ``main()`` run in this process leaves it ignored on purpose (the process exits next,
    ``spinning.run_lifecycle_node_main``); an ignored SIGINT is inherited by every child process (a
    ``ros2 launch`` that Ctrl-C no longer stops) and makes ``_thread.interrupt_main`` a no-op."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    for signum, handler in _PROCESS_SIGNALS.items():
        if signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)
    yield
    for signum, handler in _PROCESS_SIGNALS.items():
        if signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)
