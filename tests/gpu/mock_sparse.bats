#!/usr/bin/env bats
# Sparse device copies on the cuda backend (the driver's VMM calls) against
# tests/gpu/cuda_mock.c, whose reserved ranges give no access until mapped
# and make a write into a granule not mapped read-write a sticky illegal
# address: a path of the store or the backend that forgot to populate
# fails the device here. Each step is compared with the same file on
# /dev/shm (tmpfs).
# Run by tests/gpu/mock_check.sh, which sets TIERFS_BIN (the daemon relinked
# with the mock), MOCK_CUDART (the mock as a shared library, for the
# Python client) and TFS_MOCK_CAPACITY.

load ../integration/helpers

G=$((2 << 20))

setup() {
	tfs_setup
	REF=$(mktemp /dev/shm/tfs-sparse.XXXXXX)
	head -c 65536 /dev/urandom >"$TFS_TMP/a"
	head -c 4096 /dev/urandom >"$TFS_TMP/b"
}

teardown() {
	rm -f "${REF:-}"
	tfs_teardown
}

PY=/usr/bin/python3

require_python() {
	command -v "$PY" >/dev/null || skip "no $PY"
}

stat_of() {
	getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT" |
		sed -n "s/^$1=//p"
}

xa() {
	getfattr --absolute-names --only-values -n "user.tierfs.$1" "$2"
}

# put FILE SRC OFFSET: SRC's bytes at OFFSET of FILE, in place.
put() {
	dd if="$2" of="$1" bs=64K oflag=seek_bytes seek="$3" conv=notrunc \
		status=none
}

@test "cuda: a sparse file takes only its granules with data on the device" {
	tfs_mount -o device_backend=cuda,device_limit=64M,host_limit=64M
	f=$MNT/sparse
	for x in "$REF" "$f"; do
		put "$x" "$TFS_TMP/a" 0
		put "$x" "$TFS_TMP/a" $((10 << 20))
	done
	cmp "$f" "$REF"
	[ "$(xa tier "$f")" = device ]
	# Granules 0 and 5 of 6 (main: all six, 12 MiB).
	[ "$(xa stored_size "$f")" -eq $((2 * G)) ]
	[ "$(stat_of device.used)" -eq $((2 * G)) ]
	# Its holes read as zeroes on every path: a read through the mount,
	# the spill of whole chunks to host and disk.
	cmp "$f" "$REF"
	setfattr -n user.tierfs.tier -v disk "$f"
	[ "$(xa tier "$f")" = disk ]
	[ "$(stat_of device.used)" -eq 0 ]
	cmp "$f" "$REF"
	setfattr -n user.tierfs.tier -v device "$f"
	[ "$(xa tier "$f")" = device ]
	[ "$(xa stored_size "$f")" -eq $((2 * G)) ]
	# A write into a hole on the device populates its granule first.
	put "$f" "$TFS_TMP/b" $((6 << 20))
	put "$REF" "$TFS_TMP/b" $((6 << 20))
	[ "$(xa tier "$f")" = device ]
	[ "$(xa stored_size "$f")" -eq $((3 * G)) ]
	cmp "$f" "$REF"
	[ "$(stat_of device.state)" = ok ]
}

@test "cuda: a sparse file on the device exports whole, as a GPU program maps it" {
	require_python
	tfs_mount -o device_backend=cuda,device_limit=64M,host_limit=64M
	f=$MNT/sparse
	for x in "$REF" "$f"; do
		put "$x" "$TFS_TMP/a" 0
		put "$x" "$TFS_TMP/a" $((10 << 20))
	done
	[ "$(xa stored_size "$f")" -eq $((2 * G)) ]
	# Read map: the export moves it into one dense block first; the
	# bytes through the map are the file's, holes zero.
	run env TIERFS_CUDART="$MOCK_CUDART" PYTHONPATH="$BATS_TEST_DIRNAME/../../python" \
		"$PY" - "$f" "$REF" <<'EOF'
import ctypes, sys
from tierfs import device
buf = device.open(sys.argv[1])
ptr = buf.__cuda_array_interface__["data"][0]
want = open(sys.argv[2], "rb").read()
got = ctypes.string_at(ptr, len(want))
buf.close()
print("same" if got == want else "differ")
EOF
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[-1]}" = same ]
	[ "$(xa tier "$f")" = device ]
	[ "$(xa stored_size "$f")" -eq $((6 * G)) ]
	cmp "$f" "$REF"
}

@test "cuda: a sparse file moves between GPUs with its holes" {
	export TFS_MOCK_DEVICES=2
	tfs_mount -o device_backend=cuda,device_gpus=0:1,device_limit=64M,host_limit=64M
	f=$MNT/sparse
	for x in "$REF" "$f"; do
		put "$x" "$TFS_TMP/a" 0
		put "$x" "$TFS_TMP/a" $((10 << 20))
	done
	[ "$(xa stored_size "$f")" -eq $((2 * G)) ]
	setfattr -n user.tierfs.tier -v device:1 "$f"
	[ "$(xa device "$f")" = 1 ]
	[ "$(xa stored_size "$f")" -eq $((2 * G)) ]
	cmp "$f" "$REF"
	setfattr -n user.tierfs.tier -v device:0 "$f"
	[ "$(xa device "$f")" = 0 ]
	[ "$(xa stored_size "$f")" -eq $((2 * G)) ]
	cmp "$f" "$REF"
	[ "$(stat_of device.state)" = ok ]
}
