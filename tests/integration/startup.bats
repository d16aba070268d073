#!/usr/bin/env bats
# A persistent mount answers before its tree is back (issue 30): the
# loader thread restores it behind the mount, every namespace operation
# waits until it is done, and a restore that fails there ends the daemon
# with its directory kept. TFS_TEST_RESTORE_HOLD=PATH holds the loader
# until PATH exists, so the tests can act while the tree is not back.

load helpers

bats_require_minimum_version 1.5.0


setup() {
	tfs_setup
	OPTS=device_backend=none,disk_persist=yes
	BG=()
}

teardown() {
	local p
	# What still waits on a held mount is let go before the unmount.
	[ -z "${HOLD:-}" ] || touch "$HOLD"
	for p in "${BG[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	if grep -q " $MNT fuse" /proc/self/mounts && ! mountpoint -q "$MNT"; then
		fusermount3 -uz "$MNT"
	fi
	tfs_teardown
}

# mount_held OPTS: mount with the loader held until $HOLD exists. Waits
# for the mount in mountinfo, not with mountpoint(1), whose stat of the
# root must not be what the test relies on.
mount_held() {
	HOLD=$TFS_TMP/go
	TFS_TEST_RESTORE_HOLD=$HOLD "$TIERFS_BIN" "$MNT" -f \
		-o "disk_path=$SPILL,$1" 2>"$LOG" &
	TFS_PID=$!
	tfs_wait_for tfs_mounted "$MNT"
}

# answers CMD...: CMD ends within 5 s while the hold lasts, its output
# in $output. If not, the hold is let go (nothing else ends a process
# that waits on a FUSE request) and the check fails.
answers() {
	"$@" >"$TFS_TMP/answer" 2>&1 &
	local pid=$! i
	for i in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$pid" 2>/dev/null; then
		touch "$HOLD"
		wait "$pid" || true
		echo "'$*' did not answer while the tree was held" >&2
		return 1
	fi
	wait "$pid"
	output=$(cat "$TFS_TMP/answer")
}

# still_waiting PID: PID has not finished 300 ms after it started (it is
# waiting for the loader: the tree is not back while the hold lasts).
still_waiting() {
	sleep 0.3
	kill -0 "$1"
}

@test "the mount answers while its tree is restored; lookup, rename, link and df meanwhile wait, then see the tree" {
	tfs_mount -o "$OPTS"
	mkdir "$MNT/d" "$MNT/e"
	head -c 300000 /dev/urandom >"$TFS_TMP/ref"
	cp "$TFS_TMP/ref" "$MNT/d/f"
	echo moved >"$MNT/d/a"
	chmod 0751 "$MNT"
	tfs_unmount

	mount_held "$OPTS"
	# The root answers at once, with the mode it comes back with (the
	# kernel checks permissions on it).
	answers stat -c %a "$MNT"
	[ "$output" = 751 ]
	# statx asking for the birth time goes its own way (FUSE_STATX).
	answers stat -c %a:%W "$MNT"
	[ "${output%%:*}" = 751 ]
	cmp "$TFS_TMP/ref" "$MNT/d/f" >"$TFS_TMP/cmp" 2>&1 &
	BG+=($!)
	local cmp_pid=$!
	mv "$MNT/d/a" "$MNT/e/a" 2>"$TFS_TMP/mv" &
	BG+=($!)
	local mv_pid=$!
	ln "$MNT/d/f" "$MNT/e/f2" 2>"$TFS_TMP/ln" &
	BG+=($!)
	local ln_pid=$!
	df --output=iused "$MNT" >"$TFS_TMP/df" 2>&1 &
	BG+=($!)
	local df_pid=$!
	still_waiting "$cmp_pid"
	kill -0 "$mv_pid"
	kill -0 "$ln_pid"
	kill -0 "$df_pid"
	touch "$HOLD"
	wait "$cmp_pid"
	wait "$mv_pid"
	wait "$ln_pid"
	wait "$df_pid"
	BG=()
	[ "$(cat "$MNT/e/a")" = moved ]
	[ ! -e "$MNT/d/a" ]
	cmp "$TFS_TMP/ref" "$MNT/e/f2"
	[ "$(stat -c %h "$MNT/d/f")" = 2 ]
	# df waited for the whole tree: root, d, e, f, a.
	[ "$(tail -1 "$TFS_TMP/df" | tr -d ' ')" = 5 ]
	[ "$(stat -c %a "$MNT")" = 751 ]
	# What was done while the tree came back is journaled like the rest.
	tfs_unmount
	tfs_mount -o "$OPTS"
	[ "$(cat "$MNT/e/a")" = moved ]
	cmp "$TFS_TMP/ref" "$MNT/d/f"
	[ "$(stat -c %h "$MNT/e/f2")" = 2 ]
}

@test "a restore that fails behind the mount ends the daemon with the error, and loses nothing" {
	tfs_mount -o "$OPTS"
	mkdir "$MNT/d"
	(cd "$MNT/d" && touch $(seq -f 'a-file-with-a-long-name-%g' 1 300))
	tfs_unmount

	# 16K of metadata holds far fewer than 300 files; the hold keeps the
	# failure until the mount answers.
	mount_held "$OPTS,fs_metadata_limit=16K"
	# What waits is never served a tree half built.
	ls "$MNT/d" >"$TFS_TMP/ls" 2>&1 &
	BG+=($!)
	local ls_pid=$!
	still_waiting "$ls_pid"
	touch "$HOLD"
	local i rc=0
	for i in $(seq 1 200); do
		kill -0 "$TFS_PID" 2>/dev/null || break
		sleep 0.05
	done
	run ! kill -0 "$TFS_PID"
	wait "$TFS_PID" || rc=$?
	TFS_PID=
	[ "$rc" -eq 1 ]
	grep -q "cannot start the persistent mount: the files in '.*' need more metadata than fs_metadata_limit allows" "$LOG"
	run ! tfs_mounted "$MNT"
	local ls_rc=0
	wait "$ls_pid" || ls_rc=$?
	BG=()
	[ "$ls_rc" -ne 0 ]
	run ! grep -q a-file "$TFS_TMP/ls"

	tfs_mount -o "$OPTS"
	[ "$(ls "$MNT/d" | wc -l)" = 300 ]
}

@test "kill -9 while the tree is restored loses nothing" {
	tfs_mount -o "$OPTS"
	mkdir "$MNT/d"
	head -c 100000 /dev/urandom >"$TFS_TMP/ref"
	cp "$TFS_TMP/ref" "$MNT/d/f"
	tfs_unmount

	mount_held "$OPTS"
	kill -9 "$TFS_PID"
	wait "$TFS_PID" 2>/dev/null || true
	TFS_PID=
	HOLD=
	fusermount3 -uz "$MNT"

	tfs_mount -o "$OPTS"
	cmp "$TFS_TMP/ref" "$MNT/d/f"
}
