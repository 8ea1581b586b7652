#!/usr/bin/env bash
# Runs what needs a GPU, on a machine with one (and its driver, python3 with
# torch, numpy and pytest) but no Go: the Go test binaries and library that
# tests/gpu/build.sh made into build/gpu, the GPU pytest suite with the rest
# of the Python suite beside it (a driver being present must change nothing
# else), and the GPU benchmark. Logs and the benchmark's JSON go to $OUT
# (default /tmp/gostore-gpu).
#
#   tests/gpu/build.sh            # where Go is
#   tests/gpu/run.sh              # where the GPU is
set -uo pipefail
cd "$(dirname "$0")/../.."
B=$PWD/build/gpu
OUT=${OUT:-/tmp/gostore-gpu}
mkdir -p "$OUT"
export GOSTORE_LIB=$B/libgostore.so GOSTORE_MASTER_BIN=$B/gostore-master
export PYTHONPATH=$PWD/python:$PWD/tests PYTHONUNBUFFERED=1 GOSTORE_LOG_LEVEL=warn
nvidia-smi --query-gpu=name,pci.bus_id,driver_version,memory.total --format=csv,noheader
rc=0
for pkg in gpu topology client transfer rdma; do
	if ! (cd "gostore/$pkg" && "$B/$pkg.test" -test.count=1 -test.v -test.timeout=300s) >"$OUT/go-$pkg.log" 2>&1; then
		rc=1
		echo "go test $pkg FAILED:"; grep -E -- "--- FAIL|panic|Error" "$OUT/go-$pkg.log" | head -20
	fi
	echo "go $pkg: $(grep -c -- '--- PASS' "$OUT/go-$pkg.log") passed, $(grep -c -- '--- SKIP' "$OUT/go-$pkg.log") skipped, $(grep -c -- '--- FAIL' "$OUT/go-$pkg.log") failed"
	grep -E -- "--- (PASS|FAIL): Test(Real|Device|GPU)" "$OUT/go-$pkg.log"
done
python3 -m pytest -q -p no:cacheprovider -rs tests/gpu 2>&1 | tee "$OUT/pytest-gpu.log" | tail -15 || rc=1
grep -q " failed" "$OUT/pytest-gpu.log" && rc=1
if [ "${GPU_FULL:-1}" = 1 ]; then
	python3 -m pytest -q -p no:cacheprovider -x tests --ignore=tests/gpu >"$OUT/pytest-all.log" 2>&1 || rc=1
	tail -3 "$OUT/pytest-all.log"
fi
python3 tests/gpu/bench_gpu.py --json "$OUT/bench_gpu.json" 2>&1 | tee "$OUT/bench_gpu.log" || rc=1
exit $rc
