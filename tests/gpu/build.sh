#!/usr/bin/env bash
# Builds, on a machine with Go, what tests/gpu/run.sh runs on a GPU machine
# that has no Go: the library, the master and the GPU-touching Go test
# binaries, stripped, into build/gpu (carried there with the tree).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/gpu
mkdir -p "$out"
export CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}"
flags=(-ldflags="-checklinkname=0 -s -w")
go build -buildmode=c-shared "${flags[@]}" -o "$out/libgostore.so" ./bindings
rm -f "$out/libgostore.h"
go build "${flags[@]}" -o "$out/gostore-master" ./gostore/master/cmd/gostore-master
for pkg in gpu topology client transfer rdma; do
	go test -c "${flags[@]}" -o "$out/$pkg.test" "./gostore/$pkg"
done
ls -la "$out"
