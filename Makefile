# gostore: `make run` shows the store working, `make test` proves it.
# Everything Python lives in a local virtualenv (.venv); Go builds use the
# module cache. -checklinkname=0 is required by giouring on Go >= 1.23 and is
# passed to every build and test so one cache serves all of them.

# go-nvml's generated cgo calls deprecated NVML functions: keep builds quiet.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

VENV    ?= .venv
PY      := $(VENV)/bin/python
PIP     := $(VENV)/bin/pip
GOLD    := -ldflags=-checklinkname=0
STAMP   := $(VENV)/.gostore-installed
SOURCES := $(shell find gostore bindings python/gostore third_party -name '*.go' -o -name '*.py' -o -name '*.c' -o -name '*.h' 2>/dev/null) python/gostore-mooncake-alias.pth go.mod go.sum setup.py pyproject.toml
# The package's folders too: a module moved or removed (no file newer than the
# stamp) changes its folder, and the installed copy must follow.
SOURCES += $(shell find python/gostore -type d -not -name __pycache__ 2>/dev/null)

.PHONY: run test test-engines test-ucx-wheel fuzz soak bench bench-scale bench-peers vet gotest pytest install clean etcd ucx

run: install
	$(PY) -m gostore.demo

test: vet etcd ucx gotest install pytest

# The HA tests run a real etcd cluster: Debian's etcd-server. Installed when
# missing and apt can (as root); the tests skip, saying so, where it cannot.
etcd:
	@command -v etcd >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		(apt-get install -y -q etcd-server >/dev/null 2>&1 || \
		 (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q etcd-server >/dev/null 2>&1)) ; } || \
		echo "etcd-server could not be installed: the etcd tests will skip"

# The UCX route's tests (docs/ucx.md) load Debian's UCX at run time: the
# libraries (libucx0) and ucx_info/ucx_perftest (ucx-utils). Not libucx-dev:
# the build compiles against the headers in third_party/ucx. Installed when
# missing and apt can (as root); the UCX tests skip, saying why, where not.
ucx:
	@{ ldconfig -p | grep -q 'libucp\.so\.0 ' && command -v ucx_perftest >/dev/null; } || \
	{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		(apt-get install -y -q libucx0 ucx-utils >/dev/null 2>&1 || \
		 (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libucx0 ucx-utils >/dev/null 2>&1)) ; } || \
		echo "libucx0/ucx-utils could not be installed (needs root and apt): the UCX tests will skip and bench/ucx.py has no ucx_perftest limit"

vet:
	go vet $(GOLD) ./...

gotest:
	go test -race $(GOLD) -count=1 ./...

# SGLang, LMCache: each in its own virtualenv (GBs; see docs/engines.md),
# driven through its own Mooncake integration (tools/test_engines.sh).
test-engines: install
	tools/test_engines.sh $(ENGINES)

# The UCX route's suites (gostore/ucx, the UCX tests of gostore/transfer and
# gostore/client, tests/test_ucx.py) on PyPI's UCX 1.22, the `ucx` extra's
# pinned libucx-cu12 (142 MB, in .venv-ucx), instead of the system's 1.13:
# a run that loads any other UCX fails. Needs the network the first time
# (tools/test_ucx_wheel.sh; --ci in UCX_WHEEL_ARGS: no wheel is no failure).
test-ucx-wheel: install
	DEV_PKGS='$(DEV_PKGS)' tools/test_ucx_wheel.sh $(UCX_WHEEL_ARGS)

# Every Go fuzz target beyond its seed corpus (which make test replays):
# FUZZTIME each (default 10s), one worker. A crash's input lands in the
# package's testdata/fuzz/ to be kept as a regression test.
fuzz:
	tools/fuzz.sh

# Chaos soak (tools/soak.py, docs/operations.md#chaos-soak): a master on a
# state directory, storage clients, writers and readers on loopback, and
# random kill -9 / SIGSTOP of clients and kill -9 of the master for
# SOAK_MINUTES of load (default 10; then a final phase of up to a minute);
# every byte read is checked. SOAK_ARGS adds flags (--seed N, --json FILE).
SOAK_MINUTES ?= 10
soak: install
	$(PY) tools/soak.py --duration $(SOAK_MINUTES)m $(SOAK_ARGS)

pytest: install
	$(PY) -m pytest -q -p no:cacheprovider --ignore=tests/engines tests

bench: install ucx
	$(PY) bench/bench.py --json bench/results.json
	go run $(GOLD) ./bench/master --json bench/master-results.json
	go run $(GOLD) ./bench/scale --json bench/scale-results.json
	go run $(GOLD) ./bench/ssd --json bench/ssd-results.json
	go run $(GOLD) ./bench/auth --json bench/auth-results.json
	go run $(GOLD) ./bench/prefix --json bench/prefix-results.json
	go run $(GOLD) ./bench/kvevents --json bench/kvevents-results.json
	$(PY) bench/nano.py --json bench/nano-results.json
	$(PY) bench/full_pool.py --json bench/full-pool-results.json
	$(PY) bench/zipf.py --json bench/zipf-results.json
	$(PY) bench/restart.py --json bench/restart-results.json
	$(PY) bench/setup.py --json bench/setup-results.json
	$(PY) bench/ucx.py --json bench/ucx-results.json
	@if command -v etcd >/dev/null; then go run $(GOLD) ./bench/ha -objects 100000 \
		-master "$$($(PY) -c 'import gostore; print(gostore.master_binary_path())')" -json bench/ha-results.json; \
	else echo "bench/ha: etcd-server is not installed: skipped"; fi
	@for e in sglang lmcache vllm; do \
		if [ -x .venv-engines/$$e/bin/python ]; then \
			.venv-engines/$$e/bin/python -W ignore bench/engines.py --engine $$e \
				--rounds 9 --json bench/engines-$$e-results.json; \
		else echo "bench/engines.py: $$e is not installed here (make test-engines installs it)"; fi; \
	done

# The master at 10^5, 10^6 and 10^7 objects (bench/README.md, "The master
# at scale"): make bench runs the first two; this adds 10^7, which takes
# about 30 minutes and GBs of memory (a master past 8 GB of RSS is killed
# and reported). Run nothing else big meanwhile.
bench-scale:
	go run $(GOLD) ./bench/scale -sizes 1e5,1e6,1e7 --json bench/scale-10m-results.json

# Mooncake 0.3.13's wheel, for the Mooncake columns of bench/engines.py:
# pip --target without its dependencies, so an engine's virtualenv can put
# it on PYTHONPATH (the engines bring what it imports). It needs Debian's
# libibverbs1 even without RDMA.
PEERS := .venv-peers/mooncake-wheel
bench-peers: $(PEERS)/mooncake/mooncake_master

$(PEERS)/mooncake/mooncake_master: | $(PY)
	@ldconfig -p | grep -q libibverbs.so.1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		(apt-get install -y -q libibverbs1 >/dev/null 2>&1 || \
		 (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libibverbs1 >/dev/null 2>&1)) ; } || \
		echo "libibverbs1 could not be installed: Mooncake's wheel will not load"
	$(PIP) install -q --no-deps --target $(PEERS) mooncake-transfer-engine-non-cuda==0.3.13.post1

install: $(STAMP)

# What the build and the tests use besides gostore (pyzmq and msgpack: the
# KV events' subscriber in tests/); installed again when this list changes,
# so an existing .venv gets what a new one does.
DEV_PKGS := "setuptools>=68" wheel pytest numpy pyzmq msgpack

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): $(PY) $(SOURCES) Makefile
	$(PIP) install -q $(DEV_PKGS)
	$(PIP) install -q --no-build-isolation .
	touch $@

clean:
	rm -rf $(VENV) build python/gostore/libgostore.so python/gostore/libgostore.h python/gostore/bin *.egg-info python/*.egg-info
