"""The ``libredgetpu-ros robotics`` subcommand registry: one :class:`RoboticsCommand` per module.

``cli/robotics_cmd.py`` (the image modules: spot, pattern, looming, flow, compass) and
``cli/robotics_learning.py`` (embed, reservoir: their own inputs) both register here; ``robotics_cmd`` builds
the parser from :data:`MODULES`. A module of its own so neither command file imports the other's.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RoboticsCommand:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, list[Any]], dict[str, Any]]  # (args, RGB images) -> report
    # True: the command declares all its options and inputs and prints its own output; run(args, []) returns
    # the exit code (embed, reservoir: cli/robotics_learning.py).
    own_inputs: bool = False


MODULES: dict[str, RoboticsCommand] = {}


def register(command: RoboticsCommand) -> None:
    """Add a module subcommand (each command file calls this below its own functions)."""
    MODULES[command.name] = command
