#!/usr/bin/env bats
# mount -o remount,ro and remount,rw: mount(8) runs mount.fuse3, which runs
# "tierfs SOURCE MNT -o remount,..."; that changes the running mount (its
# superblock and its own flags), starts no second daemon, and the daemon
# follows.

load helpers

setup() {
	tfs_setup
	mkdir -p "$TFS_TMP/bin"
	ln -s "$(readlink -f "$TIERFS_BIN")" "$TFS_TMP/bin/tierfs"
	command -v mount.fuse3 >/dev/null || skip "no mount.fuse3"
}

teardown() {
	tfs_teardown
}

# remount OPTS: what "mount -o remount,OPTS $MNT" runs, with the options
# of the mount as mount(8) passes them.
remount() {
	env PATH="$TFS_TMP/bin:$PATH" mount.fuse3 tierfs "$MNT" -t fuse.tierfs \
		-o "$1,nosuid,nodev,relatime,remount,user_id=0,group_id=0,default_permissions"
}

@test "remount,ro: writes get EROFS, the daemon follows, and remount,rw undoes it" {
	tfs_mount
	echo data >"$MNT/f"
	local pid
	pid=$(tfs_stat pid)
	[ "$(tfs_stat read_only)" = 0 ]
	run remount ro
	echo "$output"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	# The superblock and the mount: every write fails, from now on.
	[ "$(findmnt -no FS-OPTIONS "$MNT" | cut -d, -f1)" = ro ]
	[ "$(findmnt -no VFS-OPTIONS "$MNT" | cut -d, -f1)" = ro ]
	run sh -c "echo x >'$MNT/g'"
	[[ "$output" == *"Read-only file system"* ]]
	run sh -c "echo x >>'$MNT/f'"
	[[ "$output" == *"Read-only file system"* ]]
	run setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[[ "$output" == *"Read-only file system"* ]]
	[ "$(cat "$MNT/f")" = data ]
	# The same daemon, which saw it; no second one.
	tfs_wait_for tfs_stat_is read_only = 1
	[ "$(tfs_stat pid)" = "$pid" ]
	grep -q "the filesystem is now read-only" "$LOG"
	[ "$(pgrep -fc -- "$MNT")" -eq 1 ]
	[ "$(grep -c " $MNT fuse.tierfs " /proc/mounts)" -eq 1 ]

	run remount rw
	[ "$status" -eq 0 ]
	echo more >>"$MNT/f"
	[ "$(cat "$MNT/f")" = "$(printf 'data\nmore')" ]
	tfs_wait_for tfs_stat_is read_only = 0
	[ "$(findmnt -no FS-OPTIONS "$MNT" | cut -d, -f1)" = rw ]
	[ "$(findmnt -no VFS-OPTIONS "$MNT" | cut -d, -f1)" = rw ]
	[ "$(tfs_stat pid)" = "$pid" ]
}

@test "remount,ro waits for no one: a file open for writing refuses it" {
	tfs_mount
	exec 8>"$MNT/open"
	run remount ro
	exec 8>&-
	echo "$output"
	[ "$status" -ne 0 ]
	[ "$output" = "tierfs: $MNT: cannot remount read-only: files are open for writing" ]
	echo x >"$MNT/still-rw"
	run remount ro
	[ "$status" -eq 0 ]
}

@test "a mount made with -o ro becomes writable with remount,rw" {
	tfs_mount -o ro
	[ "$(tfs_stat read_only)" = 1 ]
	run touch "$MNT/f"
	[[ "$output" == *"Read-only file system"* ]]
	run remount rw
	[ "$status" -eq 0 ]
	touch "$MNT/f"
	tfs_wait_for tfs_stat_is read_only = 0
}

@test "mount -o remount,ro through mount(8) itself" {
	command -v unshare >/dev/null || skip "no unshare"
	# mount(8) runs its helpers with no PATH, so sh finds tierfs in
	# /usr/local/sbin or not at all: put it there, in a private mount
	# namespace that the daemon and the mount live and die in.
	cat >"$TFS_TMP/in-ns.sh" <<'EOF'
set -eu
mount --bind "$TFS_TMP/bin" /usr/local/sbin
tierfs "$MNT" -f -o "disk_path=$SPILL" 2>"$LOG" &
daemon=$!
for i in $(seq 1 200); do mountpoint -q "$MNT" && break; sleep 0.05; done
echo data >"$MNT/f"
mount -o remount,ro "$MNT"
if (echo x >"$MNT/g") 2>/dev/null; then echo "wrote after remount,ro"; exit 1; fi
findmnt -no FS-OPTIONS "$MNT" | grep -q '^ro,'
for i in $(seq 1 200); do
	getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT" |
		grep -qx read_only=1 && break
	sleep 0.05
done
getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT" |
	grep -x read_only=1
[ "$(pgrep -fc -- "$MNT")" -eq 1 ]
mount -o remount,rw "$MNT"
echo x >"$MNT/g"
findmnt -no FS-OPTIONS,VFS-OPTIONS "$MNT"
fusermount3 -u "$MNT"
wait "$daemon"
EOF
	run env TFS_TMP="$TFS_TMP" MNT="$MNT" SPILL="$SPILL" LOG="$LOG" \
		unshare -m --propagation private bash "$TFS_TMP/in-ns.sh"
	echo "$output"
	cat "$LOG"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = read_only=1 ]
	[[ "${lines[1]}" == "rw,"*" rw,nosuid,nodev,"* ]]
}
