#!/usr/bin/env bash
# Run the launch_testing tests (libredgetpu_ros/test/launch/test_*_launch.py, or the files given) one by one
# with `launch_test`, each in its own ROS domain and bounded by LAUNCH_TEST_TIMEOUT seconds (`timeout` makes
# itself a process-group leader and signals the whole group: SIGINT first, the way Ctrl-C reaches launch,
# SIGKILL 10 s later), a failing file once more (LAUNCH_TEST_RERUNS, default 1). Run it inside
# tools/ros_sandbox.sh (make test does). Exit status: 0 when all pass.
#
# Why launch_test and not pytest: launch_testing 3.7.1's pytest plugin does not load under pytest 9
# (ros2/launch#979); `launch_test` is the runner colcon's add_launch_test uses and works with any pytest.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${LIBREDGETPU_ROS_VENV:-$repo/.venv}"
timeout_s="${LAUNCH_TEST_TIMEOUT:-120}"
[[ -x "$venv/bin/launch_test" ]] || { echo "run_launch_tests: no $venv/bin/launch_test; run 'make setup'" >&2; exit 2; }
# shellcheck disable=SC1091
source "$repo/tools/env.sh" --localhost  # launch tests stay on this machine even outside the sandbox
# As for the pytest run: `python -m ...` (a launched process, a test helper) must not put the current
# directory (the repository root, where the ROS package folder libredgetpu_ros/ shadows the Python package of
# the same name) on sys.path.
export PYTHONSAFEPATH=1

if (($#)); then files=("$@"); else
    shopt -s nullglob
    files=("$repo"/libredgetpu_ros/test/launch/test_*_launch.py)
fi
((${#files[@]})) || { echo "run_launch_tests: no launch tests found" >&2; exit 2; }

failed=()
rerun=()
# A file that fails runs once more (LAUNCH_TEST_RERUNS, as a failing ros test of the pytest run does: DDS
# discovery on a loaded machine is late now and then), unless its output shows a crash; the first failure's
# output is printed either way and the reruns are listed at the end.
reruns="${LAUNCH_TEST_RERUNS:-1}"
# Domains 200..231: apart from pytest's 100..199; the pid spreads concurrent runs on one host apart.
domain=$((200 + $$ % 32))
for f in "${files[@]}"; do
    name="$(basename "$f" .py)"
    for ((attempt = 0; attempt <= reruns; attempt++)); do
        log="$(mktemp "${TMPDIR:-/tmp}/launch_test_${name}.XXXXXX.log")"
        start=$(date +%s)
        rc=0
        ROS_DOMAIN_ID=$domain timeout -s INT -k 10 "$timeout_s" "$venv/bin/launch_test" "$f" >"$log" 2>&1 || rc=$?
        domain=$((200 + (domain - 199) % 32))  # the next run, this file's again or the next one's
        if ((rc == 0)); then
            echo "launch_test $name: passed in $(( $(date +%s) - start )) s"
            rm -f "$log"
            break
        fi
        ((rc == 124)) && why="timed out after $timeout_s s" || why="exit code $rc"
        # a crash (a process killed by a fault signal, a fatal Python error) is never rerun: a bug to see
        crashed=0
        # launch_test itself killed by a fault signal: timeout passes on 128 + the signal (SIGILL, SIGABRT,
        # SIGBUS, SIGFPE, SIGSEGV)
        case $rc in 132|134|135|136|139) crashed=1 ;; esac
        grep -Eq 'exit code -(4|6|7|8|11)([^0-9]|$)|Fatal Python error|Segmentation fault|core dumped' "$log" && crashed=1
        ((crashed)) && why="$why, a crash: not rerun"
        if ((attempt < reruns && !crashed)); then
            echo "launch_test $name: failed ($why), RERUN; output:"
            rerun+=("$name")
        else
            echo "launch_test $name: FAILED ($why); output:"
            failed+=("$name")
        fi
        sed 's/^/    /' "$log"
        rm -f "$log"
        ((attempt < reruns && !crashed)) || break
    done
done
((${#rerun[@]})) && echo "run_launch_tests: rerun after a failure: ${rerun[*]}"
if ((${#failed[@]})); then
    echo "run_launch_tests: ${#failed[@]} of ${#files[@]} failed: ${failed[*]}" >&2
    exit 1
fi
echo "run_launch_tests: ${#files[@]} launch test file(s) passed"
