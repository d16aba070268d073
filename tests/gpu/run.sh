#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# tests/gpu/run.sh: the CUDA checks of tierfs, for a machine with a GPU.
#
#   tests/gpu/run.sh            build (build-gpu/, -Dcuda=enabled) and test
#   TFS_GPU_BUILD=DIR run.sh    use another build directory
#   TFS_GPU_DRYRUN=1 run.sh     no GPU: run the same steps on the sim backend
#                               (checks the script itself; no bandwidth)
#
# 1. the cuda backend alone (tests/gpu/backend_check.c): init, copies around
#    the staging chunk size from 8 threads, zero, export, out of memory;
# 2. two processes through CUDA IPC: gpu_fill writes a file's buffer with a
#    kernel and commits, gpu_check maps it in another process and checks it
#    on the GPU, cmp sees it through the filesystem; two maps at once; a
#    leased file refuses to move (EBUSY);
# 3. spill/unspill under a 64 MiB device_limit: files bigger than the limit,
#    user.tierfs.tier moves, every byte checked with cmp and on the GPU;
# 4. throughput: a 1 GiB buffer spilled device->host (D2H) and prefetched
#    back (H2D) with setfattr, next to raw pinned cudaMemcpy (gpu_bw);
#    reclaim latency: tfs_reclaim() of 1 GiB that exists only on the GPU,
#    next to a raw 1 GiB D2H copy;
# 5. giving memory back (gpu_hog): a program that fills the GPU but for
#    512 MiB gets 2 GiB more through tfs_cuda_malloc() (a reclaim), and a
#    competing cudaMalloc loop gets 2 GiB while tierfs yields under
#    [device] reserve, the files checked on the GPU after both;
# 6. Python: tierfs.device.open() with cupy, when cupy is installed (a
#    kernel-written file compared, written through cupy, committed, read
#    with cat).
#
# Exit: 0 all passed, 1 something failed, 77 skipped (no usable GPU, or no
# FUSE), with "SKIP: <reason>" on stdout. Runs in under 5 minutes.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
CUDA=${CUDA_HOME:-/usr/local/cuda}
BUILD=${TFS_GPU_BUILD:-build-gpu}
case $BUILD in /*) ;; *) BUILD=$top/$BUILD ;; esac
HELP_DIR=$BUILD/gpu-tests
export PATH=$CUDA/bin:$PATH
START=$SECONDS

say() { printf '== %s [%ds]\n' "$*" $((SECONDS - START)); }
skip() { echo "SKIP: $*"; exit 77; }
fatal() { echo "FAIL: $*"; exit 1; }

DRYRUN=${TFS_GPU_DRYRUN:-}
BACKEND=cuda

# --- is there a GPU? ---------------------------------------------------------
if [ ! -x "$CUDA/bin/nvcc" ] || [ ! -f "$CUDA/lib64/libcudart_static.a" ]; then
	skip "no usable GPU: no CUDA toolkit under $CUDA (set CUDA_HOME)"
fi
mkdir -p "$HELP_DIR"
if [ -n "$DRYRUN" ]; then
	BACKEND=sim
	export TFS_GPU_CHECK_SHM=1
	echo "dry run: sim backend, no GPU used"
else
	command -v nvidia-smi >/dev/null 2>&1 ||
		skip "no usable GPU: nvidia-smi not found"
	smi=$(nvidia-smi -L 2>&1) ||
		skip "no usable GPU: nvidia-smi -L: ${smi%%$'\n'*}"
	echo "$smi"

	say "cuda backend, no mount (tests/gpu/backend_check.c)"
	cc -std=gnu11 -O2 -D_GNU_SOURCE -DTFS_HAVE_CUDA=1 -Wall -Wextra \
		-Wno-unused-parameter -I include -I . -isystem "$CUDA/include" \
		tests/gpu/backend_check.c tiers/device_cuda.c config/log.c \
		"$CUDA/lib64/libcudart_static.a" -ldl -lpthread -lrt \
		-o "$HELP_DIR/backend_check"
	set +e
	bc_out=$("$HELP_DIR/backend_check" 2>&1)
	bc_rc=$?
	set -e
	# cudaGetDeviceCount (or the next call) failed: the line names it.
	[ $bc_rc -eq 77 ] && skip "${bc_out#1..0 # SKIP }"
	echo "$bc_out"
	[ $bc_rc -eq 0 ] || fatal "backend_check exited $bc_rc"
fi

[ -c /dev/fuse ] || skip "no FUSE: /dev/fuse missing"

# --- build ------------------------------------------------------------------
need_pkgs=()
for t in meson:meson ninja:ninja-build pkg-config:pkg-config \
	setfattr:attr fusermount3:fuse3 cmp:diffutils; do
	command -v "${t%%:*}" >/dev/null 2>&1 || need_pkgs+=("${t#*:}")
done
for p in fuse3:libfuse3-dev liblz4:liblz4-dev inih:libinih-dev; do
	pkg-config --exists "${p%%:*}" 2>/dev/null || need_pkgs+=("${p#*:}")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
	say "installing ${need_pkgs[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if ! timeout 150 apt-get install -y --no-install-recommends \
		"${need_pkgs[@]}" >/dev/null 2>&1; then
		timeout 120 apt-get update >/dev/null 2>&1 || true
		timeout 150 apt-get install -y --no-install-recommends \
			"${need_pkgs[@]}" >/dev/null 2>&1 ||
			fatal "cannot build: apt-get could not install ${need_pkgs[*]}"
	fi
fi

say "building $BUILD with -Dcuda=enabled"
if [ -f "$BUILD/build.ninja" ]; then
	meson configure "$BUILD" -Dcuda=enabled -Dcudadir="$CUDA" \
		>"$HELP_DIR/meson.log" 2>&1 ||
		{ cat "$HELP_DIR/meson.log"; fatal "meson configure failed"; }
else
	meson setup "$BUILD" -Dcuda=enabled -Dcudadir="$CUDA" \
		>"$HELP_DIR/meson.log" 2>&1 ||
		{ cat "$HELP_DIR/meson.log"; fatal "meson setup failed"; }
fi
ninja -C "$BUILD" >"$HELP_DIR/ninja.log" 2>&1 || {
	tail -30 "$HELP_DIR/ninja.log"
	fatal "build failed"
}
TIERFS_BIN=$BUILD/fs/tierfs
TIERFSCTL_BIN=$BUILD/client/tierfsctl
EC=$BUILD/client/lib/export_client
FILL=$BUILD/examples/gpu_fill
for f in "$TIERFS_BIN" "$EC" "$FILL"; do
	[ -x "$f" ] || fatal "the build made no $f"
done
export TIERFS_BIN TIERFSCTL_BIN

# -arch=native compiles for the GPU at hand (no JIT at the first launch);
# without a GPU, or with an older nvcc, the default architectures do.
nvcc_helper() {
	local h=$1 arch
	for arch in -arch=native ""; do
		nvcc -O2 -std=c++17 $arch -cudart shared -I include -I client \
			-I examples \
			"tests/gpu/$h.cu" -L "$BUILD/client/lib" -ltierfs \
			-Xlinker -rpath="$BUILD/client/lib" -o "$HELP_DIR/$h" \
			2>"$HELP_DIR/$h.log" && return 0
	done
	cat "$HELP_DIR/$h.log" >&2
	return 1
}
nvcc_helper gpu_check &
nvcc_helper gpu_bw &
nvcc_helper gpu_hog &
wait
CHECK=$HELP_DIR/gpu_check
BW=$HELP_DIR/gpu_bw
HOG=$HELP_DIR/gpu_hog
if [ ! -x "$CHECK" ] || [ ! -x "$BW" ] || [ ! -x "$HOG" ]; then
	fatal "nvcc could not build the helpers"
fi

# shellcheck source=../integration/helpers.bash
. tests/integration/helpers.bash

# Each test runs in a subshell with set -e and its own mount, unmounted by
# its EXIT trap whatever happens.
die() { echo "FAIL: $*" >&2; exit 1; }
mount_cuda() {
	tfs_setup
	trap 'tfs_teardown' EXIT
	tfs_mount -o "device_backend=$BACKEND,$1" ||
		die "mount with device_backend=$BACKEND,$1 failed"
}
tier_of() { tfs_tier "$1"; }
now_ns() { date +%s%N; }

test_ipc() {
	mount_cuda device_limit=2G,host_limit=2G
	getfattr --only-values -n user.tierfs.stats "$MNT" 2>/dev/null | grep "$BACKEND" ||
		die "user.tierfs.stats does not name the $BACKEND backend"

	# A GPU producer: alloc + kernel + commit in one process...
	"$FILL" "$MNT/a" 11 $((64 << 20))
	# ...a GPU consumer in another, the shell through the page cache.
	"$CHECK" "$MNT/a" 11
	"$EC" pattern $((64 << 20)) 11 | cmp - "$MNT/a"
	od -An -tx1 -N16 "$MNT/a"

	# Rewrite an existing, page-cached file from the GPU.
	"$FILL" "$MNT/a" 12
	"$EC" pattern $((64 << 20)) 12 | cmp - "$MNT/a"

	# Bytes written through the filesystem reach the GPU (H2D).
	"$EC" pattern $((10 << 20)) 5 >"$MNT/b"
	"$CHECK" "$MNT/b" 5

	# Two processes map the same file at once; the lease pins it.
	"$CHECK" "$MNT/a" 12 4 >"$TFS_TMP/hold" &
	local pid=$! i
	for i in $(seq 1 100); do
		grep -qs holding "$TFS_TMP/hold" && break
		sleep 0.05
	done
	grep -q holding "$TFS_TMP/hold" || die "first gpu_check did not map"
	"$CHECK" "$MNT/a" 12
	if setfattr -n user.tierfs.tier -v disk "$MNT/a" 2>"$TFS_TMP/err"; then
		die "a leased file moved to disk"
	fi
	grep -q "busy" "$TFS_TMP/err" || die "not EBUSY: $(cat "$TFS_TMP/err")"
	wait $pid
	setfattr -n user.tierfs.tier -v disk "$MNT/a"
	[ "$(tier_of "$MNT/a")" = disk ] || die "a is not on disk"
	# Export unspills disk -> host -> device.
	"$CHECK" "$MNT/a" 12
	[ "$(tier_of "$MNT/a")" = device ] || die "export left a on $(tier_of "$MNT/a")"
}

test_spill() {
	mount_cuda device_limit=64M,host_limit=96M
	local i t n_dev=0 n_other=0
	for i in 0 1 2 3 4 5; do
		"$EC" pattern $((24 << 20)) $((i + 20)) >"$MNT/s$i"
	done
	# Bigger than the device limit: skips the device tier.
	"$EC" pattern $((80 << 20)) 30 >"$MNT/big"
	for i in 0 1 2 3 4 5; do
		t=$(tier_of "$MNT/s$i")
		echo "s$i: $t"
		if [ "$t" = device ]; then n_dev=$((n_dev + 1)); else n_other=$((n_other + 1)); fi
	done
	echo "big: $(tier_of "$MNT/big")"
	[ $n_dev -ge 1 ] || die "no file on the device"
	[ $n_other -ge 1 ] || die "nothing spilled under a 64M device limit"
	[ "$(tier_of "$MNT/big")" != device ] || die "big is on the device"
	for i in 0 1 2 3 4 5; do
		"$EC" pattern $((24 << 20)) $((i + 20)) | cmp - "$MNT/s$i"
	done
	"$EC" pattern $((80 << 20)) 30 | cmp - "$MNT/big"
	# Every file through every tier and back, checked on the GPU.
	for i in 0 1 2 3 4 5; do
		setfattr -n user.tierfs.tier -v disk "$MNT/s$i"
		[ "$(tier_of "$MNT/s$i")" = disk ] || die "s$i not on disk"
		setfattr -n user.tierfs.tier -v device "$MNT/s$i"
		[ "$(tier_of "$MNT/s$i")" = device ] || die "s$i not on device"
		"$CHECK" "$MNT/s$i" $((i + 20))
		setfattr -n user.tierfs.tier -v host "$MNT/s$i"
		[ "$(tier_of "$MNT/s$i")" = host ] || die "s$i not on host"
	done
	for i in 0 1 2 3 4 5; do
		"$EC" pattern $((24 << 20)) $((i + 20)) | cmp - "$MNT/s$i"
	done
	if "$CHECK" "$MNT/big" 30 2>"$TFS_TMP/err"; then
		die "a file bigger than device_limit was exported"
	fi
	echo "export of big: $(cat "$TFS_TMP/err")"
	getfattr --only-values -n user.tierfs.stats "$MNT" 2>/dev/null |
		grep -E '^(device|host|disk)\.(used|limit|spills|unspills)='
}

# Prints "d2h_gbps=X h2d_gbps=Y": medians of 3 spills and prefetches of a
# 1 GiB buffer that exists only on the device (a GPU write dropped every
# other copy), so each spill really copies.
test_throughput() {
	mount_cuda device_limit=3G,host_limit=3G
	local size=$((1 << 30)) r t0 t1 d2h=() h2d=()
	for r in 1 2 3; do
		rm -f "$MNT/big"
		"$FILL" "$MNT/big" $r $size >/dev/null
		t0=$(now_ns)
		setfattr -n user.tierfs.tier -v host "$MNT/big"
		t1=$(now_ns)
		d2h+=($((t1 - t0)))
		[ "$(tier_of "$MNT/big")" = host ] || die "big did not spill"
		t0=$(now_ns)
		setfattr -n user.tierfs.tier -v device "$MNT/big"
		t1=$(now_ns)
		h2d+=($((t1 - t0)))
		[ "$(tier_of "$MNT/big")" = device ] || die "big did not come back"
	done
	"$CHECK" "$MNT/big" 3 >/dev/null
	med() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
	awk -v s=$size -v d="$(med "${d2h[@]}")" -v h="$(med "${h2d[@]}")" \
		'BEGIN { printf "d2h_gbps=%.2f h2d_gbps=%.2f\n", s / d, s / h }'
}

stat_of() {
	getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT" |
		sed -n "s/^$1=//p"
}

# A program that fills the GPU but for 512 MiB asks tfs_cuda_malloc() for
# 2 GiB: tierfs spills device-only files to make the room.
test_reclaim() {
	[ -z "$DRYRUN" ] || { echo "dry run: needs a GPU"; return 0; }
	mount_cuda device_limit=8G,host_limit=12G,device_reserve=0
	local i
	for i in 0 1 2 3; do
		"$FILL" "$MNT/r$i" $((40 + i)) $((1 << 30)) >/dev/null
	done
	[ "$(stat_of device.used)" -ge $((4 << 30)) ] ||
		die "the files are not on the device"
	"$HOG" reclaim "$MNT" 512 2048
	[ "$(stat_of device.reclaims)" -ge 1 ] || die "no reclaim was asked"
	[ "$(stat_of device.reclaimed_bytes)" -ge $((1 << 30)) ] ||
		die "reclaimed only $(stat_of device.reclaimed_bytes) bytes"
	for i in 0 1 2 3; do
		"$CHECK" "$MNT/r$i" $((40 + i)) >/dev/null
	done
}

# Another program takes all but 256 MiB, then 2 GiB more in 256 MiB
# cudaMallocs, retrying each that fails: tierfs must yield by itself.
test_reserve() {
	[ -z "$DRYRUN" ] || { echo "dry run: needs a GPU"; return 0; }
	mount_cuda device_limit=8G,host_limit=12G,device_reserve=1G,device_poll_ms=50
	local i pid
	for i in 0 1 2 3; do
		"$FILL" "$MNT/y$i" $((50 + i)) $((1 << 30)) >/dev/null
	done
	"$HOG" loop 256 2048 256 >"$TFS_TMP/hog" 2>&1 &
	pid=$!
	for i in $(seq 1 1800); do
		grep -q '^ready' "$TFS_TMP/hog" && break
		kill -0 $pid 2>/dev/null || break
		sleep 0.05
	done
	cat "$TFS_TMP/hog"
	grep -q 'held_mib=2048' "$TFS_TMP/hog" ||
		{ kill $pid; die "the competing loop did not get its 2 GiB"; }
	getfattr --only-values -n user.tierfs.stats "$MNT" 2>/dev/null |
		grep -E '^device\.(used|room|free|others|reserve|yields|yield_bytes)='
	[ "$(stat_of device.yields)" -ge 1 ] || { kill $pid; die "no yield"; }
	[ "$(stat_of device.used)" -le "$(stat_of device.room)" ] ||
		{ kill $pid; die "the device tier holds more than its room"; }
	grep -q "device: yielded" "$LOG" || { kill $pid; die "no yield logged"; }
	kill -TERM $pid
	wait $pid || true
	for i in 0 1 2 3; do
		"$CHECK" "$MNT/y$i" $((50 + i)) >/dev/null
	done
}

# tierfs.device from Python with cupy, zero copy.
test_python_cupy() {
	local py=/usr/bin/python3
	if ! "$py" -c 'import cupy' 2>/dev/null; then
		echo "cupy is not installed: skipped"
		return 0
	fi
	mount_cuda device_limit=2G,host_limit=2G
	"$FILL" "$MNT/p" 7 $((64 << 20)) >/dev/null
	PYTHONPATH=$top/python TIERFS_CUDART=$CUDA/lib64/libcudart.so "$py" -c '
import sys, numpy, cupy, tierfs.device as d
path = sys.argv[1]
want = numpy.fromfile(path, dtype=numpy.uint8)
with d.open(path) as b:
    a = cupy.asarray(b)
    assert a.size == want.size and cupy.asnumpy(a).tobytes() == want.tobytes()
with d.open(path, write=True) as b:
    a = cupy.asarray(b)
    a[:] = 3
    b.commit()
print("cupy ok")
' "$MNT/p"
	head -c $((64 << 20)) /dev/zero | tr '\0' '\3' | cmp - "$MNT/p"
}

# Prints "reclaim_gbps=X reclaim_ms=Y": the median of 3 tfs_reclaim()s of
# 1 GiB that exists only on the GPU (copied D2H, then freed and drained).
test_reclaim_latency() {
	mount_cuda device_limit=3G,host_limit=3G,device_reserve=0
	local r ms=()
	for r in 1 2 3; do
		rm -f "$MNT/big"
		"$FILL" "$MNT/big" $r $((1 << 30)) >/dev/null
		ms+=("$("$HOG" reclaim-only "$MNT" 1024 |
			sed -n 's/^reclaim_ms=\([0-9.]*\) freed_mib=1024$/\1/p')")
		[ -n "${ms[-1]}" ] || die "reclaim gave back less than 1 GiB"
		[ "$(tier_of "$MNT/big")" = host ] || die "big was not spilled"
	done
	local m
	m=$(printf '%s\n' "${ms[@]}" | sort -n | sed -n 2p)
	awk -v m="$m" 'BEGIN { printf "reclaim_gbps=%.2f reclaim_ms=%.1f\n",
		1073741824 / (m * 1e6), m }'
}

failed=0
run_test() {
	local name=$1 rc
	say "$name"
	set +e
	(set -e; "$name")
	rc=$?
	set -e
	if [ $rc -eq 0 ]; then
		echo "PASS: $name"
	else
		echo "FAIL: $name"
		failed=1
	fi
}

run_test test_ipc
run_test test_spill
run_test test_reclaim
run_test test_reserve
run_test test_python_cupy

say "throughput, 1 GiB"
set +e
spill=$( (set -e; test_throughput) | tail -1)
if [ -n "$DRYRUN" ]; then
	raw="h2d_gbps=1 d2h_gbps=1 (dry run: not measured)"
	reclaim="reclaim: dry run, not measured"
else
	raw=$("$BW" 1024 3)
	reclaim=$( (set -e; test_reclaim_latency) | tail -1)
fi
set -e
echo "tierfs: $spill"
echo "raw pinned cudaMemcpy: $raw"
echo "tierfs reclaim, 1 GiB: $reclaim"
get() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
if [ -n "$(get d2h_gbps "$spill")" ] && [ -n "$(get d2h_gbps "$raw")" ]; then
	printf '%-28s %10s %12s %7s\n' case tierfs "raw pinned" ratio
	for dir in d2h h2d; do
		case $dir in
		d2h) label="spill D2H (device->host)" ;;
		h2d) label="prefetch H2D (host->device)" ;;
		esac
		awk -v l="$label" -v a="$(get ${dir}_gbps "$spill")" \
			-v b="$(get ${dir}_gbps "$raw")" 'BEGIN {
			printf "%-28s %7.2f GB/s %7.2f GB/s %6.2fx\n",
				l, a, b, a / b }'
	done
	if [ -n "$(get reclaim_gbps "$reclaim")" ]; then
		awk -v a="$(get reclaim_gbps "$reclaim")" \
			-v ms="$(get reclaim_ms "$reclaim")" \
			-v b="$(get d2h_gbps "$raw")" 'BEGIN {
			printf "%-28s %7.2f GB/s %7.2f GB/s %6.2fx (%.1f ms)\n",
				"reclaim 1 GiB (D2H+free)", a, b, a / b, ms }'
	elif [ -z "$DRYRUN" ]; then
		echo "FAIL: reclaim latency"
		failed=1
	fi
else
	echo "FAIL: throughput"
	failed=1
fi

say "done"
[ $failed -eq 0 ] && echo "PASS: tests/gpu/run.sh" || echo "FAIL: tests/gpu/run.sh"
exit $failed
