#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# tests/gpu/run.sh: the CUDA checks of tierfs on a machine with a GPU, from
# a bundle made here by tests/gpu/bundle.sh: no build, no apt, no network.
#
# The GPU run (the device tool of this workplace; tests/gpu/README):
#   here:  tests/gpu/bundle.sh                       (makes gpu-bundle/)
#   there: run(command='bash tests/gpu/run.sh --bundle gpu-bundle --out "$OUT"',
#              carry=["gpu-bundle"], timeout_s=480)
#   It stops starting checks at TFS_GPU_BUDGET (420 s) and ends by 450 s,
#   well inside the 480 s limit, leaving the lease time for a rerun. What
#   comes back in $OUT: summary.txt (each check ok / FAIL / SKIP with the
#   reason, the figures; rewritten after every check, so a cut run still
#   has one), run.log, preflight.txt and logs.tar.gz (every check's log).
#
# Rehearsal here:
#   TFS_GPU_DRYRUN=1 bash tests/gpu/run.sh --bundle gpu-bundle --out DIR
#   runs that same command from a copy of the tree outside the checkout:
#   as root in a bare root (tests/gpu/bare_root.sh: a chroot in a private
#   mount namespace holding only the commands a CUDA image has, its C
#   library and python3, the tree and the bundle), otherwise (or with
#   TFS_GPU_BARE=0) with PATH holding only those commands and
#   LD_LIBRARY_PATH unset, so that a file missing from the bundle shows
#   here: the mount checks on the sim backend, backend_check
#   and store_check on the fake CUDA runtime (the bundle's mock/), the
#   GPU-only checks SKIP.
#
#   --only "NAME..."            those checks alone (after the preflight),
#                               for a rerun of what failed
#   tests/gpu/run.sh            (no --bundle: tests/run) SKIP at once
#                               without a GPU; with one, make a bundle in
#                               build-gpu/bundle and run from it
#
# Every check has its own time limit and needs; one whose needs are not met
# (no FUSE mount in a gVisor sandbox, no cupy, one GPU) is SKIP with the
# reason, and the checks that need no mount run anyway:
#  preflight  in the first seconds: the bundle and its libraries, the tools,
#             nvidia-smi (driver, compute mode, MIG), /dev/nvidia-uvm,
#             /dev/fuse and a real FUSE mount, the image's python with cupy,
#             the memory stated for the machine against MemTotal
#  backend    tests/gpu/backend_check.c: the backend alone on the GPU
#  store      tests/gpu/store_check.c: the store over the backend without a
#             mount: spill, unspill, reclaim; spill and prefetch against
#             raw pinned cudaMemcpy (FAIL below 0.8x); 1 and 8 readers of
#             device-only buffers; the read map's cost and snapshots
#             shared; IPC with a second process through the export path
#  mount      the first mount, given a cold CUDA start's time (120 s)
#  ipc        two processes through CUDA IPC (gpu_fill, gpu_check, cmp),
#             two maps at once; a read map does not keep the owner from
#             moving the file
#  spill      files through every tier under a 64 MiB device limit
#  python     tierfs.device with cupy: zero copy, a commit on a stream
#  throughput spill and prefetch of 1 GiB through the mount against raw
#             pinned cudaMemcpy: FAIL below 0.8x; a 1 GiB tfs_reclaim()
#  isolation  a 4 KiB file's map scanned over its 2 MiB block for another
#             file's bytes; a kernel writing through a read map changes
#             nothing the file serves
#  forkclose  a forked child's tfs_map_close leaves the parent's write map
#  sigkill    a client killed with -9 while its kernel reads the map
#  oob        a client's kernel writes far out of bounds: its context dies,
#             the daemon's does not
#  accounting device.used against what nvidia-smi says the daemon uses
#             (SKIP where nvidia-smi cannot attribute memory to processes)
#  reclaim    a program that fills the GPU but for 512 MiB gets 2 GiB more
#             through tfs_cuda_malloc()
#  reserve    a competing cudaMalloc loop gets 2 GiB while tierfs yields
#  stress     TFS_GPU_STRESS_S (30) s of readers, GPU readers and writers,
#             churn and moves
#  ipc2, peer with two GPUs or more (SKIP with one)
#  dask       tierfs.dask.TierfsDeviceStore with cupy arrays, without a
#             cluster (SKIP where the image's python has no distributed):
#             put and get of 1 GiB next to cupy's D2D and D2H copies of it,
#             values spilled to hold device_memory_limit and brought back
#
# Memory is sized from what the machine is stated to have (TFS_GPU_RAM_GIB,
# 128; TFS_GPU_MEM_GIB, 139), not from MemTotal, which starts low on the
# GPU machine and grows as memory is used: mounts pass policy_overcommit.
#
# Exit: 0 nothing failed, 1 something failed, 77 no usable GPU (outside the
# dry run) or no bundle could be made.
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
BUNDLE=
OUT=
ONLY=
while [ $# -gt 0 ]; do
	case $1 in
	--bundle) BUNDLE=$2; shift ;;
	--out) OUT=$2; shift ;;
	--only) ONLY=" $2 "; shift ;;
	-h | --help) sed -n '2,70p' "$0"; exit 0 ;;
	*) echo "run.sh: unknown argument '$1'" >&2; exit 2 ;;
	esac
	shift
done
DRYRUN=${TFS_GPU_DRYRUN:-}
BUDGET=${TFS_GPU_BUDGET:-420}
RAM_GIB=${TFS_GPU_RAM_GIB:-128}
GPU_GIB=${TFS_GPU_MEM_GIB:-139}
CUDA=${CUDA_HOME:-/usr/local/cuda}

# --- no bundle given: tests/run, or by hand -----------------------------------
if [ -z "$BUNDLE" ]; then
	if [ -z "$DRYRUN" ] && ! command -v nvidia-smi >/dev/null 2>&1; then
		echo "SKIP: no usable GPU: nvidia-smi not found"
		exit 77
	fi
	tests/gpu/bundle.sh "$top/build-gpu/bundle" || {
		echo "SKIP: no bundle could be made here"
		exit 77
	}
	BUNDLE=$top/build-gpu/bundle
fi
case $BUNDLE in /*) ;; *) BUNDLE=$top/$BUNDLE ;; esac
OUT=${OUT:-$top/gpu-out}
case $OUT in /*) ;; *) OUT=$top/$OUT ;; esac
[ -f "$BUNDLE/MANIFEST" ] || {
	echo "FAIL: no bundle at $BUNDLE (make one with tests/gpu/bundle.sh)"
	exit 1
}

# --- the dry run: the same command, from outside the checkout -----------------
# Commands a CUDA image has (an Ubuntu base, CUDA and python); anything else
# the run calls must come from the bundle.
IMAGE_TOOLS="bash sh env cat cp mv rm mkdir rmdir ln ls head tail tr sed grep
awk sort uniq wc cut date sleep seq timeout kill id stat du df tee mktemp
dirname basename readlink realpath touch chmod printf test true false xargs
find tar gzip mountpoint umount mount setpriv unshare nproc uname python3 dd
od sha256sum ldd getconf ps"
if [ -n "$DRYRUN" ] && [ -z "${TFS_GPU_RELOCATED:-}" ]; then
	case $BUNDLE in
	"$top"/*) ;;
	*) echo "FAIL: the dry run wants the bundle inside the tree"; exit 1 ;;
	esac
	# As root: in a bare root (tests/gpu/bare_root.sh), a chroot with
	# the image's commands and C library alone, so that a library or a
	# tool the bundle lacks fails here as it would there.
	if [ "$(id -u)" = 0 ] && [ "${TFS_GPU_BARE:-1}" != 0 ] &&
		command -v unshare >/dev/null && command -v chroot >/dev/null; then
		dry=$(mktemp -d /tmp/tierfs-gpu-bare.XXXXXX)
		echo "dry run: in a bare root at $dry (TFS_GPU_BARE=0: PATH alone)"
		mkdir -p "$OUT" || exit 1
		OUT=$(cd "$OUT" && pwd)
		bash "$top/tests/gpu/bare_root.sh" "$dry" "$top" "$BUNDLE" "$OUT" -- \
			${ONLY:+--only "$ONLY"}
		exit $?
	fi
	dry=$(mktemp -d /tmp/tierfs-gpu-dry.XXXXXX)
	mkdir -p "$dry/repo" "$dry/image-bin" "$dry/home"
	# What the device tool sends: tracked and untracked files git does
	# not ignore, and the carried bundle.
	git -C "$top" ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do
			[ -e "$top/$f" ] && printf '%s\0' "$f"
		done | (cd "$top" && xargs -0 cp -P --parents -t "$dry/repo")
	mkdir -p "$dry/repo/$(dirname "${BUNDLE#"$top"/}")"
	cp -a "$BUNDLE" "$dry/repo/${BUNDLE#"$top"/}"
	for t in $IMAGE_TOOLS; do
		p=$(command -v "$t") && ln -s "$p" "$dry/image-bin/$t"
	done
	echo "dry run: from $dry/repo, PATH=$dry/image-bin"
	(cd "$dry/repo" && env -i HOME="$dry/home" TERM=dumb \
		PATH="$dry/image-bin" TFS_GPU_DRYRUN=1 TFS_GPU_RELOCATED=1 \
		TFS_GPU_BUDGET="$BUDGET" ${TFS_GPU_STRESS_S:+TFS_GPU_STRESS_S=$TFS_GPU_STRESS_S} \
		bash tests/gpu/run.sh --bundle "${BUNDLE#"$top"/}" --out "$OUT" \
		${ONLY:+--only "$ONLY"})
	rc=$?
	rm -rf "$dry"
	exit $rc
fi

# --- output -------------------------------------------------------------------
mkdir -p "$OUT" || exit 1
rm -f "$OUT/summary.txt" "$OUT/run.log" "$OUT/preflight.txt" "$OUT/logs.tar.gz"
WORK=$(mktemp -d /tmp/tierfs-gpu-run.XXXXXX)
LOGS=$WORK/logs
mkdir -p "$LOGS"
exec > >(tee "$OUT/run.log") 2>&1
START=$SECONDS
say() { printf '== %s [%ds]\n' "$*" $((SECONDS - START)); }

BIN=$BUNDLE/bin
export PATH=$BIN:$PATH
export LD_LIBRARY_PATH=$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# nvidia-smi's GPU index is the CUDA ordinal then.
export CUDA_DEVICE_ORDER=PCI_BUS_ID
BACKEND=cuda
TIERFS_BIN=$BIN/tierfs
TIERFSCTL_BIN=$BIN/tierfsctl
BCHECK=$BIN/backend_check
SCHECK=$BIN/store_check
if [ -n "$DRYRUN" ]; then
	BACKEND=sim
	TIERFS_BIN=$BIN/tierfs
	BCHECK=$BUNDLE/mock/backend_check
	SCHECK=$BUNDLE/mock/store_check
	export TFS_GPU_CHECK_SHM=1 TFS_MOCK_CAPACITY=$((1 << 30))
fi
EC=$BIN/export_client
FILL=$BIN/gpu_fill
CHECK=$BIN/gpu_check
BW=$BIN/gpu_bw
PROBE=$BIN/gpu_probe
HOG=$BIN/gpu_hog
PEER=$BIN/gpu_peer
export TIERFS_BIN TIERFSCTL_BIN

# --- the summary: written after every result, and when cut ---------------------
R_KIND=() R_NAME=() R_STATE=() R_TIME=() R_WHY=()
FIGS=() DETAILS=()
CUR_CHECK=
record() { # KIND NAME STATE SECONDS WHY
	R_KIND+=("$1") R_NAME+=("$2") R_STATE+=("$3") R_TIME+=("$4") R_WHY+=("$5")
	printf '%-9s %-12s %-4s %s\n' "$1" "$2" "$3" "$5"
	write_summary
}
write_summary() {
	local i ok=0 bad=0 sk=0 verdict tmp=$OUT/.summary.tmp
	for i in "${!R_STATE[@]}"; do
		case ${R_STATE[$i]} in
		ok) ok=$((ok + 1)) ;;
		FAIL) bad=$((bad + 1)) ;;
		*) sk=$((sk + 1)) ;;
		esac
	done
	verdict=PASS
	[ $bad -eq 0 ] || verdict=FAIL
	[ $bad -gt 0 ] || [ $ok -gt 0 ] || verdict=SKIP
	{
		echo "tierfs GPU run: $verdict ($ok ok, $bad FAIL, $sk SKIP) after $((SECONDS - START)) s${CUR_CHECK:+, cut while $CUR_CHECK ran}${DRYRUN:+ (dry run: sim backend and the fake CUDA runtime)}"
		echo "bundle: $(head -2 "$BUNDLE/MANIFEST" | tr '\n' ' ')"
		echo "machine: ${MACHINE:-unknown}"
		echo
		for i in "${!R_STATE[@]}"; do
			printf '%-9s %-12s %-4s %5ss  %s\n' "${R_KIND[$i]}" \
				"${R_NAME[$i]}" "${R_STATE[$i]}" "${R_TIME[$i]}" \
				"${R_WHY[$i]}"
		done
		if [ ${#FIGS[@]} -gt 0 ]; then
			echo
			echo "figures:"
			printf '  %s\n' "${FIGS[@]}"
		fi
		if [ ${#DETAILS[@]} -gt 0 ]; then
			echo
			echo "details:"
			printf '  %s\n' "${DETAILS[@]}"
		fi
	} >"$tmp" && mv "$tmp" "$OUT/summary.txt"
}
pack_logs() {
	tar -C "$WORK" -czf "$OUT/.logs.tmp" logs 2>/dev/null &&
		mv "$OUT/.logs.tmp" "$OUT/logs.tar.gz"
}
finish() {
	trap - EXIT TERM INT
	write_summary
	pack_logs
	rm -rf "$WORK"
}
trap 'finish' EXIT
trap 'echo "cut by a signal"; exit 1' TERM INT

# --- preflight: what can be known before it is needed ----------------------------
say "preflight"
PRE=$OUT/preflight.txt
: >"$PRE"
GPU_OK= FUSE_OK= PY= GPU=${TFS_GPU:-0} NGPUS=0 MACHINE=
pre() { # NAME STATE WHY [DETAIL...]: record a preflight result
	local n=$1 st=$2 why=$3
	shift 3
	{
		echo "== $n: $st $why"
		[ $# -eq 0 ] || printf '%s\n' "$@"
	} >>"$PRE"
	record preflight "$n" "$st" $((SECONDS - START)) "$why"
}

# The bundle: its files, and that its programs start here at all (a C
# library older than the one they were built against shows now).
v=$(timeout 10 "$BIN/tierfs" --version 2>&1 | head -1)
if [ -n "$v" ] && [[ $v == *tierfs* ]]; then
	pre bundle ok "$(sed -n 1p "$BUNDLE/MANIFEST"); $v"
else
	pre bundle FAIL "bin/tierfs does not start here: ${v:-no output}"
fi

# Libraries: everything the bundle's programs link is in its lib/ or the
# image's own C library; libcuda.so.1 comes with the driver.
if command -v ldd >/dev/null 2>&1; then
	miss=()
	for f in "$BIN"/* "$BUNDLE"/mock/* "$BUNDLE"/lib/*.so*; do
		while read -r name; do
			[ "$name" = libcuda.so.1 ] && [ -n "$DRYRUN" ] && continue
			miss+=("$(basename "$f"): $name")
		done < <(ldd "$f" 2>/dev/null | awk '/not found/ { print $1 }')
		# What resolves outside the bundle must be the base system's.
		while read -r name path; do
			case $path in "$BUNDLE"/*) continue ;; esac
			case $name in
			libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | \
				librt.so.1 | libgcc_s.so.1 | libstdc++.so.6 | \
				libcuda.so.1 | libnvidia-*) ;;
			*) miss+=("$(basename "$f"): $name from $path, not the bundle") ;;
			esac
		done < <(ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }')
	done
	if [ ${#miss[@]} -eq 0 ]; then
		pre libraries ok "every library resolves in the bundle or the base system"
	else
		pre libraries FAIL "${miss[0]}$([ ${#miss[@]} -gt 1 ] && echo " and $((${#miss[@]} - 1)) more")" "${miss[@]}"
	fi
else
	pre libraries SKIP "no ldd in the image"
fi

# Tools: the bundled ones must be the bundle's.
miss=()
for t in fusermount3 setfattr getfattr cmp; do
	[ "$(command -v "$t")" = "$BIN/$t" ] || miss+=("$t is $(command -v "$t" || echo missing), not the bundle's")
done
for t in mountpoint timeout awk sed grep tar seq date mktemp; do
	command -v "$t" >/dev/null 2>&1 || miss+=("$t missing")
done
if [ ${#miss[@]} -eq 0 ]; then
	pre tools ok "bundled: fusermount3 setfattr getfattr cmp; the image: the rest"
else
	pre tools FAIL "${miss[*]}"
fi

# The GPU.
if [ -n "$DRYRUN" ]; then
	pre gpu SKIP "dry run: no GPU used"
elif ! command -v nvidia-smi >/dev/null 2>&1; then
	pre gpu SKIP "no usable GPU: nvidia-smi not found"
elif ! smi=$(timeout 30 nvidia-smi -L 2>&1); then
	pre gpu SKIP "no usable GPU: nvidia-smi -L: ${smi%%$'\n'*}"
else
	q=$(timeout 30 nvidia-smi -i "$GPU" --format=csv,noheader \
		--query-gpu=name,driver_version,compute_mode,mig.mode.current,memory.total,memory.used 2>&1)
	IFS=, read -r g_name g_driver g_mode g_mig g_total _ <<<"$q"
	g_mode=${g_mode# } g_mig=${g_mig# }
	NGPUS=$(grep -c '^GPU [0-9]' <<<"$smi")
	MACHINE="$NGPUS GPU(s), gpu $GPU:$g_name, driver${g_driver},${g_total}, compute mode $g_mode, MIG $g_mig; kernel $(uname -r)"
	timeout 30 nvidia-smi -q -i "$GPU" >"$LOGS/nvidia-smi-q.txt" 2>&1
	why=
	case $g_mode in
	Exclusive_Process) why="GPU $GPU is in exclusive-process compute mode, which tierfs refuses (nvidia-smi -i $GPU -c DEFAULT)" ;;
	Prohibited) why="GPU $GPU is in prohibited compute mode" ;;
	esac
	if [ -z "$why" ] && [ "$g_mig" = Enabled ]; then
		# Daemon and clients must run on one MIG instance.
		mig=$(grep -o 'MIG-[0-9a-fA-F-]*' <<<"$smi" | head -1)
		if [ -n "$mig" ]; then
			export CUDA_VISIBLE_DEVICES=$mig
			GPU=0 NGPUS=1
		else
			why="GPU $GPU has MIG enabled but no MIG instance"
		fi
	fi
	if [ -z "$why" ] && [ ! -c /dev/nvidia-uvm ]; then
		why="no /dev/nvidia-uvm: the CUDA runtime cannot start (nvidia-modprobe -u -c 0)"
	fi
	if [ -n "$why" ]; then
		pre gpu SKIP "$why" "$smi" "$q"
	else
		GPU_OK=1
		pre gpu ok "$MACHINE" "$smi" "$q"
	fi
fi

# FUSE, and whether a mount works here at all (a gVisor sandbox may have
# /dev/fuse and refuse the mount).
fuse_probe() {
	local d pid i
	[ -c /dev/fuse ] || { echo "no /dev/fuse"; return 1; }
	d=$(mktemp -d /tmp/tierfs-fuse-probe.XXXXXX)
	mkdir -p "$d/mnt" "$d/spill"
	"$TIERFS_BIN" "$d/mnt" -f -o "device_backend=none,host_limit=64M,disk_path=$d/spill" \
		2>"$d/log" &
	pid=$!
	for i in $(seq 1 300); do
		mountpoint -q "$d/mnt" && break
		kill -0 $pid 2>/dev/null || break
		sleep 0.05
	done
	if ! mountpoint -q "$d/mnt"; then
		kill $pid 2>/dev/null
		wait $pid 2>/dev/null
		echo "a tierfs mount did not come up: $(tail -1 "$d/log")"
		rm -rf "$d"
		return 1
	fi
	echo probe >"$d/mnt/f" && [ "$(cat "$d/mnt/f")" = probe ] &&
		getfattr --only-values -n user.tierfs.tier "$d/mnt/f" >/dev/null
	i=$?
	fusermount3 -u "$d/mnt" 2>/dev/null || umount "$d/mnt" 2>/dev/null
	wait $pid 2>/dev/null
	rm -rf "$d"
	[ $i -eq 0 ] || { echo "mounted, but a write, read or getfattr failed"; return 1; }
	echo "/dev/fuse, a mount, a write, a read and an xattr work"
}
t0=$SECONDS
if why=$(fuse_probe); then
	FUSE_OK=1
	pre fuse ok "$why"
else
	pre fuse SKIP "FUSE unusable here ($why): the mount checks are skipped, the rest run"
fi

# The image's python with cupy, not /usr/bin/python3.
why="no python3 with cupy"
for p in ${TFS_GPU_PYTHON:-} /opt/torch/.venv/bin/python3 python3 /usr/bin/python3; do
	command -v "$p" >/dev/null 2>&1 || continue
	v=$(timeout 120 "$p" -c 'import cupy; print("cupy", cupy.__version__, "sees", cupy.cuda.runtime.getDeviceCount(), "GPU(s)")' 2>&1)
	if [ $? -eq 0 ]; then
		PY=$(command -v "$p")
		break
	fi
	why="$p: $(tail -1 <<<"$v")"
done
if [ -n "$PY" ]; then
	pre python ok "$PY: $v"
else
	pre python SKIP "$why"
fi

mem=$(awk '/^MemTotal/ { print int($2 / 1048576) }' /proc/meminfo 2>/dev/null)
pre memory ok "sized from the stated ${RAM_GIB} GiB RAM and ${GPU_GIB} GiB GPU; MemTotal says ${mem:-?} GiB now, and grows with use"

if [ -z "$DRYRUN" ] && [ -z "$GPU_OK" ]; then
	echo "SKIP: no usable GPU"
	exit 77
fi

# --- the checks --------------------------------------------------------------------

# shellcheck source=../integration/helpers.bash
. tests/integration/helpers.bash

die() { echo "FAIL: $*" >&2; exit 1; }
# gpu_mount OPTS [WAIT]: tfs_mount, waiting up to WAIT seconds (a cold
# CUDA start, in the first mount, can take tens of seconds).
gpu_mount() {
	local opts="disk_path=$SPILL,$1" wait=${2:-45} i
	"$TIERFS_BIN" "$MNT" -f -o "$opts" 2>"$LOG" &
	TFS_PID=$!
	export TFS_PID
	for i in $(seq 1 $((wait * 20))); do
		mountpoint -q "$MNT" && return 0
		kill -0 "$TFS_PID" 2>/dev/null || {
			cat "$LOG" >&2
			die "tierfs exited before mounting"
		}
		sleep 0.05
	done
	cat "$LOG" >&2
	die "tierfs did not mount within ${wait}s"
}
# gpu_teardown: the EXIT trap of a check that mounted. The daemon must end
# by itself within 60 s of its unmount and with status 0: a crash at
# unmount (an abort in the CUDA backend's shutdown, a missing libgcc_s for
# pthread_cancel) fails the check, which tfs_teardown would not see.
gpu_teardown() {
	local rc=$? st i
	if [ -n "${TFS_PID:-}" ]; then
		if mountpoint -q "$MNT"; then
			fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT"
		fi
		for i in $(seq 1 1200); do
			kill -0 "$TFS_PID" 2>/dev/null || break
			sleep 0.05
		done
		if kill -0 "$TFS_PID" 2>/dev/null; then
			kill -9 "$TFS_PID" 2>/dev/null
			echo "FAIL: tierfs did not exit within 60 s of its unmount"
			[ $rc -ne 0 ] || rc=1
		fi
		st=0
		wait "$TFS_PID" 2>/dev/null || st=$?
		if [ $st -ne 0 ] && [ $rc -eq 0 ]; then
			echo "FAIL: tierfs exited with status $st after its unmount: $(tail -2 "$LOG" 2>/dev/null | tr '\n' ' ')"
			rc=1
		fi
		TFS_PID=
	fi
	cp "$LOG" "$LOGS/$CUR.daemon.log" 2>/dev/null
	tfs_teardown || [ $rc -ne 0 ] || rc=1
	exit $rc
}
mount_cuda() {
	tfs_setup
	trap gpu_teardown EXIT
	gpu_mount "device_backend=$BACKEND,device_gpu=$GPU,policy_overcommit=yes,$1" "${2:-45}"
}
tier_of() { tfs_tier "$1"; }
now_ns() { date +%s%N; }
# skip WHY: this check cannot judge here.
skip() { echo "SKIP: $*"; exit 77; }
gpu_only() { [ -z "$DRYRUN" ] || skip "dry run: needs a GPU"; }
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
# tap_of LOG: a TAP program's result (0 all ok, 1 a not ok, 77 a plan of 0
# with its SKIP reason), its skipped and failed lines as details.
tap_of() {
	local log=$1
	if grep -q '^1\.\.0 # SKIP' "$log"; then
		echo "SKIP: $(sed -n 's/^1\.\.0 # SKIP //p' "$log" | head -1)"
		return 77
	fi
	grep -q '^not ok' "$log" && return 1
	grep -q '^1\.\.[1-9]' "$log" || { echo "FAIL: no TAP plan"; return 1; }
	return 0
}

t_backend() {
	local rc
	TFS_GPU=$GPU timeout 100 "$BCHECK" >"$TFS_TMP_LOG" 2>&1
	rc=$?
	cat "$TFS_TMP_LOG"
	[ $rc -ne 124 ] || die "backend_check did not end within 100 s"
	tap_of "$TFS_TMP_LOG"
}

t_store() {
	local rc
	TFS_GPU=$GPU timeout 150 "$SCHECK" >"$TFS_TMP_LOG" 2>&1
	rc=$?
	cat "$TFS_TMP_LOG"
	[ $rc -ne 124 ] || die "store_check did not end within 150 s"
	tap_of "$TFS_TMP_LOG"
}

# The first mount pays the CUDA context's creation, and on a machine just
# started the driver's own: it gets 120 s.
t_mount() {
	local t0=$SECONDS
	mount_cuda device_limit=2G,host_limit=2G 120
	echo "figure: the first mount on the $BACKEND backend came up in $((SECONDS - t0)) s"
	[ "$(tfs_stat backend)" = "$BACKEND" ] ||
		die "user.tierfs.stats does not name the $BACKEND backend"
	[ -z "$GPU_OK" ] || state_ok
	getfattr --only-values -n user.tierfs.stats "$MNT" | grep -E '^(backend|device_model|device\.(limit|state))='
	alive
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
	# device.used is right; whether the GPU agrees, only nvidia-smi can
	# say, and in a container or a VM it often cannot.
	[ -n "$base" ] && [ -n "$smi" ] ||
		skip "nvidia-smi does not attribute GPU memory to the daemon's process here (--query-compute-apps for pid $TFS_PID: ${smi:-nothing}); device.used was right"
	# What the daemon took on top of its context and staging buffers.
	awk -v b="$base" -v s="$smi" -v u="$used" 'BEGIN {
		d = s - b; w = u / 1048576; slack = w / 20 > 32 ? w / 20 : 32
		printf "figure: nvidia-smi: +%d MiB for %d MiB of device.used\n", d, w
		exit (d < w - slack || d > w + slack) }' ||
		die "device.used and nvidia-smi disagree by more than 5%"
}

# 60 s of everything at once; every byte checked after.
t_stress() {
	mount_cuda device_limit=256M,host_limit=384M
	local end=$((SECONDS + ${TFS_GPU_STRESS_S:-30})) i n=16 pids=()
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
	[ -n "$PY" ] || skip "no python with cupy (see preflight)"
	mount_cuda device_limit=2G,host_limit=2G
	"$FILL" "$MNT/p" 7 $((64 << 20)) >/dev/null
	PYTHONPATH=$top/python "$PY" -c '
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
# On a stream of its own, committed with that stream only.
s = cupy.cuda.Stream(non_blocking=True)
with d.open(path, write=True) as b:
    with s:
        cupy.asarray(b)[:] = 4
    b.commit(stream=s)
print("cupy ok")
' "$MNT/p"
	head -c $((64 << 20)) /dev/zero | tr '\0' '\4' | cmp - "$MNT/p"
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
	local spill raw reclaim dir a b rc=0
	spill=$( (CUR=throughput; set -e; t_throughput_tierfs) | tail -1)
	raw=$("$BW" 1024 3)
	reclaim=$( (CUR=reclaim_latency; set -e; t_reclaim_latency) | tail -1)
	echo "tierfs: $spill"
	echo "raw pinned cudaMemcpy: $raw"
	echo "tierfs reclaim, 1 GiB: $reclaim"
	get() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
	[ -n "$(get d2h_gbps "$spill")" ] || die "no throughput measured through the mount"
	[ -n "$(get d2h_gbps "$raw")" ] || die "no raw pinned cudaMemcpy measured"
	for dir in d2h h2d; do
		a=$(get ${dir}_gbps "$spill")
		b=$(get ${dir}_gbps "$raw")
		# The target is 0.8x: below it is a failure, not a warning.
		awk -v l="$dir" -v a="$a" -v b="$b" 'BEGIN {
			r = a / b
			printf "figure: %s %.2f GB/s, raw pinned cudaMemcpy %.2f GB/s: %.2fx (target 0.8x) %s\n", \
				(l == "d2h" ? "spill D2H (device->host) through the mount" : \
					      "prefetch H2D (host->device) through the mount"), \
				a, b, r, r < 0.8 ? "FAIL" : "ok"
			exit r < 0.8 }' || rc=1
	done
	if [ -n "$(get reclaim_gbps "$reclaim")" ]; then
		awk -v a="$(get reclaim_gbps "$reclaim")" \
			-v ms="$(get reclaim_ms "$reclaim")" \
			-v b="$(get d2h_gbps "$raw")" 'BEGIN {
			printf "figure: reclaim of 1 GiB (D2H and free) %.2f GB/s, %.2fx of raw D2H, %.1f ms\n",
				a, a / b, ms }'
	else
		echo "FAIL: reclaim latency not measured"
		rc=1
	fi
	[ $rc -eq 0 ] || die "under 0.8x of raw pinned cudaMemcpy"
}

two_gpus() {
	gpu_only
	[ "$NGPUS" -ge 2 ] || skip "$NGPUS GPU(s): needs two"
}
# mount_two OPTS: a mount serving GPUs 0 and 1.
mount_two() {
	tfs_setup
	trap gpu_teardown EXIT
	gpu_mount "device_backend=$BACKEND,device_gpus=0:1,policy_overcommit=yes,$1"
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
	[ $rc -eq 0 ]
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
	awk -v s=$size -v a="$(med "${there[@]}")" -v b="$(med "${back[@]}")" \
		-v pa="$(get peer_ab_gbps "$raw")" -v pb="$(get peer_ba_gbps "$raw")" \
		-v ca="$(get can_ab "$raw")" -v cb="$(get can_ba "$raw")" 'BEGIN {
		x = s / a; y = s / b
		printf "figure: move GPU 0 -> GPU 1 %.2f GB/s, cudaMemcpyPeer %.2f GB/s: %.2fx%s\n", \
			x, pa, x / pa, ca ? "" : " (no peer access)"
		printf "figure: move GPU 1 -> GPU 0 %.2f GB/s, cudaMemcpyPeer %.2f GB/s: %.2fx%s\n", \
			y, pb, y / pb, cb ? "" : " (no peer access)"
	}'
}

# --- running them ------------------------------------------------------------------

# tierfs.dask.TierfsDeviceStore with cupy, without a cluster: a put and a
# get of 1 GiB (figures, next to cupy copies of the same size), the store's
# share (device_memory_limit under the mount's limit) held by spilling its
# oldest values, and a spilled value back on the GPU with its bytes.
t_dask() {
	gpu_only
	[ -n "$PY" ] || skip "no python with cupy (see preflight)"
	"$PY" -c 'import distributed' 2>/dev/null ||
		skip "$PY has no distributed: the device store needs its serializers"
	mount_cuda device_limit=4G,host_limit=6G
	PYTHONPATH=$top/python "$PY" - "$MNT" <<'EOF'
import os, sys, time
import cupy, numpy
from tierfs import xattr
from tierfs.dask import TierfsDeviceStore

G = 1 << 30
root = os.path.join(sys.argv[1], "dask")
os.makedirs(root, exist_ok=True)
dev = cupy.cuda.Device()
s = TierfsDeviceStore(root, device_memory_limit="2600MiB")
a = cupy.arange(G // 4, dtype=cupy.uint32)
dev.synchronize()
t0 = time.perf_counter()
s["a"] = a
t_put = time.perf_counter() - t0
assert xattr.tier(s.file_of("a")) == "device", xattr.tier(s.file_of("a"))
assert s.device_share["enforced_by"] == "store", s.device_share
t0 = time.perf_counter()
b = s["a"]
dev.synchronize()
t_get = time.perf_counter() - t0
assert isinstance(b, cupy.ndarray) and bool((b == a).all())
del b
x = cupy.empty_like(a)
dev.synchronize()
t0 = time.perf_counter()
x[:] = a
dev.synchronize()
t_d2d = time.perf_counter() - t0
h = numpy.empty(G // 4, dtype=numpy.uint32)
t0 = time.perf_counter()
a.get(out=h)
t_d2h = time.perf_counter() - t0
del x, h
for i in range(3):
    s["v%d" % i] = cupy.full(G // 4, i, dtype=cupy.uint32)
    on = sum(xattr.stat(s.file_of(k))["stored_size"] for k in s
             if xattr.tier(s.file_of(k)) == "device")
    assert on <= 2600 << 20, (i, on)
tiers = {k: xattr.tier(s.file_of(k)) for k in s}
assert tiers["a"] != "device" and tiers["v2"] == "device", tiers
b = s["a"]
assert bool((b == a).all()) and xattr.tier(s.file_of("a")) == "device"
print("figure: device store put of 1 GiB %.1f ms, get %.1f ms; cupy d2d "
      "%.1f ms, d2h (pageable) %.1f ms" % (t_put * 1e3, t_get * 1e3,
                                           t_d2d * 1e3, t_d2h * 1e3))
s.close()
print("dask ok")
EOF
}

# shellcheck disable=SC2046 # one word per function name
export -f $(compgen -A function)
export top CUDA BUNDLE LOGS DRYRUN BACKEND GPU GPU_OK FUSE_OK PY NGPUS EC \
	FILL CHECK BW PROBE HOG PEER BCHECK SCHECK

# run_check NAME LIMIT [NEEDS...]: t_NAME in a shell of its own, cut at
# LIMIT seconds or at the end of the budget, whichever comes first. NEEDS:
# gpu (a usable GPU), fuse (a mount works). A check whose needs are not met,
# or that says it cannot judge (exit 77, "SKIP: why"), is SKIP.
run_check() {
	local name=$1 limit=$2 need rc t0 why left log
	shift 2
	[ -z "$ONLY" ] || [[ $ONLY == *" $name "* ]] || return 0
	for need in "$@"; do
		case $need in
		gpu) [ -n "$GPU_OK" ] || [ -n "$DRYRUN" ] ||
			{ record check "$name" SKIP 0 "no usable GPU"; return; } ;;
		fuse) [ -n "$FUSE_OK" ] ||
			{ record check "$name" SKIP 0 "needs a FUSE mount, which does not work here"; return; } ;;
		esac
	done
	left=$((START + BUDGET - SECONDS))
	if [ $left -lt 15 ]; then
		record check "$name" SKIP 0 "not run: the ${BUDGET} s budget is spent"
		return
	fi
	[ $limit -le $left ] || limit=$left
	log=$LOGS/$name.log
	say "$name (limit ${limit}s)"
	CUR_CHECK=$name
	t0=$SECONDS
	CUR=$name TFS_TMP_LOG=$LOGS/$name.tap timeout -k 5 "$limit" \
		bash -c 'trap "exit 143" TERM; set -e; "t_$CUR"' >"$log" 2>&1
	rc=$?
	CUR_CHECK=
	sed 's/^/    /' "$log" | tail -15
	while IFS= read -r why; do
		FIGS+=("$name: $why")
	done < <(sed -n 's/^#* *figure: //p' "$log")
	# A TAP program's skipped and failed checks, by name.
	while IFS= read -r why; do
		DETAILS+=("$name: $why")
	done < <(grep -E '^not ok |^ok .* # SKIP ' "$log" 2>/dev/null)
	case $rc in
	0) record check "$name" ok $((SECONDS - t0)) "" ;;
	77) why=$(sed -n 's/^SKIP: //p' "$log" | tail -1)
	    record check "$name" SKIP $((SECONDS - t0)) "${why:-skipped}" ;;
	124 | 137 | 143)
	    record check "$name" FAIL $((SECONDS - t0)) "cut at its limit of ${limit} s" ;;
	*) why=$(grep -E '^FAIL|^not ok|^die' "$log" | tail -1)
	   [ -n "$why" ] || why=$(grep -v '^ *$' "$log" | tail -1)
	   record check "$name" FAIL $((SECONDS - t0)) "${why:-exit $rc} (exit $rc)" ;;
	esac
	pack_logs
}

# Most telling first: what needs no mount, then the mount's basics, then
# the long ones. Limits are each check's own; the budget cuts the tail.
run_check backend 110 gpu
run_check store 160 gpu
run_check mount 150 fuse
run_check ipc 60 fuse
run_check spill 60 fuse
run_check python 90 gpu fuse
run_check throughput 120 gpu fuse
run_check isolation 40 gpu fuse
run_check forkclose 45 gpu fuse
run_check sigkill 45 gpu fuse
run_check oob 45 gpu fuse
run_check accounting 45 gpu fuse
run_check reclaim 90 gpu fuse
run_check reserve 90 gpu fuse
run_check stress $((${TFS_GPU_STRESS_S:-30} + 45)) fuse
run_check ipc2 60 gpu fuse
run_check peer 60 gpu fuse
run_check dask 90 gpu fuse

say "done"
write_summary
cat "$OUT/summary.txt"
grep -q '^tierfs GPU run: FAIL' "$OUT/summary.txt" && exit 1
exit 0
