"""Ingenic Magik ``.mgk`` models (T31/T41 NNA): ELF reading, layer and scale tables, weight layouts.

``load_mgk(path | bytes, table=None) -> MgkModel``; ``load_table(yaml_path)`` for a user's offset table;
the pure layout functions are in :mod:`libredgetpu_ros.ingenic.layouts`. See docs/ingenic.md.
"""

from libredgetpu_ros.ingenic.enums import ENUM_TABLES, EnumObservation, enum_name, fit_enum_tables
from libredgetpu_ros.ingenic.model import LayerEntry, MgkModel, load_mgk
from libredgetpu_ros.ingenic.table import OffsetTable, load_table, parse_table

__all__ = ["ENUM_TABLES", "EnumObservation", "LayerEntry", "MgkModel", "OffsetTable", "enum_name",
           "fit_enum_tables", "load_mgk", "load_table", "parse_table"]
