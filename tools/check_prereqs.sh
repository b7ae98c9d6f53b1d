#!/usr/bin/env bash
# The Debian packages `make setup` / `make test` need, checked before anything is built, so a missing one is
# named at once with the one line that installs it (instead of minutes of building and a page of errors).
#
# Usage: tools/check_prereqs.sh [--for setup|test] [--list]
#   --for setup   what building the venv needs (default)
#   --for test    also what the test suite needs (the sandbox's unshare/ip, the MIPS binutils of the
#                 Ingenic tests, git for the clean-clone tests)
#   --list        print the missing package names, one a line, and exit 0 (.ci/run installs them)
# Exit status: 0 all present (or --list), 2 something is missing (the install line is on stderr).
set -euo pipefail

goal=setup list=0
while (($#)); do
    case "$1" in
        --for) goal="${2:?--for needs setup or test}"; shift 2 ;;
        --list) list=1; shift ;;
        *) echo "check_prereqs: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ $goal == setup || $goal == test ]] || { echo "check_prereqs: --for setup|test, not $goal" >&2; exit 2; }

missing=()
have_python311_venv() {
    command -v python3.11 >/dev/null && python3.11 -c 'import ensurepip, venv, sysconfig, pathlib, sys;
sys.exit(not pathlib.Path(sysconfig.get_paths()["include"], "Python.h").is_file())' 2>/dev/null
}
have_python311_venv || missing+=(python3.11 python3.11-venv python3.11-dev)
command -v cmake >/dev/null || missing+=(cmake)
command -v g++ >/dev/null || missing+=(g++)
command -v make >/dev/null || missing+=(make)
# The Edge TPU driver loads libusb at run time (libusb1 wraps it).
# grep without -q reads the whole listing: with -q it exits at the first match, ldconfig dies of SIGPIPE and
# pipefail turns an installed libusb into a missing one (seen once on a fresh machine).
ldconfig -p 2>/dev/null | grep 'libusb-1\.0\.so\.0' >/dev/null || missing+=(libusb-1.0-0)
if [[ $goal == test ]]; then
    command -v ip >/dev/null || missing+=(iproute2)
    command -v unshare >/dev/null || missing+=(util-linux)
    command -v git >/dev/null || missing+=(git)
    # MIPS32 LE assembler/linker: the Ingenic .mgk tests build their ELF fixtures with it.
    command -v mipsel-linux-gnu-as >/dev/null || missing+=(binutils-mipsel-linux-gnu)
fi

if ((list)); then
    ((${#missing[@]})) && printf '%s\n' "${missing[@]}"
    exit 0
fi
if ((${#missing[@]})); then
    echo "error: missing system packages for 'make $goal': ${missing[*]}" >&2
    echo "install them with:  sudo apt-get install ${missing[*]}" >&2
    exit 2
fi
