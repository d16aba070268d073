#!/usr/bin/env bats
# The daemon's life around its spill directory: private, cleaned at mount
# after a crash, removed at a clean unmount.

load helpers

setup() { tfs_setup; }
teardown() {
	tfs_unmount
	if mountpoint -q "$TFS_TMP/small" 2>/dev/null; then
		umount "$TFS_TMP/small"
	fi
	tfs_teardown
}

spill_files() {
	find "$SPILL" -mindepth 2 -type f | wc -l
}

@test "the spill directory is private and its files 0600" {
	tfs_mount -o device_backend=none,host_limit=8M
	dd if=/dev/urandom of="$MNT/f" bs=1M count=2 status=none
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	dir=$(find "$SPILL" -mindepth 1 -maxdepth 1 -type d)
	[ "$(stat -c %a "$dir")" = 700 ]
	f=$(find "$dir" -type f | head -1)
	[ "$(stat -c %a "$f")" = 600 ]
}

@test "spill files a crashed daemon left are removed at the next mount" {
	tfs_mount -o device_backend=none,host_limit=8M
	for i in 1 2 3; do
		dd if=/dev/urandom of="$MNT/f$i" bs=1M count=1 status=none
		setfattr -n user.tierfs.tier -v disk "$MNT/f$i"
	done
	[ "$(spill_files)" -eq 3 ]
	kill -9 "$TFS_PID"
	wait "$TFS_PID" 2>/dev/null || true
	TFS_PID=
	fusermount3 -uz "$MNT"
	[ "$(spill_files)" -eq 3 ]
	tfs_mount -o device_backend=none,host_limit=8M
	[ "$(spill_files)" -eq 0 ]
}

@test "a clean unmount removes the spill directory" {
	tfs_mount -o device_backend=none,host_limit=8M
	dd if=/dev/urandom of="$MNT/f" bs=1M count=1 status=none
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[ "$(spill_files)" -eq 1 ]
	tfs_unmount
	[ -z "$(ls -A "$SPILL")" ]
}

@test "a full disk under the disk tier fails the write and close, not later" {
	mkdir -p "$TFS_TMP/small"
	mount -t tmpfs -o size=4M tmpfs "$TFS_TMP/small"
	SPILL=$TFS_TMP/small
	tfs_mount -o device_backend=none,host_limit=2M,disk_limit=1G
	run dd if=/dev/urandom of="$MNT/big" bs=1M count=16
	[ "$status" -ne 0 ]
	[[ "$output" == *"No space left on device"* ]]
}
