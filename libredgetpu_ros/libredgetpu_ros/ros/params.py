"""Declare a node's parameters once, from one table, and read them back as a typed dataclass.

Every parameter is one ``ParamSpec`` row: name, default (its Python type is the ROS parameter type),
description, optional numeric range or string choices, and when a change takes effect:

- ``runtime``: applied while the node runs (validated in the set-parameters callback);
- ``configure``: read in ``on_configure``; rejected while the node is configured, with a reason that
  says how to apply it (deactivate -> cleanup -> set -> configure);
- ``read_only``: fixed at start-up (ROS descriptor ``read_only``; set it from a params file or launch).

The same table drives the ROS descriptors, the validation of ``SetParameters`` requests, the dataclass the
node works with, and the parameter table in the docs (``markdown_table``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
    SetParametersResult,
)
from rclpy.node import Node
from rclpy.parameter import Parameter

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.textdata import clip, clip_repr

Mutability = Literal["runtime", "configure", "read_only"]
T = TypeVar("T")

_ROS_TYPES: dict[type, int] = {
    bool: ParameterType.PARAMETER_BOOL,
    int: ParameterType.PARAMETER_INTEGER,
    float: ParameterType.PARAMETER_DOUBLE,
    str: ParameterType.PARAMETER_STRING,
}


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: the single source of its default, type, documentation and limits."""

    name: str
    default: bool | int | float | str | tuple[str, ...]
    description: str
    range: tuple[float, float] | None = None
    choices: tuple[str, ...] | None = None
    mutability: Mutability = "configure"

    @property
    def ros_type(self) -> int:
        if isinstance(self.default, tuple):
            return ParameterType.PARAMETER_STRING_ARRAY
        return _ROS_TYPES[type(self.default)]

    def descriptor(self) -> ParameterDescriptor:
        extra = []
        if self.choices:
            extra.append("one of: " + ", ".join(self.choices))
        if self.mutability == "configure":
            extra.append("applied on configure")
        desc = ParameterDescriptor(
            name=self.name,
            type=self.ros_type,
            description=self.description,
            additional_constraints="; ".join(extra),
            read_only=self.mutability == "read_only",
            # Empty strings/lists are legal values; let a params file give an empty list without a type error.
            dynamic_typing=False,
        )
        if self.range is not None:
            lo, hi = self.range
            if isinstance(self.default, int) and not isinstance(self.default, bool):
                desc.integer_range = [IntegerRange(from_value=int(lo), to_value=int(hi), step=1)]
            else:
                desc.floating_point_range = [FloatingPointRange(from_value=float(lo), to_value=float(hi),
                                                                step=0.0)]
        return desc

    def check(self, value: Any) -> str | None:
        """Why ``value`` is not acceptable for this parameter, or None. (Ranges are checked by rclpy too.)"""
        if self.choices is not None and value not in self.choices:
            return f"{self.name}={clip_repr(value)} is not one of {', '.join(self.choices)}"
        if self.range is not None and not isinstance(value, bool) and isinstance(value, int | float):
            lo, hi = self.range
            if not lo <= value <= hi:
                return f"{self.name}={clip_repr(value)} is outside [{lo:g}, {hi:g}]"
        return None


def best_effort_param(topics: str) -> ParamSpec:
    """The ``best_effort`` parameter of a companion-style node (control, reservoir): QoS of ``topics``."""
    return ParamSpec("best_effort", False, f"best-effort QoS for {topics} (reliable otherwise)")


# Every accelerator-backed node's `device`: which accelerator it opens (edgetpu.device.parse_selector),
# checked at configure (a device that does not exist fails it, naming the value and listing what is attached).
DEVICE_PARAM = ParamSpec("device", "", "Edge TPU to use: '' = the first one no other process holds (one this "
                         "process already has open is shared), an index ('0', '1': bus-path order, as "
                         "`libredgetpu-ros devices` lists them) or a USB bus path ('usb:1-2.3'); one that is "
                         "not attached fails configure, listing those that are.")

# Every Edge TPU node's weight on an accelerator shared with other nodes of its process (edgetpu/broker.py:
# its stream's rate_hz), passed where it opens its backend / engine; applied on configure like `device`.
DEVICE_SHARE_PARAM = ParamSpec("device_share_hz", 0.0, "This node's share of an accelerator it shares with "
                               "other nodes of its process, as its rate (a camera node's frame rate, the "
                               "control or reservoir node's state rate): under saturation a 30 Hz node is "
                               "served twice as often as a 15 Hz one; 0: weighted like the highest rate set "
                               "on the device (all 0: equal turns).",
                               range=(0.0, 1000.0))


def share_stream(node: str, what: object) -> str:
    """The name of ``node``'s stream (its fully qualified name) for ``what`` it runs (a template or model:
    a path is shortened to its file name) on an accelerator shared in its process: ``"/robot1/tracker:
    color_red_64x64"``, what the broker and the node's ``shared_stream`` diagnostics show; "" without a node
    (process-bag, the CLI): the broker names it after the model."""
    return f"{node}: {str(what).rstrip('/').rsplit('/', 1)[-1]}" if node else ""


def resolved_topic(resolve: Callable[[str], str], topic: str, what: str, *, service: bool = False) -> str:
    """``topic`` resolved by the node (``node.resolve_topic_name``; ``resolve_service_name`` with
    ``service``), checked as a full ROS topic (service) name; a ConfigError saying ``what`` it is otherwise.
    rclpy refuses a bad name only where it resolves one: when activate subscribes, or in a diagnostics timer
    (an exception there ends the node's process), so configure checks every topic it reads from its
    parameters or files here."""
    from rclpy.exceptions import InvalidServiceNameException, InvalidTopicNameException
    from rclpy.validate_full_topic_name import validate_full_topic_name

    try:
        full = resolve(topic)
        validate_full_topic_name(full, is_service=service)
    except (InvalidTopicNameException, InvalidServiceNameException, RuntimeError) as exc:  # resolve: RCLError
        reason = clip(str(exc).splitlines()[0], 160)  # the rule; rclpy's next lines echo the whole name
        raise ConfigError(f"{what} is not a valid ROS {'service' if service else 'topic'} name ({reason})") \
            from None
    return full


def dense_stream(node: str, template: int | str) -> str:
    """:func:`share_stream` of a MatMul engine on ``template`` (a size N: ``dense_N``, or a path)."""
    return share_stream(node, f"dense_{template}" if isinstance(template, int) else template)


# Every node's /diagnostics period (the camera nodes' too: ros/camera/params.py IMAGE_PARAMS).
DIAGNOSTICS_PERIOD = ParamSpec("diagnostics_period", 1.0, "s between /diagnostics messages",
                               range=(0.05, 60.0))


# Every node's bound on the wait of a deactivate or a teardown for its data-path callback in flight
# (ros/lifecycle.py): a ManagedNode parameter outside the node's own table (MANAGED_NODE_PARAMS below).
DEACTIVATE_TIMEOUT = ParamSpec(
    "deactivate_timeout", 10.0, "s a deactivate, cleanup, shutdown or error processing waits for the "
    "data-path callback in flight (a state, a frame, a sample on the accelerator) to return, logged every "
    "second meanwhile; the node's executor waits with it (no diagnostics, parameter or lifecycle request is "
    "served meanwhile). Past it a deactivate fails: the node stays active (its engine open under the call, "
    "diagnostics ERROR) and may be deactivated again; a teardown goes on without the call (ERROR log and "
    "diagnostics), what it runs on left open, never closed under it; the reservoir node's teardown waits as "
    "long for a running ~/fit it asked to stop",
    range=(0.1, 3600.0), mutability="runtime")


class ParamTable:
    """A node's parameter table bound to the dataclass that holds its values.

    The dataclass must have one field per spec, with the same names.
    """

    def __init__(self, specs: Sequence[ParamSpec], values_type: type[T]) -> None:
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate parameter names in {names}")
        fields = {f.name for f in dataclasses.fields(values_type)}  # type: ignore[arg-type]
        if fields != set(names):
            raise ValueError(f"{values_type.__name__} fields {sorted(fields)} != table {sorted(names)}")
        self.specs: dict[str, ParamSpec] = {s.name: s for s in specs}
        self.values_type = values_type

    def declare(self, node: Node) -> None:
        """Declare every parameter with its descriptor; overrides from params files/launch apply here."""
        node.declare_parameters("", [(s.name, _ros_default(s), s.descriptor()) for s in self.specs.values()])

    def read(self, node: Node) -> Any:
        """The current values as an instance of the values dataclass; ConfigError names a bad value."""
        values: dict[str, Any] = {}
        for spec in self.specs.values():
            value = _from_ros(node.get_parameter(spec.name).value, spec)
            reason = spec.check(value)
            if reason:
                raise ConfigError(f"parameter {reason}")
            values[spec.name] = value
        return self.values_type(**values)

    def validator(self, is_configured: Callable[[], bool]
                  ) -> Callable[[list[Parameter]], SetParametersResult]:
        """A callback for ``add_on_set_parameters_callback`` that enforces choices, ranges and mutability."""

        def validate(params: list[Parameter]) -> SetParametersResult:
            for param in params:
                spec = self.specs.get(param.name)
                if spec is None:
                    continue  # not ours (e.g. use_sim_time)
                reason = spec.check(_from_ros(param.value, spec))
                if reason is None and spec.mutability == "configure" and is_configured():
                    reason = (f"{param.name} is applied on configure: deactivate -> cleanup, set it, "
                              f"then configure -> activate")
                if reason:
                    return SetParametersResult(successful=False, reason=reason)
            return SetParametersResult(successful=True)

        return validate

    def runtime_names(self) -> set[str]:
        return {s.name for s in self.specs.values() if s.mutability == "runtime"}

    def overrides(self, values: dict[str, Any], known: Sequence[str] = ()) -> list[Parameter]:
        """Typed ``Parameter`` list for ``Node(parameter_overrides=...)``; ConfigError on unknown names,
        listing ``known`` (default: this table's)."""
        # repr of what is not a name (a YAML key may be a number): sorted and named, never a TypeError
        unknown = sorted(str(k) if isinstance(k, str) else repr(k) for k in values if k not in self.specs)
        if unknown:
            raise ConfigError(f"unknown parameter(s) {', '.join(unknown)}; known: "
                              f"{', '.join(known or self.specs)}")
        out = []
        for name, value in values.items():
            spec = self.specs[name]
            value = _coerce(value, spec)
            out.append(Parameter(name, Parameter.Type.from_parameter_value(_ros_value(value, spec)),
                                 _ros_value(value, spec)))
        return out

    def markdown_table(self) -> str:
        rows = ["| name | type | default | range / choices | applied | description |",
                "|---|---|---|---|---|---|"]
        for s in self.specs.values():
            limits = (f"[{s.range[0]:g}, {s.range[1]:g}]" if s.range else
                      ", ".join(s.choices) if s.choices else "")
            kind = "string[]" if isinstance(s.default, tuple) else type(s.default).__name__
            rows.append(f"| `{s.name}` | {kind} | `{s.default!r}` | {limits} | {s.mutability} "
                        f"| {s.description} |")
        return "\n".join(rows)

    def defaults(self) -> dict[str, Any]:
        return {s.name: s.default for s in self.specs.values()}


def _ros_default(spec: ParamSpec) -> Any:
    return _ros_value(spec.default, spec)


def _ros_value(value: Any, spec: ParamSpec) -> Any:
    return list(value) if isinstance(spec.default, tuple) else value


def _from_ros(value: Any, spec: ParamSpec) -> Any:
    if isinstance(spec.default, tuple):
        return tuple(value or ())
    return value


def _coerce(value: Any, spec: ParamSpec) -> Any:
    """Accept YAML-typed values (ints for floats, lists for string arrays); ConfigError otherwise."""
    default = spec.default
    if isinstance(default, tuple):
        if isinstance(value, str) or not isinstance(value, Iterable):
            raise ConfigError(f"parameter {spec.name} must be a list of strings, got {clip_repr(value)}")
        return tuple(str(v) for v in value)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"parameter {spec.name} must be true/false, got {clip_repr(value)}")
        return value
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if type(value) is not type(default):
        raise ConfigError(f"parameter {spec.name} must be {type(default).__name__}, got {clip_repr(value)}")
    reason = spec.check(value)
    if reason:
        raise ConfigError(f"parameter {reason}")
    return value


@dataclass(frozen=True)
class ManagedNodeConfig:
    deactivate_timeout: float


# The parameters every lifecycle.ManagedNode declares besides its own table (the same on every node, read by
# the base, not the node): bringup takes them beside the node's table (node_overrides); offline: no meaning.
MANAGED_NODE_PARAMS = ParamTable([DEACTIVATE_TIMEOUT], ManagedNodeConfig)


@dataclass(frozen=True)
class RclpyNodeConfig:
    use_sim_time: bool


# What rclpy itself declares on every node (never declared here): typed for bringup's overrides only.
RCLPY_NODE_PARAMS = ParamTable([ParamSpec(
    "use_sim_time", False, "the node's clock follows /clock (e.g. `libredgetpu-ros replay --clock`) instead "
    "of the system clock", mutability="runtime")], RclpyNodeConfig)

# Every node's parameters beside its own table.
NODE_WIDE_TABLES = (MANAGED_NODE_PARAMS, RCLPY_NODE_PARAMS)


def node_overrides(table: ParamTable, values: dict[str, Any], also: Iterable[str] = ()) -> list[Parameter]:
    """Typed overrides of a node's parameters: its table's and the :data:`NODE_WIDE_TABLES`' (the base's
    ``deactivate_timeout``, rclpy's ``use_sim_time``). A name none knows is a ConfigError listing every
    parameter the node accepts: all those tables' and ``also`` (what the caller takes itself, e.g. bringup's
    ``qos_overrides``)."""
    wide = [{k: v for k, v in values.items() if k in t.specs and k not in table.specs}
            for t in NODE_WIDE_TABLES]
    taken = {k for part in wide for k in part}
    own = {k: v for k, v in values.items() if k not in taken}
    known = list(dict.fromkeys([*table.specs, *(k for t in NODE_WIDE_TABLES for k in t.specs), *also]))
    return table.overrides(own, known) + [p for t, part in zip(NODE_WIDE_TABLES, wide, strict=True)
                                          for p in t.overrides(part)]
