#!/bin/bash
# End-to-end Dask test: mount a private tierfs with small tier limits (sim
# device 32M, host 64M, so data goes through every tier), run tests/dask/e2e.py
# on it with Debian's python, unmount. Prints PASS or FAIL last; exit 0 on
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
[ -x "$TIERFS_BIN" ] || skip "no tierfs binary at '$TIERFS_BIN'"
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

start=$(date +%s)
PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH} timeout 300 \
	"$PYTHON" tests/dask/e2e.py "$MNT"
rc=$?
echo "tests/dask/run.sh: e2e took $(($(date +%s) - start))s, exit $rc"
if ! kill -0 "$TFS_PID" 2>/dev/null; then
	echo "tierfs died during the run:"
	cat "$LOG"
	echo "FAIL: tests/dask/run.sh: tierfs died"
	exit 1
fi
if [ $rc != 0 ]; then
	echo "--- tierfs log (last 30 lines)"
	tail -30 "$LOG"
	echo "FAIL: tests/dask/run.sh"
	exit 1
fi
echo "PASS: tests/dask/run.sh"
