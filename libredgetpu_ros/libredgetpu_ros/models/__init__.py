"""Models a robot can get: the pinned catalogue, the verified download cache, config-name resolution.

ROS-free. ``catalogue`` (what, from where, which bytes), ``download`` (resumable, verified, atomic),
``store`` (cache folder, fetch, offline import, ``resolve_model`` / ``resolve_labels``).
"""
