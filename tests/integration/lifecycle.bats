#!/usr/bin/env bats
# The daemon's life around its spill directory: private, unpredictable,
# cleaned at mount after a crash (and only what is provably tierfs's own),
# removed at a clean unmount.

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
	find "$SPILL" -mindepth 2 -type f ! -name lock | wc -l
}

# The spill directory's name tierfs used before issue 10 for this mount
# point: tierfs.<FNV-1a 64 of the mount point's path>.
old_spill_name() {
	/usr/bin/python3 -c '
import sys
h = 0xcbf29ce484222325
for c in sys.argv[1].encode():
    h = ((h ^ c) * 0x100000001b3) & (2**64 - 1)
print("tierfs.%016x" % h)' "$MNT"
}

# plant USER DIR: DIR made by USER with a lock file and four subdirectories
# of 500 files each.
plant() {
	local d
	tfs_as "$1" mkdir "$2"
	tfs_as "$1" touch "$2/lock"
	for d in a b c d; do
		tfs_as "$1" mkdir "$2/$d"
		seq 1 500 | sed "s|^|$2/$d/f|" | tfs_as "$1" xargs touch
	done
}

@test "the spill directory is private and its files 0600" {
	tfs_mount -o device_backend=none,host_limit=8M
	dd if=/dev/urandom of="$MNT/f" bs=1M count=2 status=none
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	dir=$(find "$SPILL" -mindepth 1 -maxdepth 1 -type d)
	[ "$(stat -c %a "$dir")" = 700 ]
	[[ "$(basename "$dir")" =~ ^tierfs\.[0-9a-f]{16}\.[0-9a-f]{16}$ ]]
	f=$(find "$dir" -type f ! -name lock | head -1)
	[ "$(stat -c %a "$f")" = 600 ]
	# Not derived from the mount point alone: the next mount on it
	# gets another name.
	tfs_unmount
	tfs_mount -o device_backend=none,host_limit=8M
	[ "$(find "$SPILL" -mindepth 1 -maxdepth 1 -type d)" != "$dir" ]
}

@test "a disk path other users may write to must be sticky, and then a private directory is used" {
	mkdir -m 777 "$TFS_TMP/open"
	run timeout 20 "$TIERFS_BIN" "$MNT" -f -o "disk_path=$TFS_TMP/open"
	[ "$status" -ne 0 ]
	[[ "$output" == *"disk path '$TFS_TMP/open' is writable by other users and not sticky"* ]]
	run ! tfs_mounted "$MNT"
	chmod 1777 "$TFS_TMP/open"
	SPILL=$TFS_TMP/open
	tfs_mount -o device_backend=none,host_limit=8M
	local priv=$SPILL/tierfs-$(id -u)
	[ "$(stat -c %a:%u "$priv")" = "700:$(id -u)" ]
	dir=$(find "$priv" -mindepth 1 -maxdepth 1 -type d)
	[[ "$(basename "$dir")" =~ ^tierfs\.[0-9a-f]{16}\.[0-9a-f]{16}$ ]]
	dd if=/dev/urandom of="$MNT/f" bs=1M count=1 status=none
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[ "$(find "$dir" -type f ! -name lock | wc -l)" -eq 1 ]
}

@test "planted spill directories are neither followed nor removed, and every mount starts" {
	tfs_user bob
	local shared=$TFS_TMP/shared secret=$TFS_TMP/secret n i
	local names=("$(old_spill_name)" "tierfs-$(id -u)" tierfs.0.0)
	mkdir -m 1777 "$shared"
	mkdir -m 700 "$secret"
	seq 1 2000 | sed "s|^|$secret/s|" | xargs touch
	# The name an earlier tierfs used for this mount point, the private
	# directory this one wants, and one like its spill directories.
	for n in "${names[@]}"; do
		plant "$bob" "$shared/$n"
	done
	# While the daemons start, bob swaps his subdirectories for symlinks
	# to the root-only directory and keeps creating entries.
	tfs_bg_as "$bob" /bin/sh -c '
		i=0
		while :; do
			for t in "$0"/tierfs*; do
				for d in a b c d; do
					mv "$t/$d" "$t/$d.x"
					ln -s "$1" "$t/$d"
					touch "$t/n$i" "$t/$d.x/n$i"
					rm -f "$t/$d"
					mv "$t/$d.x" "$t/$d"
					i=$((i + 1))
				done
			done
		done 2>/dev/null' "$shared" "$secret"
	SPILL=$shared
	for i in 1 2 3; do
		tfs_mount -o device_backend=none,host_limit=8M
		dd if=/dev/urandom of="$MNT/f" bs=1M count=1 status=none
		setfattr -n user.tierfs.tier -v disk "$MNT/f"
		cmp "$MNT/f" "$MNT/f"
		tfs_unmount
	done
	kill -KILL "$BG_PID"
	wait "$BG_PID" 2>/dev/null || true
	[ "$(find "$secret" -type f | wc -l)" -eq 2000 ]
	for n in "${names[@]}"; do
		[ "$(stat -c %U "$shared/$n")" = "$bob" ]
		[ -f "$shared/$n/lock" ]
		[ "$(find "$shared/$n" -name 'f*' | wc -l)" -eq 2000 ]
	done
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
	# a limit above the filesystem's size needs overcommit
	tfs_mount -o device_backend=none,host_limit=2M,disk_limit=1G,policy_overcommit=yes
	run dd if=/dev/urandom of="$MNT/big" bs=1M count=16
	[ "$status" -ne 0 ]
	[[ "$output" == *"No space left on device"* ]]
}
