#!/bin/bash
# Mount a private tierfs and run bench/dask/bench.py on it (default Dask
# worker spill store on local disk vs TierfsStore, same worker limits).
#
#   bench/dask/run.sh [--quick] [--repeats N] [--local-dir DIR]
#
# TIERFS_BIN: the daemon (default build/fs/tierfs); TFS_BENCH_OPTS: mount
# options (default host_limit=1G: the device backend is auto, so a GPU is
# used where there is one). The spill directory goes under /var/tmp.
set -u
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
: "${TIERFS_BIN:=$ROOT/build/fs/tierfs}"
: "${PYTHON:=/usr/bin/python3}"
: "${TFS_BENCH_OPTS:=host_limit=1G}"
[ -x "$TIERFS_BIN" ] || { echo "bench/dask: no tierfs at '$TIERFS_BIN'" >&2; exit 77; }
"$PYTHON" -c 'import distributed, dask.dataframe' 2>/dev/null ||
	{ echo "bench/dask: $PYTHON lacks distributed or dask" >&2; exit 77; }

TMP=$(mktemp -d /var/tmp/tierfs-dask-bench.XXXXXX)
mkdir -p "$TMP/mnt" "$TMP/spill"
PID=
cleanup() {
	mountpoint -q "$TMP/mnt" && { fusermount3 -u "$TMP/mnt" || fusermount3 -uz "$TMP/mnt"; }
	[ -n "$PID" ] && wait "$PID" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT
"$TIERFS_BIN" "$TMP/mnt" -f -o "disk_path=$TMP/spill,$TFS_BENCH_OPTS" 2>"$TMP/tierfs.log" &
PID=$!
for _ in $(seq 1 200); do
	mountpoint -q "$TMP/mnt" && break
	kill -0 "$PID" 2>/dev/null || { cat "$TMP/tierfs.log"; exit 1; }
	sleep 0.05
done
mountpoint -q "$TMP/mnt" || { cat "$TMP/tierfs.log"; exit 1; }
PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH} "$PYTHON" bench/dask/bench.py "$TMP/mnt" "$@"
