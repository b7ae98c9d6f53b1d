"""libredgetpu_ros: Edge TPU (and other edge accelerators) perception and control for ROS 2.

Layers (see docs/architecture.md):
  formats/      model file formats (TFLite flatbuffers, DarwiNN executables)   -- no ROS
  edgetpu/      USB transport, chip driver, firmware, execution planner        -- no ROS
  matmul/       MatMulEngine: compiler-free parameter blobs, CPU twin          -- no ROS
  backends/     one small interface: CPU (LiteRT) and Edge TPU backends        -- no ROS
  postprocess/  PoseNet, DeepLabV3, SSD, classification decoders               -- no ROS
  perception/   pre-processing + backend + post-processing pipeline, drawing   -- no ROS
  bags/         offline bag tools built on `rosbags`                           -- no ROS runtime
  ros/          lifecycle nodes, message conversions, bringup (rclpy)
  cli/          the `libredgetpu-ros` command
"""

__version__ = "0.1.0"
