#!/usr/bin/env bash
# Run a command with the localhost-only ROS environment, inside a private network namespace with only
# `lo` up when the kernel lets us (root, or unprivileged user namespaces), so no DDS packet can leave the
# machine even if a setting is missed. Without it the command still runs, with a warning.
#
# Usage: tools/ros_sandbox.sh COMMAND [ARGS...]      Exit status: the command's.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
profile="$repo/libredgetpu_ros/libredgetpu_ros/data/fastdds_localhost.xml"
[[ -f "$profile" ]] || { echo "ros_sandbox: missing DDS profile $profile" >&2; exit 2; }

export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export FASTDDS_DEFAULT_PROFILES_FILE="$profile"
export RMW_IMPLEMENTATION=rmw_fastrtps_cpp
if [[ -z "${ROS_LOG_DIR:-}" ]]; then
    ROS_LOG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/libredgetpu_ros_log.XXXXXX")"
    export ROS_LOG_DIR
fi
export PYTHONUNBUFFERED=1
# The venv as a ROS install (PATH, AMENT_PREFIX_PATH) when `make setup` has built it, so `ros2 ...` and
# `launch_test` work here too; the settings forced above are kept (env.sh only fills in unset ones).
if [[ -f "${LIBREDGETPU_ROS_VENV:-$repo/.venv}/bin/activate" ]]; then
    # shellcheck disable=SC1091
    source "$repo/tools/env.sh" --localhost
fi

# `ip` is needed to bring lo up inside the namespace; probe the whole thing once.
if command -v unshare >/dev/null && command -v ip >/dev/null \
        && unshare -n sh -c 'ip link set lo up' 2>/dev/null; then
    exec unshare -n sh -c 'ip link set lo up && exec "$@"' ros_sandbox "$@"
fi
if [[ "${ROS_SANDBOX_REQUIRED:-0}" == 1 ]]; then
    echo "ros_sandbox: 'unshare -n' is not permitted here and ROS_SANDBOX_REQUIRED=1" >&2
    exit 2
fi
echo "ros_sandbox: WARNING: cannot create a private network namespace ('unshare -n' not permitted or" \
     "'ip' missing); running without it: DDS relies on the localhost-only settings alone." >&2
exec "$@"
