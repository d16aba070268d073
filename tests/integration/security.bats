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

# bg USER OUT CMD...: export_client CMD... as USER in the background, its
# output in OUT; waits for its "ready" line. Sets BG_PID.
bg() {
	local u=$1 out=$2 i
	shift 2
	tfs_bg_as "$u" "$EXPORT_CLIENT" "$@" >"$out" 2>&1
	for i in $(seq 1 200); do
		grep -q '^ready' "$out" && return 0
		if ! kill -0 "$BG_PID" 2>/dev/null; then
			echo "client exited:" >&2
			cat "$out" >&2
			return 1
		fi
		sleep 0.05
	done
	echo "client not ready within 10s" >&2
	cat "$out" >&2
	return 1
}

# ask PID OUT SIG WHAT: send SIG and wait for one more line starting with
# WHAT in OUT; print that line's last word.
ask() {
	local pid=$1 out=$2 sig=$3 what=$4 n i
	n=$(grep -c "^$what" "$out" || true)
	kill "-$sig" "$pid"
	for i in $(seq 1 200); do
		if [ "$(grep -c "^$what" "$out" || true)" -gt "$n" ]; then
			grep "^$what" "$out" | tail -1 | awk '{print $NF}'
			return 0
		fi
		sleep 0.05
	done
	echo "no answer to SIG$sig" >&2
	return 1
}

# The sum export_client gives bytes, of a file.
sum_of() {
	"$EXPORT_CLIENT" sum "$1"
}

@test "a read export cannot be used to write the file (finding 1)" {
	alice_file f 0644
	run ec "$bob" probe "$MNT/f"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" =~ ^name=/tierfs\.[0-9]+\.[0-9a-f]{32}$ ]]
	# The daemon's object, opened to bob for reading by an ACL entry.
	[[ "${lines[1]}" == *" uid=0" ]]
	[ "${lines[2]}" = rdwr=EACCES ]
	[ "${lines[3]}" = mmap-write=EACCES ]
	[ "${lines[4]}" = chmod=EPERM ]
	[ "${lines[5]}" = rdonly=ok ]
	[ "${lines[6]}" = "after release: gone" ]
	cmp "$TFS_TMP/f" "$MNT/f"
	# Nor a root-owned script that root then runs.
	printf '#!/bin/sh\necho safe\n' >"$MNT/script"
	chmod 0755 "$MNT/script"
	run ec "$bob" probe "$MNT/script"
	[ "${lines[2]}" = rdwr=EACCES ]
	[ "$("$MNT/script")" = safe ]
}

# shm_objs: the daemon's objects in /dev/shm, one name a line.
shm_objs() {
	find /dev/shm -maxdepth 1 -name "tierfs.$TFS_PID.*" -printf '%f\n' |
		sort
}

@test "bob cannot change alice's file through any interface" {
	alice_file f 0644 100000
	local before o mine hers
	before=$(stat -c %Y.%s "$MNT/f")
	# open(2), truncate(2), and every xattr, tierfs's own included.
	run as "$bob" sh -c "echo x >>'$MNT/f'"
	[ "$status" -ne 0 ]
	run as "$bob" truncate -s 0 "$MNT/f"
	[ "$status" -ne 0 ]
	for o in user.x=1 user.tierfs.tier=disk user.tierfs.pin=1; do
		run as "$bob" setfattr -n "${o%%=*}" -v "${o#*=}" "$MNT/f"
		[ "$status" -ne 0 ]
		[[ "$output" == *"Permission denied"* ]]
	done
	run as "$bob" setfattr -x user.tierfs.tier "$MNT/f"
	[ "$status" -ne 0 ]
	# The ioctls through his read-only descriptor: no write export, no
	# commit of a read export, no alloc, no move.
	run ec "$bob" ioctl "$MNT/f" export-write r
	[ "$output" = errno=EBADF ]
	run ec "$bob" ioctl "$MNT/f" export-commit r
	[ "$output" = errno=EPERM ]
	run ec "$bob" ioctl "$MNT/f" alloc r
	[ "$output" = errno=EBADF ]
	run ec "$bob" ioctl "$MNT/f" move-disk r
	[ "$output" = errno=EACCES ]
	# /dev/shm: bob holds a read map and alice a write map. He can open
	# no object of the daemon's for writing, his own snapshot included,
	# nor alice's live one at all.
	bg "$bob" "$TFS_TMP/bob" hold "$MNT/f"
	local bobpid=$BG_PID
	mine=$(shm_objs)
	[ "$(echo "$mine" | wc -l)" = 1 ]
	bg "$alice" "$TFS_TMP/alice" hold "$MNT/f" rw
	local apid=$BG_PID
	hers=$(shm_objs | grep -vxF "$mine")
	[ -n "$hers" ]
	for o in $(shm_objs); do
		run as "$bob" sh -c "exec 3<>'/dev/shm/$o'"
		[ "$status" -ne 0 ]
		run as "$bob" sh -c "exec 3>>'/dev/shm/$o'"
		[ "$status" -ne 0 ]
		run as "$bob" chmod 0666 "/dev/shm/$o"
		[ "$status" -ne 0 ]
		run as "$bob" rm -f "/dev/shm/$o"
		[ "$status" -ne 0 ]
	done
	run as "$bob" cat "/dev/shm/$hers"
	[ "$status" -ne 0 ]
	# (his snapshot, page-rounded)
	as "$bob" cat "/dev/shm/$mine" | head -c 100000 | cmp - "$TFS_TMP/f"
	kill -TERM "$apid" "$bobpid"
	wait "$apid" "$bobpid"
	# The spill directory: alice's bytes on disk are nobody else's.
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	local files
	files=$(find "$SPILL" -type f ! -name lock)
	[ -n "$files" ]
	run as "$bob" ls "$SPILL"/tierfs.*
	[ "$status" -ne 0 ]
	for o in $files; do
		run as "$bob" sh -c "exec 3<>'$o'"
		[ "$status" -ne 0 ]
		run as "$bob" cat "$o"
		[ "$status" -ne 0 ]
	done
	cmp "$TFS_TMP/f" "$MNT/f"
	[ "$(stat -c %Y.%s "$MNT/f")" = "$before" ]
}

@test "a mapping dies with its lease (finding 2)" {
	alice_file f 0644
	# bob keeps his read mapping after releasing the lease and closing.
	bg "$bob" "$TFS_TMP/bob" keep "$MNT/f"
	local bobpid=$BG_PID s0
	s0=$(awk '/^ready/ {print $2}' "$TFS_TMP/bob")
	[ "$s0" = "$(sum_of "$TFS_TMP/f")" ]
	# alice makes the file private and writes secrets in place.
	as "$alice" chmod 0600 "$MNT/f"
	head -c 65536 /dev/urandom >"$TFS_TMP/secret"
	as "$alice" dd if="$TFS_TMP/secret" of="$MNT/f" conv=notrunc \
		status=none
	[ "$(ask "$bobpid" "$TFS_TMP/bob" USR1 sum)" = "$s0" ]

	# A writer's mapping is detached when its lease ends: alice keeps
	# hers, root writes new bytes, and neither side sees the other's.
	bg "$alice" "$TFS_TMP/alice" keep "$MNT/f" rw
	local apid=$BG_PID s1
	s1=$(awk '/^ready/ {print $2}' "$TFS_TMP/alice")
	[ "$s1" = "$(sum_of "$TFS_TMP/secret")" ]
	head -c 65536 /dev/urandom >"$TFS_TMP/new"
	dd if="$TFS_TMP/new" of="$MNT/f" conv=notrunc status=none
	[ "$(ask "$apid" "$TFS_TMP/alice" USR1 sum)" = "$s1" ]
	[ "$(ask "$apid" "$TFS_TMP/alice" USR2 wrote)" = wrote ]
	cmp "$TFS_TMP/new" "$MNT/f"
	[ "$(ask "$bobpid" "$TFS_TMP/bob" USR1 sum)" = "$s0" ]

	# Closing the descriptor without a release ends the lease as well.
	cp "$TFS_TMP/new" "$TFS_TMP/now"
	bg "$alice" "$TFS_TMP/alice2" keep "$MNT/f" rw close
	local a2=$BG_PID s2
	s2=$(awk '/^ready/ {print $2}' "$TFS_TMP/alice2")
	[ "$s2" = "$(sum_of "$TFS_TMP/now")" ]
	head -c 4096 /dev/urandom >"$TFS_TMP/head"
	dd if="$TFS_TMP/head" of="$MNT/f" conv=notrunc status=none
	dd if="$TFS_TMP/head" of="$TFS_TMP/now" conv=notrunc status=none
	[ "$(ask "$a2" "$TFS_TMP/alice2" USR1 sum)" = "$s2" ]
	[ "$(ask "$a2" "$TFS_TMP/alice2" USR2 wrote)" = wrote ]
	cmp "$TFS_TMP/now" "$MNT/f"
}

@test "a reader's map never blocks the owner, and each sees their own bytes (finding 5)" {
	alice_file f 0644 100000
	bg "$bob" "$TFS_TMP/bob" hold "$MNT/f"
	local bobpid=$BG_PID s0
	s0=$(awk '/^ready/ {print $4}' "$TFS_TMP/bob")
	[ "$s0" = "$(sum_of "$TFS_TMP/f")" ]
	# alice truncates, rewrites, appends, moves and maps her file.
	as "$alice" truncate -s 1000 "$MNT/f"
	head -c 50000 /dev/urandom >"$TFS_TMP/g"
	chmod 644 "$TFS_TMP/g"
	as "$alice" cp "$TFS_TMP/g" "$MNT/f"
	as "$alice" sh -c "echo more >>'$MNT/f'"
	echo more >>"$TFS_TMP/g"
	as "$alice" setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[ "$(tfs_tier "$MNT/f")" = disk ]
	as "$alice" setfattr -n user.tierfs.tier -v host "$MNT/f"
	cmp "$TFS_TMP/g" "$MNT/f"
	ec "$alice" cat "$MNT/f" | cmp - "$TFS_TMP/g"
	ec "$alice" fill "$MNT/f" 5
	ec root pattern "$(stat -c %s "$TFS_TMP/g")" 5 >"$TFS_TMP/filled"
	cmp "$TFS_TMP/filled" "$MNT/f"
	# bob still sees what he mapped, and only that.
	[ "$(ask "$bobpid" "$TFS_TMP/bob" USR1 sum)" = "$s0" ]
	kill -TERM "$bobpid"
	wait "$bobpid"
	grep -q '^closed$' "$TFS_TMP/bob"
	cmp "$TFS_TMP/filled" "$MNT/f"
}

@test "one write map at a time; readers come and go around it" {
	alice_file f 0666
	bg "$alice" "$TFS_TMP/alice" hold "$MNT/f" rw
	local apid=$BG_PID
	run ec "$bob" ioctl "$MNT/f" export-write rw
	[ "$output" = errno=EBUSY ]
	run ec "$bob" ioctl "$MNT/f" export r
	[ "$output" = ok ]
	kill -TERM "$apid"
	wait "$apid"
	run ec "$bob" ioctl "$MNT/f" export-write rw
	[ "$output" = ok ]
}

@test "[device] user_share bounds what one user's pins, exports and moves hold on the device" {
	tfs_unmount
	tfs_mount -o allow_other,device_backend=sim,device_limit=64M,host_limit=64M,device_user_share=1M
	chmod 1777 "$MNT"
	local f
	for f in b1 b2 b3; do
		head -c 600000 /dev/urandom >"$TFS_TMP/$f"
		chmod 644 "$TFS_TMP/$f"
		as "$bob" cp "$TFS_TMP/$f" "$MNT/$f"
		[ "$(tfs_tier "$MNT/$f")" = device ]
	done
	as "$bob" setfattr -n user.tierfs.pin -v 1 "$MNT/b1"
	run as "$bob" setfattr -n user.tierfs.pin -v 1 "$MNT/b2"
	[[ "$output" == *"Disk quota exceeded"* ]]
	run ec "$bob" ioctl "$MNT/b2" export r
	[ "$output" = errno=EDQUOT ]
	as "$bob" setfattr -n user.tierfs.tier -v host "$MNT/b3"
	run as "$bob" setfattr -n user.tierfs.tier -v device "$MNT/b3"
	[[ "$output" == *"Disk quota exceeded"* ]]
	run ec "$bob" ioctl "$MNT/b3" move-device r
	[ "$output" = errno=EDQUOT ]
	[ "$(tfs_tier "$MNT/b3")" = host ]
	# alice has a share of her own, and root none.
	alice_file a 0644 600000
	as "$alice" setfattr -n user.tierfs.pin -v 1 "$MNT/a"
	setfattr -n user.tierfs.pin -v 1 "$MNT/b2"
	setfattr -n user.tierfs.pin -v 0 "$MNT/b2"
	# Unpinning gives the share back.
	as "$bob" setfattr -n user.tierfs.pin -v 0 "$MNT/b1"
	as "$bob" setfattr -n user.tierfs.pin -v 1 "$MNT/b2"
	run ec "$bob" ioctl "$MNT/b1" export r
	[ "$output" = errno=EDQUOT ]
	as "$bob" setfattr -n user.tierfs.pin -v 0 "$MNT/b2"
	run ec "$bob" ioctl "$MNT/b1" export r
	[ "$output" = ok ]
	cmp "$TFS_TMP/b1" "$MNT/b1"
}

# --- round 3 (issue 24) ---

# alive: the daemon still runs and the mount still answers.
alive() {
	kill -0 "$TFS_PID"
	stat "$MNT" >/dev/null
}

# bytes_of N BYTE: N bytes of BYTE (octal escape), to stdout.
bytes_of() {
	head -c "$1" /dev/zero | tr '\0' "$2"
}

@test "nothing a client does to its export's object reaches the daemon (round 3, finding 1)" {
	alice_file keep 0644 300000
	local kind action
	for kind in rw r; do
		for action in truncate grow unmap late; do
			head -c 200000 /dev/urandom >"$TFS_TMP/b"
			chmod 644 "$TFS_TMP/b"
			as "$bob" cp "$TFS_TMP/b" "$MNT/b"
			run ec "$bob" attack "$MNT/b" "$kind" "$action"
			echo "$kind $action: $output"
			[ "$status" -eq 0 ]
			[ "${lines[-1]}" = done ]
			alive
			[[ "$output" == *"read=ok"* ]]
			[[ "$output" == *"bytes=200000"* ]]
			[[ "$output" == *"release=ok"* ]]
			if [ "$kind" = r ]; then
				# He can only read a snapshot: nothing changed.
				[[ "$output" == *"open=rdonly"* ]]
				cmp "$TFS_TMP/b" "$MNT/b"
			elif [ "$action" = truncate ]; then
				# What his object held at the end: nothing, so
				# zeroes, and the size the file had.
				[[ "$output" == *"truncate=ok"* ]]
				[[ "$output" == *"commit=ok"* ]]
				bytes_of 200000 '\0' | cmp - "$MNT/b"
			elif [ "$action" = grow ]; then
				[[ "$output" == *"grow=ok"* ]]
				cmp "$TFS_TMP/b" "$MNT/b"
			else
				# His writes before the release count, none after.
				bytes_of 200000 '\315' | cmp - "$MNT/b"
			fi
			[ "$(stat -c %s "$MNT/b")" = 200000 ]
			cmp "$TFS_TMP/keep" "$MNT/keep"
			as "$bob" rm "$MNT/b"
		done
	done
	# Nothing of his exports is left in /dev/shm.
	[ -z "$(shm_objs)" ]
	alice_file other 0644 100000
	cmp "$TFS_TMP/other" "$MNT/other"
	ec "$alice" cat "$MNT/other" | cmp - "$TFS_TMP/other"
}
