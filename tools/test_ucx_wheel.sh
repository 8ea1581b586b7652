#!/usr/bin/env bash
# make test-ucx-wheel: the UCX route's suites on PyPI's UCX (the `ucx`
# extra's pinned libucx-cu12, UCX 1.22) instead of the system's (Debian's
# 1.13 in `make test`). docs/ucx.md#packaging says what it covers.
#
#   tools/test_ucx_wheel.sh [--ci]
#
# gostore's wheel goes, with its `ucx` extra, into a virtualenv of its own
# (.venv-ucx; $UCX_VENV): not .venv, where `make test` checks what a host
# without the wheel does (setup falls back to TCP when no UCX exists), and
# which every developer has without needing 142 MB of UCX. Then, with
# GOSTORE_LIBUCX naming the wheel's libucp.so.0:
#   - go test -race ./gostore/ucx/ (the whole binding);
#   - go test -race ./gostore/transfer/ -run UCX and ./gostore/client/
#     -run 'UCX|Spot' (the route in the engine and between clients);
#   - tests/test_ucx.py over tcp, shared memory (posix, sysv) and cma: the
#     wheel's transports (it has no verbs).
# GOSTORE_TEST_UCX_VERSION and GOSTORE_TEST_UCX_LIBRARY name the wheel's
# UCX: a Go test binary (gostore/internal/ucxtest) or a test_ucx.py peer
# that loaded any other UCX, or none, fails the run instead of passing on
# the system's.
#
# --ci: where the wheel cannot be installed here (no network, no room) it
# is reported and left out (exit 0); a test that fails still fails the run.
# DEV_PKGS (from the Makefile): what the tests import besides gostore.
set -euo pipefail
cd "$(dirname "$0")/.."

ci=0
if [ "${1:-}" = "--ci" ]; then ci=1; shift; fi
PY=${PYTHON:-python3}
venv=${UCX_VENV:-.venv-ucx}
eval "pkgs=(${DEV_PKGS:-pytest numpy pyzmq msgpack})"
pin=$(sed -n 's/^ucx = \["\(libucx-cu12==[0-9.]*\)"\]$/\1/p' pyproject.toml)
if [ -z "$pin" ]; then
	echo "ucx wheel: pyproject.toml's ucx extra pins no libucx-cu12==VERSION"
	exit 1
fi
version=${pin#*==}
wheel_dir=build/ucx-wheel
log=build/ucx-wheel-install.log
mkdir -p build

left_out() {
	echo "ucx wheel: $pin could not be installed ($log): $1"
	tail -5 "$log"
	rm -rf "$venv"
	if [ $ci = 1 ]; then echo "ucx wheel: left out"; exit 0; fi
	exit 1
}

start=$(date +%s)
rm -rf "$wheel_dir"
.venv/bin/pip wheel -q --no-build-isolation --no-deps . -w "$wheel_dir"
whl=$(ls "$wheel_dir"/gostore-*.whl)
stamp=$venv/.installed-$(echo "$pin ${pkgs[*]}" | sha1sum | cut -c1-12)
if [ ! -e "$stamp" ]; then
	rm -rf "$venv"
	{ $PY -m venv "$venv" && "$venv/bin/pip" install -q --upgrade pip &&
		"$venv/bin/pip" install -q "${pkgs[@]}" "$whl[ucx]"; } > "$log" 2>&1 ||
		left_out "pip failed"
	touch "$stamp"
fi
"$venv/bin/pip" install -q --force-reinstall --no-deps "$whl"
# The wheel's library as the package finds it (gostore/_ucx.py).
lib=$("$venv/bin/python" -c 'from gostore import _ucx; print(_ucx.wheel_library())')
[ -n "$lib" ] || left_out "no libucx/lib/libucp.so.0 in $venv after the install"
export GOSTORE_LIBUCX=$lib GOSTORE_TEST_UCX_LIBRARY=$lib GOSTORE_TEST_UCX_VERSION=$version
echo "ucx wheel: UCX $version from $lib; installed in $(( $(date +%s) - start )) s"

failed=()
step() {
	local name=$1 t0
	shift
	t0=$(date +%s)
	if "$@"; then echo "ucx wheel: $name passed in $(( $(date +%s) - t0 )) s"
	else echo "ucx wheel: $name FAILED after $(( $(date +%s) - t0 )) s"; failed+=("$name"); fi
}
GOLD=-ldflags=-checklinkname=0
step gostore/ucx go test -race $GOLD -count=1 ./gostore/ucx/
step gostore/transfer go test -race $GOLD -count=1 ./gostore/transfer/ -run UCX
step gostore/client go test -race $GOLD -count=1 ./gostore/client/ -run 'UCX|Spot'
step tests/test_ucx.py "$venv/bin/python" -m pytest -q -p no:cacheprovider -rs tests/test_ucx.py
if [ ${#failed[@]} -gt 0 ]; then
	echo "ucx wheel: failed on UCX $version: ${failed[*]}"
	exit 1
fi
