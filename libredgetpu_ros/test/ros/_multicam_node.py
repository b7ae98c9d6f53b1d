"""Node process of test_multi_camera: ``libredgetpu-ros bringup`` of an ``image_topics`` entry
(one perception node per camera, one process) on one simulated accelerator: the real driver over the
recording transport with the timing model (``edgetpu/simulated.py``; no device here). The only test seam: the
nodes' ``pipeline_config`` gets the process's broker of that accelerator instead of a device name, as
``EdgeTpuBackend`` would open it, at the first configure. The accelerator fails once, at the end of its
``MULTICAM_FAULT_AT``-th executable (0: never).

    _multicam_node.py BRINGUP_YAML
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    from libredgetpu_ros.cli.main import main as cli
    from libredgetpu_ros.edgetpu import broker as brokers
    from libredgetpu_ros.edgetpu import registers as r
    from libredgetpu_ros.edgetpu.device import EdgeTpuDevice
    from libredgetpu_ros.edgetpu.simulated import Timed, TimingModel, ZerosAccelerator
    from libredgetpu_ros.edgetpu.transport import RecordingTransport
    from libredgetpu_ros.errors import DeviceLostError
    from libredgetpu_ros.ros.perception import processor as node_module  # where the pipeline is opened

    fault_at = int(os.environ.get("MULTICAM_FAULT_AT", "0"))
    runs = [0]

    class FailsOnce(ZerosAccelerator):
        def __call__(self, call):
            if call.kind == "bulk_read" and call.endpoint == r.EP_EVENT_IN:
                runs[0] += 1
                if runs[0] == fault_at:
                    raise DeviceLostError("simulated unplug at the end of an executable")
            return super().__call__(call)

    def opener() -> EdgeTpuDevice:
        transport = RecordingTransport(Timed(FailsOnce(), TimingModel(run_s=0.005)), bus_path="multicam-sim",
                                       keep_payloads=False)
        return EdgeTpuDevice.open(transport_factory=lambda: transport)

    held: list = []  # the process's reference, taken at the first configure (as a node's own open would be)
    named_config = node_module.pipeline_config

    def shared_config(params):
        config = named_config(params)
        if not held:  # another process holding the device: the DeviceError naming it fails this configure
            held.append(brokers.shared("multicam-sim", opener))
        config.device = held[0]
        return config

    node_module.pipeline_config = shared_config
    try:
        return cli(["bringup", *argv])
    finally:
        for broker in held:
            broker.release()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
