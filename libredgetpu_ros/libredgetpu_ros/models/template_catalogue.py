"""Catalogue entries for the templates the robotics and control modules run (`models fetch NAME`).

A template ``NAME`` is three files: ``NAME_edgetpu.tflite`` (compiled), ``NAME.tflite`` (its int8 twin, the
CPU backend's model) and ``NAME_edgetpu.json`` (LibrEdgeTPU's sidecar). They come from
ricardodeazambuja/LibrEdgeTPU (Apache-2.0) at a pinned commit, so a URL always names the same bytes; each
SHA-256 is the shared fixtures' file, checked equal to that commit's blob. The embedding extractor (the
recognition node's default model) is Google's, from google-coral/edgetpu ``test_data``; it has no sidecar.

The pattern tracker's entries have no compiled model (none is pinned: the fixtures hold none, so its twin
runs on the CPU; ``edgetpu`` is None). Not here: Dense(N) sizes other than 256/512/1024
(``libredgetpu-ros template-gen`` makes them locally). ROS-free.
"""

from __future__ import annotations

from libredgetpu_ros.models.entry import ModelEntry, ModelFile

LIBREDGETPU_COMMIT = "be71d6de166d9c13bd221117bebb1934446fd10f"
_UPSTREAM = f"https://raw.githubusercontent.com/ricardodeazambuja/LibrEdgeTPU/{LIBREDGETPU_COMMIT}/libredgetpu/"
_EDGETPU = "https://raw.githubusercontent.com/google-coral/edgetpu/master/test_data/"

# family: (upstream folder, catalogue task, what the family's templates are for)
DENSE = ("templates/", "dense", "Dense(N) MatMul template (control node, recognition database)")
TRACKER = ("tracker/templates/", "tracker", "spot tracker template (bright spot or colour blob)")
LOOMING = ("looming/templates/", "looming", "looming (approach) detector template")
FLOW = ("optical_flow/templates/", "flow", "optical-flow Gabor template")
PATTERN = ("pattern/templates/", "pattern", "pattern tracker template (twin and sidecar; no compiled model)")


def _t(family: tuple[str, str, str], name: str, compiled: str | None, twin: str, sidecar: str) -> ModelEntry:
    folder, task, what = family
    base = _UPSTREAM + folder

    def f(suffix: str, sha256: str) -> ModelFile:
        return ModelFile(name + suffix, base + name + suffix, sha256)

    return ModelEntry(name, task, what, f("_edgetpu.tflite", compiled) if compiled else None,
                      f(".tflite", twin), sidecar=f("_edgetpu.json", sidecar))


EXTRACTOR = "mobilenet_v1_1.0_224_quant_embedding_extractor"

TEMPLATES: tuple[ModelEntry, ...] = (
    _t(DENSE, "dense_256",
       "145e02a22b0000b5844882d07442dff8e28c02afc17443a82758a31dd5c1f7db",
       "73fcdbe9633027647a6661a22a3e1be3d33cb95079fbdc1975ef0be0ae3555a1",
       "3c2c9d81da695bf315c57543a89d41bdc29ed449ae982c073c9ce4ca049cbbfe"),
    _t(DENSE, "dense_512",
       "fa097c1aa7e4dedae53d1e682899393865fb810c354b3c01b314d6e02938380d",
       "ff0cda0a127cf705fab6d3be5542f2be664acd6bcd89ddac7825baa9787290b2",
       "ad1bc4bac3a3465386fc2683d8e8efd2f906add3d28bf257fcad6f77cd70f653"),
    _t(DENSE, "dense_1024",
       "5049cc0b34f77c97df480d4f7d51cb50342edfe83dd3b0b3c013d85ee4ac6c74",
       "64a0c5e623186c3d1dfea99d96e1112b9f859d8e782f8d5feb07c554901c9889",
       "ee4805c2119e5fd0ae27b4f1552d4628fd1d02907c90debe86ef5150bb786bf3"),
    _t(TRACKER, "bright_128x128",
       "28ffae4fa7e2c675a06520adaa233619a462bfee9e09a237fbb580ee58908a73",
       "c19d0c207ac3704920fc8d9d6ad0b9f12d32f20a08eebfa052a3612b19e93db7",
       "c66ef5618972653cbd1e18d3c748f6724b32095c6d7d8a1769f47ab66a1fb5bc"),
    _t(TRACKER, "bright_16x16",
       "8da05b2b4233e321e948f7e076e124eed8cbfd8ac913881b4889a14e667faf0a",
       "54b4da1684fa2ef158e1729e336b2a4b5141ad9d0e7f013d536d2c07dbdb48d4",
       "34c3bf4927e81ca63984571a3ad26734cadb1104525b2c067090728ac343c0a2"),
    _t(TRACKER, "bright_64x64",
       "9eaa40b870082d0b8fa554665803ff803941c27fdb951431f8461104343b61e4",
       "4a1b1c38c86eb46b1cc44678a78836cbfb8f01233a7f789df04de4fbb5eb2362",
       "ddac047a87db7879da1b6f2d6907f551abac3c6f1c1d72ac582a3dcab5032b9e"),
    _t(TRACKER, "color_blue_64x64",
       "cefcb8c15aec198f29de4941b02ad52334e71b9f39ecbbef6682b72aa26956ed",
       "5cfd9064b6214255aa8c4cc484a2be20564cdc285989e6e0a0d568df003922c9",
       "81011353e8045d5648a8ae9d7fa4578f5de5c6cdc1a74d428394c2f95e0e27be"),
    _t(TRACKER, "color_cyan_64x64",
       "f4e936d7c438629e9b0d59423c03f4d9cd810b4347e359dc6b884dd68e3c74fe",
       "157394f128ccacfea4d26032da504aa0356db83ef953923987f569dbe9b56eb1",
       "3177edecd375ef567b0c1acbce44291ac75ecc8af4561134603cf0897227c85a"),
    _t(TRACKER, "color_green_64x64",
       "b80afc64a3f4d9610b961ac8ff2ef8795de2017ddd1aa56da66b84b6466d65b0",
       "ab92e3fa3aa4ea58aa24b4f2df077835e5059d41b4bd0445ac05aeab553303f3",
       "c7b51fd84beaed2516d993b949f0a337346feaed80bb6fc0a95dcb90044fab60"),
    _t(TRACKER, "color_magenta_64x64",
       "b5bb1dba14d3b4c2b38db901f29fce402fc66374cc74403f8d33eea533161fca",
       "5958d2d29707c277ef98979e452f9a4f0bea1cdec26d9a6f2b783d18dc3dcac1",
       "e5640de7fd27c2a0cb5d596d795a20bf58c73e420d64b452d731f500bb27304c"),
    _t(TRACKER, "color_red_128x128",
       "f8bb0b2433f33dde0225c6b83e529dde3da293b52900167defef7a0e1c442cd7",
       "da76ac3b5e38b1053cd2849ed81b2a3a893e1c51ba37470e0d43e7fc6ad9d3a3",
       "f585288634c8caaf4d8afae9923065fa11ad104571033c88bd8002dfb0c167b1"),
    _t(TRACKER, "color_red_64x64",
       "7c7c8cd8dbb87ec901d0739bb32444ebc5447c34e8649c6f0659aaba00876a92",
       "4997529e4417b503ecae40a09bc7b515bbcfc4dff10100755b31c57303071c5e",
       "2f1e4aa85f5d346e99aeba4fcf6d08e3ed784a57a43e1b342af52643a3b92b96"),
    _t(TRACKER, "color_white_64x64",
       "a84319b115c4e9ebfc2ec1e35737864daa7e9a51466c78e9da5c170cb74ed331",
       "032bfe1dec4707fccc35780b73ae0adee8d2cbef6343374c2fcc03e0594776e0",
       "00d668fa19b66b2b1583c120e666d8b505ccd3e1af2ccb99e28eed0a90050aa2"),
    _t(TRACKER, "color_yellow_64x64",
       "8165026f1fab02090a893e9c827f86395e18570067bfc475a24c4bd01571241a",
       "2fe1c0746cada924ffdf4571ed65ff2d424c5d1db70b8055f16c46a3e1b35a4c",
       "be9e7779dfdf63e09af95138f11623c901cb74fce8d191da4b2a4a1a6fd8957d"),
    _t(LOOMING, "looming_64x64_3x3",
       "1cae86d5b5440ab416f34480b1cc8301455b4c018ad18f5f268f80b9fe2ce8aa",
       "47198af0e5aee83950da9426fe1d77a71dac85ee9bfda6b74cfdc89ec33fc429",
       "a7f9e729946842006652deb965289cad873803c1ba6a67351a8f9571b3b9c80f"),
    _t(LOOMING, "looming_128x128_3x3",
       "5fcc4088d4115caae82a14c9656a7a23c9f39bd90dc511f351d10c94c191fce3",
       "aedc240c9b51c10b9166018bd8e53ecb8d151d3c95197d97473a90a4413918d5",
       "c65bb97f6717298f73be31d0dd05d56057f2145477c62fc28062e51908e5a1f7"),
    _t(FLOW, "gabor_64x64_p4",
       "b8d2a165c8ad9238146ed1fab9c39c8c0582e39fb6c4b4f418b468e469a17c7c",
       "bbd85284c8c899c5509f6d171435035f70603281f7951fee7ef9e0e3cd20373e",
       "32d69081b674548e909188c8cd60d15fb49f699193dd9583d415a12283354931"),
    _t(FLOW, "gabor_128x128_p4",
       "4ba07aaf5d17c24d22f613ad493914ae9ebe33924fffb0490d1ffdd4e9966ddd",
       "99a9285b6760f874ff91833e45e9a4b6a4c9b47075db99430f5b91d6f8042685",
       "b729084af3bb4a283abfd2d88be43ddb648cd46ca10483f64a617d83e0c0dd8e"),
    _t(FLOW, "gabor_64x64_7k_4o_2s",
       "118001b6f61ffe4829794e8dea7920a4f8332d36d9bc02604b0a0f4d263d75d1",
       "48fcbb9347f3d37b1cbbf34b86a85f07d9476c90fe10ae374e93a37a056f7e5b",
       "bd96147a46939497c2155cea31a08d9b55dd7d3d58d084306520122a6f2a63bf"),
    _t(FLOW, "gabor_128x128_7k_4o_2s",
       "784d8017680b138bbe93bd071c6f4986a8fe98eba9b274bcea2c5803121947d1",
       "19572e5ed5afd4dbcb0cb908a1172227768e081f5ca3bb606b92645a1c01033c",
       "e470a6fbee01116b911c726b9da6e3cfce7c89e19f0e1689d15d4a2997e8e736"),
    _t(PATTERN, "pattern_128x128_16x16_1ch", None,
       "ed103f5c5f5eb2155acf9e759be1739319b741bddea63e19285b9da12985845c",
       "c9e04bbd1a94514e4e02989493af0e1db8d4faecc89689e9242a9361c58cfa5a"),
    _t(PATTERN, "pattern_128x128_16x16_3ch", None,
       "04f59cb39582efa8ee61bae80eb62b304907fa9f639be308ef33ab4357c80d34",
       "c1640f799a3950dd7453e1728fa14f601af6ea71f7ad01159a9e66e3c3980ac2"),
    _t(PATTERN, "pattern_128x128_32x32_1ch", None,
       "bb5a9fb716522e804bde55946a25b4fb775b3bdd3887bcc0931afa90a08242a9",
       "95be9ebc7b90a536e32d70bf3eaa01e6642617b85a75e3260cff0aacfd8d3f7e"),
    _t(PATTERN, "pattern_64x64_16x16_1ch", None,
       "259830a4b73824e8b25b5c2227ef109d0aec06545f165daeecef7726232f9d7b",
       "ce8695d91c2b4283d0fe36c0463b98f56a99dba5ec824d3189d7829b5eafb6f7"),
    _t(PATTERN, "pattern_64x64_8x8_1ch", None,
       "a545c9a0220070da8c14c2c6168b0306827a24c57241d97036b8677ade6f63f1",
       "772384fb5c6444a7608edd44142792f6667352630f96168c0a38aefeedfaad61"),
    _t(PATTERN, "pattern_64x64_8x8_3ch", None,
       "d208fe24c3e254d80bf39a3ed389179ba5dda782325a67026cc8efd184e24377",
       "07f827cf19ee6949098c1b3ce1bf3304f352baf906929ffa0dca92e9c16efdbe"),
    ModelEntry(EXTRACTOR, "embed",
               "MobileNet v1 1.0 224x224 without its classifier: 1024-d embeddings (recognition node)",
               ModelFile(EXTRACTOR + "_edgetpu.tflite", _EDGETPU + EXTRACTOR + "_edgetpu.tflite",
                         "ed74fbd0f06019e729ba20112f29e1c85b2ecc2c77db3ef3deed8acb16513343"),
               ModelFile(EXTRACTOR + ".tflite", _EDGETPU + EXTRACTOR + ".tflite",
                         "735ee601180d88be8bcf1e68ddd4aece93d617531745cdcf3e7f840f2fedcf56")),
)
