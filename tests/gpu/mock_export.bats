#!/usr/bin/env bats
# The cuda backend and libtierfs as the real runtime behaves, against a
# daemon linked with tests/gpu/cuda_mock.c (a fake runtime as strict as a
# GPU: 2 MiB blocks shared by small allocations, sticky errors, IPC that
# aborts when memory an importer still maps is freed, several devices).
# Run by tests/gpu/mock_check.sh, which sets:
#   TIERFS_BIN     the daemon relinked with the mock
#   EXPORT_CLIENT  tests/integration/export_client with the mock preloaded
#   MOCK_CLIENT    tests/gpu/mock_client.c, built, with the mock preloaded

load ../integration/helpers

setup() {
	HOLDERS=()
	tfs_setup
}

teardown() {
	local pid
	for pid in "${HOLDERS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	tfs_teardown
}

mount_cuda() {
	tfs_mount -o device_backend=cuda,device_limit=64M,host_limit=64M "$@"
}

# A file of N random bytes at $MNT/NAME with a copy at $TFS_TMP/NAME.
mkfile() {
	head -c "$2" /dev/urandom >"$TFS_TMP/$1"
	cp "$TFS_TMP/$1" "$MNT/$1"
}

# hold OUT CMD...: run a client in the background until it prints "ready".
hold() {
	local out=$1 i
	shift
	"$@" >"$out" 2>&1 &
	HOLD_PID=$!
	HOLDERS+=("$HOLD_PID")
	for i in $(seq 1 200); do
		grep -q '^ready' "$out" && return 0
		if ! kill -0 "$HOLD_PID" 2>/dev/null; then
			echo "client exited:" >&2
			cat "$out" >&2
			return 1
		fi
		sleep 0.05
	done
	echo "client not ready within 10s" >&2
	cat "$out" >&2
	return 1
}

@test "a small file's map reaches no other file's bytes" {
	mount_cuda
	mkfile a 4096
	mkfile b 4096
	[ "$(tfs_tier "$MNT/a")" = device ]
	[ "$(tfs_tier "$MNT/b")" = device ]
	run "$MOCK_CLIENT" window "$MNT/a" "$TFS_TMP/b"
	[ "$status" -eq 0 ]
	# Nothing of b, and nothing of an earlier allocation past a's end.
	[ "${lines[0]}" = "window clean" ]
	[ "${lines[1]}" = "tail zero" ]
	run "$MOCK_CLIENT" window "$MNT/b" "$TFS_TMP/a"
	[ "${lines[0]}" = "window clean" ]
	[ "${lines[1]}" = "tail zero" ]
	# ...while its own bytes are there.
	run "$MOCK_CLIENT" window "$MNT/a" "$TFS_TMP/a"
	[[ "${lines[0]}" == "window holds $TFS_TMP/a at +0" ]]
}

@test "a forked child's tfs_map_close leaves the parent's map and lease" {
	mount_cuda
	mkfile f 1000000
	hold "$TFS_TMP/out" "$MOCK_CLIENT" forkclose "$MNT/f"
	[ "$(getfattr --only-values -n user.tierfs.pins "$MNT/f")" -ge 1 ]
	# The parent still maps it: it must not move (the mock aborts the
	# daemon if memory an importer maps is freed).
	run setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[ "$status" -ne 0 ]
	[[ "$output" == *"busy"* ]]
	# A forked child may not call CUDA: its close must not have tried.
	grep -q '^child exit 0$' "$TFS_TMP/out"
	kill -TERM "$HOLD_PID"
	wait "$HOLD_PID"
	grep -q '^closed$' "$TFS_TMP/out"
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	cmp "$TFS_TMP/f" "$MNT/f"
	kill -0 "$TFS_PID"
}

@test "mapping a file on GPU 1 creates no context on GPU 0" {
	export TFS_MOCK_DEVICES=2
	mount_cuda -o device_gpu=1
	mkfile f 100000
	TFS_MOCK_STATS=$TFS_TMP/client.stats "$EXPORT_CLIENT" cat "$MNT/f" \
		>"$TFS_TMP/mapped"
	cmp "$TFS_TMP/f" "$TFS_TMP/mapped"
	cat "$TFS_TMP/client.stats"
	grep -q 'contexts 0:0,1:1$' "$TFS_TMP/client.stats"
}

@test "a client that cannot see tierfs's GPU is told which, and about MIG" {
	mount_cuda
	mkfile f 100000
	run env TFS_MOCK_UUID_SALT=100 "$EXPORT_CLIENT" cat "$MNT/f"
	[ "$status" -ne 0 ]
	[[ "$output" == *"no visible CUDA device has the UUID of tierfs's GPU (01020304-0506-0708-090a-0b0c0d0e0f10; 1 visible)"* ]]
	run env TFS_MOCK_UUID_SALT=100 TFS_MOCK_MIG=1 "$EXPORT_CLIENT" cat "$MNT/f"
	[ "$status" -ne 0 ]
	[[ "$output" == *"sees MIG instances"* ]]
}

@test "exclusive-process compute mode: the cuda backend does not start" {
	export TFS_MOCK_COMPUTE_MODE=3
	# It must refuse, not mount (a mount would run until the timeout).
	run timeout 30 "$TIERFS_BIN" "$MNT" -f \
		-o "disk_path=$SPILL,device_backend=cuda"
	[ "$status" -ne 0 ] && [ "$status" -ne 124 ]
	[[ "$output" == *"exclusive-process compute mode"* ]]
	! mountpoint -q "$MNT"
	# auto falls back to no device tier, and says why.
	tfs_mount -o device_backend=auto
	[ "$(tfs_stat backend)" = none ]
	grep -q "exclusive-process compute mode" "$LOG"
}
