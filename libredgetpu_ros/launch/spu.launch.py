"""SPU lifecycle node (Femtosense), started with the launch system (`make setup` installs it into the venv).

    ros2 launch libredgetpu_ros spu.launch.py        # the design seed's example on the reference runner
    ros2 launch libredgetpu_ros spu.launch.py params_file:=/path/spu.yaml namespace:=audio
    ros2 launch libredgetpu_ros spu.launch.py params_file:=/path/spu.yaml iospec:=/path/model.iospec.yaml
    ros2 launch libredgetpu_ros spu.launch.py strict:=false     # femtorun's rules only (any input order)

Without ``params_file`` the installed ``config/spu.yaml`` runs with the installed example IOSpec and program
(A = B + latchedC). ``iospec`` / ``program`` / ``runner`` / ``strict``, when given, override what the params
file says.
With autostart the launch emits configure, then activate once the node reports ``inactive``; without it:
``ros2 lifecycle set /spu configure``.
"""

from __future__ import annotations

from launch import LaunchContext, LaunchDescription
from launch.substitutions import LaunchConfiguration
from libredgetpu_ros.ros.launching import installed_config, lifecycle_launch


def _parameters(context: LaunchContext) -> list:
    params_file = LaunchConfiguration("params_file").perform(context)
    overrides: dict = {k: LaunchConfiguration(k).perform(context) for k in ("iospec", "program", "runner")}
    overrides = {k: v for k, v in overrides.items() if v}
    strict = LaunchConfiguration("strict").perform(context).strip().lower()
    if strict:  # a bool parameter: the string "false" would be refused by the node's table
        if strict not in ("true", "false"):
            raise ValueError(f"launch argument strict:={strict!r}: expected true or false")
        overrides["strict"] = strict == "true"
    if not params_file:  # the example: absolute paths of the installed files
        params_file = installed_config("spu.yaml")
        overrides.setdefault("iospec", installed_config("spu_add_latched.iospec.yaml"))
        overrides.setdefault("program", installed_config("spu_add_latched.program.yaml"))
    return [params_file, overrides]


def generate_launch_description() -> LaunchDescription:
    return lifecycle_launch("spu_node", {
        "params_file": ("", "node parameters (config/spu.yaml); '' = the installed example"),
        "iospec": ("", "IOSpec YAML (overrides params_file)"),
        "program": ("", "reference runner program (overrides params_file)"),
        "runner": ("", "reference | femtodriver | fqir (overrides params_file)"),
        "strict": ("", "true | false: reject inputs out of a sequence's declared order, the SPU firmware "
                       "rule (overrides params_file; '' = the file's value, true by default)"),
        "namespace": ("", "namespace of the node and topics"),
        "node_name": ("spu", "the node's name (its services and ~/ topics)"),
        "autostart": ("true", "configure and activate at start-up"),
    }, _parameters)
