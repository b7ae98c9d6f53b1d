"""rviz2 configs that follow the launch: the shipped ``share/libredgetpu_ros/rviz/*.rviz`` name each display's
topic relative to the node (``markers``, ``annotated``), the way the node publishes it; ``rviz:=true`` writes
a copy with every relative topic resolved under the launch's ``namespace`` (``/cam1/markers``), so rviz2 shows
the node that launch started. Absolute topics in a config are left as written (a user's fixed choice);
private ``~/`` names are not used by our nodes' outputs and are refused. The node's input (``image_raw``,
e.g. under a Camera display) follows the launch's remapping (``image:=``) as the node's subscription does.
Run standalone (``rviz2 -d
share/.../perception.rviz``), rviz2 resolves the relative names in its own root namespace: ``/markers``.

ROS-free apart from where it is used (``ros/launching.py``); every file is written through ``atomicio``.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from libredgetpu_ros.atomicio import atomic_write_text
from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.textdata import clip, load_yaml_file


def displays(config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every display of an rviz config, those inside display groups included."""
    stack = list(reversed(config.get("Visualization Manager", {}).get("Displays") or []))
    while stack:
        display = stack.pop()
        if not isinstance(display, dict):
            continue
        yield display
        stack.extend(reversed(display.get("Displays") or []))


def topic_displays(config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The displays that subscribe to a topic (a ``Topic`` map with a ``Value``)."""
    for display in displays(config):
        topic = display.get("Topic")
        if isinstance(topic, dict) and isinstance(topic.get("Value"), str):
            yield display


def resolve(topic: str, namespace: str) -> str:
    """A config's topic as the node in ``namespace`` publishes it: relative names under the namespace."""
    if topic.startswith("/"):
        return topic
    if topic.startswith("~"):
        raise ConfigError(f"rviz config topic {clip(topic)!r}: private names are not node outputs here")
    parts = [p for p in namespace.strip().split("/") if p]
    return "/" + "/".join([*parts, topic])


def namespaced(config: dict[str, Any], namespace: str,
               remappings: dict[str, str] | None = None) -> dict[str, Any]:
    """A copy of ``config`` whose display topics are remapped (``remappings``: the node's, by the name in
    the config) and then resolved under ``namespace``."""
    out = copy.deepcopy(config)
    remappings = {k: v for k, v in (remappings or {}).items() if v}
    for display in topic_displays(out):
        topic = display["Topic"]["Value"]
        display["Topic"]["Value"] = resolve(remappings.get(topic, topic), namespace)
    return out


def write_namespaced(source: str | Path, namespace: str, folder: str | Path | None = None,
                     remappings: dict[str, str] | None = None) -> Path:
    """``source`` with its topics remapped and resolved under ``namespace`` (:func:`namespaced`), written
    to ``folder`` (default: a new temporary folder) under the source's file name; returns the path."""
    source = Path(source)
    config = load_yaml_file(source, "rviz config")
    if not isinstance(config, dict):
        raise ConfigError(f"rviz config {clip(source)}: not a YAML map")
    target = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="libredgetpu_ros_rviz_"))
    path = target / source.name
    atomic_write_text(path, yaml.safe_dump(namespaced(config, namespace, remappings), sort_keys=False))
    return path
