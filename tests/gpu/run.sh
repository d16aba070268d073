#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# tests/gpu/run.sh: the CUDA checks of tierfs, for a machine with a GPU. One
# run fits in 10 minutes: TFS_GPU_BUDGET (560 s by default) is where it
# stops starting checks, and each check is cut at most 20 s after it.
#
#   tests/gpu/run.sh            build (build-gpu/, -Dcuda=enabled) and test
#   TFS_GPU_BUILD=DIR run.sh    use another build directory (a ready one is
#                               only brought up to date: no network needed)
#   TFS_GPU_LOGS=DIR run.sh     where every log goes (default BUILD/gpu-logs)
#   TFS_GPU_DRYRUN=1 run.sh     no GPU: the mount checks on the sim backend
#                               (checks the script itself; no GPU probes)
#
# Preflight: toolkit, driver version, compute mode, MIG state, /dev/fuse;
# then the build, offline (apt only for tools that are missing), then:
#  backend    tests/gpu/backend_check.c: the backend alone on the GPU
#  ipc        two processes through CUDA IPC (gpu_fill, gpu_check, cmp),
#             two maps at once; a read map (a private snapshot) does not
#             keep the owner from moving the file
#  spill      files through every tier under a 64 MiB device limit
#  isolation  a 4 KiB file's map scanned over its whole 2 MiB block for
#             another file's bytes; a kernel writing through a read map
#             must change nothing the file serves
#  forkclose  a forked child's tfs_map_close leaves the parent's write map
#             and lease (the file refuses to move); the parent's kernel
#             still reads the right bytes
#  sigkill    a client killed with -9 while its kernel reads the map: the
#             daemon goes on, the lease goes, the file moves
#  oob        a client's kernel writes far out of bounds: its context
#             dies, the daemon's does not and serves other files
#  accounting device.used against what nvidia-smi says the daemon uses
#  stress     60 s of readers, GPU readers and writers, churn and moves
#  reclaim    a program that fills the GPU but for 512 MiB gets 2 GiB more
#             through tfs_cuda_malloc() (gpu_hog), the files checked after
#  reserve    a competing cudaMalloc loop gets 2 GiB while tierfs yields
#             under [device] reserve
#  python     tierfs.device with cupy, when cupy is installed
#  throughput spill and prefetch of 1 GiB against raw pinned cudaMemcpy:
#             FAIL below 0.5x, WARN below 0.8x; the latency of a 1 GiB
#             tfs_reclaim() next to a raw D2H copy
#  ipc2       with two GPUs or more: the daemon on GPU 1, clients on GPU 0
#             and 1 (a kernel on GPU 0 reads the map on GPU 1 through peer
#             access); with a mount serving GPUs 0 and 1, each client's
#             export lands on its own GPU, and moves between them
#  peer       with two GPUs or more: a 1 GiB move between GPUs
#             (user.tierfs.tier = device:N) next to cudaMemcpyPeer
#             (bench/gpu_peer.cu), ratio printed, not asserted
#
# Exit: 0 all passed, 1 something failed, 77 skipped (no usable GPU, no
# FUSE, or the build cannot be made here), with "SKIP: <reason>".
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
CUDA=${CUDA_HOME:-/usr/local/cuda}
BUILD=${TFS_GPU_BUILD:-build-gpu}
case $BUILD in /*) ;; *) BUILD=$top/$BUILD ;; esac
LOGS=${TFS_GPU_LOGS:-$BUILD/gpu-logs}
case $LOGS in /*) ;; *) LOGS=$top/$LOGS ;; esac
BUDGET=${TFS_GPU_BUDGET:-560}
DRYRUN=${TFS_GPU_DRYRUN:-}
BACKEND=cuda
HELP_DIR=$BUILD/gpu-tests
export PATH=$CUDA/bin:$PATH
# nvidia-smi's GPU index is the CUDA ordinal then.
export CUDA_DEVICE_ORDER=PCI_BUS_ID

mkdir -p "$LOGS" "$HELP_DIR" || exit 1
rm -f "$LOGS"/*.log "$LOGS"/*.txt
exec > >(tee "$LOGS/run.log") 2>&1
START=$SECONDS

say() { printf '== %s [%ds]\n' "$*" $((SECONDS - START)); }
skip() {
	echo "SKIP: $*"
	echo "logs: $LOGS"
	exit 77
}
fatal() {
	echo "FAIL: $*"
	echo "logs: $LOGS"
	exit 1
}

# --- preflight ----------------------------------------------------------------
say "preflight"
if [ ! -x "$CUDA/bin/nvcc" ] || [ ! -f "$CUDA/lib64/libcudart_static.a" ]; then
	skip "no usable GPU: no CUDA toolkit under $CUDA (set CUDA_HOME)"
fi
"$CUDA/bin/nvcc" --version | tail -2 >"$LOGS/preflight.txt"
GPU=${TFS_GPU:-0}
NGPUS=0
if [ -n "$DRYRUN" ]; then
	BACKEND=sim
	export TFS_GPU_CHECK_SHM=1
	echo "dry run: sim backend, no GPU used"
else
	command -v nvidia-smi >/dev/null 2>&1 ||
		skip "no usable GPU: nvidia-smi not found"
	smi=$(nvidia-smi -L 2>&1) ||
		skip "no usable GPU: nvidia-smi -L: ${smi%%$'\n'*}"
	echo "$smi" | tee -a "$LOGS/preflight.txt"
	q=$(nvidia-smi -i "$GPU" --format=csv,noheader \
		--query-gpu=name,driver_version,compute_mode,mig.mode.current,memory.total,memory.used 2>&1) ||
		skip "no usable GPU: nvidia-smi cannot query GPU $GPU: $q"
	echo "gpu $GPU: $q" | tee -a "$LOGS/preflight.txt"
	IFS=, read -r _ g_driver g_mode g_mig _ <<<"$q"
	g_mode=${g_mode# }
	g_mig=${g_mig# }
	echo "driver ${g_driver# }, compute mode $g_mode, MIG $g_mig"
	NGPUS=$(grep -c '^GPU [0-9]' <<<"$smi")
	case $g_mode in
	Exclusive_Process)
		skip "GPU $GPU is in exclusive-process compute mode, which tierfs refuses: no client could map (nvidia-smi -i $GPU -c DEFAULT)" ;;
	Prohibited)
		skip "GPU $GPU is in prohibited compute mode" ;;
	esac
	if [ "$g_mig" = Enabled ]; then
		# Daemon and clients must run on one MIG instance.
		mig=$(grep -o 'MIG-[0-9a-fA-F-]*' <<<"$smi" | head -1)
		[ -n "$mig" ] || skip "GPU $GPU has MIG enabled but no MIG instance"
		export CUDA_VISIBLE_DEVICES=$mig
		GPU=0
		NGPUS=1
		echo "MIG: daemon and clients run on $mig"
	fi
	nvidia-smi -q -i "$GPU" >"$LOGS/nvidia-smi-q.txt" 2>&1
fi
[ -c /dev/fuse ] || skip "no FUSE: /dev/fuse missing"

# --- build, offline when it can -------------------------------------------------
say "build"
need_pkgs=()
for t in meson:meson ninja:ninja-build pkg-config:pkg-config cc:gcc \
	setfattr:attr getfattr:attr fusermount3:fuse3 cmp:diffutils; do
	command -v "${t%%:*}" >/dev/null 2>&1 || need_pkgs+=("${t#*:}")
done
for p in fuse3:libfuse3-dev liblz4:liblz4-dev inih:libinih-dev; do
	pkg-config --exists "${p%%:*}" 2>/dev/null || need_pkgs+=("${p#*:}")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
	say "installing ${need_pkgs[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt_opts=(-y --no-install-recommends -o Acquire::Retries=0
		-o Acquire::http::Timeout=15)
	if ! timeout 150 apt-get install "${apt_opts[@]}" "${need_pkgs[@]}" \
		>"$LOGS/apt.log" 2>&1; then
		timeout 90 apt-get update -o Acquire::Retries=0 >>"$LOGS/apt.log" 2>&1
		timeout 150 apt-get install "${apt_opts[@]}" "${need_pkgs[@]}" \
			>>"$LOGS/apt.log" 2>&1 ||
			skip "cannot build here: ${need_pkgs[*]} missing and apt-get could not install them (no network?); see $LOGS/apt.log"
	fi
fi
if [ -f "$BUILD/build.ninja" ]; then
	meson configure "$BUILD" -Dcuda=enabled -Dcudadir="$CUDA" \
		>"$LOGS/meson.log" 2>&1 ||
		fatal "meson configure failed: $(tail -3 "$LOGS/meson.log")"
else
	meson setup "$BUILD" --wrap-mode=nodownload -Dcuda=enabled \
		-Dcudadir="$CUDA" >"$LOGS/meson.log" 2>&1 ||
		fatal "meson setup failed: $(tail -3 "$LOGS/meson.log")"
fi
ninja -C "$BUILD" >"$LOGS/ninja.log" 2>&1 ||
	fatal "build failed: $(grep -m3 -E 'error' "$LOGS/ninja.log")"
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
	local src=$1 h arch
	h=$(basename "$src" .cu)
	for arch in -arch=native ""; do
		nvcc -O2 -std=c++17 $arch -cudart shared -I include -I client \
			-I examples -I tests/gpu "$src" -L "$BUILD/client/lib" \
			-ltierfs -Xlinker -rpath="$BUILD/client/lib" \
			-o "$HELP_DIR/$h" >"$LOGS/nvcc-$h.log" 2>&1 && return 0
	done
	return 1
}
nvcc_pids=()
for h in tests/gpu/gpu_check.cu tests/gpu/gpu_bw.cu tests/gpu/gpu_probe.cu \
	tests/gpu/gpu_hog.cu bench/gpu_peer.cu; do
	nvcc_helper "$h" &
	nvcc_pids+=($!)
done
cc -std=gnu11 -O2 -D_GNU_SOURCE -DTFS_HAVE_CUDA=1 -Wall -Wextra \
	-Wno-unused-parameter -I include -I . -isystem "$CUDA/include" \
	tests/gpu/backend_check.c tiers/device_cuda.c tiers/device_cuda_copy.c config/log.c \
	"$CUDA/lib64/libcudart_static.a" -ldl -lpthread -lrt \
	-o "$HELP_DIR/backend_check" >"$LOGS/cc-backend_check.log" 2>&1 ||
	fatal "backend_check does not build: $(head -3 "$LOGS/cc-backend_check.log")"
# Not a bare wait: that would wait for the tee of the log too.
wait "${nvcc_pids[@]}"
CHECK=$HELP_DIR/gpu_check
BW=$HELP_DIR/gpu_bw
PROBE=$HELP_DIR/gpu_probe
HOG=$HELP_DIR/gpu_hog
PEER=$HELP_DIR/gpu_peer
for h in "$CHECK" "$BW" "$PROBE" "$HOG" "$PEER"; do
	[ -x "$h" ] || fatal "nvcc could not build $(basename "$h"): see $LOGS/nvcc-$(basename "$h").log"
done

# shellcheck source=../integration/helpers.bash
. tests/integration/helpers.bash

# Each check runs in a subshell with set -e and its own mount, unmounted
# by its EXIT trap whatever happens; the daemon's log is kept.
die() { echo "FAIL: $*" >&2; exit 1; }
mount_cuda() {
	tfs_setup
	trap 'cp "$LOG" "$LOGS/$CUR.daemon.log" 2>/dev/null; tfs_teardown' EXIT
	tfs_mount -o "device_backend=$BACKEND,device_gpu=$GPU,$1" ||
		die "mount with device_backend=$BACKEND,$1 failed"
}
tier_of() { tfs_tier "$1"; }
now_ns() { date +%s%N; }
gpu_only() { [ -z "$DRYRUN" ] || { echo "dry run: needs a GPU"; exit 77; }; }
# wait_for FILE PATTERN [SECONDS]: until a line of FILE matches (bounded).
wait_for() {
	local i
	for i in $(seq 1 $((${3:-20} * 20))); do
		grep -qs -- "$2" "$1" && return 0
		sleep 0.05
	done
	return 1
}
pins_of() { getfattr --only-values -n user.tierfs.pins "$1" 2>/dev/null; }
alive() { kill -0 "$TFS_PID" 2>/dev/null || die "the daemon died"; }
state_ok() {
	[ "$(tfs_stat device.state)" = ok ] ||
		die "device.state=$(tfs_stat device.state), want ok"
}

t_backend() {
	gpu_only
	"$HELP_DIR/backend_check"
}

t_ipc() {
	mount_cuda device_limit=2G,host_limit=2G
	[ "$(tfs_stat backend)" = "$BACKEND" ] ||
		die "user.tierfs.stats does not name the $BACKEND backend"
	# A GPU producer: alloc + kernel + commit in one process...
	"$FILL" "$MNT/a" 11 $((64 << 20))
	# ...a GPU consumer in another, the shell through the page cache.
	"$CHECK" "$MNT/a" 11
	"$EC" pattern $((64 << 20)) 11 | cmp - "$MNT/a"
	# Rewrite an existing, page-cached file from the GPU.
	"$FILL" "$MNT/a" 12
	"$EC" pattern $((64 << 20)) 12 | cmp - "$MNT/a"
	# Bytes written through the filesystem reach the GPU (H2D).
	"$EC" pattern $((10 << 20)) 5 >"$MNT/b"
	"$CHECK" "$MNT/b" 5
	# Two processes map the same file at once. A read map is a private
	# snapshot: it keeps nothing in place (a write map does: forkclose).
	"$CHECK" "$MNT/a" 12 4 >"$TFS_TMP/hold" &
	local pid=$!
	wait_for "$TFS_TMP/hold" holding || die "first gpu_check did not map"
	"$CHECK" "$MNT/a" 12
	setfattr -n user.tierfs.tier -v disk "$MNT/a" 2>"$TFS_TMP/err" ||
		die "a read map kept the file from moving: $(cat "$TFS_TMP/err")"
	wait $pid || die "the first gpu_check failed"
	[ "$(tier_of "$MNT/a")" = disk ] || die "a is not on disk"
	# Export unspills disk -> host -> device.
	"$CHECK" "$MNT/a" 12
	[ "$(tier_of "$MNT/a")" = device ] || die "export left a on $(tier_of "$MNT/a")"
	alive
}

t_spill() {
	mount_cuda device_limit=64M,host_limit=96M
	local i t n_dev=0 n_other=0
	for i in 0 1 2 3 4 5; do
		"$EC" pattern $((24 << 20)) $((i + 20)) >"$MNT/s$i"
	done
	# Bigger than the device limit: skips the device tier.
	"$EC" pattern $((80 << 20)) 30 >"$MNT/big"
	for i in 0 1 2 3 4 5; do
		t=$(tier_of "$MNT/s$i")
		if [ "$t" = device ]; then n_dev=$((n_dev + 1)); else n_other=$((n_other + 1)); fi
	done
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
	getfattr --only-values -n user.tierfs.stats "$MNT" 2>/dev/null |
		grep -E '^(device|host|disk)\.(used|limit|spills|unspills)='
	alive
}

# Defects 1 and 2 of issue 13: what a map reaches.
t_isolation() {
	gpu_only
	mount_cuda device_limit=1G,host_limit=1G
	local out
	head -c 4096 /dev/urandom >"$TFS_TMP/a"
	head -c 4096 /dev/urandom >"$TFS_TMP/b"
	cp "$TFS_TMP/a" "$MNT/a"
	cp "$TFS_TMP/b" "$MNT/b"
	[ "$(tier_of "$MNT/a")" = device ] && [ "$(tier_of "$MNT/b")" = device ] ||
		die "the 4 KiB files are not on the device"
	out=$("$PROBE" window "$MNT/a" "$TFS_TMP/b")
	echo "$out"
	grep -qx "window clean" <<<"$out" ||
		die "a map of a reaches b's bytes: $out"
	grep -qx "tail zero" <<<"$out" ||
		die "a map of a shows stale bytes past its end: $out"
	out=$("$PROBE" window "$MNT/b" "$TFS_TMP/b")
	grep -qx "window holds $TFS_TMP/b at +0" <<<"$out" ||
		die "a map of b does not show b: $out"
	# Legacy IPC has no read-only import: the kernel's write lands
	# somewhere, and must not be in what the file serves.
	"$PROBE" writeread "$MNT/b"
	cmp "$TFS_TMP/b" "$MNT/b" ||
		die "a kernel writing through a read map changed the file"
	out=$("$PROBE" window "$MNT/b" "$TFS_TMP/b")
	grep -qx "window holds $TFS_TMP/b at +0" <<<"$out" ||
		die "a write through one read map shows in the next: $out"
	state_ok
}

# Defect 4: the lease follows the map, not the open file.
t_forkclose() {
	gpu_only
	mount_cuda device_limit=1G,host_limit=1G
	"$EC" pattern $((8 << 20)) 21 >"$MNT/f"
	"$PROBE" forkclose "$MNT/f" 21 >"$TFS_TMP/out" 2>&1 &
	local pid=$!
	wait_for "$TFS_TMP/out" '^ready' || die "forkclose: $(cat "$TFS_TMP/out")"
	grep -q '^child exit 0$' "$TFS_TMP/out" ||
		die "the child's close failed: $(cat "$TFS_TMP/out")"
	[ "$(pins_of "$MNT/f")" -ge 1 ] || die "the child's close ended the lease"
	if setfattr -n user.tierfs.tier -v disk "$MNT/f" 2>/dev/null; then
		die "moved while the parent maps it"
	fi
	kill -TERM $pid
	wait $pid || die "the parent's kernel saw wrong bytes: $(cat "$TFS_TMP/out")"
	grep -q '^closed$' "$TFS_TMP/out"
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	"$EC" pattern $((8 << 20)) 21 | cmp - "$MNT/f"
	state_ok
}

t_sigkill() {
	gpu_only
	mount_cuda device_limit=1G,host_limit=1G
	"$EC" pattern $((64 << 20)) 31 >"$MNT/f"
	"$EC" pattern $((16 << 20)) 32 >"$MNT/g"
	"$PROBE" spin "$MNT/f" >"$TFS_TMP/out" 2>&1 &
	local pid=$! i
	wait_for "$TFS_TMP/out" '^running' || die "spin: $(cat "$TFS_TMP/out")"
	kill -9 $pid
	wait $pid 2>/dev/null || true
	# Its descriptors closed as it died: the lease goes.
	for i in $(seq 1 400); do
		[ "$(pins_of "$MNT/f")" = 0 ] && break
		sleep 0.05
	done
	[ "$(pins_of "$MNT/f")" = 0 ] || die "the killed client's lease stayed"
	alive
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	"$EC" pattern $((64 << 20)) 31 | cmp - "$MNT/f"
	"$CHECK" "$MNT/g" 32
	state_ok
}

t_oob() {
	gpu_only
	mount_cuda device_limit=1G,host_limit=1G
	"$EC" pattern $((4 << 20)) 41 >"$MNT/f"
	"$EC" pattern $((4 << 20)) 42 >"$MNT/g"
	local out
	out=$("$PROBE" oob "$MNT/f")
	echo "$out"
	grep -q '^oob: cudaError' <<<"$out" ||
		die "the out-of-bounds kernel did not fail: $out"
	alive
	state_ok
	"$CHECK" "$MNT/g" 42
	"$EC" pattern $((4 << 20)) 42 | cmp - "$MNT/g"
	"$EC" pattern $((4 << 20)) 41 | cmp - "$MNT/f"
}

# MiB the daemon's process uses on the GPU, as nvidia-smi sees it; empty
# when it cannot say (containers may show N/A).
smi_used() {
	nvidia-smi --query-compute-apps=pid,used_memory \
		--format=csv,noheader,nounits 2>/dev/null |
		awk -F', *' -v p="$TFS_PID" '$1 == p && $2 ~ /^[0-9]+$/ { print $2 }'
}

t_accounting() {
	gpu_only
	mount_cuda device_limit=8G,host_limit=4G
	local base used smi i want
	base=$(smi_used)
	for i in $(seq 1 256); do
		head -c 4096 /dev/urandom >"$MNT/s$i"
	done
	for i in 1 2 3 4; do
		"$EC" pattern $(((64 << 20) + 4096)) $i >"$MNT/b$i"
	done
	want=$((256 * (2 << 20) + 4 * (66 << 20)))
	used=$(tfs_stat device.used)
	echo "device.used=$used, want $want (2 MiB blocks)"
	[ "$used" -eq "$want" ] || die "device.used $used, want $want"
	smi=$(smi_used)
	if [ -z "$base" ] || [ -z "$smi" ]; then
		echo "nvidia-smi does not show the daemon's memory here: not compared"
		return 0
	fi
	# What the daemon took on top of its context and staging buffers.
	awk -v b="$base" -v s="$smi" -v u="$used" 'BEGIN {
		d = s - b; w = u / 1048576; slack = w / 20 > 32 ? w / 20 : 32
		printf "nvidia-smi: +%d MiB for %d MiB of device.used\n", d, w
		exit (d < w - slack || d > w + slack) }' ||
		die "device.used and nvidia-smi disagree by more than 5%"
}

# 60 s of everything at once; every byte checked after.
t_stress() {
	mount_cuda device_limit=256M,host_limit=384M
	local end=$((SECONDS + ${TFS_GPU_STRESS_S:-60})) i n=16 pids=()
	: >"$TFS_TMP/errors"
	for i in $(seq 0 $((n - 1))); do
		"$EC" pattern $(((i + 1) << 20)) $((i + 100)) >"$MNT/s$i"
	done
	reader() {
		local i
		while [ $SECONDS -lt $end ]; do
			i=$((RANDOM % n))
			"$EC" pattern $(((i + 1) << 20)) $((i + 100)) |
				cmp -s - "$MNT/s$i" || echo "read s$i" >>"$TFS_TMP/errors"
		done
	}
	gpu_reader() {
		local i
		while [ $SECONDS -lt $end ]; do
			i=$((RANDOM % n))
			"$CHECK" "$MNT/s$i" $((i + 100)) >/dev/null 2>"$TFS_TMP/gr.$BASHPID" ||
				grep -q "resource busy\|No space" "$TFS_TMP/gr.$BASHPID" ||
				echo "gpu read s$i: $(cat "$TFS_TMP/gr.$BASHPID")" >>"$TFS_TMP/errors"
		done
	}
	churn() {
		local j=0 sz
		while [ $SECONDS -lt $end ]; do
			sz=$(((RANDOM % 4096 + 1) * 1024))
			"$EC" pattern $sz $((j + 500)) >"$MNT/c$j" 2>/dev/null &&
				{ "$EC" pattern $sz $((j + 500)) | cmp -s - "$MNT/c$j" ||
					echo "churn c$j" >>"$TFS_TMP/errors"; }
			rm -f "$MNT/c$j"
			j=$((j + 1))
		done
	}
	gpu_writer() {
		local j=0
		while [ $SECONDS -lt $end ]; do
			if "$FILL" "$MNT/w$j" $((j + 900)) $((((j % 8) + 1) << 20)) >/dev/null 2>&1; then
				"$EC" pattern $((((j % 8) + 1) << 20)) $((j + 900)) |
					cmp -s - "$MNT/w$j" || echo "gpu write w$j" >>"$TFS_TMP/errors"
			fi
			rm -f "$MNT/w$j"
			j=$((j + 1))
		done
	}
	mover() {
		local t
		while [ $SECONDS -lt $end ]; do
			for t in device host disk; do
				setfattr -n user.tierfs.tier -v $t "$MNT/s$((RANDOM % n))" 2>/dev/null || true
			done
		done
	}
	reader & pids+=($!)
	reader & pids+=($!)
	churn & pids+=($!)
	mover & pids+=($!)
	if [ -z "$DRYRUN" ]; then
		gpu_reader & pids+=($!)
		gpu_reader & pids+=($!)
		gpu_writer & pids+=($!)
	fi
	wait "${pids[@]}"
	alive
	for i in $(seq 0 $((n - 1))); do
		"$EC" pattern $(((i + 1) << 20)) $((i + 100)) | cmp -s - "$MNT/s$i" ||
			echo "final s$i" >>"$TFS_TMP/errors"
	done
	getfattr --only-values -n user.tierfs.stats "$MNT" 2>/dev/null |
		grep -E '^(device|host|disk)\.(spills|unspills)=|^device.state='
	[ -s "$TFS_TMP/errors" ] && die "$(sort "$TFS_TMP/errors" | uniq -c | head)"
	state_ok
}

stat_of() { tfs_stat "$1"; }

# A program that fills the GPU but for 512 MiB asks tfs_cuda_malloc() for
# 2 GiB: tierfs spills device-only files to make the room.
t_reclaim() {
	gpu_only
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
t_reserve() {
	gpu_only
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
t_python() {
	gpu_only
	local py=/usr/bin/python3
	if ! "$py" -c 'import cupy' 2>/dev/null; then
		echo "cupy is not installed"
		exit 77
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
t_reclaim_latency() {
	mount_cuda device_limit=3G,host_limit=3G,device_reserve=0
	local r m ms=()
	for r in 1 2 3; do
		rm -f "$MNT/big"
		"$FILL" "$MNT/big" $r $((1 << 30)) >/dev/null
		ms+=("$("$HOG" reclaim-only "$MNT" 1024 |
			sed -n 's/^reclaim_ms=\([0-9.]*\) freed_mib=1024$/\1/p')")
		[ -n "${ms[-1]}" ] || die "reclaim gave back less than 1 GiB"
		[ "$(tier_of "$MNT/big")" = host ] || die "big was not spilled"
	done
	m=$(printf '%s\n' "${ms[@]}" | sort -n | sed -n 2p)
	awk -v m="$m" 'BEGIN { printf "reclaim_gbps=%.2f reclaim_ms=%.1f\n",
		1073741824 / (m * 1e6), m }'
}

# Prints "d2h_gbps=X h2d_gbps=Y": medians of 3 spills and prefetches of a
# 1 GiB buffer that exists only on the device (a GPU write dropped every
# other copy), so each spill really copies.
t_throughput_tierfs() {
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

t_throughput() {
	gpu_only
	local spill raw reclaim dir a b r rc=0
	spill=$( (CUR=throughput; set -e; t_throughput_tierfs) | tail -1)
	raw=$("$BW" 1024 3)
	reclaim=$( (CUR=reclaim_latency; set -e; t_reclaim_latency) | tail -1)
	echo "tierfs: $spill"
	echo "raw pinned cudaMemcpy: $raw"
	echo "tierfs reclaim, 1 GiB: $reclaim"
	get() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
	[ -n "$(get d2h_gbps "$spill")" ] && [ -n "$(get d2h_gbps "$raw")" ] ||
		die "no throughput measured"
	printf '%-28s %10s %12s %7s\n' case tierfs "raw pinned" ratio
	for dir in d2h h2d; do
		a=$(get ${dir}_gbps "$spill")
		b=$(get ${dir}_gbps "$raw")
		r=0
		awk -v l="$dir" -v a="$a" -v b="$b" 'BEGIN {
			r = a / b
			printf "%-28s %7.2f GB/s %7.2f GB/s %6.2fx %s\n", \
				(l == "d2h" ? "spill D2H (device->host)" : \
					      "prefetch H2D (host->device)"), \
				a, b, r, r < 0.5 ? "FAIL" : r < 0.8 ? "WARN" : "ok"
			exit r < 0.5 ? 2 : r < 0.8 ? 1 : 0 }' || r=$?
		case $r in
		2) rc=1 ;;
		1) echo "WARN: $dir at under 0.8x of raw pinned cudaMemcpy" ;;
		esac
	done
	if [ -n "$(get reclaim_gbps "$reclaim")" ]; then
		awk -v a="$(get reclaim_gbps "$reclaim")" \
			-v ms="$(get reclaim_ms "$reclaim")" \
			-v b="$(get d2h_gbps "$raw")" 'BEGIN {
			printf "%-28s %7.2f GB/s %7.2f GB/s %6.2fx (%.1f ms)\n",
				"reclaim 1 GiB (D2H+free)", a, b, a / b, ms }'
	else
		echo "FAIL: reclaim latency"
		rc=1
	fi
	return $rc
}

two_gpus() {
	gpu_only
	[ "$NGPUS" -ge 2 ] || { echo "$NGPUS GPU(s): needs two"; exit 77; }
}
# mount_two OPTS: a mount serving GPUs 0 and 1, or exit 77 while the store
# serves one GPU per mount.
mount_two() {
	tfs_setup
	trap 'cp "$LOG" "$LOGS/$CUR.daemon.log" 2>/dev/null; tfs_teardown' EXIT
	if ! tfs_mount -o "device_backend=$BACKEND,device_gpus=0:1,$1"; then
		grep -q 'one mount serves one GPU so far' "$LOG" && {
			echo "the store serves one GPU per mount so far"
			exit 77
		}
		die "mount with device_gpus=0:1,$1 failed"
	fi
}
gpu_of() { getfattr --only-values -n user.tierfs.device "$1" 2>/dev/null; }

# CUDA IPC across two GPUs.
t_ipc2() {
	two_gpus
	local rc=0
	(
		GPU=1
		mount_cuda device_limit=1G,host_limit=1G
		"$EC" pattern $((64 << 20)) 61 >"$MNT/a"
		for on in 1 0; do
			out=$(TFS_GPU_CHECK_ON=$on "$CHECK" "$MNT/a" 61)
			echo "client on GPU $on: $out"
			grep -q "buffer on GPU 1$" <<<"$out" ||
				die "a client on GPU $on: not GPU 1's buffer"
		done
		grep -q "match on GPU 0, buffer on GPU 1$" <<<"$out" ||
			echo "GPU 0 cannot reach GPU 1: its kernel ran on GPU 1"
		alive
	)
	(
		mount_two device_limit=1G,host_limit=1G
		"$EC" pattern $((64 << 20)) 62 >"$MNT/b"
		for on in 1 0 1; do
			out=$(TFS_GPU_CHECK_ON=$on "$CHECK" "$MNT/b" 62)
			echo "two GPUs served, client on GPU $on: $out"
			grep -q "buffer on GPU $on$" <<<"$out" ||
				die "an export from GPU $on landed elsewhere"
			[ "$(gpu_of "$MNT/b")" = $on ] ||
				die "user.tierfs.device $(gpu_of "$MNT/b"), want $on"
		done
		"$EC" pattern $((64 << 20)) 62 | cmp - "$MNT/b"
		# A client with no context gets the default GPU, 0.
		out=$("$CHECK" "$MNT/b" 62)
		grep -q "buffer on GPU 0$" <<<"$out" || die "no context: $out"
		alive
		state_ok
	) || rc=$?
	# 77: the store serves one GPU per mount so far; the rest passed.
	[ $rc -eq 0 ] || [ $rc -eq 77 ]
}

# A move between GPUs next to cudaMemcpyPeer, 1 GiB, medians of 3.
t_peer() {
	two_gpus
	local size=$((1 << 30)) raw r t0 t1 there=() back=()
	raw=$("$PEER" 1024 3 0 1) || die "gpu_peer failed: $raw"
	echo "cudaMemcpyPeer: $raw"
	mount_two device_limit=3G,host_limit=3G
	"$FILL" "$MNT/big" 71 $size >/dev/null
	setfattr -n user.tierfs.tier -v device:0 "$MNT/big"
	for r in 1 2 3; do
		t0=$(now_ns)
		setfattr -n user.tierfs.tier -v device:1 "$MNT/big"
		t1=$(now_ns)
		there+=($((t1 - t0)))
		[ "$(gpu_of "$MNT/big")" = 1 ] || die "big is not on GPU 1"
		t0=$(now_ns)
		setfattr -n user.tierfs.tier -v device:0 "$MNT/big"
		t1=$(now_ns)
		back+=($((t1 - t0)))
		[ "$(gpu_of "$MNT/big")" = 0 ] || die "big is not on GPU 0"
	done
	"$CHECK" "$MNT/big" 71 >/dev/null
	med() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
	get() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
	printf '%-28s %10s %15s %7s\n' case tierfs cudaMemcpyPeer ratio
	awk -v s=$size -v a="$(med "${there[@]}")" -v b="$(med "${back[@]}")" \
		-v pa="$(get peer_ab_gbps "$raw")" -v pb="$(get peer_ba_gbps "$raw")" \
		-v ca="$(get can_ab "$raw")" -v cb="$(get can_ba "$raw")" 'BEGIN {
		x = s / a; y = s / b
		printf "%-28s %7.2f GB/s %10.2f GB/s %6.2fx%s\n", \
			"move GPU 0 -> GPU 1", x, pa, x / pa, ca ? "" : " (no peer access)"
		printf "%-28s %7.2f GB/s %10.2f GB/s %6.2fx%s\n", \
			"move GPU 1 -> GPU 0", y, pb, y / pb, cb ? "" : " (no peer access)"
	}'
}

failed=()
passed=()
skipped=()
# Each check gets what is left of the budget, and a little more, as its
# timeout: a check cut short unmounts (its EXIT trap) and fails, and the
# run still ends with its summary inside the 10 minutes.
# shellcheck disable=SC2046 # one word per function name
export -f $(compgen -A function)
export top CUDA BUILD LOGS BUDGET DRYRUN BACKEND HELP_DIR GPU START EC FILL \
	CHECK BW PROBE HOG PEER NGPUS
run_test() {
	local name=$1 rc left=$((START + BUDGET + 20 - SECONDS))
	if [ $left -lt 30 ]; then
		echo "FAIL: $name not run: out of time (${BUDGET}s)"
		failed+=("$name(time)")
		return
	fi
	say "$name"
	CUR=$name timeout -k 10 $left \
		bash -c 'trap "exit 143" TERM; set -e; "t_$CUR"' \
		>"$LOGS/$name.log" 2>&1
	rc=$?
	sed 's/^/    /' "$LOGS/$name.log" | tail -25
	if [ $rc -eq 124 ] || [ $rc -eq 143 ]; then
		echo "FAIL: $name: cut short at the end of the budget"
		failed+=("$name(time)")
	elif [ $rc -eq 0 ]; then
		echo "PASS: $name"
		passed+=("$name")
	elif [ $rc -eq 77 ]; then
		echo "SKIP: $name"
		skipped+=("$name")
	else
		echo "FAIL: $name (see $LOGS/$name.log)"
		failed+=("$name")
	fi
}

if [ -z "$DRYRUN" ]; then
	say "backend"
	"$HELP_DIR/backend_check" >"$LOGS/backend.log" 2>&1
	rc=$?
	tail -5 "$LOGS/backend.log"
	# init failed (no device, an old driver): the line names the cause.
	[ $rc -eq 77 ] && skip "$(grep -m1 SKIP "$LOGS/backend.log")"
	if [ $rc -eq 0 ]; then passed+=(backend); else failed+=(backend); fi
fi
for t in ipc isolation forkclose sigkill oob accounting spill stress \
	throughput reclaim reserve python ipc2 peer; do
	run_test $t
done

say "done"
echo "passed: ${passed[*]:-none}"
echo "skipped: ${skipped[*]:-none}"
echo "failed: ${failed[*]:-none}"
echo "logs: $LOGS"
if [ ${#failed[@]} -eq 0 ]; then
	echo "PASS: tests/gpu/run.sh"
	exit 0
fi
echo "FAIL: tests/gpu/run.sh"
exit 1
