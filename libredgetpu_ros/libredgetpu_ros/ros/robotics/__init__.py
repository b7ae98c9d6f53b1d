"""Robotics nodes over ``robotics/``: ``tracker_node`` (spot / pattern servo tracking) and ``looming_node``
(collision warning), both on the camera-node base (``ros/camera/``); ``params`` and ``messages`` are theirs.
"""
