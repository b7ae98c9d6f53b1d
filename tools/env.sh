# shellcheck shell=bash
# Source me (bash): `source tools/env.sh [--localhost]` — the workspace venv as a ROS 2 install, like
# sourcing /opt/ros/<distro>/setup.bash on a robot:
#   - activates the venv (.venv beside this folder, or $LIBREDGETPU_ROS_VENV), so `ros2`, `launch_test`,
#     `libredgetpu-ros` and the venv's python are on PATH;
#   - prepends the venv to AMENT_PREFIX_PATH, where `make setup` installed the ament index, the launch
#     system, vision_msgs, our interfaces and libredgetpu_ros the colcon way (`ros2 launch libredgetpu_ros
#     perception.launch.py`, `ros2 run libredgetpu_ros perception_node`, `ros2 lifecycle`, `ros2 param`);
#   - leaves discovery and transport to ROS's defaults and your environment (like setup.bash): nodes are
#     seen from other machines of the subnet, as every ROS package's are;
#   - with --localhost, fills in the localhost-only DDS settings where unset (discovery range LOCALHOST,
#     the package's Fast DDS profile on 127.0.0.1, rmw_fastrtps_cpp), as
#     libredgetpu_ros.ros.environment.localhost_only_environ does: nothing of this shell's ROS traffic
#     leaves the machine (docs/install.md "Across machines, or confined to one").
# Tests, demos and CI run inside tools/ros_sandbox.sh (which forces those settings, then sources this file).

_lrr_repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_lrr_venv="${LIBREDGETPU_ROS_VENV:-$_lrr_repo/.venv}"
if [[ ! -f "$_lrr_venv/bin/activate" ]]; then
    echo "tools/env.sh: no venv at $_lrr_venv; run 'make setup' first" >&2
    unset _lrr_repo _lrr_venv
    return 2 2>/dev/null || exit 2
fi
# shellcheck disable=SC1091
source "$_lrr_venv/bin/activate"
case ":${AMENT_PREFIX_PATH:-}:" in
    *":$_lrr_venv:"*) ;;
    *) export AMENT_PREFIX_PATH="$_lrr_venv${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}" ;;
esac
# The PyPI wheels of requirements.lock.txt are ROS 2 Kilted; /opt/ros/<distro>/setup.bash sets this too.
export ROS_DISTRO="${ROS_DISTRO:-kilted}"
# (Only --localhost is looked at: sourced without arguments, $1 may be the calling script's.)
if [[ "${1:-}" == "--localhost" ]]; then
    export ROS_AUTOMATIC_DISCOVERY_RANGE="${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}"
    export FASTDDS_DEFAULT_PROFILES_FILE="${FASTDDS_DEFAULT_PROFILES_FILE:-$_lrr_repo/libredgetpu_ros/libredgetpu_ros/data/fastdds_localhost.xml}"
    export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
fi
# rclpy cannot start without HOME or ROS_LOG_DIR (rcutils_expand_user fails).
if [[ -z "${HOME:-}" && -z "${ROS_LOG_DIR:-}" ]]; then
    ROS_LOG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/libredgetpu_ros_log.XXXXXX")"
    export ROS_LOG_DIR
fi
unset _lrr_repo _lrr_venv
