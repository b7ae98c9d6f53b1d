"""The two enum tables in circulation for Magik's DataFormat / DataType, and which one observed values fit.

- ``seed``: the design seed's table, said to come from ``uranus_common_type.h`` (NHWC = 0, NMHWSOIB2 = 3,
  FP32 = 0, UINT8 = 11, INT8 = 12).
- ``venus``: Ingenic's Venus inference-kit header ``common/common_type.h`` (``enum class DataFormat`` /
  ``DataType`` in namespace ``magik::venus``; NHWC = 1, NMHWSOIB2 = 4, FP32 = 1, UINT8 = 6, INT8 = 7).

Neither table is known to be the one a given ``.mgk`` was written with; :func:`fit_enum_tables` says which
one a set of (name, value) observations is consistent with.
"""

from __future__ import annotations

from dataclasses import dataclass

ENUM_TABLES: dict[str, dict[str, dict[str, int]]] = {
    "seed": {
        "format": {"NHWC": 0, "NDHWC32": 1, "HWIO": 2, "NMHWSOIB2": 3, "NMC32": 4, "D1": 5, "NV12": 6,
                   "OHWI": 7, "NCHW": 8},
        "dtype": {"FP32": 0, "UINT8": 11, "INT8": 12},
    },
    "venus": {
        "format": {"NONE": -1, "AUTO": 0, "NHWC": 1, "NDHWC32": 2, "HWIO": 3, "NMHWSOIB2": 4, "NV12": 5,
                   "OHWI": 6, "NCHW": 7},
        "dtype": {"NONE": -1, "AUTO": 0, "FP32": 1, "UINT32": 2, "INT32": 3, "UINT16": 4, "INT16": 5,
                  "UINT8": 6, "INT8": 7, "UINT6B": 8, "UINT6BP": 9, "UINT4B": 10, "UINT2B": 11, "UINT10": 12,
                  "INT10": 13, "UINT12": 14, "INT12": 15, "UINT14": 16, "INT14": 17, "BOOL": 18},
    },
}


@dataclass(frozen=True)
class EnumObservation:
    kind: str       # "format" or "dtype"
    name: str       # what the value should mean, e.g. "NMHWSOIB2" or "INT8"
    value: int      # what the file (or the user's table) says
    where: str      # e.g. "layer_4_QuantizeFeature"


def enum_name(table: str, kind: str, value: int) -> str | None:
    """The name ``value`` has in ``table`` ("seed" or "venus"), or None when that table has no such value."""
    return next((n for n, v in ENUM_TABLES[table][kind].items() if v == value), None)


def fit_enum_tables(observations: list[EnumObservation]) -> dict[str, dict]:
    """Per table: ``verdict`` ("consistent" | "inconsistent" | "no evidence") and the contradicting
    observations. An observation whose name a table does not define counts neither for nor against it."""
    result = {}
    for table, kinds in ENUM_TABLES.items():
        checked, conflicts = 0, []
        for obs in observations:
            expected = kinds[obs.kind].get(obs.name)
            if expected is None:
                continue
            checked += 1
            if expected != obs.value:
                meaning = enum_name(table, obs.kind, obs.value) or "undefined"
                conflicts.append(f"{obs.where}: {obs.kind} {obs.name} is {expected} in this table, "
                                 f"found {obs.value} ({meaning})")
        verdict = "no evidence" if not checked else ("inconsistent" if conflicts else "consistent")
        result[table] = {"verdict": verdict, "checked": checked, "conflicts": conflicts}
    return result
