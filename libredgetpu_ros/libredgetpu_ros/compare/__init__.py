"""Comparing two runs of process-bag(s): per message type differences (``messages``), runs paired bag by
bag and message by message (``runs``), and the HTML report (``report``). ROS-free (rosbags decodes)."""
