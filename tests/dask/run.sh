#!/bin/bash
# End-to-end Dask tests: mount a private tierfs with small tier limits (sim
# device 32M, host 64M, so data goes through every tier), run on it with
# Debian's python tests/dask/e2e.py (a real cluster's results), then
# tests/dask/lifecycle.py (every way a worker ends leaves nothing), the
# device store's "sim" case of tests/dask/device_cluster.py (host frames on
# a mount without a cuda device tier), then examples/dask_localcluster.py
# (it must leave no file), unmount. Prints PASS or FAIL last; exit 0 on
# PASS, 77 when a prerequisite is missing, 1 otherwise.
#
#   TIERFS_BIN=build/fs/tierfs tests/dask/run.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
: "${TIERFS_BIN:=$ROOT/build/fs/tierfs}"
: "${PYTHON:=/usr/bin/python3}"
: "${TFS_DASK_OPTS:=device_backend=sim,device_limit=32M,host_limit=64M}"

skip() { echo "SKIP: tests/dask/run.sh: $*"; exit 77; }
# tierfs is what is tested: without it the run fails, never skips.
if [ ! -x "$TIERFS_BIN" ]; then
	echo "FAIL: tests/dask/run.sh: no tierfs binary at '$TIERFS_BIN'"
	exit 1
fi
[ -e /dev/fuse ] || skip "no /dev/fuse"
"$PYTHON" -c 'import distributed, dask.dataframe, numpy, pandas' 2>/dev/null ||
	skip "$PYTHON lacks distributed, dask, numpy or pandas"

TFS_TMP=$(mktemp -d /tmp/tierfs-dask.XXXXXX)
MNT=$TFS_TMP/mnt
SPILL=$TFS_TMP/spill
LOG=$TFS_TMP/tierfs.log
mkdir -p "$MNT" "$SPILL"
TFS_PID=

teardown() {
	if mountpoint -q "$MNT"; then
		fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT"
	fi
	if [ -n "$TFS_PID" ]; then
		for _ in $(seq 1 100); do
			kill -0 "$TFS_PID" 2>/dev/null || break
			sleep 0.05
		done
		kill -0 "$TFS_PID" 2>/dev/null && kill -9 "$TFS_PID"
		wait "$TFS_PID" 2>/dev/null
	fi
	rm -rf "$TFS_TMP"
}
trap teardown EXIT

"$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,$TFS_DASK_OPTS" 2>"$LOG" &
TFS_PID=$!
for _ in $(seq 1 200); do
	mountpoint -q "$MNT" && break
	if ! kill -0 "$TFS_PID" 2>/dev/null; then
		cat "$LOG"
		echo "FAIL: tests/dask/run.sh: tierfs exited before mounting"
		exit 1
	fi
	sleep 0.05
done
if ! mountpoint -q "$MNT"; then
	cat "$LOG"
	echo "FAIL: tests/dask/run.sh: tierfs did not mount within 10s"
	exit 1
fi

# ticks PID FIELDS: the sum of fields of /proc/PID/stat (14 utime, 15
# stime, 16 cutime, 17 cstime: the process's CPU, and its reaped
# children's), in 1/100 s. The names here hold no spaces.
ticks() {
	local f n=0 s
	read -r -a s <"/proc/$1/stat" || { echo 0; return; }
	for f in "${@:2}"; do n=$((n + s[f - 1])); done
	echo $n
}

# run NAME CMD...: one part, with the daemon checked afterwards. Prints the
# part's wall time, the CPU seconds it and the daemon used and the load, so
# a slow run shows whether the machine's load or the work made it slow.
# (Workers forked by a forkserver, as e2e.py's and lifecycle.py's are, end
# as children of init and are not in the part's CPU time.)
failed=0
run() {
	local name=$1 start rc py0 fs0 py fs
	shift
	start=$(date +%s)
	py0=$(ticks $$ 16 17)
	fs0=$(ticks "$TFS_PID" 14 15)
	PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH} "$@"
	rc=$?
	py=$(($(ticks $$ 16 17) - py0))
	fs=$(($(ticks "$TFS_PID" 14 15) - fs0))
	echo "tests/dask/run.sh: $name took $(($(date +%s) - start))s, exit $rc;" \
		"cpu: python $((py / 100)).$((py % 100 / 10))s," \
		"tierfs $((fs / 100)).$((fs % 100 / 10))s; load $(cut -d' ' -f1-3 /proc/loadavg)"
	if ! kill -0 "$TFS_PID" 2>/dev/null; then
		cat "$LOG"
		echo "FAIL: tests/dask/run.sh: tierfs died during $name"
		exit 1
	fi
	if [ $rc != 0 ]; then
		echo "--- tierfs log (last 30 lines)"
		tail -30 "$LOG"
		failed=$((failed + 1))
	fi
}

run e2e timeout 300 "$PYTHON" tests/dask/e2e.py "$MNT"
run lifecycle timeout 600 "$PYTHON" tests/dask/lifecycle.py "$MNT"
# The device store on this (sim) mount keeps host frames: numpy, pandas.
run device-store-sim timeout 300 env PYTHONPATH=$ROOT/python:$ROOT/tests/dask \
	"$PYTHON" tests/dask/device_cluster.py sim "$MNT"

# The example as a user runs it, smaller; it must leave no file behind.
run example timeout 300 "$PYTHON" examples/dask_localcluster.py "$MNT" \
	--gib 0.75 --memory-limit 384MiB
left=$(find "$MNT" -mindepth 1 -not -path "$MNT/dask" | head -5)
if [ -n "$left" ]; then
	echo "left on the mount after the example: $left"
	failed=$((failed + 1))
fi

if [ $failed != 0 ]; then
	echo "FAIL: tests/dask/run.sh ($failed parts failed)"
	exit 1
fi
echo "PASS: tests/dask/run.sh"
