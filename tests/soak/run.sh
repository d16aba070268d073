#!/bin/bash
# The soak: a tierfs with tiny limits, under AddressSanitizer, loaded for M
# minutes by writers, readers, renamers, exporters (sim backend) and a mover
# (tests/soak/soak.py), with SIGHUPs changing the limits every few seconds.
# At the end every file is checked against its model, the daemon's RSS
# beyond what its tiers hold against what it was after the warm-up, the
# daemon's log for sanitizer reports, and the spill directory for leftovers.
#
# Usage: tests/soak/run.sh [--minutes M] [--build DIR] [--seed S] [--keep]
#   --build  an ASan build (default build-san, set up as tests/run
#            --sanitize does when missing)
#   --keep   leave the run's directory (log, config, results) behind
#
# Ends with "N passed, N failed"; exits non-zero when anything failed.
set -u
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD

minutes=1
build=build-san
seed=$RANDOM
keep=0
while [ $# -gt 0 ]; do
	case $1 in
	--minutes) minutes=$2; shift ;;
	--build) build=$2; shift ;;
	--seed) seed=$2; shift ;;
	--keep) keep=1 ;;
	-h|--help) sed -n '2,14p' "$0"; exit 0 ;;
	*) echo "tests/soak/run.sh: unknown argument '$1'" >&2; exit 2 ;;
	esac
	shift
done

die() {
	echo "tests/soak/run.sh: $*" >&2
	echo "0 passed, 1 failed"
	exit 1
}

if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" -Dwerror=true --buildtype=debugoptimized \
		-Db_sanitize=address,undefined -Db_lundef=false >/dev/null ||
		die "meson setup failed"
fi
ninja -C "$build" >"$build/ninja-soak.log" 2>&1 ||
	{ cat "$build/ninja-soak.log"; die "build failed"; }
bin=$ROOT/$build/fs/tierfs
ec=$ROOT/$build/client/lib/export_client
ldd "$bin" | grep -q libasan ||
	die "'$bin' is not built with AddressSanitizer (use an ASan build)"
[ -x "$ec" ] || die "no export_client at '$ec'"

tmp=$(mktemp -d /tmp/tierfs-soak.XXXXXX)
mnt=$tmp/mnt
spill=$tmp/spill
conf=$tmp/tierfs.conf
log=$tmp/tierfs.log
mkdir -p "$mnt" "$spill"
printf '[device]\nbackend = sim\nlimit = 4M\n[host]\nlimit = 8M\n[disk]\npath = %s\nlimit = 1G\n' \
	"$spill" >"$conf"

# A small quarantine: ASan would otherwise keep 256 MiB of freed memory,
# which the RSS check would read as growth.
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:quarantine_size_mb=16:malloc_context_size=20
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$ROOT/tests/lsan.supp
"$bin" "$mnt" -f -o "config=$conf" 2>"$log" &
pid=$!
for _ in $(seq 1 400); do
	mountpoint -q "$mnt" && break
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.05
done
mountpoint -q "$mnt" || { cat "$log"; rm -rf "$tmp"; die "tierfs did not mount"; }

echo "# soak: $minutes min, seed $seed, pid $pid, in $tmp"
passed=0 failed=0
python3 tests/soak/soak.py --mount "$mnt" --pid "$pid" --config "$conf" \
	--spill "$spill" --export-client "$ec" --out "$tmp/results" \
	--minutes "$minutes" --seed "$seed" | tee "$tmp/soak.out"
passed=$((passed + $(grep -c '^ok ' "$tmp/soak.out")))
failed=$((failed + $(grep -c '^not ok ' "$tmp/soak.out")))
grep -q '^ok .*daemon alive' "$tmp/soak.out" ||
	{ [ "$(grep -c '^not ok .*daemon alive' "$tmp/soak.out")" = 1 ] ||
		failed=$((failed + 1)); }

n=$((passed + failed))
result() { # NAME OK
	n=$((n + 1))
	if [ "$2" = 0 ]; then
		passed=$((passed + 1)); echo "ok $n - $1"
	else
		failed=$((failed + 1)); echo "not ok $n - $1"
	fi
}

fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt"
for _ in $(seq 1 600); do
	kill -0 "$pid" 2>/dev/null || break
	sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
	kill -9 "$pid"
	result "daemon exits after unmount" 1
else
	wait "$pid"
	result "daemon exits 0 after unmount (LeakSanitizer included)" $?
fi
! grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$log"
result "no sanitizer report in the daemon's log" $?
[ -z "$(find "$spill" -mindepth 1 2>/dev/null)" ]
result "no spill file left" $?
grep -E 'error|cannot' "$log" | sort | uniq -c | sort -rn | head -10 |
	sed 's/^/# log: /'
if [ $keep = 1 ] || [ $failed != 0 ]; then
	echo "# kept $tmp"
else
	rm -rf "$tmp"
fi
echo "$passed passed, $failed failed"
[ $failed = 0 ]
