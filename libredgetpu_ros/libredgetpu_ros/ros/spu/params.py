"""Parameters of the SPU node, declared once from this table (see ros/params.py, docs/femto.md).

Latched inputs add one parameter each at configure, ``latched.<varname>`` (a double array of the input's
length, 0 by default): they can be set at any time, like the input's transient-local topic.
"""

from __future__ import annotations

from dataclasses import dataclass

from libredgetpu_ros.femto.runner import RUNNERS
from libredgetpu_ros.ros.params import DIAGNOSTICS_PERIOD, ParamSpec, ParamTable

LATCHED_PREFIX = "latched."


@dataclass(frozen=True)
class SpuConfig:
    iospec: str
    runner: str
    program: str
    femtofile: str
    platform: str
    hardware_address: str
    fqir: str
    strict: bool
    qos_depth: int
    diagnostics_period: float

    def runner_options(self) -> dict:
        """Constructor options of the chosen runner."""
        if self.runner == "reference":
            return {"program": self.program}
        if self.runner == "femtodriver":
            return {"femtofile": self.femtofile, "platform": self.platform,
                    "hardware_address": self.hardware_address or None}
        return {"fqir": self.fqir}


PARAM_TABLE = ParamTable([
    ParamSpec("iospec", "", "IOSpec YAML of the SPU program (written by fmot / femtorun / femtodriver)"),
    ParamSpec("runner", "reference", "which runner computes the outputs", choices=tuple(sorted(RUNNERS))),
    ParamSpec("program", "", "reference runner: affine program YAML (docs/femto.md)"),
    ParamSpec("femtofile", "", "femtodriver runner: the femtofile compiled for the SPU"),
    ParamSpec("platform", "evk2", "femtodriver runner: board", choices=("evk2", "zcu104", "redis")),
    ParamSpec("hardware_address", "", "femtodriver runner: EVK2 serial / board host; '' = the first"),
    ParamSpec("fqir", "", "fqir runner: fmot FQIR graph pickle"),
    ParamSpec("strict", True, "reject inputs out of the sequence's declared order (SPU firmware rule)"),
    ParamSpec("qos_depth", 10, "queue depth of streaming input and output topics", range=(1, 1000)),
    DIAGNOSTICS_PERIOD,
], SpuConfig)
