#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# bench/dask/device_run.sh [BUILD] [-- device_bench.py ARGS]: the device
# store against the host-pickle store at equal memory, on the fake CUDA
# runtime (tests/gpu/cuda_mock.c): BUILD's tierfs (configured with CUDA)
# relinked with the fake, mounted with device_limit=32M,host_limit=64M
# (TFS_BENCH_OPTS), and bench/dask/device_bench.py run on it with the
# fake as the Python side's CUDA runtime. On the fake a device copy is a
# memcpy, so its times say what the store costs, not what a GPU does.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
BUILD=build
if [ $# -gt 0 ] && [ "$1" != -- ]; then BUILD=$1; shift; fi
[ "${1:-}" = -- ] && shift
CUDA=${CUDA_HOME:-/usr/local/cuda}
: "${TFS_BENCH_OPTS:=device_limit=32M,host_limit=64M}"
[ -f "$CUDA/include/cuda_runtime_api.h" ] || { echo "SKIP: no CUDA headers"; exit 77; }
out=$(mktemp -d /tmp/tierfs-devbench.XXXXXX)
pid=
cleanup() {
	if mountpoint -q "$out/mnt"; then
		fusermount3 -u "$out/mnt" 2>/dev/null || fusermount3 -uz "$out/mnt"
	fi
	[ -n "$pid" ] && wait "$pid" 2>/dev/null
	rm -rf "$out"
}
trap cleanup EXIT
ninja -C "$BUILD" >/dev/null || exit 1
link=$(ninja -C "$BUILD" -t commands fs/tierfs | tail -1)
case $link in
*libcudart_static.a*) ;;
*) echo "$BUILD has no CUDA backend"; exit 1 ;;
esac
cc -std=gnu11 -O1 -g -D_GNU_SOURCE -fPIC -Wall -isystem "$CUDA/include" \
	-c tests/gpu/cuda_mock.c -o "$out/cuda_mock.o" &&
	cc -shared "$out/cuda_mock.o" -lpthread -lrt -o "$out/libcudamock.so" || exit 1
link=$(sed -e "s| -o fs/tierfs | -o $out/tierfs |" \
	-e "s|[^ ]*libcudart_static\.a|$out/cuda_mock.o|" <<<"$link")
(cd "$BUILD" && eval "$link") || exit 1
mkdir -p "$out/mnt" "$out/spill"
export TFS_MOCK_CAPACITY=$((1 << 30))
"$out/tierfs" "$out/mnt" -f \
	-o "disk_path=$out/spill,device_backend=cuda,$TFS_BENCH_OPTS" 2>"$out/log" &
pid=$!
for _ in $(seq 1 200); do
	mountpoint -q "$out/mnt" && break
	sleep 0.05
done
mountpoint -q "$out/mnt" || { cat "$out/log"; echo "tierfs did not mount"; exit 1; }
PYTHONPATH=$top/python:$top/tests/dask TIERFS_CUDART=$out/libcudamock.so \
	/usr/bin/python3 bench/dask/device_bench.py "$out/mnt" "$@"
