#!/usr/bin/env bats
# What a CUDA export holds and for how long, against a daemon linked with
# tests/gpu/cuda_mock.c (which aborts the daemon when it frees memory a live
# process still maps through IPC): the process an export waits for, the
# device memory kept for it, readers sharing one snapshot, the lower copies
# a write export keeps, a commit waiting for one stream, and what an IPC
# failure is blamed on. Run by tests/gpu/mock_check.sh (see mock_export.bats
# for what it sets).

load mock_helpers

# hold OUT WANT CMD...: run a client in the background until its output
# has a line starting with WANT; HOLD_PID is its pid.
hold() {
	local out=$1 want=$2
	shift 2
	"$@" >"$out" 2>&1 &
	HOLD_PID=$!
	HOLDERS+=("$HOLD_PID")
	tfs_wait_line "$out" "$want" "$HOLD_PID"
}

# stop PID: SIGTERM, and its exit status must be 0.
stop() {
	kill -TERM "$1"
	wait "$1"
}

# wait_stat KEY OP VALUE: until the stat says so, at most 10 s (the freer
# looks at parked processes every 200 ms, the store every poll).
wait_stat() {
	local i
	for i in $(seq 1 200); do
		tfs_stat_is "$@" && return 0
		sleep 0.05
	done
	echo "$1 is $(tfs_stat "$1"), want $2 $3" >&2
	return 1
}

@test "an export from a thread that ended is kept while its process maps it" {
	mount_cuda
	mkfile f $((3 << 20))
	hold "$TFS_TMP/out" closed "$MOCK_CLIENT" threadkeep "$MNT/f" "$TFS_TMP/go"
	# The thread is gone; the snapshot must wait for the process (the
	# fake runtime aborts the daemon if it is freed under the mapping).
	sleep 1
	kill -0 "$TFS_PID"
	[ "$(tfs_stat device.export_held)" -eq $((4 << 20)) ]
	# The owner rewrites the file: new blocks come and go meanwhile.
	head -c $((3 << 20)) /dev/urandom >"$TFS_TMP/g"
	cp "$TFS_TMP/g" "$MNT/f"
	setfattr -n user.tierfs.tier -v host "$MNT/f"
	setfattr -n user.tierfs.tier -v device "$MNT/f"
	touch "$TFS_TMP/go"
	local i
	for i in $(seq 1 100); do grep -q '^same' "$TFS_TMP/out" && break; sleep 0.05; done
	grep -q '^same' "$TFS_TMP/out"
	kill -0 "$TFS_PID"
	stop "$HOLD_PID"
	# Its process is gone: the snapshot goes too.
	wait_stat device.export_held -eq 0
	kill -0 "$TFS_PID"
}

@test "memory kept for processes that did not unmap counts, up to the device limit" {
	mount_cuda -o device_limit=32M,host_limit=96M
	local i files=()
	for i in 1 2 3 4 5 6 7 8 9; do
		mkfile "f$i" $((3 << 20))
		files+=("$MNT/f$i")
	done
	hold "$TFS_TMP/out" ready "$MOCK_CLIENT" keepmany "${files[@]}"
	cat "$TFS_TMP/out"
	# Seven snapshots of 4 MiB fit beside the file being exported; the
	# eighth finds the tier full of memory nothing can move.
	[ "$(grep -c '^kept' "$TFS_TMP/out")" -eq 7 ]
	grep -q "^refused $MNT/f8: No space left on device" "$TFS_TMP/out"
	[ "$(tfs_stat device.export_held)" -eq $((28 << 20)) ]
	[ "$(tfs_stat device.used)" -le $((32 << 20)) ]
	[ "$(tfs_stat device.used)" -ge $((28 << 20)) ]
	# The process goes: its blocks are freed and uncharged.
	stop "$HOLD_PID"
	wait_stat device.export_held -eq 0
	[ "$(tfs_stat device.used)" -le $((8 << 20)) ]
	"$EXPORT_CLIENT" cat "$MNT/f8" | cmp - "$TFS_TMP/f8"
	kill -0 "$TFS_PID"
}

@test "readers of the same bytes share one snapshot, freed when the last goes" {
	mount_cuda
	mkfile f $((3 << 20))
	[ "$(tfs_tier "$MNT/f")" = device ]
	local a b c d
	hold "$TFS_TMP/a" holding "$MOCK_CLIENT" hold "$MNT/f"
	a=$HOLD_PID
	hold "$TFS_TMP/b" holding "$MOCK_CLIENT" hold "$MNT/f"
	b=$HOLD_PID
	hold "$TFS_TMP/c" holding "$MOCK_CLIENT" hold "$MNT/f"
	c=$HOLD_PID
	# The file's 4 MiB block and one snapshot of it, not three.
	[ "$(tfs_stat device.export_held)" -eq $((4 << 20)) ]
	[ "$(tfs_stat device.used)" -eq $((8 << 20)) ]
	# New bytes: the next reader gets a snapshot of its own, and the
	# others keep seeing what they mapped (checked as they stop).
	head -c $((3 << 20)) /dev/urandom >"$TFS_TMP/g"
	cp "$TFS_TMP/g" "$MNT/f"
	# (the holders keep it open: the close placed nothing)
	setfattr -n user.tierfs.tier -v device "$MNT/f"
	hold "$TFS_TMP/d" holding "$MOCK_CLIENT" hold "$MNT/f"
	d=$HOLD_PID
	[ "$(tfs_stat device.export_held)" -eq $((8 << 20)) ]
	"$EXPORT_CLIENT" cat "$MNT/f" | cmp - "$TFS_TMP/g"
	stop "$a"
	stop "$b"
	[ "$(tfs_stat device.export_held)" -eq $((8 << 20)) ]
	stop "$c"
	[ "$(tfs_stat device.export_held)" -eq $((4 << 20)) ]
	stop "$d"
	[ "$(tfs_stat device.export_held)" -eq 0 ]
	[ "$(tfs_stat device.used)" -eq $((4 << 20)) ]
	kill -0 "$TFS_PID"
}

@test "a write export keeps the host copy until a commit: a failed GPU loses nothing" {
	# Its own stats: a dead context keeps its memory until the process
	# exits, which the fake runtime counts as left over.
	TFS_MOCK_BREAK_FILE=$TFS_TMP/break \
		TFS_MOCK_STATS=$TFS_TMP/daemon.stats mount_cuda
	mkfile f $((3 << 20))
	mkfile c $((3 << 20))
	# g lives on the GPU only: its read notices the failure.
	"$EXPORT_CLIENT" alloc "$MNT/g" 1000000
	"$EXPORT_CLIENT" fill "$MNT/g" 7
	[ "$(tfs_tier "$MNT/f")" = device ]
	hold "$TFS_TMP/out" ready "$MOCK_CLIENT" writehold "$MNT/f" 205
	# c is written and committed: its host copy is stale, and goes.
	hold "$TFS_TMP/outc" ready "$MOCK_CLIENT" writehold "$MNT/c" 7commit
	touch "$TFS_TMP/break"
	run cat "$MNT/g"
	[ "$status" -ne 0 ]
	[ "$(tfs_stat device.state)" = failed ]
	# Nothing was committed: the file is what it was.
	cmp "$TFS_TMP/f" "$MNT/f"
	# Committed bytes are not served from the old host copy.
	run cat "$MNT/c"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Input/output error"* ]]
	kill -0 "$TFS_PID"
}

@test "a write lease ending without a commit leaves its bytes in the file" {
	mount_cuda
	mkfile f $((3 << 20))
	hold "$TFS_TMP/out" ready "$MOCK_CLIENT" writehold "$MNT/f" 205
	stop "$HOLD_PID"
	head -c $((3 << 20)) /dev/zero | tr '\0' '\315' >"$TFS_TMP/want"
	cmp "$TFS_TMP/want" "$MNT/f"
	# ...on every tier: the old host copy did not come back.
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	cmp "$TFS_TMP/want" "$MNT/f"
}

@test "a commit waits for the stream that wrote the buffer, not the whole device" {
	mount_cuda
	mkfile f $((3 << 20))
	run timeout 60 "$MOCK_CLIENT" commitstream "$MNT/f"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = committed ]
	head -c $((3 << 20)) /dev/zero | tr '\0' '\132' >"$TFS_TMP/want"
	cmp "$TFS_TMP/want" "$MNT/f"
}

@test "an IPC failure is blamed on another PID namespace only when it is one" {
	mount_cuda
	mkfile f 100000
	# In another PID namespace, with an older runtime too: the namespace
	# is the cause that was checked.
	run unshare --pid --fork env TFS_MOCK_IPC_OPEN_ERROR=1 \
		TFS_MOCK_RUNTIME_VERSION=11080 "$EXPORT_CLIENT" cat "$MNT/f"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"cudaIpcOpenMemHandle: "*"another PID namespace than tierfs"* ]]
	[[ "$output" != *"older"* ]]
	# In the daemon's namespace the hint says what it ruled out, and
	# names an older runtime as a difference only.
	run env TFS_MOCK_IPC_OPEN_ERROR=1 TFS_MOCK_RUNTIME_VERSION=11080 \
		"$EXPORT_CLIENT" cat "$MNT/f"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"same PID namespace as tierfs; GPU 0 is tierfs's (same UUID), in default compute mode; this process's CUDA runtime 11.8 is older than tierfs's 13.0"* ]]
	run env TFS_MOCK_IPC_OPEN_ERROR=1 "$EXPORT_CLIENT" cat "$MNT/f"
	[ "$status" -ne 0 ]
	[[ "$output" == *"same PID namespace as tierfs"* ]]
	[[ "$output" != *"older"* ]]
	[[ "$output" != *"another PID namespace"* ]]
	# An older runtime alone maps it: handles are the driver's.
	TFS_MOCK_RUNTIME_VERSION=11080 "$EXPORT_CLIENT" cat "$MNT/f" |
		cmp - "$TFS_TMP/f"
}

@test "python: commit(stream=) and commit(event=) wait for that work alone" {
	mount_cuda
	mkfile f $((3 << 20))
	# Stream b is kept busy by a host function until after the commit: a
	# wait for the whole device would never return (timeout).
	run env PYTHONPATH="$BATS_TEST_DIRNAME/../../python" \
		TIERFS_CUDART="$MOCK_CUDART" timeout 60 /usr/bin/python3 -c '
import ctypes, sys, time, tierfs.device as d
rt = ctypes.CDLL(sys.argv[2])
done = [False]
@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def busy(_):
    while not done[0]:
        time.sleep(0.001)
def stream():
    s = ctypes.c_void_p()
    assert rt.cudaStreamCreateWithFlags(ctypes.byref(s), 1) == 0
    return s.value
a, b = stream(), stream()
assert rt.cudaLaunchHostFunc(ctypes.c_void_p(b), busy, None) == 0
class Stream:  # what cupy and torch hand over
    def __init__(self, h): self.ptr = h
with d.open(sys.argv[1], write=True) as m:
    p = m.__cuda_array_interface__["data"][0]
    n = len(m)
    assert rt.cudaMemsetAsync(ctypes.c_void_p(p), 0x61, ctypes.c_size_t(n),
                              ctypes.c_void_p(a)) == 0
    m.commit(stream=Stream(a))
    assert ctypes.string_at(p, n) == b"a" * n
    ev = ctypes.c_void_p()
    assert rt.cudaEventCreateWithFlags(ctypes.byref(ev), 2) == 0
    assert rt.cudaMemsetAsync(ctypes.c_void_p(p), 0x62, ctypes.c_size_t(n),
                              ctypes.c_void_p(a)) == 0
    assert rt.cudaEventRecord(ev, ctypes.c_void_p(a)) == 0
    m.commit(event=ev.value)
print("committed")
done[0] = True
assert rt.cudaStreamSynchronize(ctypes.c_void_p(b)) == 0
' "$MNT/f" "$MOCK_CUDART"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = committed ]
	head -c $((3 << 20)) /dev/zero | tr '\0' 'b' | cmp - "$MNT/f"
}
