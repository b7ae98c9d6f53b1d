"""Trainer node: a ROS Data Source for a Team Tensor worker (``node.py``) and the asyncio session it drives
(``session.py``). See docs/teamtensor.md."""
