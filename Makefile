# libredgetpu_ros workspace: `make demo`, `make test` (both run `make setup` first).
#
# setup  check the system packages first (tools/check_prereqs.sh names what is missing and the install line),
#        then create .venv (python3.11), install requirements.lock.txt and the launch system + `ros2` CLI from
#        ../shared/ros/wheels, build our interfaces, composition_interfaces and vision_msgs with CMake into
#        the venv prefix, install libredgetpu_ros editable and the colcon way (ros2 launch/run find it).
#        Stamp files under .venv/.stamps make a second run with nothing to do take seconds.
#        Then `source tools/env.sh` makes the venv a ROS install in your shell. SHARED=dir overrides ../shared.
# test   ruff, then the whole pytest suite in tools/ros_sandbox.sh (localhost-only ROS, private netns), then
#        the launch_testing tests (test/launch/) through launch_test. Extra pytest arguments:
#        make test PYTEST_ARGS="-k foo"; only the launch tests: make test-launch
# test-fast  ruff, then every test not marked `ros` or `slow` (test/conftest.py marks every test using
#        ros_env or rclpy `ros`, and the tests of its SLOW_TESTS list `slow`), in the same sandbox, on
#        FAST_WORKERS (2) pytest-xdist processes, one test file per process at a time: the lane to run while
#        working. `make test` runs every test, the slow ones included, in one process.
# test-slowest  the 20 slowest test files of the runs so far (seconds per file, recorded by every
#        `make test` / `make test-fast` in build/test-durations.json).
# test-pythons  the ROS-free suite on every other CPython pyenv has (3.10, 3.12, 3.13), one venv each
#        (tools/test_python_versions.sh; PYTHONS="3.10 3.12" picks some).
# demo   the perception demo (python -m libredgetpu_ros.ros.demo) in the same sandbox.
# bench  every bench/bench_*.py as a script, in the same sandbox.
# pictures  docs/images/ rendered again from the fixtures and bench/results/ (tools/pictures.py; a test checks
#        that the committed pictures are current: run this after changing a drawing or a bench result).
# tpu-mlir-check  our TpuLang exports + fixture cases through Sophgo's tpu-mlir 1.30.2 (native tpuc-opt) to
#        bm1684x bmodels (not part of `make test`; the 311 MB wheel is unpacked into TPU_MLIR_CACHE), then
#        random families of graphs (tools/tpu_mlir_families.py), each equal to the bm1684x simulator.
# clean  build products and caches; `make distclean` also removes .venv.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV ?= .venv
PYTEST_ARGS ?=
# pip < 24 installs `-e` projects without pyproject.toml through `setup.py develop`, which setuptools >= 80
# rejects; the venv module of Debian's Python 3.11 ships pip 23.x.
PIP_VERSION := 25.3

VENV_ABS := $(abspath $(VENV))
VPY := $(VENV_ABS)/bin/python
STAMPS := $(VENV)/.stamps
SANDBOX := tools/ros_sandbox.sh
INTERFACES := libredgetpu_ros_interfaces
INTERFACES_BUILD := build/$(INTERFACES)
INTERFACES_SRC := $(INTERFACES)/CMakeLists.txt $(INTERFACES)/package.xml \
                  $(wildcard $(INTERFACES)/msg/*.msg $(INTERFACES)/srv/*.srv)
NPROC := $(shell nproc 2>/dev/null || echo 2)
# Shared, unmodified upstream ROS parts PyPI lacks (launch, ros2cli wheels; composition_interfaces and
# vision_msgs sources), beside the checkout. Override: make setup SHARED=/path/to/shared
SHARED ?= ../shared
SHARED_ROS := $(abspath $(SHARED))/ros

.PHONY: help setup prereqs prereqs-test test test-fast test-slowest test-pythons test-launch lint demo bench \
        pictures tpu-mlir-check clean distclean

help:
	@sed -n '/^#/!q; s/^# \{0,1\}//p' Makefile

setup: prereqs $(STAMPS)/package

# System packages first: a missing one is named with its install line before anything is built.
prereqs:
	@tools/check_prereqs.sh --for setup

prereqs-test:
	@tools/check_prereqs.sh --for test

$(VPY):
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (Debian: apt-get install python3.11 python3.11-venv python3.11-dev)" >&2; exit 2; }
	$(PYTHON) -m venv $(VENV)

$(STAMPS)/requirements: requirements.lock.txt tools/fix_ros_cmake_exports.py | $(VPY)
	$(VPY) -m pip install --disable-pip-version-check --quiet pip==$(PIP_VERSION)
	$(VPY) -m pip install --disable-pip-version-check --quiet -r requirements.lock.txt
	@# The ROS wheels export the include dirs of the machine that built them; point them at this venv.
	$(VPY) tools/fix_ros_cmake_exports.py $(VENV_ABS)
	@mkdir -p $(STAMPS) && touch $@

# One ament CMake package (interfaces) built and installed into the venv prefix. $(1): source dir,
# $(2): build dir, $(3): a Python import that proves the generated code loads.
define cmake_install
	AMENT_PREFIX_PATH=$(VENV_ABS) PATH="$(VENV_ABS)/bin:$$PATH" cmake -S $(1) -B $(2) \
	    -DCMAKE_INSTALL_PREFIX=$(VENV_ABS) -DPython3_EXECUTABLE=$(VPY) \
	    -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF --log-level=WARNING >/dev/null
	AMENT_PREFIX_PATH=$(VENV_ABS) cmake --build $(2) -j $(NPROC) -- --no-print-directory >/dev/null
	cmake --install $(2) >/dev/null
	$(VPY) -c "$(3)"
endef

$(STAMPS)/interfaces: $(STAMPS)/requirements $(INTERFACES_SRC)
	$(call cmake_install,$(INTERFACES),$(INTERFACES_BUILD),from $(INTERFACES).msg import PersonPoseArray; from $(INTERFACES).srv import SetWeights)
	@touch $@

# Upstream msg packages PyPI lacks, built from $(SHARED)/ros/src exactly like our interfaces.
$(STAMPS)/composition_interfaces: $(STAMPS)/requirements $(wildcard $(SHARED_ROS)/src/composition_interfaces/*)
	@test -d $(SHARED_ROS)/src/composition_interfaces || { echo "error: $(SHARED_ROS)/src/composition_interfaces not found (set SHARED=...)" >&2; exit 2; }
	$(call cmake_install,$(SHARED_ROS)/src/composition_interfaces,build/composition_interfaces,from composition_interfaces.srv import LoadNode)
	@touch $@

$(STAMPS)/vision_msgs: $(STAMPS)/requirements $(wildcard $(SHARED_ROS)/src/vision_msgs/* $(SHARED_ROS)/src/vision_msgs/msg/*)
	@test -d $(SHARED_ROS)/src/vision_msgs || { echo "error: $(SHARED_ROS)/src/vision_msgs not found (set SHARED=...)" >&2; exit 2; }
	$(call cmake_install,$(SHARED_ROS)/src/vision_msgs,build/vision_msgs,from vision_msgs.msg import Detection2DArray; from vision_msgs.msg import Classification; from vision_msgs.msg import LabelInfo)
	@touch $@

# The launch system, launch_testing and the `ros2` CLI (verbs pkg run launch node param lifecycle service topic
# interface): pure-Python upstream wheels from $(SHARED)/ros/wheels, checked against their SHA256SUMS and
# installed --no-deps; their PyPI dependencies (osrf-pycommon, psutil, argcomplete) are pinned in
# requirements.lock.txt. launch's substitution grammar runs on the lark-parser 0.12 that rosidl-parser
# already pins (the module is `lark` either way; installing PyPI's `lark` too would overwrite its files).
$(STAMPS)/ros_tools: $(STAMPS)/requirements $(wildcard $(SHARED_ROS)/wheels/*)
	@test -f $(SHARED_ROS)/wheels/SHA256SUMS || { echo "error: $(SHARED_ROS)/wheels/SHA256SUMS not found (set SHARED=...)" >&2; exit 2; }
	cd $(SHARED_ROS)/wheels && sha256sum --quiet --strict -c SHA256SUMS
	$(VPY) -m pip install --disable-pip-version-check --quiet --no-deps $(SHARED_ROS)/wheels/*.whl
	AMENT_PREFIX_PATH=$(VENV_ABS) $(VPY) -c "import launch, launch_ros, launch_testing, launch_testing_ros, ros2cli"
	@touch $@

# libredgetpu_ros: editable pip install (code edits take effect at once), then the colcon layout in the
# venv prefix (ament index marker, share/libredgetpu_ros/{package.xml,launch,config} as symlinks, every
# console_script of setup.py in lib/libredgetpu_ros/) so `ros2 run` / `ros2 launch` find it. The folders
# are prerequisites: adding or removing a launch/config file re-runs the (idempotent) layout step.
PKG := libredgetpu_ros
PKG_LAYOUT_SRC := $(PKG)/launch $(PKG)/config $(PKG)/rviz $(wildcard $(PKG)/launch/* $(PKG)/config/* $(PKG)/rviz/*)
$(STAMPS)/package: $(STAMPS)/interfaces $(STAMPS)/vision_msgs $(STAMPS)/composition_interfaces \
                   $(STAMPS)/ros_tools $(PKG)/setup.py $(PKG)/setup.cfg $(PKG)/package.xml \
                   tools/install_ament_package.py $(PKG_LAYOUT_SRC)
	$(VPY) -m pip install --disable-pip-version-check --quiet --no-build-isolation --no-deps -e $(PKG)
	$(VPY) tools/install_ament_package.py $(PKG) $(VENV_ABS)
	$(VENV)/bin/libredgetpu-ros --help >/dev/null
	AMENT_PREFIX_PATH=$(VENV_ABS) $(VENV)/bin/ros2 pkg executables $(PKG) >/dev/null
	@touch $@

lint: setup
	$(VENV)/bin/ruff check .

# PYTHONSAFEPATH: `python -m` would put the repository root on sys.path, where the ROS package folder
# libredgetpu_ros/ shadows the Python package of the same name.
# pytest 9 vs launch_testing 3.7.1: launch_testing's pytest plugin fails to load under pytest 9
# (PluginValidationError on its `path` hook argument, ros2/launch#979). Rather than pin the whole venv back to
# pytest 8, pyproject.toml turns the plugins off (-p no:launch_testing -p no:launch_ros) for every pytest run,
# test/launch/conftest.py keeps the main run from collecting the launch tests, and those run after the suite
# through `launch_test` (the runner colcon's add_launch_test uses; it works with any pytest), one file at a
# time, each bounded in time: tools/run_launch_tests.sh. Only the launch tests: make test-launch
DURATIONS := build/test-durations.json
PYTEST := LIBREDGETPU_ROS_DURATIONS=$(abspath $(DURATIONS)) PYTHONSAFEPATH=1 $(SANDBOX) $(VPY) -m pytest
# The kernels are built into the user's cache first (`kernels build`, what docs/install.md asks of an install):
# otherwise the first node a test configures compiles them (up to ~16 s of CPU a family on 2 cores) inside
# that test's wait; a fresh or outdated cache made such waits fail now and then.
# A build that fails (an unwritable cache folder, a family that does not compile) must not stop the tests:
# the modules then compile when they open, as without the step.
KERNELS := $(VENV)/bin/libredgetpu-ros kernels build --no-progress || echo "warning: kernels not pre-built (see above)" >&2
test: prereqs-test lint
	$(KERNELS)
	$(PYTEST) $(PYTEST_ARGS)
	$(SANDBOX) tools/run_launch_tests.sh

# xdist: every test of the fast lane keeps to its tmp_path and binds 127.0.0.1:0; whole files go to one
# worker (--dist loadfile), so a module's fixtures are built once and its tests keep their order.
FAST_WORKERS ?= 2
test-fast: prereqs-test lint
	$(KERNELS)
	$(PYTEST) -m "not ros and not slow" -n $(FAST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-slowest:
	@python3 tools/slowest_tests.py $(DURATIONS) 20

PYTHONS ?= 3.10 3.12 3.13
test-pythons: prereqs-test
	tools/test_python_versions.sh $(PYTHONS)

test-launch: setup
	$(SANDBOX) tools/run_launch_tests.sh

demo: setup
	PYTHONSAFEPATH=1 $(SANDBOX) $(VPY) -m libredgetpu_ros.ros.demo

bench: setup
	@shopt -s nullglob; files=(bench/bench_*.py); \
	if (( $${#files[@]} == 0 )); then echo "no bench/bench_*.py found" >&2; exit 1; fi; \
	for f in "$${files[@]}"; do echo "== $$f"; $(SANDBOX) $(VPY) "$$f"; done

pictures: setup
	PYTHONSAFEPATH=1 $(SANDBOX) $(VPY) tools/pictures.py

TPU_MLIR_CACHE ?= $(HOME)/.cache/libredgetpu_ros/tpu_mlir-1.30.2
tpu-mlir-check: setup
	$(VPY) tools/tpu_mlir_check.py --cache $(TPU_MLIR_CACHE)
	$(VPY) tools/tpu_mlir_families.py --cache $(TPU_MLIR_CACHE)

clean:
	rm -rf build install log out .pytest_cache .ruff_cache .benchmarks $(STAMPS)/interfaces $(STAMPS)/package
	find . -path ./$(VENV) -prune -o \( -name __pycache__ -o -name '*.egg-info' \) -type d -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf $(VENV)
