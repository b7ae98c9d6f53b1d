"""The pinned model catalogue: what `libredgetpu-ros models` can fetch, from where, and the exact bytes.

Each entry is an Edge TPU model the perception pipeline supports, its CPU twin (same network compiled for
the CPU, used by the ``cpu`` backend and by ``auto`` without an accelerator) and, where the task has one,
its label file. URLs are Google's official repositories (google-coral/test_data, project-posenet, edgetpu)
at their default branch (files removed upstream since: at the last commit that had them); the SHA-256 pins
the exact file (the fixtures' SHA256SUMS, checked against those sources), so a changed upstream file is
refused, never used. ROS-free: no rclpy here.

Templates (Dense(N), tracker, looming, optical flow, the embedding extractor) are entries too, listed in
models/template_catalogue.py. Not in the catalogue: the two-segment SSD pipeline (google-coral/test_data
``pipeline/``; no CPU twin exists, so it needs an accelerator: give both segments' paths).
"""

from __future__ import annotations

from libredgetpu_ros.models.entry import ModelEntry, ModelFile
from libredgetpu_ros.models.template_catalogue import TEMPLATES

_TEST_DATA = "https://raw.githubusercontent.com/google-coral/test_data/master/"
_POSENET = "https://raw.githubusercontent.com/google-coral/project-posenet/master/models/mobilenet/"
_EDGETPU = "https://raw.githubusercontent.com/google-coral/edgetpu/master/test_data/"
# The single-file SSD MobileNet v2 pair (2019 build) was removed from google-coral/edgetpu in 2020: its last
# tree holding it (git blob ids equal to the pinned bytes' files).
_EDGETPU_2019 = ("https://raw.githubusercontent.com/google-coral/edgetpu/"
                 "75e675633c2110a991426c8afa64f122b16ac372/test_data/")


def _f(base: str, name: str, sha256: str) -> ModelFile:
    return ModelFile(name, base + name, sha256)


_IMAGENET = _f(_TEST_DATA, "imagenet_labels.txt",
               "b8aaeb5630c62626a7d124a05c0e14230a7ffdd2136a31d0190a4fb71c1d82f1")

CATALOGUE: dict[str, ModelEntry] = {e.name: e for e in (
    ModelEntry(
        "posenet_mobilenet_v1_075_481_641", "pose",
        "PoseNet MobileNet v1 0.75, 481x641 input, with the PosenetDecoderOp (17 keypoints per person)",
        _f(_POSENET, "posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite",
           "73837902b843122386133a517a732b5c3887cfdd21fa6ae4ac1db4b61da28318"),
        _f(_POSENET, "posenet_mobilenet_v1_075_481_641_quant_decoder.tflite",
           "29c142d62cd1f4f562bcb423a88b85c67db26aa2c057c4a3ce519bc397a6f7d4"),
    ),
    ModelEntry(
        "deeplabv3_mnv2_pascal", "segment",
        "DeepLab v3 MobileNet v2, 513x513, PASCAL VOC (21 classes)",
        _f(_TEST_DATA, "deeplabv3_mnv2_pascal_quant_edgetpu.tflite",
           "4d899a809ac1d7032880392ef09ee1a891205ecaae2cde288fd3fe7f7dda966e"),
        _f(_TEST_DATA, "deeplabv3_mnv2_pascal_quant.tflite",
           "350af47fd346ea6d74b58833a351f583ba860e9806ec5bd292ff8d8f1f249398"),
        _f(_TEST_DATA, "pascal_voc_segmentation_labels.txt",
           "7337a2b06728385fb3e1106416c67bfddf69628598b1f2f0db6a63cd63fb6b1e"),
    ),
    ModelEntry(
        "mobilenet_v1_0.25_128", "classify",
        "MobileNet v1 0.25, 128x128, ImageNet (1001 classes); small and fast",
        _f(_TEST_DATA, "mobilenet_v1_0.25_128_quant_edgetpu.tflite",
           "a4cb1e493346542248687939fbd7421ab92d74c58b1f0a0018b8f1bdddfcef7e"),
        _f(_TEST_DATA, "mobilenet_v1_0.25_128_quant.tflite",
           "cb273c23ee76374b05b9583177e28aa19744858a7679c56a250e83d0333da785"),
        _IMAGENET,
    ),
    ModelEntry(
        "mobilenet_v2_1.0_224", "classify",
        "MobileNet v2 1.0, 224x224, ImageNet (1001 classes)",
        _f(_EDGETPU, "mobilenet_v2_1.0_224_quant_edgetpu.tflite",
           "a20b5112542b2e14e46a30c365ba03f25deb1c81b9ea42ec7b7dc2a59620f267"),
        _f(_EDGETPU, "mobilenet_v2_1.0_224_quant.tflite",
           "51e8256b05665529f8836fe6e8eeed41b2fc75a900d8eebda338d70a6726f8da"),
        _IMAGENET,
    ),
    ModelEntry(
        "ssd_mobilenet_v2_coco", "detect",
        "SSD MobileNet v2, 300x300, COCO (90 classes), up to 20 boxes; box decoding + NMS on the CPU",
        _f(_EDGETPU_2019, "mobilenet_ssd_v2_coco_quant_postprocess_edgetpu.tflite",
           "1df6f563746346d656c58aa2ae801b32f2a29e4e4adee46a65aeac6decc5f887"),
        _f(_EDGETPU_2019, "mobilenet_ssd_v2_coco_quant_postprocess.tflite",
           "7046f31a72ec0045a57b94199144c96cf5840c7dc106b808b64a1ed5559aa0cd"),
        # upstream's coco_labels.txt of that tree ("id  label", 80 lines), cached under its own name: the
        # 90-line coco_labels.txt of google-coral/test_data is another file
        ModelFile("coco_labels_edgetpu_2019.txt", _EDGETPU_2019 + "coco_labels.txt",
                  "93f235896748537fc71325a070ee32e9a0afda2481ceb943559325619763fa6d"),
    ),
    *TEMPLATES,
)}
