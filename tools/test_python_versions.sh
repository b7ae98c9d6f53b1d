#!/usr/bin/env bash
# The ROS-free suite on other CPythons: robots run their ROS distro's system Python (Humble 3.10, Jazzy and
# Kilted on Ubuntu 24.04 3.12), while the main venv is 3.11. No ROS wheels exist for those Pythons here, so
# what runs is everything below ros/ (docs/architecture.md): tests marked `ros` are deselected, and a test
# or module that still needs rclpy / a message package is skipped with the reason (test/conftest.py).
#
# Usage: tools/test_python_versions.sh [VERSION...]       (default: 3.10 3.12 3.13)
#   VERSION: a CPython found by `pyenv prefix VERSION`, else `pythonVERSION` on PATH; a missing one is
#   skipped with a message (exit status 0 if every version found passed).
# Environment: PY_VENVS (default build/pythons: one venv per version, reused while requirements.lock.txt
#   and setup.py are unchanged), MARKERS (default "not ros"), PYTEST_ARGS (extra pytest arguments).
#
# Each venv gets the ROS-free part of requirements.lock.txt (no ros-* wheels, no ROS build tools). A pin
# with no release for that Python (NumPy 2.4, SciPy 1.17 ... need >= 3.11) is relaxed to the newest release
# not newer than the pin (`==` -> `<=`); what was installed is written to VENV/installed.txt and the
# relaxed pins are listed. Tests run in tools/ros_sandbox.sh (private network namespace), like `make test`.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

versions=("$@")
((${#versions[@]})) || versions=(3.10 3.12 3.13)
venvs="${PY_VENVS:-$repo/build/pythons}"
markers="${MARKERS:-not ros}"
# ROS build and launch tooling in the lock file that the ROS-free code never imports.
ros_tools='^(ros-|catkin-pkg==|empy==|lark-parser==|osrf-pycommon==|argcomplete==|ruff==)'

find_python() {  # $1: version -> path of its interpreter, or nothing
    local prefix
    if command -v pyenv >/dev/null && prefix="$(pyenv prefix "$1" 2>/dev/null)" \
            && [[ -x "$prefix/bin/python$1" ]]; then
        echo "$prefix/bin/python$1"
    elif command -v "python$1" >/dev/null; then
        command -v "python$1"
    fi
}

make_venv() {  # $1: interpreter, $2: venv folder
    local python="$1" venv="$2" stamp="$2/.ready" subset="$2/requirements.txt"
    if [[ -f "$stamp" && "$stamp" -nt requirements.lock.txt && "$stamp" -nt libredgetpu_ros/setup.py ]]; then
        return 0
    fi
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --disable-pip-version-check --quiet pip==25.3
    grep -Ev '^\s*(#|$)' requirements.lock.txt | grep -Ev "$ros_tools" | sed 's/ *#.*//' > "$subset"
    if ! "$venv/bin/python" -m pip install --disable-pip-version-check --quiet -r "$subset" 2>"$venv/pip.log"; then
        echo "  some pins have no release for $("$venv/bin/python" -V); relaxing == to <= (pip.log: why)"
        sed -i 's/==/<=/' "$subset"
        "$venv/bin/python" -m pip install --disable-pip-version-check --quiet -r "$subset"
    fi
    "$venv/bin/python" -m pip install --disable-pip-version-check --quiet --no-build-isolation --no-deps \
        -e libredgetpu_ros
    "$venv/bin/python" -m pip freeze --exclude-editable > "$venv/installed.txt"
    # the pins that differ from the lock file, for the log
    grep -Ev '^\s*(#|$)' requirements.lock.txt | sed 's/ *#.*//' | grep -vxFf "$venv/installed.txt" \
        | grep -Ev "$ros_tools" | sed 's/^/  not as locked: /' || true
    touch "$stamp"
}

status=0
ran=()
for version in "${versions[@]}"; do
    python="$(find_python "$version")"
    if [[ -z "$python" ]]; then
        echo "== Python $version: not found (pyenv install $version, or python$version on PATH); skipped"
        continue
    fi
    echo "== Python $version: $python"
    venv="$venvs/$version"
    make_venv "$python" "$venv"
    start=$(date +%s)
    # From the venv's folder, not the repository root, where the ROS package folder libredgetpu_ros/ would
    # shadow the Python package for child processes (3.11's -P / PYTHONSAFEPATH do not exist in 3.10).
    # -u PYTHONPATH and this venv first on PATH: nothing of the 3.11 venv (rclpy, messages, its console
    # scripts) may be used; the sandbox's env.sh still puts the main venv's share/ on AMENT_PREFIX_PATH when
    # `make setup` built it (the vision_msgs / interfaces .msg files the bag tests read: text, any Python).
    # shellcheck disable=SC2086
    if (cd "$venv" && env -u PYTHONPATH PYTHONSAFEPATH=1 "$repo/tools/ros_sandbox.sh" \
            env PATH="$venv/bin:$PATH" "$venv/bin/python" -m pytest -q -c "$repo/pyproject.toml" \
            --rootdir "$repo" -m "$markers" -p no:cacheprovider ${PYTEST_ARGS:-} "$repo/libredgetpu_ros/test"); then
        ran+=("$version passed in $(( $(date +%s) - start )) s")
    else
        ran+=("$version FAILED after $(( $(date +%s) - start )) s")
        status=1
    fi
done
printf '== %s\n' "${ran[@]:-no Python version found}"
exit "$status"
