"""The DDS floor under the perception node: a bare rclpy node that answers every camera frame with an empty
result message carrying the frame's header, and does nothing else.

    python bench/_echo_node.py --ros-args -r __node:=NAME     (started by bench_perception_node.py --echo)

It reads ``image_raw`` with the QoS the perception node subscribes with for a best-effort camera and
publishes an empty ``vision_msgs/Classification`` on ``classification`` with the node's result QoS, from a
``SingleThreadedExecutor`` on the main thread with the same allocator setting as the node: the cheapest way
rclpy can turn a full image into a result, so publish -> result of this node is what any Python node pays
before doing any work.
"""

from __future__ import annotations

import sys


def main() -> int:
    from libredgetpu_ros.ros.memory import retain_large_allocations

    retain_large_allocations()  # as the perception node's main() does, before rclpy allocates
    import rclpy
    from libredgetpu_ros.ros.camera.qos import image_qos
    from libredgetpu_ros.ros.perception_node import RESULT_QOS
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from sensor_msgs.msg import Image
    from vision_msgs.msg import Classification

    rclpy.init(args=sys.argv)
    node = rclpy.create_node("echo", enable_rosout=False, start_parameter_services=False)
    publisher = node.create_publisher(Classification, "classification", RESULT_QOS)
    result = Classification()

    def on_image(msg: Image) -> None:
        result.header = msg.header
        publisher.publish(result)

    node.create_subscription(Image, "image_raw", on_image, image_qos("best_effort"))
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
