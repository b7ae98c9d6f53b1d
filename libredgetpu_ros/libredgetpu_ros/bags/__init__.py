"""rosbag2 without a ROS install (``rosbags``): our typestore, bag I/O, camera-stream bags."""
