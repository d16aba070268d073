#!/usr/bin/env bats
# What a user can do to another's files through a shared mount (issue 10):
# the mount has allow_other (and, always, default_permissions), and two
# unprivileged users, alice and bob, made for each test, act through the
# ioctls and the sim backend's shared-memory exports.
# tests/run: alone (every daemon that starts sweeps a dead one's /dev/shm)

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
		flock /run/lock/tierfs-tests.users groupdel "$g" || true
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
	flock /run/lock/tierfs-tests.users groupadd "$g"
	GROUPS_MADE+=("$g")
	flock /run/lock/tierfs-tests.users usermod -a -G "$g" "$bob"
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
	run ! grep -q "removed '/$theirs'" "$LOG"
	! grep -q "removed '/$link'" "$LOG"
}

# bg USER OUT CMD...: export_client CMD... as USER in the background, its
# output in OUT; waits for its "ready" line. Sets BG_PID.
bg() {
	local u=$1 out=$2
	shift 2
	tfs_bg_as "$u" "$EXPORT_CLIENT" "$@" >"$out" 2>&1
	tfs_wait_line "$out" ready "$BG_PID"
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

# direct FILE: FILE's bytes as the daemon holds them, past the page cache.
direct() {
	dd if="$1" iflag=direct bs=1M status=none
}

# mapw USER OUT FILE: a shared writable mapping of FILE, held by USER in
# the background; SIGUSR1 writes 0x11 over it and msyncs, SIGUSR2 0x22,
# each printing "msync=ok" or the error. Sets BG_PID.
mapw() {
	local u=$1 out=$2 file=$3 i
	cat >"$TFS_TMP/mapw.py" <<'PY'
import mmap, os, signal, sys
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, os.fstat(fd).st_size, mmap.MAP_SHARED,
              mmap.PROT_READ | mmap.PROT_WRITE)
def fill(sig, frame):
    m[:] = (b"\x11" if sig == signal.SIGUSR1 else b"\x22") * len(m)
    try:
        m.flush()
        print("msync=ok", flush=True)
    except OSError as e:
        print("msync=" + (os.strerror(e.errno) or "?").replace(" ", "_"),
              flush=True)
signal.signal(signal.SIGUSR1, fill)
signal.signal(signal.SIGUSR2, fill)
print("ready", flush=True)
while True:
    signal.pause()
PY
	chmod 644 "$TFS_TMP/mapw.py"
	tfs_bg_as "$u" /usr/bin/python3 "$TFS_TMP/mapw.py" "$file" >"$out" 2>&1
	for i in $(seq 1 200); do
		grep -q '^ready' "$out" && return 0
		sleep 0.05
	done
	cat "$out" >&2
	return 1
}

@test "chattr +i and +a bind a write export and a shared mapping taken before (round 3, finding 5)" {
	local f
	for f in e m a; do
		head -c 100000 /dev/urandom >"$TFS_TMP/$f"
		chmod 644 "$TFS_TMP/$f"
		as "$bob" cp "$TFS_TMP/$f" "$MNT/$f"
	done
	bg "$bob" "$TFS_TMP/we" writer "$MNT/e"
	local wpid=$BG_PID
	mapw "$bob" "$TFS_TMP/wm" "$MNT/m"
	local mpid=$BG_PID
	mapw "$bob" "$TFS_TMP/wa" "$MNT/a"
	local apid=$BG_PID
	# Before the flags, both write the file, and what they wrote stays.
	[ "$(ask "$wpid" "$TFS_TMP/we" USR2 commit)" = commit=ok ]
	bytes_of 100000 '\315' | cmp - "$MNT/e"
	[ "$(ask "$mpid" "$TFS_TMP/wm" USR1 msync)" = msync=ok ]
	bytes_of 100000 '\021' | cmp - "$MNT/m"
	[ "$(ask "$apid" "$TFS_TMP/wa" USR1 msync)" = msync=ok ]
	chattr +i "$MNT/e" "$MNT/m"
	chattr +a "$MNT/a"
	grep -q "inode [0-9]*: ended 1 write export: the file is now immutable" "$LOG"
	# After: the file refuses the commit (EPERM, as a write), the export
	# is gone (its release hears ESTALE), the mapping's write-back is
	# refused, and nothing reaches the files.
	[ "$(ask "$wpid" "$TFS_TMP/we" USR2 commit)" = commit=EPERM ]
	run ask "$mpid" "$TFS_TMP/wm" USR2 msync
	[ "$output" != msync=ok ]
	run ask "$apid" "$TFS_TMP/wa" USR2 msync
	[ "$output" != msync=ok ]
	bytes_of 100000 '\315' | cmp - <(direct "$MNT/e")
	bytes_of 100000 '\021' | cmp - <(direct "$MNT/m")
	bytes_of 100000 '\021' | cmp - <(direct "$MNT/a")
	# The refused pages are dropped: readers through the cache see the
	# file's bytes too, and so does the mapping.
	tfs_wait_for cmp -s <(bytes_of 100000 '\021') "$MNT/m"
	tfs_wait_for cmp -s <(bytes_of 100000 '\021') "$MNT/a"
	kill -TERM "$wpid"
	wait "$wpid"
	grep -q '^release=ESTALE$' "$TFS_TMP/we"
	kill -TERM "$mpid" "$apid"
	wait "$mpid" "$apid" || true
	bytes_of 100000 '\315' | cmp - "$MNT/e"
	bytes_of 100000 '\021' | cmp - "$MNT/m"
	# Append-only still takes appends, and only appends.
	as "$bob" sh -c "echo more >>'$MNT/a'"
	run as "$bob" dd if=/dev/zero of="$MNT/a" bs=1 count=1 conv=notrunc \
		status=none
	[ "$status" -ne 0 ]
	[ "$(tail -c 5 "$MNT/a")" = more ]
	[ "$(stat -c %s "$MNT/a")" = 100005 ]
	chattr -i "$MNT/e" "$MNT/m"
	chattr -a "$MNT/a"
}

@test "the owner's truncate, rewrite, chmod, move and export break a writer's lease (round 3, finding 9)" {
	local how i
	for how in truncate rewrite chmod move export; do
		alice_file f 0666 100000
		bg "$bob" "$TFS_TMP/w.$how" writer "$MNT/f"
		local wpid=$BG_PID
		case $how in
		truncate) as "$alice" truncate -s 1000 "$MNT/f" ;;
		rewrite) as "$alice" sh -c "echo mine >'$MNT/f'" ;;
		chmod) as "$alice" chmod 600 "$MNT/f" ;;
		move)
			as "$alice" setfattr -n user.tierfs.tier -v disk "$MNT/f"
			[ "$(tfs_tier "$MNT/f")" = disk ]
			;;
		export)
			run ec "$alice" ioctl "$MNT/f" export-write rw
			[ "$output" = ok ]
			;;
		esac
		# bob hears it at his next use, and his bytes go nowhere.
		cp "$MNT/f" "$TFS_TMP/now"
		[ "$(ask "$wpid" "$TFS_TMP/w.$how" USR2 commit)" = commit=ESTALE ]
		cmp "$TFS_TMP/now" "$MNT/f"
		cmp "$TFS_TMP/now" <(direct "$MNT/f")
		kill -TERM "$wpid"
		wait "$wpid"
		grep -q '^release=ENOENT$\|^release=other$' "$TFS_TMP/w.$how"
		cmp "$TFS_TMP/now" "$MNT/f"
		as "$alice" rm "$MNT/f"
	done
	[ "$(grep -c "ended 1 write export of other users: its owner asked" "$LOG")" = 5 ]
	# Someone who is not the owner breaks nothing, and the holder's own
	# truncate still waits for the holder.
	alice_file g 0666 100000
	bg "$bob" "$TFS_TMP/w.g" writer "$MNT/g"
	local wpid=$BG_PID
	local carol
	tfs_user carol
	run as "$carol" truncate -s 0 "$MNT/g"
	[[ "$output" == *"Device or resource busy"* ]]
	run as "$bob" truncate -s 0 "$MNT/g"
	[[ "$output" == *"Device or resource busy"* ]]
	[ "$(ask "$wpid" "$TFS_TMP/w.g" USR2 commit)" = commit=ok ]
	kill -TERM "$wpid"
	wait "$wpid"
	grep -q '^release=ok$' "$TFS_TMP/w.g"
}

# pin_until USER PREFIX N: USER pins PREFIX1.. PREFIXN in turn until one
# is refused; prints how many were pinned and the last error.
pin_until() {
	local u=$1 p=$2 n=$3 k out
	for k in $(seq 1 "$n"); do
		if ! out=$(as "$u" setfattr -n user.tierfs.pin -v 1 "$p$k" 2>&1); then
			echo "$((k - 1)) $out"
			return 0
		fi
	done
	echo "$n"
}

@test "pins are charged on every tier: one user's pins cannot starve another (round 3, finding 6)" {
	tfs_unmount
	tfs_mount -o allow_other,device_backend=sim,device_limit=64M,host_limit=64M,device_user_share=8M,host_user_share=8M
	chmod 1777 "$MNT"
	as "$bob" mkdir "$MNT/bob"
	local k out
	for k in $(seq 1 8); do
		as "$bob" dd if=/dev/urandom of="$MNT/bob/h$k" bs=1M count=2 \
			status=none
		as "$bob" setfattr -n user.tierfs.tier -v host "$MNT/bob/h$k"
		[ "$(tfs_tier "$MNT/bob/h$k")" = host ]
	done
	# Moved to host first and pinned there: charged to the host share,
	# 8M, four files, then EDQUOT.
	out=$(pin_until "$bob" "$MNT/bob/h" 8)
	echo "$out"
	[[ "$out" == "4 "*"Disk quota exceeded"* ]]
	# A pinned file grows only within the share.
	as "$bob" setfattr -n user.tierfs.pin -v 0 "$MNT/bob/h4"
	run as "$bob" dd if=/dev/zero of="$MNT/bob/h1" bs=1M count=4 \
		oflag=append conv=notrunc status=none
	[[ "$output" == *"Disk quota exceeded"* ]]
	[ "$(stat -c %s "$MNT/bob/h1")" -le $((4 * 1024 * 1024)) ]
	for k in 1 2 3; do
		as "$bob" setfattr -n user.tierfs.pin -v 0 "$MNT/bob/h$k"
	done
	# On the device (with the clean host copy beside it): the same.
	for k in $(seq 1 8); do
		as "$bob" dd if=/dev/urandom of="$MNT/bob/d$k" bs=1M count=2 \
			status=none
		[ "$(tfs_tier "$MNT/bob/d$k")" = device ]
	done
	out=$(pin_until "$bob" "$MNT/bob/d" 8)
	echo "$out"
	[[ "$out" == "4 "*"Disk quota exceeded"* ]]
	run as "$bob" setfattr -n user.tierfs.pin -v 1 "$MNT/bob/h8"
	[[ "$output" == *"Disk quota exceeded"* ]]
	# alice is unaffected: her files are placed on the device, her moves
	# up and her pins work, and so do root's exports.
	alice_file a 0644 4000000
	[ "$(tfs_tier "$MNT/a")" = device ]
	as "$alice" setfattr -n user.tierfs.tier -v disk "$MNT/a"
	as "$alice" setfattr -n user.tierfs.tier -v host "$MNT/a"
	as "$alice" setfattr -n user.tierfs.tier -v device "$MNT/a"
	as "$alice" setfattr -n user.tierfs.pin -v 1 "$MNT/a"
	alice_file b 0644 2000000
	as "$alice" setfattr -n user.tierfs.tier -v host "$MNT/b"
	as "$alice" setfattr -n user.tierfs.pin -v 1 "$MNT/b"
	run ec root ioctl "$MNT/bob/d1" export r
	[ "$output" = ok ]
	ec "$alice" cat "$MNT/a" | cmp - "$TFS_TMP/a"
	# Unpinning gives the share back, to pin elsewhere.
	as "$bob" setfattr -n user.tierfs.pin -v 0 "$MNT/bob/d2"
	as "$bob" setfattr -n user.tierfs.pin -v 1 "$MNT/bob/d7"
	run as "$bob" setfattr -n user.tierfs.pin -v 1 "$MNT/bob/d8"
	[[ "$output" == *"Disk quota exceeded"* ]]
}

@test "by default one user's pins hold at most half of device and host (round 3, finding 6)" {
	as "$bob" mkdir "$MNT/bob"
	local k out
	for k in $(seq 1 12); do
		as "$bob" dd if=/dev/urandom of="$MNT/bob/d$k" bs=1M count=4 \
			status=none
	done
	out=$(pin_until "$bob" "$MNT/bob/d" 12)
	echo "$out"
	[[ "$out" == "8 "*"Disk quota exceeded"* ]]
	alice_file a 0644 4000000
	as "$alice" setfattr -n user.tierfs.pin -v 1 "$MNT/a"
	[ "$(tfs_tier "$MNT/a")" = device ]
}

# maps_of PID: the mappings the process has.
maps_of() {
	wc -l <"/proc/$1/maps"
}

@test "an export flood is capped per user and costs the daemon no mappings (round 3, finding 7)" {
	# Started where a root shell leaves the soft limit on descriptors
	# (1024): each export holds one, so the daemon takes the hard limit.
	tfs_unmount
	printf '#!/bin/sh\nulimit -Sn 1024\nexec "%s" "$@"\n' \
		"$(readlink -f "$TIERFS_BIN")" >"$TFS_TMP/tierfs-1024"
	chmod 755 "$TFS_TMP/tierfs-1024"
	TIERFS_BIN=$TFS_TMP/tierfs-1024 tfs_mount -o allow_other,device_backend=sim,device_limit=64M,host_limit=64M
	chmod 1777 "$MNT"
	[ "$(prlimit --pid "$TFS_PID" --nofile --noheadings -o SOFT)" = \
		"$(prlimit --pid "$TFS_PID" --nofile --noheadings -o HARD)" ]
	as "$bob" mkdir "$MNT/bob"
	as "$bob" sh -c "cd '$MNT/bob' && for k in \$(seq 0 1099); do echo \$k >f\$k; done"
	local before after
	before=$(maps_of "$TFS_PID")
	bg "$bob" "$TFS_TMP/flood" flood "$MNT/bob" 1100 rw
	# [device] user_exports: 1024 live exports a user by default.
	grep -q '^ready 1024 76 0$' "$TFS_TMP/flood"
	after=$(maps_of "$TFS_PID")
	echo "maps: $before -> $after"
	[ "$after" -lt $((before + 64)) ]
	# alice's writes and exports go on.
	head -c 50000000 /dev/urandom >"$TFS_TMP/big"
	chmod 644 "$TFS_TMP/big"
	as "$alice" cp "$TFS_TMP/big" "$MNT/big"
	cmp "$TFS_TMP/big" "$MNT/big"
	alice_file a 0644 100000
	ec "$alice" cat "$MNT/a" | cmp - "$TFS_TMP/a"
	run ec "$alice" ioctl "$MNT/a" export-write rw
	[ "$output" = ok ]
	kill -TERM "$BG_PID"
	wait "$BG_PID"
	# Once his exports end, he may export again.
	run ec "$bob" ioctl "$MNT/bob/f0" export-write rw
	[ "$output" = ok ]
}

@test "one user's xattrs and files take only their share of the metadata budget (round 3, finding 8)" {
	tfs_unmount
	tfs_mount -o allow_other,device_backend=sim,device_limit=64M,host_limit=64M,fs_metadata_limit=4M
	chmod 1777 "$MNT"
	as "$bob" mkdir "$MNT/bob"
	local k v out=
	v=$(head -c 60000 /dev/zero | tr '\0' x)
	printf '%s' "$v" >"$TFS_TMP/v"
	chmod 644 "$TFS_TMP/v"
	for k in $(seq 1 100); do
		if ! out=$(as "$bob" sh -c "touch '$MNT/bob/x$k' &&
			setfattr -n user.a -v \"\$(cat '$TFS_TMP/v')\" '$MNT/bob/x$k' &&
			setfattr -n user.b -v \"\$(cat '$TFS_TMP/v')\" '$MNT/bob/x$k' &&
			setfattr -n user.c -v \"\$(cat '$TFS_TMP/v')\" '$MNT/bob/x$k'" 2>&1); then
			break
		fi
	done
	echo "$k: $out"
	[[ "$out" == *"Disk quota exceeded"* ]]
	[ "$(tfs_stat metadata.user_share)" -eq $((2 * 1024 * 1024)) ]
	# Half of 4M is his: he stopped near 2M.
	[ "$(tfs_stat metadata.used)" -lt 3000000 ]
	# What is left of it takes a few more files, no more.
	run as "$bob" sh -c "for k in \$(seq 1 2000); do touch '$MNT/bob/t'\$k || exit; done"
	[[ "$output" == *"Disk quota exceeded"* ]]
	# A directory may cost less than a file: what is left may hold a
	# few, no more.
	run as "$bob" sh -c "for k in \$(seq 1 2000); do mkdir '$MNT/bob/d'\$k || exit; done"
	[[ "$output" == *"Disk quota exceeded"* ]]
	run as "$bob" mkdir "$MNT/bob/more"
	[[ "$output" == *"Disk quota exceeded"* ]]
	# alice and root are unaffected.
	as "$alice" touch "$MNT/af"
	as "$alice" mkdir "$MNT/ad"
	as "$alice" setfattr -n user.a -v "$(cat "$TFS_TMP/v")" "$MNT/af"
	touch "$MNT/rf"
	mkdir "$MNT/rd"
	# What he frees is his again.
	as "$bob" rm -f "$MNT/bob/x1" "$MNT/bob/x2"
	as "$bob" mkdir "$MNT/bob/more"
}

@test "a read-only mount refuses moves and pins with EROFS (round 3, finding 10)" {
	command -v mount.fuse3 >/dev/null || skip "no mount.fuse3"
	mkdir -p "$TFS_TMP/bin"
	ln -s "$(readlink -f "$TIERFS_BIN")" "$TFS_TMP/bin/tierfs"
	alice_file f 0644
	as "$alice" setfattr -n user.tierfs.tier -v host "$MNT/f"
	env PATH="$TFS_TMP/bin:$PATH" mount.fuse3 tierfs "$MNT" -t fuse.tierfs \
		-o "ro,nosuid,nodev,relatime,remount,user_id=0,group_id=0,default_permissions,allow_other"
	[ "$(findmnt -no FS-OPTIONS "$MNT" | cut -d, -f1)" = ro ]
	local who t
	for who in "$alice" root; do
		for t in disk device; do
			run ec "$who" ioctl "$MNT/f" "move-$t" r
			[ "$output" = errno=EROFS ]
		done
		run as "$who" setfattr -n user.tierfs.tier -v disk "$MNT/f"
		[[ "$output" == *"Read-only file system"* ]]
		run as "$who" setfattr -n user.tierfs.pin -v 1 "$MNT/f"
		[[ "$output" == *"Read-only file system"* ]]
	done
	[ "$(tfs_tier "$MNT/f")" = host ]
	[ "$(getfattr --only-values -n user.tierfs.pin "$MNT/f")" = 0 ]
	cmp "$TFS_TMP/f" "$MNT/f"
	# Reading, and read exports, still work.
	ec "$alice" cat "$MNT/f" | cmp - "$TFS_TMP/f"
}
