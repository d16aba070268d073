#!/usr/bin/env bats
# What an operator meets first: the checks on the mount point and the
# options, where the logs go, the atime flags, the installed files.

load helpers

SRC=$BATS_TEST_DIRNAME/../..

setup() {
	tfs_setup
}

teardown() {
	tfs_teardown
}

# mount_fails MESSAGE [ARGS...]: the daemon, run with ARGS after the mount
# point, exits 1 with one line that holds MESSAGE, and mounts nothing.
mount_fails() {
	local msg=$1
	shift
	run timeout 20 "$TIERFS_BIN" "$MNT" "$@"
	echo "status $status, output: $output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"$msg"* ]]
	[ "$(printf '%s\n' "$output" | grep -c .)" -eq 1 ]
	! mountpoint -q "$MNT"
}

@test "an unknown option is one line naming it and the closest known one" {
	mount_fails "tierfs: -o foo: unknown option, see tierfs --help" \
		-f -o "disk_path=$SPILL,foo=bar"
	mount_fails "tierfs: --bogus: unknown option, see tierfs --help" \
		-f --bogus -o "disk_path=$SPILL"
	mount_fails "tierfs: -x: unknown option" -f -x -o "disk_path=$SPILL"
	# Typos of config keys, FUSE options and dash options.
	mount_fails "tierfs: -o hots_limit: unknown option, did you mean 'host_limit'?" \
		-f -o "disk_path=$SPILL,hots_limit=1G"
	mount_fails "tierfs: -o alow_other: unknown option, did you mean 'allow_other'?" \
		-f -o "disk_path=$SPILL,alow_other"
	mount_fails "tierfs: -o noatim: unknown option, did you mean 'noatime'?" \
		-f -o "disk_path=$SPILL,noatim"
	mount_fails "tierfs: --hepl: unknown option, did you mean '--help'?" --hepl
	mount_fails "tierfs: --allow-other: unknown option, did you mean '-o allow_other'?" \
		-f --allow-other -o "disk_path=$SPILL"
	mount_fails "tierfs: -o fsname: needs a value" -f -o "disk_path=$SPILL,fsname"
	mount_fails "tierfs: -o allow_other: takes no value" \
		-f -o "disk_path=$SPILL,allow_other=1"
	# Before the store starts: no CUDA or spill line in front of it.
	run "$TIERFS_BIN" "$MNT" -o "disk_path=$SPILL,foo=bar"
	[ "$status" -eq 1 ]
	[ "$output" = "tierfs: -o foo: unknown option, see tierfs --help" ]
	[ -z "$(ls -A "$SPILL")" ]
}

@test "the FUSE options tierfs lets through mount" {
	tfs_mount -o "fsname=mine,subtype=tierfs,nosuid,nodev" \
		-o "noexec,exec,suid,dev,rw,async,dirsync,atime,noatime" \
		-o "default_permissions,clone_fd,max_idle_threads=4,max_threads=8" \
		-o "defaults,_netdev,nofail,x-systemd.requires=foo"
	echo hi >"$MNT/f"
	[ "$(cat "$MNT/f")" = hi ]
	grep -q "^mine $MNT fuse.tierfs " /proc/mounts
}

@test "--help lists allow_other once" {
	run "$TIERFS_BIN" --help
	[ "$status" -eq 0 ]
	[ "$(grep -c -- '-o allow_other' <<<"$output")" -eq 1 ]
}

@test "a second tierfs on a tierfs mount is refused with the first one's pid" {
	tfs_mount
	echo kept >"$MNT/f"
	[ "$(tfs_stat pid)" = "$TFS_PID" ]
	run timeout 20 "$TIERFS_BIN" "$MNT" -o "disk_path=$SPILL"
	echo "$output"
	[ "$status" -eq 1 ]
	[ "$output" = "tierfs: $MNT: already a tierfs mount (pid $TFS_PID); unmount it first" ]
	# Through a relative path and with -o nonempty too: one mount only.
	run bash -c "cd '$TFS_TMP' && timeout 20 '$TIERFS_BIN' mnt -f -o nonempty,disk_path='$SPILL'"
	[ "$status" -eq 1 ]
	[[ "$output" == *"already a tierfs mount (pid $TFS_PID)"* ]]
	[ "$(grep -c " $MNT fuse.tierfs " /proc/mounts)" -eq 1 ]
	[ "$(cat "$MNT/f")" = kept ]
}

@test "a regular file is refused as a mount point" {
	: >"$TFS_TMP/file"
	run timeout 20 "$TIERFS_BIN" "$TFS_TMP/file" -f -o "disk_path=$SPILL"
	echo "$output"
	[ "$status" -eq 1 ]
	[ "$output" = "tierfs: $TFS_TMP/file: not a directory" ]
	! mountpoint -q "$TFS_TMP/file"
}

@test "a directory that is not empty needs -o nonempty" {
	echo under >"$MNT/hidden"
	mount_fails "tierfs: $MNT: directory not empty; mounting would hide its files (-o nonempty to do it anyway)" \
		-f -o "disk_path=$SPILL"
	tfs_mount -o nonempty
	[ ! -e "$MNT/hidden" ]
	tfs_unmount
	[ "$(cat "$MNT/hidden")" = under ]
}
