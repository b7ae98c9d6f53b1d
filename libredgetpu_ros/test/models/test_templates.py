"""Templates from `libredgetpu-ros models` (issue 22): a robot has no shared fixtures folder, so the templates
the control / tracker / looming / flow / recognition configs name come from the model cache.

Each test hides the fixtures (``LIBREDGETPU_ROS_FIXTURES`` -> an empty folder: a robot) and starts from an
empty cache; the files arrive by ``models fetch`` from a loopback mirror (127.0.0.1) or by ``models import``
of a copy of the fixtures. Then the name resolves to the cache and the template loads and runs. Nothing
found: one error naming the template with the exact fetch command, or the close names of a misspelling."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.errors import ConfigError

pytestmark = pytest.mark.timeout(120)

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"


@pytest.fixture
def robot(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A robot: no fixtures folder (an empty one), no $LIBREDGETPU_ROS_TEMPLATES, an empty model cache."""
    empty = tmp_path / "no_fixtures"
    empty.mkdir()
    monkeypatch.setenv("LIBREDGETPU_ROS_FIXTURES", str(empty))
    monkeypatch.delenv("LIBREDGETPU_ROS_TEMPLATES", raising=False)
    return cache


def _flat_copy(fixtures_dir: Path, names: list[str], folder: Path) -> Path:
    """The entries' files, flat, as a mirror serves them (from the fixtures, subfolders included)."""
    from libredgetpu_ros.models.store import entry

    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        for f in entry(name).files:
            src, = fixtures_dir.rglob(f.name)
            shutil.copyfile(src, folder / f.name)
    return folder


def test_config_template_table_matches_the_shipped_configs() -> None:
    """doctor checks CONFIG_TEMPLATES: it must be what config/*.yaml name, each a catalogue entry."""
    import yaml
    from libredgetpu_ros.models.catalogue import CATALOGUE
    from libredgetpu_ros.models.templates import CONFIG_TEMPLATES

    for config, names in CONFIG_TEMPLATES.items():
        params = yaml.safe_load((CONFIG_DIR / f"{config}.yaml").read_text())["/**"]["ros__parameters"]
        named = params.get("template", params.get("model"))
        named = f"dense_{named}" if isinstance(named, int) else named
        assert named == names[0], config
        assert all(CATALOGUE[n].is_template for n in names), config


def test_fetch_from_a_loopback_mirror_then_resolve_and_run(robot: Path, file_server, fixtures_dir: Path,
                                                            tmp_path: Path, capsys) -> None:
    from libredgetpu_ros.cli.main import main
    from libredgetpu_ros.matmul.template import load_template as load_dense
    from libredgetpu_ros.models.templates import find_template, resolve_template
    from libredgetpu_ros.robotics.spot import SpotTracker
    from libredgetpu_ros.robotics.template import load_template

    names = ["color_red_64x64", "dense_256", "pattern_64x64_8x8_1ch"]
    with pytest.raises(ConfigError, match="models fetch color_red_64x64"):
        resolve_template("color_red_64x64")
    served = _flat_copy(fixtures_dir, names, tmp_path / "www")
    with file_server(served) as srv:
        assert main(["models", "fetch", *names, "--mirror", srv.url, "--no-progress"]) == 0
    out = capsys.readouterr().out.split()
    assert out == [str(robot / "color_red_64x64_edgetpu.tflite"), str(robot / "dense_256_edgetpu.tflite"),
                   str(robot / "pattern_64x64_8x8_1ch.tflite")]  # no compiled pattern model: its twin
    assert find_template("color_red_64x64") == (robot / "color_red_64x64", "cache")
    spot = load_template("color_red_64x64")  # a bare name, as in config/tracker_spot.yaml
    assert spot.twin_path == robot / "color_red_64x64.tflite" and spot.compiled_path is not None
    frame = np.zeros((64, 64, 3), np.uint8)
    frame[40:56, 44:60, 0] = 255  # a red blob right of and below the centre
    with SpotTracker(spot, backend="cpu") as tracker:
        result = tracker.track(frame)
    assert result.x_offset > 0.2 and result.y_offset > 0.2, result
    dense = load_dense(256)  # an int, as in config/control.yaml
    assert dense.compiled_path == robot / "dense_256_edgetpu.tflite" and dense.rows == 256
    pattern = load_template("pattern_64x64_8x8_1ch")  # config/tracker_pattern.yaml: twin + sidecar only
    assert pattern.compiled_path is None and pattern.twin_path == robot / "pattern_64x64_8x8_1ch.tflite"
    assert main(["models", "path", "pattern_64x64_8x8_1ch"]) == 2
    assert "has no compiled Edge TPU model (its CPU twin: --cpu) file" in capsys.readouterr().err


def test_import_a_copy_of_the_fixtures_then_resolve(robot: Path, fixtures_dir: Path, tmp_path: Path,
                                                     capsys) -> None:
    """`models import DIR` of a fixtures-like folder (its sub-folders searched) fills the cache."""
    from libredgetpu_ros.cli.main import main
    from libredgetpu_ros.models.templates import CONFIG_TEMPLATES, find_template
    from libredgetpu_ros.robotics.extractor import default_model
    from libredgetpu_ros.robotics.template import load_template

    usb = tmp_path / "usb"
    shutil.copytree(fixtures_dir / "robotics" / "looming", usb / "robotics" / "looming")
    shutil.copytree(fixtures_dir / "robotics" / "optical_flow", usb / "robotics" / "optical_flow")
    shutil.copytree(fixtures_dir / "robotics" / "embedding", usb / "embedding")
    assert main(["models", "import", str(usb)]) == 0
    imported = capsys.readouterr().out.split()
    assert {"looming_64x64_3x3", "gabor_64x64_p4", CONFIG_TEMPLATES["recognition"][1]} <= set(imported)
    for name in ("looming_64x64_3x3", "gabor_64x64_p4"):
        assert find_template(name) == (robot / name, "cache")
        assert load_template(name).sidecar_path == robot / f"{name}_edgetpu.json"
    assert default_model() == robot / f"{CONFIG_TEMPLATES['recognition'][1]}_edgetpu.tflite"
    assert find_template("dense_256") is None  # not imported: still nowhere


def test_cache_first_then_the_templates_folder(robot: Path, fixtures_dir: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from libredgetpu_ros.models.store import import_dir
    from libredgetpu_ros.models.templates import find_template

    own = tmp_path / "own"
    shutil.copytree(fixtures_dir / "robotics" / "tracker", own / "tracker")
    monkeypatch.setenv("LIBREDGETPU_ROS_TEMPLATES", str(own))
    assert find_template("bright_64x64") == (own / "tracker" / "bright_64x64", str(own))
    import_dir(_flat_copy(fixtures_dir, ["bright_64x64"], tmp_path / "flat"))
    assert find_template("bright_64x64") == (robot / "bright_64x64", "cache")
    (robot / "bright_64x64_edgetpu.json").unlink()  # a half-present entry is not used half
    assert find_template("bright_64x64") == (own / "tracker" / "bright_64x64", str(own))


def test_known_but_not_installed_and_misspelled_names(robot: Path) -> None:
    from libredgetpu_ros.models.templates import resolve_template
    from libredgetpu_ros.robotics.template import load_template

    with pytest.raises(ConfigError) as known:
        load_template("looming_64x64_3x3")
    text = str(known.value)
    assert "'looming_64x64_3x3' is not installed" in text and str(robot) in text
    assert "`libredgetpu-ros models fetch looming_64x64_3x3`" in text
    assert "`libredgetpu-ros models import DIR`" in text and "looming_64x64_3x3_edgetpu.json" in text
    with pytest.raises(ConfigError, match=r"'colour_red_64x64' is unknown.*did you mean color_red_64x64"):
        load_template("colour_red_64x64")
    with pytest.raises(ConfigError, match=r"'dense_2048' is unknown.*dense_256"):
        resolve_template(2048)
    with pytest.raises(ConfigError, match="catalogue templates: bright_128x128, "):
        resolve_template("zzz")


@pytest.mark.ros
def test_control_and_tracker_configure_fail_with_the_fetch_command(ros_env, robot: Path, capfd,
                                                                   fixtures_dir: Path, tmp_path: Path
                                                                   ) -> None:
    """The nodes as the default configs start them, on a robot without templates: configure fails, the node
    stays unconfigured, and what it logged is the command that fixes it; once the templates are imported
    (what that command's offline form does), the same nodes configure."""
    from libredgetpu_ros.models.store import import_dir
    from libredgetpu_ros.ros.control_node import ControlNode
    from libredgetpu_ros.ros.robotics.tracker_node import TrackerNode
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    context = ros_env.init_rclpy()
    control = ControlNode(context=context, parameter_overrides=[Parameter("template", value=256)])
    tracker = TrackerNode(context=context, parameter_overrides=[
        Parameter("template", value="color_red_64x64"), Parameter("backend", value="cpu")])
    try:
        assert control.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert tracker.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert control._ctl is None and tracker.state_label() == "unconfigured"
    finally:
        control.destroy_node()
        tracker.destroy_node()
    logged = capfd.readouterr().err
    assert "configure failed: template 'dense_256' is not installed" in logged
    assert "`libredgetpu-ros models fetch dense_256`" in logged
    assert "`libredgetpu-ros models fetch color_red_64x64`" in logged
    import_dir(_flat_copy(fixtures_dir, ["dense_256", "color_red_64x64"], tmp_path / "usb"))
    control = ControlNode("control_fixed", context=context,
                          parameter_overrides=[Parameter("template", value=256)])
    tracker = TrackerNode("tracker_fixed", context=context, parameter_overrides=[
        Parameter("template", value="color_red_64x64"), Parameter("backend", value="cpu")])
    try:
        assert control.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert tracker.trigger_configure() == TransitionCallbackReturn.SUCCESS
        # the fixtures are still hidden: the cache is the only place these templates can have come from
        assert control._ctl.describe().startswith("MatMulEngine dense_256")
    finally:
        for node in (control, tracker):
            node.teardown()
            node.destroy_node()
