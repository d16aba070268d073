#!/usr/bin/env bats
# renameat2(RENAME_WHITEOUT) and overlayfs with its upper and work
# directories on tierfs: whiteouts, copy-up, opaque directories and the
# trusted.overlay.* attributes overlayfs keeps there.

load helpers

PY=/usr/bin/python3

setup() {
	tfs_setup
	tfs_mount
	OVL=
}

teardown() {
	if [ -n "$OVL" ] && mountpoint -q "$OVL"; then
		umount "$OVL" || umount -l "$OVL"
	fi
	tfs_teardown
}

# rename2 OLD NEW FLAGS...: renameat2() with RENAME_* names; prints ok or
# the errno name. $AS runs it as another user.
rename2() {
	cat >"$TFS_TMP/rename2.py" <<'EOF'
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
bits = {"NOREPLACE": 1, "EXCHANGE": 2, "WHITEOUT": 4}
flags = sum(bits[f] for f in sys.argv[3:])
r = libc.renameat2(-100, sys.argv[1].encode(), -100, sys.argv[2].encode(),
                   flags)
print("ok" if r == 0 else errno.errorcode[ctypes.get_errno()])
EOF
	${AS:-} $PY "$TFS_TMP/rename2.py" "$@"
}

# whiteout PATH: PATH is what overlayfs takes for a whiteout.
whiteout() {
	[ "$(stat -c '%F %t:%T %a' "$1")" = "character special file 0:0 0" ]
}

@test "renameat2(RENAME_WHITEOUT) leaves a 0:0 character device behind" {
	echo a >"$MNT/a"
	[ "$(rename2 "$MNT/a" "$MNT/b" WHITEOUT)" = ok ]
	whiteout "$MNT/a"
	[ "$(cat "$MNT/b")" = a ]
	[ "$(ls "$MNT" | tr '\n' ' ')" = "a b " ]
	# Over an existing target, which goes; not with NOREPLACE.
	echo c >"$MNT/c"
	[ "$(rename2 "$MNT/b" "$MNT/c" WHITEOUT)" = ok ]
	whiteout "$MNT/b"
	[ "$(cat "$MNT/c")" = a ]
	echo d >"$MNT/d"
	[ "$(rename2 "$MNT/d" "$MNT/c" WHITEOUT NOREPLACE)" = EEXIST ]
	[ "$(rename2 "$MNT/d" "$MNT/c" WHITEOUT EXCHANGE)" = EINVAL ]
	[ "$(cat "$MNT/d")" = d ]
	# A directory moves with its contents, into another directory.
	mkdir -p "$MNT/dir/sub" "$MNT/to"
	echo x >"$MNT/dir/sub/x"
	[ "$(rename2 "$MNT/dir" "$MNT/to/dir" WHITEOUT)" = ok ]
	whiteout "$MNT/dir"
	[ "$(cat "$MNT/to/dir/sub/x")" = x ]
	[ "$(stat -c %h "$MNT/to")" -eq 3 ]
	# Whiteouts are removed like any file.
	rm "$MNT/a" "$MNT/b" "$MNT/dir"
}

@test "a user makes whiteouts too, owned as mknod would make them" {
	# Linux 5.8 dropped CAP_MKNOD for whiteouts (unprivileged overlayfs).
	tfs_unmount
	tfs_mount -o allow_other
	chmod 0755 "$TFS_TMP"
	chmod 0777 "$MNT"
	local as="setpriv --reuid=nobody --regid=nogroup --clear-groups"
	$as touch "$MNT/mine"
	[ "$(AS=$as rename2 "$MNT/mine" "$MNT/moved" WHITEOUT)" = ok ]
	whiteout "$MNT/mine"
	[ "$(stat -c %U:%G "$MNT/mine")" = nobody:nogroup ]
	# ...and inherits the group of a set-group-ID directory.
	mkdir -m 2777 "$MNT/sgid"
	chgrp daemon "$MNT/sgid"
	$as touch "$MNT/sgid/f"
	[ "$(AS=$as rename2 "$MNT/sgid/f" "$MNT/sgid/g" WHITEOUT)" = ok ]
	[ "$(stat -c %U:%G "$MNT/sgid/f")" = nobody:daemon ]
}

# overlay [OPTS]: mount an overlay of $TFS_TMP/lower with its upper and work
# directories on tierfs at $OVL.
overlay() {
	OVL=$TFS_TMP/merged
	mkdir -p "$OVL" "$MNT/upper" "$MNT/work"
	mount -t overlay overlay \
		-o "${1:+$1,}lowerdir=$TFS_TMP/lower,upperdir=$MNT/upper,workdir=$MNT/work" \
		"$OVL"
}

make_lower() {
	mkdir -p "$TFS_TMP/lower/dir/sub"
	echo one >"$TFS_TMP/lower/one"
	echo two >"$TFS_TMP/lower/two"
	echo deep >"$TFS_TMP/lower/dir/sub/deep"
}

# check_overlay XATTR_NS: deletes, copy-up and an opaque directory through
# the merged view, and what lands in the upper directory.
check_overlay() {
	local ns=$1
	# A delete in the merged view is a whiteout in the upper directory.
	rm "$OVL/one"
	[ ! -e "$OVL/one" ]
	whiteout "$MNT/upper/one"
	[ -e "$TFS_TMP/lower/one" ]
	# A write copies the file up whole; the lower file stays as it was.
	echo more >>"$OVL/two"
	[ "$(cat "$OVL/two")" = "$(printf 'two\nmore')" ]
	[ "$(cat "$MNT/upper/two")" = "$(printf 'two\nmore')" ]
	[ "$(cat "$TFS_TMP/lower/two")" = two ]
	# A directory removed and made again hides the lower one: opaque.
	rm -r "$OVL/dir"
	mkdir "$OVL/dir"
	[ -z "$(ls -A "$OVL/dir")" ]
	[ "$(getfattr --only-values -n "$ns.overlay.opaque" "$MNT/upper/dir")" = y ]
	# A rename of a lower file: copy-up, then a whiteout where it was.
	echo three >"$TFS_TMP/lower/three"
	mv "$OVL/three" "$OVL/renamed"
	[ "$(cat "$OVL/renamed")" = three ]
	[ ! -e "$OVL/three" ]
	# New files and the whole view survive an unmount of the overlay.
	echo new >"$OVL/new"
	umount "$OVL"
	overlay "$2"
	[ "$(ls "$OVL" | tr '\n' ' ')" = "dir new renamed two " ]
	[ "$(cat "$OVL/new")" = new ]
	umount "$OVL"
}

@test "overlayfs with its upper directory on tierfs (trusted.overlay.*)" {
	make_lower
	# overlayfs refuses a FUSE upper without RENAME_WHITEOUT, d_type or
	# trusted.* xattrs ("upper fs missing required features").
	overlay
	check_overlay trusted
}

@test "overlayfs with -o userxattr keeps its attributes in user.overlay.*" {
	make_lower
	overlay userxattr
	check_overlay user userxattr
}

@test "overlayfs with index=on,nfs_export=on: file handles on the upper" {
	# The index names copied-up files by their lower file handles, and
	# NFS export decodes upper handles: both need tierfs's export support.
	make_lower
	overlay index=on,nfs_export=on
	echo more >>"$OVL/dir/sub/deep"
	[ -n "$(ls -A "$MNT/work/index")" ]
	check_overlay trusted index=on,nfs_export=on
}

@test "trusted.* names are listed for root only, as on tmpfs" {
	tfs_unmount
	tfs_mount -o allow_other
	chmod 0755 "$TFS_TMP"
	echo x >"$MNT/f"
	chmod 0644 "$MNT/f"
	setfattr -n trusted.t -v 1 "$MNT/f"
	setfattr -n user.u -v 2 "$MNT/f"
	[ "$(getfattr --absolute-names -d -m - "$MNT/f" | grep -c =)" -eq 2 ]
	run setpriv --reuid=nobody --regid=nogroup --clear-groups \
		getfattr --absolute-names -d -m - "$MNT/f"
	echo "$output"
	[[ "$output" == *'user.u="2"'* ]]
	[[ "$output" != *trusted* ]]
	run setpriv --reuid=nobody --regid=nogroup --clear-groups \
		getfattr -n trusted.t "$MNT/f"
	[ "$status" -ne 0 ]
	run setpriv --reuid=nobody --regid=nogroup --clear-groups \
		setfattr -n trusted.t -v 3 "$MNT/f"
	[ "$status" -ne 0 ]
	[ "$(getfattr --only-values -n trusted.t "$MNT/f")" = 1 ]
}
