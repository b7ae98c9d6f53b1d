"""Several cameras in one bringup entry: ``image_topics: [...]`` expanded into one camera node per topic.

    - type: perception
      name: perception
      image_topics:
        - /front/image_raw                                        # outputs under /front
        - {topic: /rear/image_raw, image_reliability: best_effort} # this stream's own QoS choice
        - {topic: /wrist/color/image_raw, namespace: wrist, transport: compressed}
      parameters: {model: mobilenet_v1_0.25_128, backend: auto}   # one model, shared by every stream

Each topic (a relative one taken in the entry's ``namespace``) becomes the node ``name`` in a namespace of
its own: the topic's namespace (``/front`` for ``/front/image_raw``), or the item's ``namespace`` (a relative
one under the entry's), reading that topic (``input_topic``), with the entry's parameters plus the item's
other keys as its own (``image_reliability``, ``transport``, ``camera_info_topic``...). Its results,
``~/timing`` and diagnostics are its own; the nodes run in one process, so they share one accelerator
(``edgetpu/broker.py``). ROS-free: used by ``bringup.load_config`` (no ROS import here: bag tools read
bringup files too).
"""

from __future__ import annotations

import re
from typing import Any

from libredgetpu_ros.errors import ConfigError

# node types that read camera images (ros/camera/): the ones image_topics applies to
CAMERA_TYPES = ("perception", "tracker", "looming", "flow", "recognition")
MAX_TOPICS = 16
# A ROS name as configs give them (rcl's token rule): tokens of letters, digits and "_", none starting with a
# digit, joined by single "/"s, after a leading "" (relative), "/" (absolute) or, in a remapping, "~/" (the
# node's private namespace). Namespaces of camera streams start every token with a letter.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:/[A-Za-z_][A-Za-z0-9_]*)*")
_LETTER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*(?:/[A-Za-z][A-Za-z0-9_]*)*")
TOPIC_LEADS = ("", "/")
# rcl's remapping lexer (rcl/src/rcl/lexer.c) knows "~" only as "~/": "~foo" and a lone "~" are no rule.
REMAP_LEADS = ("", "/", "~/")


def is_ros_name(text: object, leads: tuple[str, ...] = TOPIC_LEADS, *, letter_first: bool = False) -> bool:
    """``text`` is a ROS name (above) after one of ``leads``; ``letter_first``: every token starts with a
    letter."""
    if not isinstance(text, str):
        return False
    name = _LETTER_NAME if letter_first else _NAME
    return any(text.startswith(lead) and name.fullmatch(text, len(lead)) for lead in leads)


def is_remap_name(text: object) -> bool:
    """``text`` is a name rcl takes on either side of a ``-r from:=to`` topic or service remapping: a ROS name
    after "", "/" or "~/" with no "__" (rcl's lexer reads "__" as the start of ``__node`` / ``__ns``, which
    rename the node instead, and ends a token before any other "__": ``a__b`` is no rule)."""
    return is_ros_name(text, REMAP_LEADS) and "__" not in text


def _item(value: Any, entry_namespace: str, where: str) -> tuple[str, str, dict[str, Any]]:
    """(topic, the node's absolute namespace, parameter overrides) of one ``image_topics`` item."""
    if isinstance(value, str):
        value = {"topic": value}
    if not isinstance(value, dict) or not isinstance(value.get("topic"), str):
        raise ConfigError(f"{where}: expected a topic name or a mapping with 'topic', got {value!r}")
    topic = value["topic"].strip()
    if not is_ros_name(topic):
        raise ConfigError(f"{where}: topic {topic!r} is not a ROS topic name")
    if not topic.startswith("/"):  # relative: in the entry's namespace (the node's own would nest it)
        topic = "/" + "/".join(p for p in (entry_namespace.strip("/"), topic) if p)
    given = str(value.get("namespace", "") or "")
    if given:  # relative: under the entry's namespace; absolute: as given
        namespace = given.strip("/") if given.startswith("/") else "/".join(
            p for p in (entry_namespace.strip("/"), given.strip("/")) if p)
    else:  # the camera's own namespace: where its topic is
        parent = topic.strip("/").rsplit("/", 1)
        namespace = parent[0] if len(parent) == 2 else ""
    if not is_ros_name(namespace, ("",), letter_first=True):
        raise ConfigError(f"{where}: topic {topic!r} needs a namespace of its own (give 'namespace:'); got "
                          f"{namespace!r}")
    overrides = {str(k): v for k, v in value.items() if k not in ("topic", "namespace")}
    if "input_topic" in overrides:
        raise ConfigError(f"{where}: give the topic as 'topic', not input_topic")
    return topic, "/" + namespace, overrides


def expand_image_topics(kind: str, namespace: str, params: dict[str, Any], image_topics: Any,
                        where: str) -> list[tuple[str, dict[str, Any]]]:
    """(namespace, parameters) of the node each topic gets; ConfigError names the entry and the item."""
    if kind not in CAMERA_TYPES:
        raise ConfigError(f"{where}: image_topics applies to camera nodes ({', '.join(CAMERA_TYPES)}), not "
                          f"{kind!r}")
    if not isinstance(image_topics, list) or not image_topics:
        raise ConfigError(f"{where}: image_topics must be a non-empty list, got {image_topics!r}")
    if len(image_topics) > MAX_TOPICS:
        raise ConfigError(f"{where}: {len(image_topics)} image_topics; at most {MAX_TOPICS} per entry")
    if "input_topic" in params:
        raise ConfigError(f"{where}: with image_topics, leave input_topic out of parameters")
    out: list[tuple[str, dict[str, Any]]] = []
    seen: dict[str, str] = {}
    for i, value in enumerate(image_topics):
        topic, full, overrides = _item(value, namespace, f"{where}, image_topics[{i}]")
        if full in seen:
            raise ConfigError(f"{where}: {seen[full]} and {topic} would both publish under {full}; give one "
                              f"a 'namespace:'")
        seen[full] = topic
        out.append((full, {**params, **overrides, "input_topic": topic}))
    return out
