#!/usr/bin/env bats
# tierfs.device from Python (python/tierfs/device.py) on the sim backend:
# open() exports a file and maps it, .array is a NumPy array over the
# shared memory, commit() publishes writes, close() ends the lease.
# tests/gpu/mock_check.sh runs the CUDA path of the same module against the
# fake runtime, and tests/gpu/run.sh with cupy on a GPU.

load helpers

PY=/usr/bin/python3

setup() {
	tfs_setup
	export PYTHONPATH=$BATS_TEST_DIRNAME/../../python
	tfs_mount -o allow_other,device_backend=sim,device_limit=64M,host_limit=64M
}

teardown() {
	tfs_teardown
}

tier_of() {
	getfattr --absolute-names --only-values -n user.tierfs.tier "$1"
}

pins_of() {
	getfattr --absolute-names --only-values -n user.tierfs.pins "$1"
}

@test "an opened file's NumPy view equals the file's bytes" {
	local n
	for n in 1 4095 4096 3000017 $((5 << 20)); do
		head -c $n /dev/urandom >"$TFS_TMP/f$n"
		cp "$TFS_TMP/f$n" "$MNT/f$n"
	done
	: >"$MNT/empty"
	run "$PY" -c '
import sys, numpy as np, tierfs.device as d
for p in sys.argv[2:]:
    want = np.fromfile(sys.argv[1] + "/" + p.split("/")[-1], dtype=np.uint8) \
        if not p.endswith("empty") else np.zeros(0, np.uint8)
    with d.open(p) as b:
        a = b.array
        assert isinstance(a, np.ndarray) and a.dtype == np.uint8, a
        assert len(b) == a.size == want.size, (len(b), want.size)
        assert np.array_equal(a, want), p
        assert np.array_equal(np.asarray(b), want), p
        assert not a.flags.writeable
        assert not hasattr(b, "__cuda_array_interface__")
print("ok")
' "$TFS_TMP" "$MNT/f1" "$MNT/f4095" "$MNT/f4096" "$MNT/f3000017" \
		"$MNT/f$((5 << 20))" "$MNT/empty"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = ok ]
}

@test "writes through the array show in cat after commit" {
	head -c 3000000 /dev/urandom >"$TFS_TMP/f"
	cp "$TFS_TMP/f" "$MNT/f"
	# Fill the page cache first: the commit must invalidate it.
	cmp "$TFS_TMP/f" "$MNT/f"
	run "$PY" -c '
import sys, tierfs.device as d
with d.open(sys.argv[1], write=True) as b:
    b.array[1000:2000] = 0x41
    b.array[-5:] = 0x42
    b.commit()
print("ok")
' "$MNT/f"
	[ "$output" = ok ]
	"$PY" -c '
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[1000:2000] = b"A" * 1000
b[-5:] = b"B" * 5
sys.stdout.buffer.write(b)
' "$TFS_TMP/f" >"$TFS_TMP/want"
	cat "$MNT/f" | cmp - "$TFS_TMP/want"
	# The committed bytes survive a spill to disk and back.
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[ "$(tier_of "$MNT/f")" = disk ]
	cmp "$MNT/f" "$TFS_TMP/want"
}

@test "the lease: a file mapped for writing stays on the device until close" {
	head -c 1000000 /dev/urandom >"$MNT/f"
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	run "$PY" -c '
import os, sys, tierfs.device as d
b = d.open(sys.argv[1], write=True)
print(os.getxattr(sys.argv[1], "user.tierfs.tier").decode())
print(os.getxattr(sys.argv[1], "user.tierfs.pins").decode())
try:
    os.setxattr(sys.argv[1], "user.tierfs.tier", b"disk")
    print("moved")
except OSError as e:
    print(e.strerror)
view = b.array
b.close()
b.close()
print(os.getxattr(sys.argv[1], "user.tierfs.pins").decode())
os.setxattr(sys.argv[1], "user.tierfs.tier", b"disk")
print(view.size, repr(b))
try:
    b.array
except ValueError as e:
    print("closed")
' "$MNT/f"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = device ]
	[ "${lines[1]}" = 1 ]
	[ "${lines[2]}" = "Device or resource busy" ]
	[ "${lines[3]}" = 0 ]
	[[ "${lines[4]}" == "1000000 <tierfs.device.DeviceBuffer"*"closed>" ]]
	[ "${lines[5]}" = closed ]
	[ "$(tier_of "$MNT/f")" = disk ]
	[ "$(pins_of "$MNT/f")" = 0 ]
}

@test "a read map is a snapshot: the file moves and changes under it" {
	head -c 100000 /dev/urandom >"$TFS_TMP/f"
	cp "$TFS_TMP/f" "$MNT/f"
	run "$PY" -c '
import os, sys, numpy as np, tierfs.device as d
b = d.open(sys.argv[1])
# Neither a move nor a rewrite by the owner waits for the reader.
os.setxattr(sys.argv[1], "user.tierfs.tier", b"disk")
print(os.getxattr(sys.argv[1], "user.tierfs.tier").decode())
with open(sys.argv[1], "r+b") as f:
    f.write(b"\xff" * 4096)
want = np.fromfile(sys.argv[2], dtype=np.uint8)
print(np.array_equal(b.array, want))
b.close()
' "$MNT/f" "$TFS_TMP/f"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = disk ]
	[ "${lines[1]}" = True ]
	[ "$(head -c 4096 "$MNT/f" | tr -d '\377' | wc -c)" = 0 ]
}

@test "a process that exits without close drops its lease" {
	head -c 100000 /dev/urandom >"$MNT/f"
	"$PY" -c '
import os, sys, tierfs.device as d
b = d.open(sys.argv[1], write=True)
os._exit(0)
' "$MNT/f"
	local i
	for i in $(seq 1 100); do
		[ "$(pins_of "$MNT/f")" = 0 ] && break
		sleep 0.05
	done
	[ "$(pins_of "$MNT/f")" = 0 ]
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
}

@test "read-only maps: no writes, no commit; permissions as for open(2)" {
	head -c 8192 /dev/urandom >"$MNT/f"
	chmod 0644 "$MNT/f"
	run "$PY" -c '
import sys, tierfs.device as d
b = d.open(sys.argv[1])
try:
    b.array[0] = 1
except ValueError:
    print("read-only array")
try:
    b.commit()
except OSError as e:
    print(e.errno == 9)
' "$MNT/f"
	[ "${lines[0]}" = "read-only array" ]
	[ "${lines[1]}" = True ]
	local u
	tfs_user u
	run tfs_as "$u" env PYTHONPATH="$PYTHONPATH" "$PY" -c '
import sys, tierfs.device as d
with d.open(sys.argv[1]) as b:
    print(b.array.size)
try:
    d.open(sys.argv[1], write=True)
except PermissionError:
    print("EACCES")
' "$MNT/f"
	echo "$output"
	[ "${lines[0]}" = 8192 ]
	[ "${lines[1]}" = EACCES ]
}

@test "open of what is not on tierfs, or without a device tier, fails clearly" {
	echo x >"$TFS_TMP/plain"
	run "$PY" -c '
import errno, sys, tierfs.device as d
try:
    d.open(sys.argv[1])
except OSError as e:
    print(errno.errorcode[e.errno])
' "$TFS_TMP/plain"
	[ "$output" = ENOTTY ]
	tfs_unmount
	tfs_mount -o device_backend=none
	echo x >"$MNT/f"
	run "$PY" -c '
import errno, sys, tierfs.device as d
try:
    d.open(sys.argv[1])
except OSError as e:
    print(errno.errorcode[e.errno])
' "$MNT/f"
	[ "$output" = ENODEV ]
}
