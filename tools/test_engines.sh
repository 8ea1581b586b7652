#!/usr/bin/env bash
# make test-engines: each serving engine in its own virtualenv
# (.venv-engines/<engine>, from tests/engines/requirements-<engine>.txt),
# gostore's wheel installed beside it, and tests/engines/test_<engine>*.py
# run with GOSTORE_AS_MOONCAKE=1, so that the engine's own Mooncake
# integration imports gostore.
#
#   tools/test_engines.sh [--ci] [engine ...]     (default: every engine)
#
# --ci: an engine that cannot be installed here (no room, no network) is
# reported and left out; a test that fails still fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

ci=0
if [ "${1:-}" = "--ci" ]; then ci=1; shift; fi
engines=("$@")
if [ ${#engines[@]} -eq 0 ]; then
	engines=()
	for r in tests/engines/requirements-*.txt tests/engines/install-*.sh; do
		n=${r#tests/engines/*-}; engines+=("${n%.*}")
	done
fi
NEED_GB=${GOSTORE_ENGINES_NEED_GB:-14}   # the largest venv (SGLang: 11 GB) and room to unpack
PY=${PYTHON:-python3}
wheel_dir=build/engines-wheel

rm -rf "$wheel_dir"
.venv/bin/pip wheel -q --no-build-isolation --no-deps . -w "$wheel_dir"
wheel=$(ls "$wheel_dir"/gostore-*.whl)

failed=()
for e in "${engines[@]}"; do
	# How an engine installs: a pinned requirements file, or a script
	# (given the virtualenv) where pip alone cannot resolve it.
	req=tests/engines/requirements-$e.txt
	[ -e "$req" ] || req=tests/engines/install-$e.sh
	venv=.venv-engines/$e
	stamp=$venv/.installed-$(sha1sum "$req" | cut -c1-12)
	start=$(date +%s)
	if [ ! -e "$stamp" ]; then
		free_gb=$(df -Pk . | awk 'NR==2 {print int($4 / 1048576)}')
		if [ "$free_gb" -lt "$NEED_GB" ]; then
			echo "engines: $e not installed: ${free_gb} GB free here, it needs ${NEED_GB}"
			[ $ci = 1 ] && continue || exit 1
		fi
		rm -rf "$venv"
		if [ "${req##*.}" = sh ]; then install=("$req" "$venv"); else install=("$venv/bin/pip" install -q -r "$req"); fi
		mkdir -p build
		if ! { $PY -m venv "$venv" && "$venv/bin/pip" install -q --upgrade pip &&
			"${install[@]}"; } > "build/engines-$e-install.log" 2>&1; then
			echo "engines: $e could not be installed (build/engines-$e-install.log):"
			tail -5 "build/engines-$e-install.log"
			rm -rf "$venv"
			[ $ci = 1 ] && continue || exit 1
		fi
		touch "$stamp"
	fi
	"$venv/bin/pip" install -q --force-reinstall --no-deps "$wheel"
	echo "engines: $e installed in $(( $(date +%s) - start )) s; its tests:"
	if ! GOSTORE_AS_MOONCAKE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider -W ignore \
		tests/engines/test_"$e"*.py; then
		failed+=("$e")
	fi
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "engines: tests failed for ${failed[*]}"
	exit 1
fi
