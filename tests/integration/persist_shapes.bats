#!/usr/bin/env bats
# Persistent mounts and the shapes a file can have (issue 31): each comes
# back from a clean restart as it was, on every tier, and from a kill -9
# once fsynced. persist.bats has the rest of what persistent mounts do.

load helpers

bats_require_minimum_version 1.5.0

setup() {
	tfs_setup
	CTL=$TIERFSCTL_BIN
}

teardown() {
	# A daemon killed by a test leaves a mount that answers ENOTCONN.
	if grep -q " $MNT fuse" /proc/self/mounts && ! mountpoint -q "$MNT"; then
		fusermount3 -uz "$MNT"
	fi
	tfs_teardown
}

# kill9: the daemon dies where it stands; its mount is cleared.
kill9() {
	kill -9 "$TFS_PID"
	wait "$TFS_PID" 2>/dev/null || true
	TFS_PID=
	fusermount3 -uz "$MNT"
}

# remount [OPTS]: a clean unmount, then a mount with the same options.
remount() {
	tfs_unmount
	tfs_mount "$@"
}

# shape_cycle SHAPE: tests/integration/shapes.py's file of that shape on
# each tier (the sim device, host, disk, and written in place on disk),
# and its twin on the test's own file system; unmount, mount: each comes
# back, its size, bytes, data extents and the room fallocate took as
# tmpfs keeps them, and nothing was dropped or mended; changed (written
# where it was allocated, punched, allocated past its end again), unmount,
# mount: the same again.
shape_cycle() {
	local opts=disk_persist=yes,device_backend=sim,device_limit=16M,host_limit=8M
	local py=$BATS_TEST_DIRNAME/shapes.py tiers=device,host,disk,inplace
	mkdir "$TFS_TMP/ref"
	tfs_mount -o "$opts"
	python3 "$py" "$MNT" "$TFS_TMP/ref" "$1" "$tiers" make
	remount -o "$opts"
	grep -q "persist: 4 files .* after a clean stop" "$LOG"
	run ! grep "recovery:" "$LOG"
	python3 "$py" "$MNT" "$TFS_TMP/ref" "$1" "$tiers" check
	python3 "$py" "$MNT" "$TFS_TMP/ref" "$1" "$tiers" more
	remount -o "$opts"
	grep -q "persist: 4 files .* after a clean stop" "$LOG"
	run ! grep "recovery:" "$LOG"
	python3 "$py" "$MNT" "$TFS_TMP/ref" "$1" "$tiers" check2
	run "$CTL" recover --list "$MNT"
	[[ "$output" == *"nothing was dropped"* ]]
}

# Issue 31: a file whose allocation reached past its size was written to
# the image in a form that recovery called damaged, and dropped.
@test "shape: 300,000 bytes and fallocate -n of 1 MiB past them, unmount, mount" {
	shape_cycle keep-past-eof
}

@test "shape: an empty file with fallocate -n of 64 KiB, unmount, mount" {
	shape_cycle empty-keep
}

@test "shape: 3,000,000 bytes and fallocate -n of 4 MiB past them, unmount, mount" {
	shape_cycle keep-past-eof-big
}

@test "shape: 3,000 bytes and fallocate -n of 8 KiB over them, unmount, mount" {
	shape_cycle keep-inside
}

@test "shape: pages allocated past the end in a chunk of their own, unmount, mount" {
	shape_cycle keep-far
}

@test "shape: holes at both ends, unmount, mount" {
	shape_cycle holes-both-ends
}

@test "shape: a size past the last chunk, unmount, mount" {
	shape_cycle size-past-chunks
}

@test "shape: fallocate -n past the end, then truncated up over it, unmount, mount" {
	shape_cycle keep-then-grow
}

@test "shape: punched chunks, pages and part of a page, unmount, mount" {
	shape_cycle punched
}

@test "shape: fallocate of 2 MiB, a write inside, unmount, mount" {
	shape_cycle allocated
}

# Every shape above on every tier, each file fsynced once made and then
# moved; kill -9, mount: each comes back as of its fsync, as after a clean
# stop; changed, fsynced, kill -9 again: the same.
@test "shape: every shape on every tier, fsynced, kill -9, mount, twice" {
	local opts=disk_persist=yes,device_backend=sim,device_limit=16M,host_limit=8M
	local py=$BATS_TEST_DIRNAME/shapes.py tiers=device,host,disk,inplace
	mkdir "$TFS_TMP/ref"
	tfs_mount -o "$opts"
	python3 "$py" "$MNT" "$TFS_TMP/ref" all "$tiers" make fsync
	kill9
	tfs_mount -o "$opts"
	grep -q "persist: 40 files .* after a crash or unclean stop" "$LOG"
	run ! grep "recovery:" "$LOG"
	python3 "$py" "$MNT" "$TFS_TMP/ref" all "$tiers" check
	python3 "$py" "$MNT" "$TFS_TMP/ref" all "$tiers" more fsync
	kill9
	tfs_mount -o "$opts"
	grep -q "persist: 40 files .* after a crash or unclean stop" "$LOG"
	run ! grep "recovery:" "$LOG"
	python3 "$py" "$MNT" "$TFS_TMP/ref" all "$tiers" check2
	run "$CTL" recover --list "$MNT"
	[[ "$output" == *"nothing was dropped"* ]]
}
