#!/bin/bash
# Build the libFuzzer targets (clang, ASan, UBSan, in their own build
# directory) and run each on its seed corpus for N seconds.
#
# Usage: tests/fuzz/run.sh [--seconds N] [--build DIR] [TARGET...]
#
# Each target first replays every file of tests/fuzz/corpus/TARGET (the
# seeds, and every input that once found a bug, kept as a regression
# case), then mutates them for N seconds. New interesting inputs go to
# DIR/corpus/TARGET, never into the source tree. A finding stops that
# target; its input is DIR/artifacts/TARGET-crash-*: fix the bug, then add
# the file to tests/fuzz/corpus/TARGET/ as regress-WHAT.
#
# Prints one TAP line per target and ends with "N passed, N failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD

seconds=60
build=build-fuzz
targets=
while [ $# -gt 0 ]; do
	case $1 in
	--seconds) seconds=$2; shift ;;
	--build) build=$2; shift ;;
	-h|--help) sed -n '2,14p' "$0"; exit 0 ;;
	-*) echo "tests/fuzz/run.sh: unknown option '$1'" >&2; exit 2 ;;
	*) targets="$targets $1" ;;
	esac
	shift
done

cc=$(command -v clang-14 || command -v clang)
if [ -z "$cc" ]; then
	echo "tests/fuzz/run.sh: clang not found (scripts/install-deps)" >&2
	echo "0 passed, 1 failed"
	exit 1
fi
if [ ! -f "$build/build.ninja" ]; then
	CC=$cc meson setup "$build" --buildtype=debugoptimized \
		-Dfuzz=true -Dcuda=disabled -Dman=disabled \
		-Db_sanitize=address,undefined -Db_lundef=false \
		-Dc_args="-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined" \
		>"$build.setup.log" 2>&1 || {
		cat "$build.setup.log"
		echo "0 passed, 1 failed"
		exit 1
	}
	rm -f "$build.setup.log"
fi
[ -n "$targets" ] ||
	targets=$(cd tests/fuzz && ls fuzz_*.c | sed 's/^fuzz_//; s/\.c$//')
exes=
for t in $targets; do
	exes="$exes tests/fuzz/fuzz_$t"
done
# shellcheck disable=SC2086
if ! ninja -C "$build" $exes >"$build/ninja-fuzz.log" 2>&1; then
	cat "$build/ninja-fuzz.log"
	echo "0 passed, 1 failed"
	exit 1
fi

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
sym=/usr/lib/llvm-14/bin/llvm-symbolizer
[ -x "$sym" ] && export ASAN_SYMBOLIZER_PATH=$sym
# Each run its own: two runs at once must not remove each other's files.
mkdir -p "$build/artifacts"
TMPDIR=$(mktemp -d "$ROOT/$build/tmp.XXXXXX") || exit 1
export TMPDIR
passed=0 failed=0 n=0
for t in $targets; do
	n=$((n + 1))
	seeds=tests/fuzz/corpus/$t
	work=$build/corpus/$t
	log=$build/fuzz-$t.log
	mkdir -p "$work" "$seeds"
	# -timeout: one input taking this long is a hang, which is a finding.
	"$build/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=20 \
		-rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$build/artifacts/$t-" \
		"$work" "$seeds" >"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	cov=$(grep -aoE 'cov: [0-9]+' "$log" | tail -1)
	if [ $rc = 0 ]; then
		passed=$((passed + 1))
		echo "ok $n - fuzz_$t: ${execs:-?} runs in ${seconds}s, ${cov:-cov: ?}"
	else
		failed=$((failed + 1))
		echo "not ok $n - fuzz_$t exited $rc; log $log"
		grep -a -A25 -E '^==[0-9]+==ERROR|check failed|runtime error|SUMMARY' \
			"$log" | head -60 | sed 's/^/# /'
		ls "$build"/artifacts/"$t"-* 2>/dev/null | sed 's/^/# input: /'
	fi
done
rm -rf "$TMPDIR"
echo "1..$n"
echo "$passed passed, $failed failed"
[ $failed = 0 ]
