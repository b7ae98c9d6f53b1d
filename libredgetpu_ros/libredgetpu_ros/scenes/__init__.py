"""Scenes with a known answer (ROS-free): a pinhole camera, textured surfaces, motion, sensor effects.

Used by the tests and the benches to measure the robotics modules against the world (docs/scenes.md):
``camera`` (PinholeCamera), ``textures`` (procedural textures, licensed photos split into tuning and
held-out sets), ``render`` (Surface, Backdrop, render), ``sequence`` (Motion, Effects, Frame, Truth,
render_sequence) and ``presets`` (the standard scenes: approach, recede, lateral, static, pan, spot)."""

from libredgetpu_ros.scenes.camera import PinholeCamera
from libredgetpu_ros.scenes.render import Backdrop, Surface, render
from libredgetpu_ros.scenes.sequence import Effects, Frame, Motion, Truth, render_sequence

__all__ = ["Backdrop", "Effects", "Frame", "Motion", "PinholeCamera", "Surface", "Truth", "render",
           "render_sequence"]
