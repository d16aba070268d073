#!/usr/bin/env bats
# [device] gpus on the cuda backend against tests/gpu/cuda_mock.c with two
# devices (TFS_MOCK_DEVICES=2), each with memory of its own: the backend's
# count (cudaGetDeviceCount) decides what 'all' is and which ordinals
# exist, the GPU picked is the one the files and the stats are on, and a
# mount of both has a backend instance and a device tier on each.
# Run by tests/gpu/mock_check.sh, which sets TIERFS_BIN (the daemon relinked
# with the mock) and TFS_MOCK_CAPACITY (each device's memory).

load ../integration/helpers

setup() {
	tfs_setup
	export TFS_MOCK_DEVICES=2
}

teardown() {
	# Only the names this file's tests made, never another's.
	[ ! -f "${TFS_TMP:-}/stale" ] || xargs rm -f <"$TFS_TMP/stale"
	tfs_teardown
}

stat_of() {
	getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT" |
		sed -n "s/^$1=//p"
}

mount_fails() {
	local msg=$1
	shift
	run timeout 60 "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,$1"
	echo "status $status, output: $output"
	[ "$status" -ne 0 ]
	[ "$status" -ne 124 ]
	[[ "$output" == *"$msg"* ]]
	! tfs_mounted "$MNT"
}

@test "cuda: device_gpus=1 serves the second of two GPUs" {
	tfs_mount -o device_backend=cuda,device_gpus=1,device_limit=64M
	head -c 3M /dev/urandom >"$TFS_TMP/a"
	cp "$TFS_TMP/a" "$MNT/a"
	[ "$(tfs_tier "$MNT/a")" = device ]
	[ "$(getfattr --absolute-names --only-values -n user.tierfs.device "$MNT/a")" = 1 ]
	[ "$(stat_of gpus)" = 1 ]
	[ "$(stat_of device1.used)" -ge $((3 << 20)) ]
	cmp "$TFS_TMP/a" "$MNT/a"
}

@test "cuda: the machine's count bounds the list and 'all'" {
	mount_fails "-o device_gpus: no GPU 2, the machine has 2" \
		device_backend=cuda,device_gpus=2
	TFS_MOCK_DEVICES=1 tfs_mount -o device_backend=cuda,device_gpus=all,device_limit=64M
	[ "$(stat_of gpus)" = 0 ]
}

# py_mapon PATH DEV|none: tierfs.device.open() of PATH with device DEV
# current (none: no context), "device N" where it was mapped, the bytes
# checked against the file's.
py_mapon() {
	run env PYTHONPATH="$BATS_TEST_DIRNAME/../../python" \
		TIERFS_CUDART="$MOCK_CUDART" /usr/bin/python3 - "$@" <<'PY'
import ctypes, os, sys, tierfs.device as d
path, dev = sys.argv[1], sys.argv[2]
if dev != "none":
    rt = ctypes.CDLL(os.environ["TIERFS_CUDART"])
    assert rt.cudaSetDevice(int(dev)) == 0
want = open(path, "rb").read()
with d.open(path) as b:
    ptr = b.__cuda_array_interface__["data"][0]
    assert ctypes.string_at(ptr, len(want)) == want
    print("device %d" % b.device)
PY
	echo "py_mapon $*: status $status, output: $output"
}

# The client's current device is what `mapon` sets (none: no context); the
# reply's UUID is the GPU the export is on, which the client finds as
# "device N" among its own.
@test "cuda: an export from a client on GPU 1 lands on GPU 1, the one served" {
	tfs_mount -o device_backend=cuda,device_gpus=1,device_limit=64M
	head -c 3M /dev/urandom >"$MNT/f"
	run "$MOCK_CLIENT" mapon "$MNT/f" 1
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = "device 1" ]
	# GPU 0 is not served here: the default, not an error.
	run "$MOCK_CLIENT" mapon "$MNT/f" 0
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = "device 1" ]
	# No context: zeros are sent, and none is made on GPU 0 to ask.
	TFS_MOCK_STATS=$TFS_TMP/client.stats run "$MOCK_CLIENT" mapon "$MNT/f" none
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = "device 1" ]
	grep -q 'contexts 0:0,1:1$' "$TFS_TMP/client.stats"
	# The same from Python, with the mock as its CUDA runtime: no
	# context on GPU 0 either, to ask or to map.
	TFS_MOCK_STATS=$TFS_TMP/py.stats py_mapon "$MNT/f" none
	[ "$output" = "device 1" ]
	cat "$TFS_TMP/py.stats"
	grep -q 'contexts 0:0,1:1$' "$TFS_TMP/py.stats"
	py_mapon "$MNT/f" 0
	[ "$output" = "device 1" ]
}

@test "python: the caller's GPU is its current context's, and none makes none" {
	# The mock's device d has UUID bytes 16d+1 to 16d+16.
	py_uuid() {
		run env PYTHONPATH="$BATS_TEST_DIRNAME/../../python" \
			TIERFS_CUDART="$MOCK_CUDART" /usr/bin/python3 -c '
import ctypes, os, sys, tierfs.device as d
if sys.argv[1] != "none":
    rt = ctypes.CDLL(os.environ["TIERFS_CUDART"])
    assert rt.cudaSetDevice(int(sys.argv[1])) == 0
print(d._caller_uuid().hex())
' "$1"
		echo "py_uuid $1: status $status, output: $output"
	}
	TFS_MOCK_STATS=$TFS_TMP/py.stats py_uuid none
	[ "$output" = "00000000000000000000000000000000" ]
	cat "$TFS_TMP/py.stats"
	grep -q 'contexts 0:0,1:0$' "$TFS_TMP/py.stats"
	py_uuid 1
	[ "$output" = "1112131415161718191a1b1c1d1e1f20" ]
	py_uuid 0
	[ "$output" = "0102030405060708090a0b0c0d0e0f10" ]
	# Without CUDA in the process (and no TIERFS_CUDART), nothing is
	# loaded to ask.
	run env -u TIERFS_CUDART PYTHONPATH="$BATS_TEST_DIRNAME/../../python" \
		/usr/bin/python3 -c '
import tierfs.device as d
assert d._caller_uuid() == bytes(16)
assert not d._cuda_in_process() and d._cudart is None
print("ok")'
	[ "$output" = ok ]
}

@test "cuda: a client on GPU 1 gets the default GPU when the mount serves GPU 0" {
	tfs_mount -o device_backend=cuda,device_limit=64M
	head -c 1M /dev/urandom >"$MNT/f"
	run "$MOCK_CLIENT" mapon "$MNT/f" 1
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = "device 0" ]
	[ "$(getfattr --absolute-names --only-values -n user.tierfs.device "$MNT/f")" = 0 ]
}

@test "cuda: with both GPUs served, each export lands on its caller's GPU" {
	tfs_mount -o device_backend=cuda,device_gpus=0:1,device_limit=64M
	head -c 3M /dev/urandom >"$MNT/f"
	run "$MOCK_CLIENT" mapon "$MNT/f" 1
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = "device 1" ]
	[ "$(getfattr --absolute-names --only-values -n user.tierfs.device "$MNT/f")" = 1 ]
	run "$MOCK_CLIENT" mapon "$MNT/f" 0
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = "device 0" ]
	[ "$(getfattr --absolute-names --only-values -n user.tierfs.device "$MNT/f")" = 0 ]
	# No context: the default GPU, the first listed.
	run "$MOCK_CLIENT" mapon "$MNT/f" none
	[ "$status" -eq 0 ]
	[ "$output" = "device 0" ]
	py_mapon "$MNT/f" 1
	[ "$output" = "device 1" ]
	[ "$(getfattr --absolute-names --only-values -n user.tierfs.device "$MNT/f")" = 1 ]
}

gpu_of() {
	getfattr --absolute-names --only-values -n user.tierfs.device "$1"
}

@test "cuda: both GPUs in one mount, files moved between them" {
	TFS_MOCK_STATS=$TFS_TMP/daemon.stats \
		tfs_mount -o device_backend=cuda,device_gpus=all,device_limit=64M
	[ "$(stat_of gpus)" = 0,1 ]
	head -c 5M /dev/urandom >"$TFS_TMP/a"
	head -c 3M /dev/urandom >"$TFS_TMP/b"
	cp "$TFS_TMP/a" "$MNT/a"
	cp "$TFS_TMP/b" "$MNT/b"
	[ "$(gpu_of "$MNT/a")" = 0 ]
	setfattr -n user.tierfs.tier -v device:1 "$MNT/b"
	[ "$(gpu_of "$MNT/b")" = 1 ]
	# the cuda backend rounds each allocation to 2 MiB
	[ "$(stat_of device0.used)" -eq $((6 << 20)) ]
	[ "$(stat_of device1.used)" -eq $((4 << 20)) ]
	cmp "$TFS_TMP/b" "$MNT/b"
	setfattr -n user.tierfs.tier -v device:1 "$MNT/a"
	setfattr -n user.tierfs.tier -v device:0 "$MNT/b"
	[ "$(gpu_of "$MNT/a")" = 1 ]
	[ "$(gpu_of "$MNT/b")" = 0 ]
	cmp "$TFS_TMP/a" "$MNT/a"
	cmp "$TFS_TMP/b" "$MNT/b"
	run "$TIERFSCTL_BIN" reclaim "$MNT" 1M --gpu 1
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == "gpu 1: gave back 6.0 MiB"* ]]
	[ "$(tfs_tier "$MNT/a")" = host ]
	[ "$(gpu_of "$MNT/b")" = 0 ]
	cmp "$TFS_TMP/a" "$MNT/a"
	# The three moves went device to device (cudaMemcpyPeerAsync).
	tfs_unmount
	cat "$TFS_TMP/daemon.stats"
	grep -q 'peer-direct 3 peer-staged 0 ' "$TFS_TMP/daemon.stats"
}

@test "cuda: GPUs that cannot reach each other move files through host" {
	TFS_MOCK_PEER=0 TFS_MOCK_STATS=$TFS_TMP/daemon.stats \
		tfs_mount -o device_backend=cuda,device_gpus=0:1,device_limit=64M
	head -c 5M /dev/urandom >"$TFS_TMP/a"
	cp "$TFS_TMP/a" "$MNT/a"
	setfattr -n user.tierfs.tier -v device:1 "$MNT/a"
	[ "$(gpu_of "$MNT/a")" = 1 ]
	[ "$(stat_of device0.used)" -eq 0 ]
	cmp "$TFS_TMP/a" "$MNT/a"
	setfattr -n user.tierfs.tier -v device:0 "$MNT/a"
	[ "$(gpu_of "$MNT/a")" = 0 ]
	cmp "$TFS_TMP/a" "$MNT/a"
	# No peer copy was even tried: readv from one, writev to the other.
	tfs_unmount
	cat "$TFS_TMP/daemon.stats"
	grep -q 'peer-direct 0 peer-staged 0 ' "$TFS_TMP/daemon.stats"
}

@test "cuda: each GPU's limit spills only its own files" {
	tfs_mount -o device_backend=cuda,device_gpus=0:1,device_limit=8M
	head -c 3M /dev/urandom >"$TFS_TMP/p"
	cp "$TFS_TMP/p" "$MNT/p"
	setfattr -n user.tierfs.tier -v device:1 "$MNT/p"
	for f in a b c; do
		head -c 3M /dev/urandom >"$TFS_TMP/$f"
		cp "$TFS_TMP/$f" "$MNT/$f"
	done
	[ "$(stat_of device0.used)" -le $((8 << 20)) ]
	[ "$(gpu_of "$MNT/p")" = 1 ]
	[ "$(tfs_tier "$MNT/a")" = host ]
	for f in p a b c; do
		cmp "$TFS_TMP/$f" "$MNT/$f"
	done
}

# The fake runtime names each block /tfsmock.PID.N in /dev/shm, and a
# process killed before it freed them leaves them there. A daemon that
# gets the same pid later is not out of device memory for that: once it
# took their names for a full device, and a move to GPU 1 failed with
# ENOSPC (1 run in hundreds, on a machine whose pids come round).
@test "cuda: blocks a killed process of the daemon's pid left behind take no room" {
	cat >"$TFS_TMP/stale-tierfs" <<EOF
#!/bin/sh
i=1
while [ \$i -le 8 ]; do
	f=/dev/shm/tfsmock.\$\$.\$i
	[ -e "\$f" ] || { : >"\$f" && echo "\$f" >>"$TFS_TMP/stale"; }
	i=\$((i + 1))
done
exec "$TIERFS_BIN" "\$@"
EOF
	chmod +x "$TFS_TMP/stale-tierfs"
	TIERFS_BIN=$TFS_TMP/stale-tierfs \
		tfs_mount -o device_backend=cuda,device_gpus=0:1,device_limit=8M
	grep -qx "/dev/shm/tfsmock\.$TFS_PID\.1" "$TFS_TMP/stale"
	head -c 3M /dev/urandom >"$TFS_TMP/p"
	cp "$TFS_TMP/p" "$MNT/p"
	[ "$(tfs_tier "$MNT/p")" = device ]
	[ "$(gpu_of "$MNT/p")" = 0 ]
	setfattr -n user.tierfs.tier -v device:1 "$MNT/p"
	[ "$(gpu_of "$MNT/p")" = 1 ]
	[ "$(stat_of device1.used)" -eq $((4 << 20)) ]
	cmp "$TFS_TMP/p" "$MNT/p"
}
