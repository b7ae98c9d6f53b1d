"""Robotics modules on Edge TPU templates (LibrEdgeTPU's design): one file per module with its own math only,
over ``template.py`` (template loading, backend, versioned parameters). See docs/robotics.md."""
