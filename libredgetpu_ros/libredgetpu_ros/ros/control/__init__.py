"""The adaptive control node (``control_node``): parameters, state/weight codecs, the engine side, counters,
and the lifecycle node itself (``node.py``; ``ros/control_node.py`` is its entry point)."""
