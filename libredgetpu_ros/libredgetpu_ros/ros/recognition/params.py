"""The recognition node's parameters (its own merged with the camera base's image parameters, one table)."""

from __future__ import annotations

from dataclasses import dataclass

from libredgetpu_ros.backend_kinds import BACKEND_KINDS
from libredgetpu_ros.ros.camera import ImageParams, camera_param_table
from libredgetpu_ros.ros.params import DEVICE_PARAM, DEVICE_SHARE_PARAM, ParamSpec


@dataclass(frozen=True)
class RecognitionParams(ImageParams):
    model: str
    backend: str
    device: str
    device_share_hz: float
    template: int
    database: str
    top_k: int
    open_set: bool
    open_set_margin: float
    min_score: float


RECOGNITION_PARAMS = camera_param_table([
    ParamSpec("model", "", "Embedding extractor: a compiled *_edgetpu.tflite (its CPU twin beside it); "
              "empty = the catalogue's MobileNet v1 extractor (1024-d; models fetch "
              "mobilenet_v1_1.0_224_quant_embedding_extractor)."),
    ParamSpec("backend", "auto", "auto prefers an attached Edge TPU (extractor and database); cpu runs the "
              "CPU twins.", choices=BACKEND_KINDS),
    DEVICE_PARAM,
    DEVICE_SHARE_PARAM,
    ParamSpec("template", 1024, "Dense(N) template holding the database: N entries of 1024-d at N=1024, "
              "N*N/1024 below.", range=(64, 16384)),
    ParamSpec("database", "", "Database file (from ~/save or `robotics embed --save`) loaded at configure; "
              "empty = start empty."),
    ParamSpec("top_k", 1, "Labels per frame in the Classification (best first).", range=(1, 100),
              mutability="runtime"),
    ParamSpec("open_set", True, "Open set: a frame whose best cosine does not clear the threshold calibrated "
              "from the enrolled classes is classified 'unknown'. false: the closed set (always the nearest "
              "label scoring >= min_score).", mutability="runtime"),
    ParamSpec("open_set_margin", 0.2, "Open-set threshold = background + margin * (1 - background), "
              "background = the highest cosine between entries of different labels (0.5 with one label).",
              range=(0.0, 1.0), mutability="runtime"),
    ParamSpec("min_score", 0.0, "Labels scoring below this cosine are never reported (a floor under the "
              "open-set threshold; the only filter of the closed set).", range=(-1.0, 1.0),
              mutability="runtime"),
], RecognitionParams)
