#!/bin/bash
# Dask's default spilling next to TierfsStore at equal memory: each store's
# run inside one memory cgroup with the same limit, the tierfs daemon too
# (bench/dask/bench.py mounts its own tierfs for each run).
#
#   bench/dask/run.sh [--quick] [--repeats N] [--budget-mib M] [...]
#
# TIERFS_BIN: the daemon (default build/fs/tierfs). Root. Exit 77 when a
# prerequisite is missing. bench/dask/store_bench.py measures the store
# alone.
set -u
cd "$(dirname "$0")/../.." || exit 1
: "${TIERFS_BIN:=$PWD/build/fs/tierfs}"
: "${PYTHON:=/usr/bin/python3}"
export TIERFS_BIN
"$PYTHON" -c 'import distributed, dask.dataframe' 2>/dev/null ||
	{ echo "bench/dask: $PYTHON lacks distributed or dask" >&2; exit 77; }
exec "$PYTHON" bench/dask/bench.py "$@"
