"""A camera driver as vendors ship them, for test_image_qos (run as a script in its own process): rgb8
``sensor_msgs/Image`` frames of WIDTHxHEIGHT at RATE Hz on ``image_raw`` with a KEEP_LAST 10 profile of the
given reliability (``reliable`` is the system default QoS drivers publish with), and whatever DDS settings
the environment gives (the test gives none: Fast DDS's default transports).

    python _camera_publisher.py RELIABILITY WIDTH HEIGHT RATE COUNT MATCH_TIMEOUT_S

Waits up to MATCH_TIMEOUT_S for a matched subscription (then 2 s more, so a subscriber that re-chooses its
QoS on a new publisher has done so), publishes COUNT frames stamped 1..COUNT, prints ``published N``.
"""

from __future__ import annotations

import sys
import time


def main() -> int:
    import numpy as np
    import rclpy
    from rclpy.qos import QoSHistoryPolicy, QoSProfile, QoSReliabilityPolicy
    from sensor_msgs.msg import Image

    reliability, width, height, rate, count, match_timeout = (
        sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]),
        float(sys.argv[6]))
    policy = {"reliable": QoSReliabilityPolicy.RELIABLE, "best_effort": QoSReliabilityPolicy.BEST_EFFORT}
    rclpy.init()
    node = rclpy.create_node("vendor_camera")
    pub = node.create_publisher(Image, "image_raw", QoSProfile(history=QoSHistoryPolicy.KEEP_LAST, depth=10,
                                                                reliability=policy[reliability]))
    end = time.monotonic() + match_timeout
    while pub.get_subscription_count() < 1 and time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
    matched = pub.get_subscription_count()
    time.sleep(2.0)
    pixels = np.random.default_rng(7).integers(0, 256, size=height * width * 3, dtype=np.uint8).tobytes()
    msg = Image(height=height, width=width, encoding="rgb8", step=width * 3, data=pixels)
    msg.header.frame_id = "vendor_camera_optical_frame"
    start = time.monotonic()
    for i in range(1, count + 1):
        msg.header.stamp.sec = i
        pub.publish(msg)
        time.sleep(max(0.0, start + i / rate - time.monotonic()))
    time.sleep(1.0)  # reliable: let the reader fetch what it still misses
    print(f"published {count} matched {matched}", flush=True)
    node.destroy_node()
    rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
