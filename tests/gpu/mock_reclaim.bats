#!/usr/bin/env bats
# Giving GPU memory back, and Python's device access, on the cuda backend
# against tests/gpu/cuda_mock.c, with the daemon and its clients sharing
# the mock's device memory (TFS_MOCK_SHARED) as processes on one GPU do:
# what tierfs holds is not free for a client's cudaMalloc.
# Run by tests/gpu/mock_check.sh, which sets:
#   TIERFS_BIN       the daemon relinked with the mock
#   MOCK_CLIENT      tests/gpu/mock_client.c, built, with the mock preloaded
#   MOCK_CUDART      the mock as a shared library (what Python loads)
#   TFS_MOCK_SHARED  the file the processes share their devices through
#   TFS_MOCK_CAPACITY  each device's memory (256 MiB)

load ../integration/helpers

PY=/usr/bin/python3

setup() {
	tfs_setup
	export PYTHONPATH=$BATS_TEST_DIRNAME/../../python
	export TIERFS_CUDART=$MOCK_CUDART
}

teardown() {
	# A hog left running (a failed test) ends itself rather than be
	# killed: see the reserve test.
	if [ -n "${HOG:-}" ]; then
		: >"$TFS_TMP/hog.stop"
		for _ in $(seq 1 200); do
			kill -0 "$HOG" 2>/dev/null || break
			sleep 0.05
		done
	fi
	tfs_teardown
}

stat_of() {
	getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT" |
		sed -n "s/^$1=//p"
}

tier_of() {
	getfattr --absolute-names --only-values -n user.tierfs.tier "$1"
}

# mkfiles N SIZE: N files $MNT/fI of SIZE random bytes, copies in $TFS_TMP.
mkfiles() {
	local i
	for i in $(seq 1 "$1"); do
		head -c "$2" /dev/urandom >"$TFS_TMP/f$i"
		cp "$TFS_TMP/f$i" "$MNT/f$i"
	done
}

same_files() {
	local i
	for i in $(seq 1 "$1"); do
		cmp "$TFS_TMP/f$i" "$MNT/f$i"
	done
}

wait_for() {
	local i
	for i in $(seq 1 400); do
		eval "$1" && return 0
		sleep 0.05
	done
	echo "not within 20 s: $1" >&2
	return 1
}

@test "tfs_cuda_malloc: a full GPU gives the caller memory from tierfs" {
	tfs_mount -o device_backend=cuda,device_limit=224M,host_limit=512M,device_reserve=0
	mkfiles 6 $((32 << 20))
	[ "$(stat_of device.used)" -eq $((192 << 20)) ]
	# 64M free: a 100M cudaMalloc fails until tierfs gives some back.
	run "$MOCK_CLIENT" malloc "$MNT" $((100 << 20))
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = "allocated $((100 << 20))" ]
	[ "$(stat_of device.reclaims)" -ge 1 ]
	[ "$(stat_of device.reclaimed_bytes)" -ge $((36 << 20)) ]
	same_files 6
	# By UUID, as libtierfs asks for the caller's current device.
	run "$MOCK_CLIENT" reclaim "$MNT" $((1 << 20))
	[ "$status" -eq 0 ]
	[[ "$output" == "freed "* ]]
	[ "${output#freed }" -ge $((1 << 20)) ]
}

@test "tfs_cuda_malloc: more than tierfs can give is ENOMEM, not a loop" {
	tfs_mount -o device_backend=cuda,device_limit=224M,host_limit=512M,device_reserve=0
	mkfiles 2 $((32 << 20))
	run "$MOCK_CLIENT" malloc "$MNT" $((300 << 20))
	[ "$status" -eq 1 ]
	[[ "$output" == *"no more of this GPU to give back"* ]]
	[ "$(stat_of device.used)" = 0 ]
	same_files 2
}

@test "reserve: tierfs yields to a competing cudaMalloc loop" {
	tfs_mount -o device_backend=cuda,device_limit=224M,host_limit=512M,device_reserve=16M,device_poll_ms=20
	mkfiles 6 $((32 << 20))
	# Another process takes 128M in 8M steps, retrying each failed
	# cudaMalloc until tierfs has made room.
	"$PY" -c '
import ctypes, os, sys, time
cuda = ctypes.CDLL(sys.argv[1])
held, ptrs = 0, []
deadline = time.monotonic() + 60
while held < (128 << 20) and time.monotonic() < deadline:
    p = ctypes.c_void_p()
    if cuda.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(8 << 20)) == 0:
        held += 8 << 20
        ptrs.append(p)
    else:
        cuda.cudaGetLastError()
        time.sleep(0.01)
print("held", held, flush=True)
while not os.path.exists(sys.argv[2]) and time.monotonic() < deadline + 120:
    time.sleep(0.05)
for p in ptrs:
    assert cuda.cudaFree(p) == 0
' "$MOCK_CUDART" "$TFS_TMP/hog.stop" >"$TFS_TMP/hog" &
	HOG=$!
	TFS_BG+=("$HOG")
	wait_for 'grep -q "^held" "$TFS_TMP/hog"'
	[ "$(cat "$TFS_TMP/hog")" = "held $((128 << 20))" ]
	# 256M - 128M - 16M reserve.
	wait_for '[ "$(stat_of device.used)" -le $((112 << 20)) ]'
	[ "$(stat_of device.yields)" -ge 1 ]
	[ "$(stat_of device.others)" -eq $((128 << 20)) ]
	grep -q "device: yielded" "$LOG"
	same_files 6
	# Killed, the hog would leave its 128M of blocks in /dev/shm for
	# good (the fake runtime unlinks them at exit), and a later process
	# with its pid would find their names taken.
	: >"$TFS_TMP/hog.stop"
	wait "$HOG"
	run compgen -G "/dev/shm/tfsmock.$HOG.*"
	echo "$output"
	[ "$status" -ne 0 ]
}

@test "python: the CUDA IPC handle opened in the caller, zero copy" {
	tfs_mount -o device_backend=cuda,device_limit=64M,host_limit=64M
	head -c 3000017 /dev/urandom >"$TFS_TMP/f"
	cp "$TFS_TMP/f" "$MNT/f"
	run "$PY" -c '
import ctypes, sys, tierfs.device as d
want = open(sys.argv[2], "rb").read()
with d.open(sys.argv[1]) as b:
    cai = b.__cuda_array_interface__
    assert cai["shape"] == (len(want),) and cai["typestr"] == "|u1", cai
    assert cai["version"] == 3 and cai["data"][1] is True, cai
    assert b.device == 0 and b.array is None
    # The mock maps device memory where the CPU can read it.
    assert ctypes.string_at(cai["data"][0], len(want)) == want
    assert not hasattr(b, "__array_interface__")
with d.open(sys.argv[1], write=True) as b:
    ptr = b.__cuda_array_interface__["data"][0]
    assert b.__cuda_array_interface__["data"][1] is False
    ctypes.memset(ptr + 10, 0x5a, 100)
    b.commit()
print("ok")
' "$MNT/f" "$TFS_TMP/f"
	echo "$output"
	[ "$output" = ok ]
	"$PY" -c '
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[10:110] = b"Z" * 100
sys.stdout.buffer.write(b)
' "$TFS_TMP/f" >"$TFS_TMP/want"
	cat "$MNT/f" | cmp - "$TFS_TMP/want"
	[ "$(getfattr --absolute-names --only-values -n user.tierfs.pins "$MNT/f")" = 0 ]
}

@test "python: the RMM callback reclaims on the caller's GPU by UUID" {
	tfs_mount -o device_backend=cuda,device_limit=64M,host_limit=256M
	mkfiles 3 $((8 << 20))
	run "$PY" -c '
import sys, tierfs.device as d
cb = d.rmm_failure_callback(sys.argv[1])
print(cb(8 << 20), cb(8 << 20), cb(8 << 20), cb(8 << 20))
' "$MNT"
	echo "$output"
	[ "$output" = "True True True False" ]
	[ "$(stat_of device.reclaims)" = 4 ]
	[ "$(tier_of "$MNT/f1")" = host ]
	same_files 3
}
