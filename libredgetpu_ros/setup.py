"""ament_python package definition of libredgetpu_ros (also installable with pip for the venv workflow)."""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "libredgetpu_ros"

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml") + glob("config/*.xml") + glob("config/*.rules")),
        (f"share/{PACKAGE}/rviz", glob("rviz/*.rviz")),
    ],
    package_data={PACKAGE: ["data/*"]},
    install_requires=["setuptools"],
    zip_safe=True,
    maintainer="libredgetpu_ros developers",
    maintainer_email="maintainers@libredgetpu-ros.invalid",
    description="Edge TPU perception and adaptive control for ROS 2 without Google's runtime",
    license="Apache-2.0",
    extras_require={"test": ["pytest", "hypothesis", "pytest-timeout", "pytest-xdist", "femtorun==4.1.2"],
                    "ray": ["ray==2.60.0"]},  # process-bags --engine ray (requirements.lock.txt pins it)
    entry_points={
        "console_scripts": [
            "libredgetpu-ros = libredgetpu_ros.cli.main:main",
            # Node executables for `ros2 run libredgetpu_ros <name>` and the launch files.
            "perception_node = libredgetpu_ros.ros.perception_node:main",
            "control_node = libredgetpu_ros.ros.control_node:main",
            "spu_node = libredgetpu_ros.ros.spu.node:main",
            "trainer_node = libredgetpu_ros.ros.trainer.node:main",
            "tracker_node = libredgetpu_ros.ros.robotics.tracker_node:main",
            "looming_node = libredgetpu_ros.ros.robotics.looming_node:main",
            "flow_node = libredgetpu_ros.ros.flow_node:main",
            "reservoir_node = libredgetpu_ros.ros.reservoir.node:main",
            "recognition_node = libredgetpu_ros.ros.recognition.node:main",
        ],
        # MatMulEngine runners the families provide (matmul/runners.py); matmul/ itself never imports them.
        "libredgetpu_ros.matmul_runners": [
            "tpulang = libredgetpu_ros.sophgo.matmul_runner:open_tpulang_runner",
        ],
    },
)
