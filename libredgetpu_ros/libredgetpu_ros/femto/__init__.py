"""Femtosense SPU backend, ROS-free: IOSpec files, the sequence engine, vectors, runners (docs/femto.md)."""

from libredgetpu_ros.femto.engine import SequenceEngine
from libredgetpu_ros.femto.iospec import IOSpec, SequenceSpec, VectorSpec, load_iospec, parse_iospec

__all__ = ["IOSpec", "SequenceEngine", "SequenceSpec", "VectorSpec", "load_iospec", "parse_iospec"]
