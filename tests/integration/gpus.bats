#!/usr/bin/env bats
# [device] gpus on the sim backend, which pretends as many GPUs as
# TFS_SIM_GPUS says (without it, as many as the ordinals named), each with
# memory of its own: which GPUs a mount serves, the lists it refuses before
# mounting, and a device tier per GPU (files on each, moves between them,
# limits, reclaim and stats per GPU).

load helpers

setup() {
	tfs_setup
	CONF=$TFS_TMP/t.conf
	unset TFS_SIM_GPUS
}

teardown() {
	tfs_teardown
}

# mount_fails MESSAGE ARGS...: tierfs refuses to mount, saying MESSAGE.
mount_fails() {
	local msg=$1
	shift
	run timeout 20 "$TIERFS_BIN" "$MNT" "$@"
	echo "status $status, output: $output"
	[ "$status" -ne 0 ]
	[ "$status" -ne 124 ]
	[[ "$output" == *"$msg"* ]]
	! tfs_mounted "$MNT"
}

# reclaim_on GPU: tierfsctl reclaim of 1M on that GPU.
reclaim_on() {
	run "$TIERFSCTL_BIN" reclaim "$MNT" 1M --gpu "$1"
	echo "gpu $1: status $status, output: $output"
}

@test "device_gpus with one ordinal serves that GPU" {
	tfs_mount -o device_backend=sim,device_gpus=2,device_limit=16M
	head -c 1M /dev/urandom >"$TFS_TMP/a"
	cp "$TFS_TMP/a" "$MNT/a"
	reclaim_on 2
	[ "$status" -eq 0 ]
	[[ "$output" == "gpu 2: gave back "* ]]
	reclaim_on 0
	[ "$status" -ne 0 ]
	[[ "$output" == *"does not use gpu 0"* ]]
	cmp "$TFS_TMP/a" "$MNT/a"
}

@test "device_gpus=all on a machine with one GPU serves GPU 0" {
	TFS_SIM_GPUS=1 tfs_mount -o device_backend=sim,device_gpus=all
	head -c 1M /dev/urandom >"$MNT/a"
	reclaim_on 0
	[ "$status" -eq 0 ]
	[[ "$output" == "gpu 0: gave back "* ]]
}

@test "a GPU the machine does not have is refused" {
	TFS_SIM_GPUS=2 mount_fails "-o device_gpus: no GPU 2, the machine has 2" \
		-f -o "disk_path=$SPILL,device_backend=sim,device_gpus=2"
	TFS_SIM_GPUS=0 mount_fails "-o device_gpus: the machine has no GPU" \
		-f -o "disk_path=$SPILL,device_backend=sim,device_gpus=all"
}

@test "gpu must be among the gpus listed, in the file or in -o" {
	printf '[device]\nbackend = sim\ngpus = 0, 1\ngpu = 3\n' >"$CONF"
	mount_fails "$CONF:4: gpu: GPU 3 is not among the gpus listed" \
		-f -o "config=$CONF,disk_path=$SPILL"
	mount_fails "-o device_gpu: GPU 0 is not among the gpus listed" \
		-f -o "disk_path=$SPILL,device_backend=sim,device_gpus=1:2,device_gpu=0"
	mount_fails "-o device_gpus: '1:1': GPU 1 is listed twice" \
		-f -o "disk_path=$SPILL,device_backend=sim,device_gpus=1:1"
}

stat_of() {
	getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT" |
		sed -n "s/^$1=//p"
}

@test "user.tierfs.device reads the GPU of the file's device copy" {
	tfs_mount -o device_backend=sim,device_gpus=3,device_limit=16M
	head -c 1M /dev/urandom >"$TFS_TMP/a"
	cp "$TFS_TMP/a" "$MNT/a"
	[ "$(tfs_tier "$MNT/a")" = device ]
	run getfattr --absolute-names --only-values -n user.tierfs.device "$MNT/a"
	[ "$status" -eq 0 ]
	[ "$output" = 3 ]
	# Without a device copy there is no GPU to name.
	setfattr -n user.tierfs.tier -v host "$MNT/a"
	run getfattr --absolute-names --only-values -n user.tierfs.device "$MNT/a"
	[ "$status" -ne 0 ]
	[[ "$output" == *"No such attribute"* ]]
	# It is read-only, and never listed (cp -a would copy it).
	run setfattr -n user.tierfs.device -v 3 "$MNT/a"
	[ "$status" -ne 0 ]
	run ! grep -q tierfs <<<"$(getfattr -d -m - "$MNT/a" 2>/dev/null)"
	cmp "$TFS_TMP/a" "$MNT/a"
}

@test "user.tierfs.tier = device:N moves to GPU N, and refuses GPUs not served" {
	tfs_mount -o device_backend=sim,device_gpus=1,device_limit=16M
	head -c 1M /dev/urandom >"$TFS_TMP/a"
	cp "$TFS_TMP/a" "$MNT/a"
	setfattr -n user.tierfs.tier -v disk "$MNT/a"
	[ "$(tfs_tier "$MNT/a")" = disk ]
	setfattr -n user.tierfs.tier -v device:1 "$MNT/a"
	[ "$(tfs_tier "$MNT/a")" = device ]
	[ "$(getfattr --absolute-names --only-values -n user.tierfs.device "$MNT/a")" = 1 ]
	setfattr -n user.tierfs.tier -v host "$MNT/a"
	run setfattr -n user.tierfs.tier -v device:0 "$MNT/a"
	[ "$status" -ne 0 ]
	[[ "$output" == *"No such device or address"* ]]
	run setfattr -n user.tierfs.tier -v device:256 "$MNT/a"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Invalid argument"* ]]
	[ "$(tfs_tier "$MNT/a")" = host ]
	cmp "$TFS_TMP/a" "$MNT/a"
}

@test "device:N without a device tier says so" {
	tfs_mount -o device_backend=none
	echo hi >"$MNT/a"
	run setfattr -n user.tierfs.tier -v device:0 "$MNT/a"
	[ "$status" -ne 0 ]
	[[ "$output" == *"No such device"* ]]
	[ "$(stat_of gpus)" = "" ]
}

@test "stats, status and metrics show each GPU under its ordinal" {
	tfs_mount -o device_backend=sim,device_gpus=2,device_limit=16M
	head -c 3M /dev/urandom >"$MNT/a"
	[ "$(stat_of gpus)" = 2 ]
	[ "$(stat_of device2.used)" -eq "$(stat_of device.used)" ]
	[ "$(stat_of device2.used)" -ge $((3 << 20)) ]
	[ "$(stat_of device2.limit)" -eq $((16 << 20)) ]
	[ "$(stat_of device2.buffers)" -eq 1 ]
	[ "$(stat_of device2.model)" = "simulated device" ]
	run "$TIERFSCTL_BIN" status "$MNT"
	[ "$status" -eq 0 ]
	echo "$output"
	echo "$output" | grep -Eq '^gpu 2 +3\.0 MiB +16\.0 MiB +room 16\.0 MiB, simulated device$'
	run "$TIERFSCTL_BIN" metrics "$MNT"
	[ "$status" -eq 0 ]
	echo "$output" | grep -q "^tierfs_gpu_used_bytes{gpu=\"2\",mount=\"$MNT\"} $(stat_of device2.used)\$"
	echo "$output" | grep -q "^tierfs_gpu_limit_bytes{gpu=\"2\",mount=\"$MNT\"} $((16 << 20))\$"
}

@test "python: tierfs.xattr.gpu and set_tier(..., gpu=N)" {
	tfs_mount -o device_backend=sim,device_gpus=1,device_limit=16M
	head -c 1M /dev/urandom >"$TFS_TMP/a"
	cp "$TFS_TMP/a" "$MNT/a"
	run env PYTHONPATH="$BATS_TEST_DIRNAME/../../python" python3 - "$MNT/a" <<'PY'
import errno, sys
from tierfs import xattr
p = sys.argv[1]
assert xattr.gpu(p) == 1, xattr.gpu(p)
xattr.set_tier(p, "host")
assert xattr.gpu(p) is None
xattr.set_tier(p, "device", gpu=1)
assert (xattr.tier(p), xattr.gpu(p)) == ("device", 1)
for bad in ({"where": "host", "gpu": 1}, {"where": "device", "gpu": 256},
            {"where": "device", "gpu": True}):
    try:
        xattr.set_tier(p, bad["where"], gpu=bad["gpu"])
        raise SystemExit("accepted %r" % bad)
    except ValueError:
        pass
try:
    xattr.set_tier(p, "device", gpu=0)
    raise SystemExit("gpu 0 accepted")
except OSError as e:
    assert e.errno == errno.ENXIO, e
assert xattr.mount_stats(sys.argv[1].rsplit("/", 1)[0])["gpus"] == 1
print("ok")
PY
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = ok ]
	cmp "$TFS_TMP/a" "$MNT/a"
}

# export_on MOUNT_FILE: tierfs.device.open() of the file with each caller
# GPU UUID given as arguments ("zero", "garbage", "none" for what the
# caller's CUDA says, or an ordinal for the sim's UUID of that GPU); prints
# the ordinal of the GPU each export reports, or "?" for a UUID of no sim
# GPU, one per line.
export_on() {
	local f=$1
	shift
	run env PYTHONPATH="$BATS_TEST_DIRNAME/../../python" /usr/bin/python3 - "$f" "$@" <<'PY'
import sys, numpy as np, tierfs.device as d
path = sys.argv[1]
want = np.fromfile(path, dtype=np.uint8)
def sim_uuid(n):
    return b"tierfs-sim-gpu" + n.to_bytes(2, "big")
for arg in sys.argv[2:]:
    uuid = {"zero": bytes(16), "garbage": bytes(range(200, 216)),
            "none": None}.get(arg)
    if arg.isdigit():
        uuid = sim_uuid(int(arg))
    with d.open(path, uuid=uuid) as b:
        assert np.array_equal(b.array, want), arg
        got = [n for n in range(8) if sim_uuid(n) == b.uuid]
        print(got[0] if got else "?")
PY
	echo "status $status, output: $output"
}

@test "an export reports its GPU's UUID; a caller's GPU not served gets the default" {
	tfs_mount -o device_backend=sim,device_gpus=1,device_limit=16M
	head -c 1M /dev/urandom >"$MNT/a"
	# The caller's GPU, one not served, zeros (old callers), bytes that
	# are no GPU's, and what a process without CUDA sends: GPU 1 each
	# time, never an error.
	export_on "$MNT/a" 1 0 zero garbage none
	[ "$status" -eq 0 ]
	[ "$output" = "$(printf '1\n1\n1\n1\n1')" ]
	[ "$(getfattr --absolute-names --only-values -n user.tierfs.device "$MNT/a")" = 1 ]
}

@test "with two GPUs served, an export lands on the caller's GPU" {
	TFS_SIM_GPUS=2 tfs_mount -o device_backend=sim,device_gpus=0:1,device_limit=16M
	head -c 1M /dev/urandom >"$MNT/a"
	export_on "$MNT/a" 1
	[ "$status" -eq 0 ]
	[ "$output" = 1 ]
	[ "$(getfattr --absolute-names --only-values -n user.tierfs.device "$MNT/a")" = 1 ]
	export_on "$MNT/a" 0 garbage zero 1
	[ "$status" -eq 0 ]
	[ "$output" = "$(printf '0\n0\n0\n1')" ]
}

# gpu_of FILE: the ordinal user.tierfs.device reads.
gpu_of() {
	getfattr --absolute-names --only-values -n user.tierfs.device "$1"
}

# put NAME SIZE [GPU]: SIZE random bytes in $TFS_TMP/NAME, copied to
# $MNT/NAME, and moved to GPU when one is given.
put() {
	head -c "$2" /dev/urandom >"$TFS_TMP/$1"
	cp "$TFS_TMP/$1" "$MNT/$1"
	[ -z "${3:-}" ] || setfattr -n user.tierfs.tier -v "device:$3" "$MNT/$1"
}

@test "two GPUs: files on each, moved between them byte for byte" {
	tfs_mount -o device_backend=sim,device_gpus=0:1,device_limit=16M
	put a 3M
	put b 2M
	[ "$(gpu_of "$MNT/a")" = 0 ]
	[ "$(gpu_of "$MNT/b")" = 0 ]
	setfattr -n user.tierfs.tier -v device:1 "$MNT/b"
	[ "$(tfs_tier "$MNT/b")" = device ]
	[ "$(gpu_of "$MNT/b")" = 1 ]
	cmp "$TFS_TMP/b" "$MNT/b"
	# there and back, and device without a GPU leaves it where it is
	setfattr -n user.tierfs.tier -v device:1 "$MNT/a"
	setfattr -n user.tierfs.tier -v device:0 "$MNT/a"
	setfattr -n user.tierfs.tier -v device "$MNT/b"
	[ "$(gpu_of "$MNT/a")" = 0 ]
	[ "$(gpu_of "$MNT/b")" = 1 ]
	cmp "$TFS_TMP/a" "$MNT/a"
	cmp "$TFS_TMP/b" "$MNT/b"
	[ "$(stat_of gpus)" = 0,1 ]
	[ "$(stat_of default_gpu)" = 0 ]
	[ "$(stat_of device0.used)" -eq $((3 << 20)) ]
	[ "$(stat_of device1.used)" -eq $((2 << 20)) ]
	[ "$(stat_of device.used)" -eq $((5 << 20)) ]
	[ "$(stat_of device.limit)" -eq $((32 << 20)) ]
	[ "$(stat_of device0.limit)" -eq $((16 << 20)) ]
	[ "$(stat_of device0.buffers)" -eq 1 ]
	[ "$(stat_of device1.buffers)" -eq 1 ]
	[ "$(stat_of device1.moves_in)" -eq 2 ]
	[ "$(stat_of device0.moves_out)" -eq 2 ]
	# a file written afresh goes to the default GPU
	cp "$TFS_TMP/b" "$MNT/c"
	[ "$(gpu_of "$MNT/c")" = 0 ]
	run "$TIERFSCTL_BIN" status "$MNT"
	echo "$output"
	echo "$output" | grep -Eq '^gpu 0 +5\.0 MiB +16\.0 MiB +room 16\.0 MiB, simulated device$'
	echo "$output" | grep -Eq '^gpu 1 +2\.0 MiB +16\.0 MiB +room 16\.0 MiB, simulated device$'
	run "$TIERFSCTL_BIN" metrics "$MNT"
	echo "$output" | grep -q "^tierfs_gpu_used_bytes{gpu=\"0\",mount=\"$MNT\"} $((5 << 20))\$"
	echo "$output" | grep -q "^tierfs_gpu_used_bytes{gpu=\"1\",mount=\"$MNT\"} $((2 << 20))\$"
}

@test "each GPU has its own limit: filling GPU 0 spills only GPU 0's files" {
	tfs_mount -o device_backend=sim,device_gpus=0:1,device_limit=8M
	put p 3M 1
	put q 3M 1
	# GPU 1's files are the coldest of all: a single LRU would spill them
	for f in a b c d e; do
		put $f 3M
	done
	[ "$(stat_of device0.used)" -le $((8 << 20)) ]
	[ "$(stat_of device1.used)" -eq $((6 << 20)) ]
	[ "$(gpu_of "$MNT/p")" = 1 ]
	[ "$(gpu_of "$MNT/q")" = 1 ]
	[ "$(tfs_tier "$MNT/a")" = host ]
	[ "$(tfs_tier "$MNT/e")" = device ]
	[ "$(stat_of device.spills)" -ge 3 ]
	# a move to a full GPU spills that GPU's coldest to make room
	setfattr -n user.tierfs.tier -v device:1 "$MNT/e"
	[ "$(gpu_of "$MNT/e")" = 1 ]
	[ "$(stat_of device1.used)" -le $((8 << 20)) ]
	[ "$(tfs_tier "$MNT/p")" = host ]
	for f in p q a b c d e; do
		cmp "$TFS_TMP/$f" "$MNT/$f"
	done
}

@test "reclaim --gpu 1 gives back GPU 1's memory and leaves GPU 0's" {
	tfs_mount -o device_backend=sim,device_gpus=0:1,device_limit=16M
	put a 4M
	put b 4M 1
	reclaim_on 1
	[ "$status" -eq 0 ]
	[[ "$output" == "gpu 1: gave back 4.0 MiB"* ]]
	[ "$(tfs_tier "$MNT/b")" = host ]
	[ "$(gpu_of "$MNT/a")" = 0 ]
	[ "$(stat_of device1.used)" -eq 0 ]
	[ "$(stat_of device1.reclaims)" -eq 1 ]
	[ "$(stat_of device0.reclaims)" -eq 0 ]
	[ "$(stat_of device0.used)" -eq $((4 << 20)) ]
	reclaim_on 2
	[ "$status" -ne 0 ]
	[[ "$output" == *"does not use gpu 2"* ]]
	cmp "$TFS_TMP/a" "$MNT/a"
	cmp "$TFS_TMP/b" "$MNT/b"
}

@test "three GPUs, the default one named: placements there, one too full" {
	TFS_SIM_GPUS=3 tfs_mount -o device_backend=sim,device_gpus=all,device_gpu=2,device_limit=8M
	[ "$(stat_of gpus)" = 0,1,2 ]
	[ "$(stat_of default_gpu)" = 2 ]
	put a 6M
	[ "$(gpu_of "$MNT/a")" = 2 ]
	setfattr -n user.tierfs.tier -v device:0 "$MNT/a"
	put b 6M
	[ "$(gpu_of "$MNT/b")" = 2 ]
	# 10M fits no GPU of 8M: refused, and the file stays where it was
	put c 10M
	[ "$(tfs_tier "$MNT/c")" = host ]
	run setfattr -n user.tierfs.tier -v device:1 "$MNT/c"
	[ "$status" -ne 0 ]
	[[ "$output" == *"No space left on device"* ]]
	[ "$(tfs_tier "$MNT/c")" = host ]
	# GPU 0 is full with a: b moved there spills a, not b's own GPU
	setfattr -n user.tierfs.tier -v device:0 "$MNT/b"
	[ "$(gpu_of "$MNT/b")" = 0 ]
	[ "$(tfs_tier "$MNT/a")" = host ]
	[ "$(stat_of device2.used)" -eq 0 ]
	[ "$(stat_of device1.used)" -eq 0 ]
	for f in a b c; do
		cmp "$TFS_TMP/$f" "$MNT/$f"
	done
}

@test "python: a move between GPUs with set_tier, the gpus list read" {
	tfs_mount -o device_backend=sim,device_gpus=0:1,device_limit=16M
	head -c 1M /dev/urandom >"$TFS_TMP/a"
	cp "$TFS_TMP/a" "$MNT/a"
	run env PYTHONPATH="$BATS_TEST_DIRNAME/../../python" python3 - "$MNT/a" <<'PY'
import sys
from tierfs import xattr
p = sys.argv[1]
assert xattr.gpu(p) == 0, xattr.gpu(p)
xattr.set_tier(p, "device", gpu=1)
assert (xattr.tier(p), xattr.gpu(p)) == ("device", 1)
st = xattr.mount_stats(p.rsplit("/", 1)[0])
assert st["gpus"] == "0,1", st["gpus"]
assert st["device1.used"] == 1 << 20, st["device1.used"]
print("ok")
PY
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = ok ]
	cmp "$TFS_TMP/a" "$MNT/a"
}
