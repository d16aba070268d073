#!/usr/bin/env bats
# The cuda backend and libtierfs as the real runtime behaves, against a
# daemon linked with tests/gpu/cuda_mock.c (a fake runtime as strict as a
# GPU: 2 MiB blocks shared by small allocations, sticky errors, IPC that
# aborts when memory an importer still maps is freed, several devices).
# Run by tests/gpu/mock_check.sh, which sets:
#   TIERFS_BIN     the daemon relinked with the mock
#   EXPORT_CLIENT  tests/integration/export_client with the mock preloaded
#   MOCK_CLIENT    tests/gpu/mock_client.c, built, with the mock preloaded

load mock_helpers

# hold OUT CMD...: run a client in the background until it prints "ready".
hold() {
	local out=$1
	shift
	"$@" >"$out" 2>&1 &
	HOLD_PID=$!
	HOLDERS+=("$HOLD_PID")
	tfs_wait_line "$out" ready "$HOLD_PID"
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

# The bytes the daemon holds for FILE, read past the page cache: moved to
# host (a device-to-host copy of the live allocation), then compared.
cmp_held() {
	setfattr -n user.tierfs.tier -v host "$MNT/$1"
	cmp "$TFS_TMP/$2" "$MNT/$1"
}

@test "a write through a read map changes nothing the file serves" {
	mount_cuda
	mkfile f $((3 << 20))
	[ "$(tfs_tier "$MNT/f")" = device ]
	run "$MOCK_CLIENT" writeread "$MNT/f"
	[ "$status" -eq 0 ]
	[ "$output" = "wrote $((3 << 20))" ]
	# The next map shows the file's bytes, not the writer's.
	run "$MOCK_CLIENT" window "$MNT/f" "$TFS_TMP/f"
	[[ "${lines[0]}" == "window holds $TFS_TMP/f at +0" ]]
	cmp_held f f
	kill -0 "$TFS_PID"
}

@test "a read map is a snapshot: the owner writes and moves the file under it" {
	mount_cuda
	mkfile f $((3 << 20))
	"$MOCK_CLIENT" keep "$MNT/f" read "$TFS_TMP/go" >"$TFS_TMP/out" 2>&1 &
	local pid=$! i
	HOLDERS+=($pid)
	for i in $(seq 1 200); do grep -q '^closed' "$TFS_TMP/out" && break; sleep 0.05; done
	grep -q '^closed' "$TFS_TMP/out"
	head -c $((3 << 20)) /dev/urandom >"$TFS_TMP/g"
	cp "$TFS_TMP/g" "$MNT/f"
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	setfattr -n user.tierfs.tier -v device "$MNT/f"
	rm "$MNT/f"
	# The holder's block was not freed under it (the mock aborts).
	touch "$TFS_TMP/go"
	for i in $(seq 1 200); do grep -q '^wrote' "$TFS_TMP/out" && break; sleep 0.05; done
	grep -q '^wrote' "$TFS_TMP/out"
	kill -0 "$TFS_PID"
	kill -TERM "$pid"
	wait "$pid"
	kill -0 "$TFS_PID"
}

@test "a write map whose descriptor closed first is detached, and kept until its process goes" {
	mount_cuda
	mkfile f $((3 << 20))
	"$MOCK_CLIENT" keep "$MNT/f" write "$TFS_TMP/go" >"$TFS_TMP/out" 2>&1 &
	local pid=$! i
	HOLDERS+=($pid)
	for i in $(seq 1 200); do grep -q '^closed' "$TFS_TMP/out" && break; sleep 0.05; done
	grep -q '^closed' "$TFS_TMP/out"
	# The lease ended with the descriptor: the owner may rewrite, move
	# and remove the file; the old mapping must neither see nor change
	# it, and its memory must not be freed while it is open (the mock
	# aborts the daemon if it is).
	head -c $((3 << 20)) /dev/urandom >"$TFS_TMP/g"
	cp "$TFS_TMP/g" "$MNT/f"
	[ "$(tfs_tier "$MNT/f")" = device ]
	touch "$TFS_TMP/go"
	for i in $(seq 1 200); do grep -q '^wrote' "$TFS_TMP/out" && break; sleep 0.05; done
	grep -q '^wrote' "$TFS_TMP/out"
	cmp_held f g
	setfattr -n user.tierfs.tier -v device "$MNT/f"
	cmp "$TFS_TMP/g" "$MNT/f"
	rm "$MNT/f"
	kill -0 "$TFS_PID"
	kill -TERM "$pid"
	wait "$pid"
	# Gone: its block is freed (at the latest when the daemon stops),
	# without an abort.
	kill -0 "$TFS_PID"
	tfs_unmount
	! grep -q 'mock: cudaFree' "$LOG"
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
	[ "$status" -ne 0 ]
	[ "$status" -ne 124 ]
	[[ "$output" == *"exclusive-process compute mode"* ]]
	run ! tfs_mounted "$MNT"
	# auto falls back to no device tier, and says why.
	tfs_mount -o device_backend=auto
	[ "$(tfs_stat backend)" = none ]
	grep -q "exclusive-process compute mode" "$LOG"
}

# Unmount and wait for the daemon to exit, so that the fake runtime has
# written its stats: a bounded wait, long for a loaded machine.
unmount_wait() {
	local i
	fusermount3 -u "$MNT"
	for i in $(seq 1 600); do
		kill -0 "$TFS_PID" 2>/dev/null || break
		sleep 0.1
	done
	tfs_unmount
}

# mstat FILE KEY: KEY's number in the fake runtime's stats line at FILE.
mstat() {
	awk -v k="$2" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }' "$1"
}

@test "the device tier is charged whole 2 MiB blocks" {
	mount_cuda
	mkfile a 4096
	[ "$(tfs_tier "$MNT/a")" = device ]
	[ "$(tfs_stat device.used)" -eq $((2 << 20)) ]
	mkfile b $(((2 << 20) + 4096))
	[ "$(tfs_tier "$MNT/b")" = device ]
	[ "$(tfs_stat device.used)" -eq $((6 << 20)) ]
	[ "$(getfattr --only-values -n user.tierfs.stored_size "$MNT/b")" -eq $((4 << 20)) ]
	# A 64 MiB tier holds 32 blocks, however small the files.
	for i in $(seq 1 40); do echo "$i" >"$MNT/s$i"; done
	[ "$(tfs_stat device.used)" -le $((64 << 20)) ]
	for i in $(seq 1 40); do [ "$(cat "$MNT/s$i")" = "$i" ]; done
	cmp "$TFS_TMP/b" "$MNT/b"
}

@test "reads come from the clean host copy, not across PCIe" {
	TFS_MOCK_STATS=$TFS_TMP/daemon.stats mount_cuda
	mkfile f $((8 << 20))
	[ "$(tfs_tier "$MNT/f")" = device ]
	for i in 1 2 3; do cmp "$TFS_TMP/f" "$MNT/f"; done
	unmount_wait
	cat "$TFS_TMP/daemon.stats"
	[ "$(mstat "$TFS_TMP/daemon.stats" d2h)" -eq 0 ]
}

@test "a sticky GPU error fails the device once; files with a host copy stay readable" {
	# Its own stats: a dead context keeps its memory until the process
	# exits, which the fake runtime counts as left over.
	TFS_MOCK_BREAK_FILE=$TFS_TMP/break \
		TFS_MOCK_STATS=$TFS_TMP/daemon.stats mount_cuda
	mkfile a 3000000
	# g lives on the GPU only: written there and committed.
	"$EXPORT_CLIENT" alloc "$MNT/g" 1000000
	"$EXPORT_CLIENT" fill "$MNT/g" 7
	[ "$(tfs_tier "$MNT/a")" = device ]
	[ "$(tfs_tier "$MNT/g")" = device ]
	[ "$(tfs_stat device.state)" = ok ]
	local nlog
	nlog=$(wc -l <"$LOG")
	# The context breaks (an ECC error, an Xid): the next CUDA call says so.
	touch "$TFS_TMP/break"
	for i in 1 2 3 4 5; do
		run cat "$MNT/g"
		[ "$status" -ne 0 ]
		[[ "$output" == *"Input/output error"* ]]
	done
	cmp "$TFS_TMP/a" "$MNT/a"
	[ "$(tfs_stat device.state)" = failed ]
	[ "$(tfs_stat backend)" = cuda ]
	# Logged once, and nothing else about it.
	tail -n +$((nlog + 1)) "$LOG" >"$TFS_TMP/after"
	cat "$TFS_TMP/after"
	[ "$(wc -l <"$TFS_TMP/after")" -eq 1 ]
	grep -q "cuda: gpu 0 failed: .*cudaErrorECCUncorrectable" "$TFS_TMP/after"
	# Nothing new goes to the GPU, and nothing is asked of it.
	mkfile c 1000000
	[ "$(tfs_tier "$MNT/c")" = host ]
	cmp "$TFS_TMP/c" "$MNT/c"
	run "$EXPORT_CLIENT" cat "$MNT/a"
	[ "$status" -ne 0 ]
	[[ "$output" == *"No such device"* ]]
	run setfattr -n user.tierfs.tier -v device "$MNT/c"
	[ "$status" -ne 0 ]
	setfattr -n user.tierfs.tier -v disk "$MNT/a"
	cmp "$TFS_TMP/a" "$MNT/a"
	# The lost file can be written over, or removed.
	echo again >"$MNT/g"
	[ "$(cat "$MNT/g")" = again ]
	rm "$MNT/a" "$MNT/g"
	[ "$(wc -l <"$TFS_TMP/after")" -eq 1 ]
}

@test "a placement and a fetch back wait once per batch, not per chunk" {
	TFS_MOCK_STATS=$TFS_TMP/daemon.stats mount_cuda
	head -c $((32 << 20)) /dev/urandom >"$MNT/f"
	[ "$(tfs_tier "$MNT/f")" = device ]
	# Only on the GPU now, then fetched back to host.
	"$EXPORT_CLIENT" fill "$MNT/f" 3
	setfattr -n user.tierfs.tier -v host "$MNT/f"
	"$EXPORT_CLIENT" pattern $((32 << 20)) 3 | cmp - "$MNT/f"
	unmount_wait
	cat "$TFS_TMP/daemon.stats"
	local direct waits
	direct=$(mstat "$TFS_TMP/daemon.stats" direct-copies)
	waits=$(mstat "$TFS_TMP/daemon.stats" waits)
	[ "$direct" -ge 64 ]
	[ "$waits" -le $((direct / 8)) ]
}

@test "page-locked host memory is registered in slabs, not per chunk" {
	TFS_MOCK_STATS=$TFS_TMP/daemon.stats mount_cuda
	head -c $((32 << 20)) /dev/urandom >"$TFS_TMP/f"
	cp "$TFS_TMP/f" "$MNT/f"
	cmp "$TFS_TMP/f" "$MNT/f"
	unmount_wait
	cat "$TFS_TMP/daemon.stats"
	local reg
	reg=$(mstat "$TFS_TMP/daemon.stats" registers)
	# 16 MiB slabs under the 64 MiB host limit: two or three, not 32.
	[ "$reg" -ge 1 ]
	[ "$reg" -le 4 ]
	[ "$(mstat "$TFS_TMP/daemon.stats" unregisters)" -eq "$reg" ]
	[ "$(mstat "$TFS_TMP/daemon.stats" direct-copies)" -ge 32 ]
}
