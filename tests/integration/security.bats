#!/usr/bin/env bats
# What a user can do to another's files through a shared mount (issue 10):
# the mount has allow_other (and, always, default_permissions), and two
# unprivileged users, alice and bob, made for each test, act through the
# ioctls and the sim backend's shared-memory exports.

load helpers

setup_file() {
	local top=$BATS_TEST_DIRNAME/../..
	local built
	built=$(dirname "$TIERFS_BIN")/../client/lib/export_client
	if [ -z "${EXPORT_CLIENT:-}" ] && [ -x "$built" ]; then
		EXPORT_CLIENT=$built
	fi
	if [ -z "${EXPORT_CLIENT:-}" ]; then
		EXPORT_CLIENT=$BATS_FILE_TMPDIR/export_client
		cc -std=gnu11 -D_GNU_SOURCE -Wall -O1 \
			-I "$top/include" -I "$top/client" -I "$top/examples" \
			"$top/client/libtierfs.c" \
			"$top/tests/integration/export_client.c" \
			-o "$EXPORT_CLIENT" -lrt
		chmod 755 "$BATS_FILE_TMPDIR" "$EXPORT_CLIENT"
	fi
	export EXPORT_CLIENT
}

setup() {
	tfs_setup
	tfs_user alice
	tfs_user bob
	GROUPS_MADE=()
	SHM_MADE=()
	tfs_mount -o allow_other,device_backend=sim,device_limit=64M,host_limit=64M
	chmod 1777 "$MNT"
}

teardown() {
	local g f
	for f in "${SHM_MADE[@]}"; do
		rm -f "/dev/shm/$f"
	done
	tfs_teardown
	for g in "${GROUPS_MADE[@]}"; do
		groupdel "$g" || true
	done
}

# as USER CMD...: run CMD as USER.
as() {
	tfs_as "$@"
}

# ec USER ARGS...: export_client as USER.
ec() {
	local u=$1
	shift
	tfs_as "$u" "$EXPORT_CLIENT" "$@"
}

# alice_file NAME MODE [BYTES]: a file of alice's with BYTES random bytes
# (default 64 KiB), its copy in $TFS_TMP/NAME.
alice_file() {
	head -c "${3:-65536}" /dev/urandom >"$TFS_TMP/$1"
	chmod 644 "$TFS_TMP/$1"
	as "$alice" cp "$TFS_TMP/$1" "$MNT/$1"
	as "$alice" chmod "$2" "$MNT/$1"
}

# hex N: N random bytes in hex.
hex() {
	head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'
}

# A pid that belongs to no process now.
dead_pid() {
	local pid
	sh -c 'exit 0' &
	pid=$!
	wait "$pid"
	echo "$pid"
}

@test "an export needs a descriptor open for reading (finding 4)" {
	alice_file f 0602
	# bob may write the file but not read it...
	run as "$bob" cat "$MNT/f"
	[ "$status" -ne 0 ]
	# ...so no export through his write-only descriptor may show it.
	run ec "$bob" ioctl "$MNT/f" export w
	[ "$output" = errno=EBADF ]
	run ec "$bob" ioctl "$MNT/f" export-write w
	[ "$output" = errno=EBADF ]
	[ "$(getfattr --only-values -n user.tierfs.pins "$MNT/f")" = 0 ]
	# alice reads it, and exports it through a read-only descriptor.
	run ec "$alice" ioctl "$MNT/f" export r
	[ "$output" = ok ]
	# A write export needs reading and writing: even alice's write-only
	# descriptor cannot have one.
	run ec "$alice" ioctl "$MNT/f" export-write w
	[ "$output" = errno=EBADF ]
	cmp "$TFS_TMP/f" "$MNT/f"
}

@test "moving a file needs write permission on it, as setfattr does (finding 6)" {
	alice_file f 0644
	setfattr -n user.tierfs.tier -v host "$MNT/f"
	run as "$bob" setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[ "$status" -ne 0 ]
	local t
	for t in disk device host; do
		run ec "$bob" ioctl "$MNT/f" "move-$t" r
		[ "$output" = errno=EACCES ]
		[ "$(tfs_tier "$MNT/f")" = host ]
	done
	# The owner may, even through a read-only descriptor, and root.
	run ec "$alice" ioctl "$MNT/f" move-disk r
	[ "$output" = ok ]
	[ "$(tfs_tier "$MNT/f")" = disk ]
	run ec root ioctl "$MNT/f" move-host r
	[ "$output" = ok ]
	[ "$(tfs_tier "$MNT/f")" = host ]
	# Others by the mode bits: the other bits...
	as "$alice" chmod 0646 "$MNT/f"
	run ec "$bob" ioctl "$MNT/f" move-disk r
	[ "$output" = ok ]
	[ "$(tfs_tier "$MNT/f")" = disk ]
	# ...and the group bits for a supplementary group of the caller.
	local g=tfsg$$
	groupadd "$g"
	GROUPS_MADE+=("$g")
	usermod -a -G "$g" "$bob"
	chgrp "$g" "$MNT/f"
	chmod 0664 "$MNT/f"
	run ec "$bob" ioctl "$MNT/f" move-host r
	[ "$output" = ok ]
	[ "$(tfs_tier "$MNT/f")" = host ]
	chmod 0646 "$MNT/f"
	run ec "$bob" ioctl "$MNT/f" move-disk r
	[ "$output" = errno=EACCES ]
	cmp "$TFS_TMP/f" "$MNT/f"
}

@test "start-up cleanup removes only the daemon's own stale shm objects (finding 8)" {
	local pid theirs link mine f
	pid=$(dead_pid)
	theirs=tierfs.$pid.$(hex 16)
	link=tierfs.$pid.$(hex 16)
	mine=tierfs.$pid.$(hex 16)
	SHM_MADE+=("$theirs" "$link" "$mine")
	# bob's object and bob's symlink to a file of root's, under names a
	# dead daemon's objects would have, and a real leftover of root's.
	echo bob >"$TFS_TMP/target"
	as "$bob" sh -c "echo bob >/dev/shm/$theirs"
	as "$bob" ln -s "$TFS_TMP/target" "/dev/shm/$link"
	echo root >"/dev/shm/$mine"
	tfs_unmount
	tfs_mount -o allow_other,device_backend=sim,device_limit=64M,host_limit=64M
	[ -f "/dev/shm/$theirs" ]
	[ "$(stat -c %U "/dev/shm/$theirs")" = "$bob" ]
	[ -L "/dev/shm/$link" ]
	[ "$(cat "$TFS_TMP/target")" = bob ]
	[ ! -e "/dev/shm/$mine" ]
	grep -q "removed '/$mine' left by a dead daemon" "$LOG"
	! grep -q "removed '/$theirs'" "$LOG"
	! grep -q "removed '/$link'" "$LOG"
}
