#!/usr/bin/env bats
# A daemon killed with SIGKILL in the middle of work: its clients get
# ENOTCONN, fusermount3 -u clears the mount point, and a new daemon mounts
# there at once and removes what the dead one left on disk and in /dev/shm.
# The mount is not persistent, so nothing of the dead run is worth keeping.
# tests/run: alone (every daemon that starts sweeps a dead one's /dev/shm)

load helpers

setup() {
	tfs_setup
	LOADERS=()
	EC=$(dirname "$TIERFS_BIN")/../client/lib/export_client
}

teardown() {
	local pid
	for pid in "${LOADERS[@]}"; do
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	# A failed check may leave the dead daemon's mount, which answers
	# ENOTCONN and so is no mountpoint to tfs_unmount.
	if grep -q " $MNT fuse" /proc/self/mounts; then
		fusermount3 -uz "$MNT"
	fi
	tfs_teardown
}

# load_loop NAME CMD...: run CMD over and over in the background until it
# fails, its errors in $TFS_TMP/NAME.err.
load_loop() {
	local name=$1
	shift
	(while "$@"; do :; done) 2>"$TFS_TMP/$name.err" &
	LOADERS+=($!)
}

ready_or_gone() { grep -q '^ready' "$1" || ! kill -0 "$2" 2>/dev/null; }

# hold_map OUT [rw]: export_client holding a map of $MNT/exp, in LOADERS.
# The device tier is 4 MiB of 2 MiB blocks, which the loaders' files fill
# too: a map may be refused with ENOSPC while they hold it, as it would be
# for a GPU program; try again, as that program would.
hold_map() {
	local out=$1 i pid
	shift
	for i in $(seq 1 50); do
		"$EC" hold "$MNT/exp" "$@" >"$out" 2>&1 &
		pid=$!
		tfs_wait_for ready_or_gone "$out" "$pid"
		if grep -q '^ready' "$out"; then
			LOADERS+=($pid)
			return 0
		fi
		wait "$pid" || true
		grep -q 'No space left on device' "$out" || break
		sleep 0.1
	done
	cat "$out"
	return 1
}

spill_files() { find "$SPILL" -type f ! -name lock | sort; }
has_spill_files() { [ -n "$(spill_files)" ]; }
gone() { ! kill -0 "$1" 2>/dev/null; }

@test "kill -9 under load: ENOTCONN, umount, and a new mount cleans up" {
	# export_client is built with tierfs (client/lib/meson.build).
	[ -x "$EC" ]
	local opts=device_backend=sim,device_limit=4M,host_limit=4M
	tfs_mount -o "$opts"
	head -c 3M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/seed"
	for k in 1 2 3; do
		load_loop "w$k" dd if="$TFS_TMP/src" of="$MNT/w$k" bs=256K \
			status=none
		load_loop "r$k" cmp -s "$TFS_TMP/src" "$MNT/seed"
	done
	# GPU programs' maps: the sim backend keeps them in /dev/shm, named
	# after the daemon (a read map's snapshot, a write map's live bytes).
	head -c 1M /dev/urandom >"$MNT/exp"
	hold_map "$TFS_TMP/hold.out"
	hold_map "$TFS_TMP/hold-rw.out" rw
	tfs_wait_for has_spill_files
	local dead=$TFS_PID
	local shm
	shm=$(find /dev/shm -maxdepth 1 -name "tierfs.$dead.*")
	[ "$(echo "$shm" | wc -l)" -eq 2 ]

	kill -9 "$dead"
	wait "$dead" 2>/dev/null || true
	TFS_PID=
	# What the dead run left, now that nothing changes it any more.
	local old_files
	old_files=$(spill_files)
	[ -n "$old_files" ]
	touch "$TFS_TMP/killed"

	run stat "$MNT/seed"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Transport endpoint is not connected"* ]]
	# Every loop stops at its next call, with the same error.
	for pid in "${LOADERS[@]:0:6}"; do
		tfs_wait_for gone "$pid"
	done
	# A call in flight when the daemon died gets ECONNABORTED instead.
	for k in 1 2 3; do
		grep -qE "Transport endpoint is not connected|Software caused connection abort" \
			"$TFS_TMP/w$k.err"
	done
	# The export holders keep a descriptor on the mount until they go.
	for pid in "${LOADERS[@]:6:2}"; do
		kill "$pid"
		wait "$pid" 2>/dev/null || true
	done

	fusermount3 -u "$MNT"
	run ! tfs_mounted "$MNT"
	# Until then the dead run's spill files are all still there. (Its shm
	# objects may not be: any sim daemon that starts on this machine
	# removes those of dead daemons.)
	for f in $old_files; do
		[ -e "$f" ]
	done

	tfs_mount -o "$opts"
	for f in $old_files; do
		[ ! -e "$f" ]
	done
	for o in $shm; do
		[ ! -e "$o" ]
	done
	# Nothing from before the kill is left in the spill directory: no
	# file, and no directory but the one the new daemon works in (it
	# holds it open), whatever either is named.
	[ -z "$(find "$SPILL" -type f ! -newer "$TFS_TMP/killed")" ]
	local open_dirs all_dirs
	open_dirs=$(for l in /proc/"$TFS_PID"/fd/*; do readlink "$l"; done |
		grep -E "^$SPILL/[^/]+\$" | sort -u)
	all_dirs=$(find "$SPILL" -mindepth 1 -maxdepth 1 | sort)
	[ -n "$open_dirs" ]
	[ "$all_dirs" = "$open_dirs" ]
	# The new mount works, and leaves nothing behind either.
	cp "$TFS_TMP/src" "$MNT/again"
	setfattr -n user.tierfs.tier -v disk "$MNT/again"
	cmp "$TFS_TMP/src" "$MNT/again"
	tfs_unmount
	[ -z "$(spill_files)" ]
}
