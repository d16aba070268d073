#!/usr/bin/env bats
# File handles (name_to_handle_at, open_by_handle_at, NFS export): a handle
# outlives the kernel's caches, and fails with ESTALE once its file is gone,
# even when a later file gets the same inode number.
# tests/run: alone (drops the page cache that pagecache.bats checks)

load helpers

setup_file() {
	HANDLE=$BATS_FILE_TMPDIR/handle
	cc -std=gnu11 -D_GNU_SOURCE -Wall -Werror -O1 \
		"$BATS_TEST_DIRNAME/handle.c" -o "$HANDLE"
	export HANDLE
}

setup() {
	tfs_setup
}

teardown() {
	exec 8<&- || true
	tfs_teardown
}

# opened_by_handle PATH HANDLE_FILE EXPECTED: drop the dentry and inode
# caches until opening the handle has to ask the daemon (the -d log shows
# a LOOKUP whose node is the file itself, which only a handle sends), and
# check what the file holds.
opened_by_handle() {
	local ino k out
	ino=$(stat -c %i "$1")
	for k in $(seq 1 20); do
		sync
		echo 2 >/proc/sys/vm/drop_caches
		out=$("$HANDLE" open "$MNT" "$2")
		[ "$out" = "$3" ] || { echo "read '$out', not '$3'"; return 1; }
		if grep -q "opcode: LOOKUP (1), nodeid: $ino," "$LOG"; then
			return 0
		fi
	done
	echo "the kernel never dropped inode $ino"
	return 1
}

@test "a file handle outlives the dentry and inode caches" {
	tfs_mount -d
	echo data >"$MNT/f"
	mkdir -p "$MNT/d/e"
	echo deep >"$MNT/d/e/g"
	"$HANDLE" save "$MNT/f" "$TFS_TMP/f.h"
	"$HANDLE" save "$MNT/d/e/g" "$TFS_TMP/g.h"
	opened_by_handle "$MNT/f" "$TFS_TMP/f.h" data
	opened_by_handle "$MNT/d/e/g" "$TFS_TMP/g.h" deep
	# A rename or a new link does not change what a handle names.
	mv "$MNT/f" "$MNT/d/renamed"
	ln "$MNT/d/renamed" "$MNT/other"
	rm "$MNT/d/renamed"
	[ "$("$HANDLE" open "$MNT" "$TFS_TMP/f.h")" = data ]
}

@test "a handle of a removed file fails with ESTALE" {
	tfs_mount
	echo data >"$MNT/f"
	"$HANDLE" save "$MNT/f" "$TFS_TMP/f.h"
	# Still open somewhere: the kernel holds the inode, as on tmpfs.
	exec 8<"$MNT/f"
	rm "$MNT/f"
	[ "$("$HANDLE" open "$MNT" "$TFS_TMP/f.h")" = data ]
	exec 8<&-
	echo 2 >/proc/sys/vm/drop_caches
	run "$HANDLE" open "$MNT" "$TFS_TMP/f.h"
	echo "$output"
	[ "$status" -eq 1 ]
	[ "${lines[-1]}" = ESTALE ]
	# The same for a directory.
	mkdir "$MNT/d"
	"$HANDLE" save "$MNT/d" "$TFS_TMP/d.h"
	rmdir "$MNT/d"
	run "$HANDLE" open "$MNT" "$TFS_TMP/d.h"
	[ "$status" -eq 1 ]
	[ "${lines[-1]}" = ESTALE ]
}

@test "a handle from an earlier mount fails, though its number came back" {
	tfs_mount
	echo first >"$MNT/f"
	local ino
	ino=$(stat -c %i "$MNT/f")
	"$HANDLE" save "$MNT/f" "$TFS_TMP/f.h"
	tfs_unmount
	tfs_mount
	echo second >"$MNT/f"
	# Inode numbers start again in every daemon: only the generation
	# tells the two files apart.
	[ "$(stat -c %i "$MNT/f")" = "$ino" ]
	run "$HANDLE" open "$MNT" "$TFS_TMP/f.h"
	echo "$output"
	[ "$status" -eq 1 ]
	[ "${lines[-1]}" = ESTALE ]
	# The root is the root in every mount.
	"$HANDLE" save "$MNT" "$TFS_TMP/root.h"
	tfs_unmount
	tfs_mount
	run "$HANDLE" open "$MNT" "$TFS_TMP/root.h"
	[ "$status" -eq 1 ] # a directory cannot be read()...
	[ "${lines[-1]}" = "Is a directory" ] # ...but it opened
}

@test "on a persistent mount a handle outlives a restart and a crash" {
	tfs_mount -o disk_persist=yes
	echo kept >"$MNT/f"
	mkdir -p "$MNT/d/e"
	echo deep >"$MNT/d/e/g"
	echo gone >"$MNT/h"
	"$HANDLE" save "$MNT/f" "$TFS_TMP/f.h"
	"$HANDLE" save "$MNT/d/e/g" "$TFS_TMP/g.h"
	"$HANDLE" save "$MNT/h" "$TFS_TMP/h.h"
	rm "$MNT/h"
	# The inode numbers and generations come back with the files: an
	# NFS client's handles still name them.
	tfs_unmount
	tfs_mount -o disk_persist=yes
	[ "$("$HANDLE" open "$MNT" "$TFS_TMP/f.h")" = kept ]
	[ "$("$HANDLE" open "$MNT" "$TFS_TMP/g.h")" = deep ]
	run "$HANDLE" open "$MNT" "$TFS_TMP/h.h"
	[ "$status" -eq 1 ]
	[ "${lines[-1]}" = ESTALE ]
	# After kill -9 too, for what the journal made durable.
	python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)" "$MNT/f"
	kill -9 "$TFS_PID"
	wait "$TFS_PID" 2>/dev/null || true
	TFS_PID=
	fusermount3 -uz "$MNT"
	tfs_mount -o disk_persist=yes
	[ "$("$HANDLE" open "$MNT" "$TFS_TMP/f.h")" = kept ]
	[ "$("$HANDLE" open "$MNT" "$TFS_TMP/g.h")" = deep ]
}
