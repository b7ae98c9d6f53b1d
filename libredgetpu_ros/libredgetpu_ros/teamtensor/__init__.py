"""Team Tensor worker protocol over UDP (design seed 004): codec, Data Source client, software worker.

ROS-free. ``wire`` holds the constants and the one setting (:class:`WireFormat`) for what the seed leaves
open; ``tensors`` and ``model`` serialize tensors and model descriptors; ``packets`` every packet;
``datagrams`` the integrity trailer (session, request id, CRC-32 or HMAC), fragments and reassembly;
``sessions`` the worker's one Data Source; ``nn`` the NumPy training and its memory budget; ``worker`` the
board side; ``source`` the Data Source. See docs/teamtensor.md.
"""

from libredgetpu_ros.teamtensor.model import ModelSpec, conv2d, linear, plain
from libredgetpu_ros.teamtensor.packets import Refused
from libredgetpu_ros.teamtensor.source import DataSource
from libredgetpu_ros.teamtensor.wire import DEFAULT_WIRE, LayerCode, Metric, Refusal, WireFormat
from libredgetpu_ros.teamtensor.worker import WorkerConfig, WorkerCore, serve

__all__ = ["DEFAULT_WIRE", "DataSource", "LayerCode", "Metric", "ModelSpec", "Refusal", "Refused",
           "WireFormat", "WorkerConfig", "WorkerCore", "conv2d", "linear", "plain", "serve"]
