#!/usr/bin/env bats
# File flags through chattr and lsattr: immutable, append-only, nodump and
# noatime, with the kernel's rules for the first two enforced by the daemon
# (FUSE inodes never carry S_IMMUTABLE or S_APPEND, so the kernel's own
# checks do not run).

load helpers

PY=/usr/bin/python3

setup() {
	tfs_setup
	tfs_mount
}

teardown() {
	tfs_teardown
}

# flags PATH: the flag letters lsattr shows, dashes removed.
flags() {
	lsattr -d "$1" | awk '{ print $1 }' | tr -d -
}

# eperm CMD...: the command fails with "Operation not permitted".
eperm() {
	run "$@"
	echo "$* -> $status: $output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Operation not permitted"* ]]
}

@test "chattr +i: nothing changes an immutable file, not even root" {
	echo data >"$MNT/f"
	chattr +i "$MNT/f"
	[ "$(flags "$MNT/f")" = i ]
	eperm sh -c "echo more >>'$MNT/f'"
	eperm sh -c "echo new >'$MNT/f'"
	eperm truncate -s 0 "$MNT/f"
	eperm rm -f "$MNT/f"
	eperm mv "$MNT/f" "$MNT/g"
	eperm ln "$MNT/f" "$MNT/h"
	eperm chmod 0600 "$MNT/f"
	eperm chown nobody "$MNT/f"
	eperm touch "$MNT/f"
	eperm touch -d 2001-01-01 "$MNT/f"
	eperm setfattr -n user.k -v v "$MNT/f"
	eperm chattr +d "$MNT/f"
	# A rename onto it replaces it: refused too.
	echo other >"$MNT/o"
	eperm mv "$MNT/o" "$MNT/f"
	# fallocate and copy_file_range into it need a writable descriptor,
	# which it does not give.
	eperm fallocate -l 1M "$MNT/f"
	[ "$(cat "$MNT/f")" = data ]
	[ "$(stat -c %a:%s:%h "$MNT/f")" = 644:5:1 ]
	[ ! -e "$MNT/g" ]
	[ ! -e "$MNT/h" ]
	# Its place is not its content: moves and pins still work.
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[ "$(tfs_tier "$MNT/f")" = disk ]
	setfattr -n user.tierfs.pin -v 1 "$MNT/f"
	setfattr -n user.tierfs.pin -v 0 "$MNT/f"
	chattr -i "$MNT/f"
	[ -z "$(flags "$MNT/f")" ]
	echo more >>"$MNT/f"
	rm "$MNT/f"
}

@test "chattr +a: only O_APPEND writes at the end, nothing else" {
	echo one >"$MNT/log"
	setfattr -n user.k -v v "$MNT/log"
	chattr +a "$MNT/log"
	[ "$(flags "$MNT/log")" = a ]
	echo two >>"$MNT/log"
	[ "$(cat "$MNT/log")" = "$(printf 'one\ntwo')" ]
	eperm sh -c "echo three >'$MNT/log'"
	eperm dd if=/dev/zero of="$MNT/log" bs=1 count=1 conv=notrunc
	eperm truncate -s 1 "$MNT/log"
	eperm rm "$MNT/log"
	eperm mv "$MNT/log" "$MNT/log2"
	eperm ln "$MNT/log" "$MNT/log2"
	eperm chmod 0600 "$MNT/log"
	eperm touch -d 2001-01-01 "$MNT/log"
	eperm setfattr -n user.k -v w "$MNT/log"
	eperm setfattr -x user.k "$MNT/log"
	# Setting its times to now is allowed, as on any filesystem.
	touch "$MNT/log"
	# fcntl() can clear O_APPEND here (FUSE does not see it), but the
	# write that follows is refused; pwrite with O_APPEND lands at the end.
	run $PY - "$MNT/log" <<'EOF'
import errno, fcntl, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
os.pwrite(fd, b"end\n", 0)
fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_APPEND)
try:
    os.pwrite(fd, b"X", 0)
    sys.exit("pwrite without O_APPEND succeeded")
except OSError as e:
    assert e.errno == errno.EPERM, e
# An append-only file may still be extended by fallocate (vfs_fallocate).
os.posix_fallocate(fd, 0, 4096)
assert os.fstat(fd).st_size == 4096
EOF
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(head -c 12 "$MNT/log")" = "$(printf 'one\ntwo\nend\n')" ]
	[ "$(getfattr --only-values -n user.k "$MNT/log")" = v ]
	chattr -a "$MNT/log"
	rm "$MNT/log"
}

@test "chattr on directories: +a only adds entries, +i changes nothing" {
	mkdir "$MNT/a" "$MNT/i"
	touch "$MNT/a/old" "$MNT/i/old"
	chattr +a "$MNT/a"
	chattr +i "$MNT/i"
	[ "$(flags "$MNT/a")" = a ]
	[ "$(flags "$MNT/i")" = i ]
	touch "$MNT/a/new"
	mkdir "$MNT/a/sub"
	eperm rm "$MNT/a/old"
	eperm mv "$MNT/a/old" "$MNT/a/other"
	eperm mv "$MNT/a/old" "$MNT/moved"
	eperm rmdir "$MNT/a/sub"
	# The files inside are not append-only themselves.
	echo x >"$MNT/a/old"
	eperm touch "$MNT/i/new"
	eperm mkdir "$MNT/i/sub"
	eperm ln -s x "$MNT/i/link"
	eperm rm "$MNT/i/old"
	eperm mv "$MNT/a/new" "$MNT/i/new"
	eperm rmdir "$MNT/i"
	eperm mv "$MNT/i" "$MNT/j"
	[ "$(ls "$MNT/i")" = old ]
	chattr -a "$MNT/a"
	chattr -i "$MNT/i"
	rm -r "$MNT/a" "$MNT/i"
}

@test "chattr +d and +A: nodump is kept, noatime stops atime updates" {
	tfs_unmount
	tfs_mount -o strictatime
	echo data >"$MNT/f"
	chattr +dA "$MNT/f"
	[ "$(flags "$MNT/f")" = dA ]
	touch -a -d '2001-01-01' "$MNT/f"
	cat "$MNT/f" >/dev/null
	[ "$(stat -c %X "$MNT/f")" -eq "$(date -d 2001-01-01 +%s)" ]
	chattr -A "$MNT/f"
	[ "$(flags "$MNT/f")" = d ]
	cat "$MNT/f" >/dev/null
	[ "$(stat -c %X "$MNT/f")" -gt "$(date -d 2001-01-01 +%s)" ]
}

@test "new entries inherit nodump and noatime from their directory" {
	mkdir "$MNT/d"
	chattr +dA "$MNT/d"
	echo x >"$MNT/d/f"
	mkdir "$MNT/d/sub"
	[ "$(flags "$MNT/d/f")" = dA ]
	[ "$(flags "$MNT/d/sub")" = dA ]
	# Not immutable or append-only: those are not inherited.
	chattr +a "$MNT/d"
	touch "$MNT/d/g"
	[ "$(flags "$MNT/d/g")" = dA ]
	chattr -a "$MNT/d"
}

@test "chattr: flags tierfs does not keep are refused, as on tmpfs" {
	echo data >"$MNT/f"
	for f in c s u S j t; do
		run chattr "+$f" "$MNT/f"
		echo "+$f: $output"
		[ "$status" -ne 0 ]
		[[ "$output" == *"Operation not supported"* ]]
	done
	[ -z "$(flags "$MNT/f")" ]
	# Symlinks have no flags (the kernel answers for FUSE).
	ln -s f "$MNT/l"
	run lsattr -d "$MNT/l"
	[ "$status" -ne 0 ]
}

@test "FS_IOC_FSGETXATTR and FSSETXATTR see and set the same flags" {
	echo data >"$MNT/f"
	run $PY - "$MNT/f" <<'EOF'
import errno, fcntl, os, struct, sys
FSGET, FSSET = 0x801C581F, 0x401C5820
IMMUTABLE, APPEND, NODUMP, NOATIME, SYNC = 0x8, 0x10, 0x80, 0x40, 0x20
fd = os.open(sys.argv[1], os.O_RDONLY)
def get():
    return struct.unpack("5I8x", fcntl.ioctl(fd, FSGET, bytes(28)))
def put(xflags, extsize=0):
    fcntl.ioctl(fd, FSSET, struct.pack("5I8x", xflags, extsize, 0, 0, 0))
assert get() == (0, 0, 0, 0, 0), get()
put(NODUMP | NOATIME)
assert get()[0] == NODUMP | NOATIME, get()
for bad in ((SYNC, 0), (NODUMP, 4096)):
    try:
        put(*bad)
        sys.exit("FSSETXATTR %r succeeded" % (bad,))
    except OSError as e:
        assert e.errno == errno.EOPNOTSUPP, e
put(APPEND)
EOF
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(flags "$MNT/f")" = a ]
	chattr -a "$MNT/f"
}

@test "only root with CAP_LINUX_IMMUTABLE sets or clears +i and +a" {
	tfs_unmount
	tfs_mount -o allow_other
	chmod 0755 "$TFS_TMP"
	chmod 0777 "$MNT"
	setpriv --reuid=nobody --regid=nogroup --clear-groups \
		sh -c "echo mine >'$MNT/mine'"
	local nobody="setpriv --reuid=nobody --regid=nogroup --clear-groups"
	eperm $nobody chattr +i "$MNT/mine"
	eperm $nobody chattr +a "$MNT/mine"
	# The owner may set the others...
	$nobody chattr +d "$MNT/mine"
	[ "$(flags "$MNT/mine")" = d ]
	# ...and nobody else may, on a file they do not own.
	echo root >"$MNT/roots"
	eperm $nobody chattr +d "$MNT/roots"
	# Root without the capability may not either.
	eperm setpriv --inh-caps=-linux_immutable --bounding-set=-linux_immutable \
		chattr +i "$MNT/roots"
	chattr +i "$MNT/mine"
	eperm $nobody chattr -i "$MNT/mine"
	eperm setpriv --inh-caps=-linux_immutable --bounding-set=-linux_immutable \
		chattr -i "$MNT/mine"
	[ "$(flags "$MNT/mine")" = id ]
	chattr -i "$MNT/mine"
}

@test "tierfs ioctls that rewrite bytes refuse an append-only file" {
	echo data >"$MNT/f"
	chattr +a "$MNT/f"
	run $PY - "$MNT/f" <<'EOF'
import errno, fcntl, os, struct, sys
def iow(nr, size):
    return (1 << 30) | (size << 16) | (0xf7 << 8) | nr
ALLOC, COMMIT = iow(4, 32), iow(3, 32)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
for cmd, arg in ((ALLOC, struct.pack("IIQ16x", 1, 0, 4096)),
                 (COMMIT, struct.pack("II24x", 1, 0))):
    try:
        fcntl.ioctl(fd, cmd, arg)
        sys.exit("ioctl %#x succeeded" % cmd)
    except OSError as e:
        assert e.errno == errno.EPERM, e
EOF
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(cat "$MNT/f")" = data ]
	chattr -a "$MNT/f"
}

@test "tierfs ioctls on a directory still answer ENOTTY" {
	mkdir "$MNT/d"
	run $PY - "$MNT/d" <<'EOF'
import errno, fcntl, os, sys
STAT = (3 << 30) | (88 << 16) | (0xf7 << 8) | 6
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
try:
    fcntl.ioctl(fd, STAT, bytes(88))
    sys.exit("TFS_IOC_STAT on a directory succeeded")
except OSError as e:
    assert e.errno == errno.ENOTTY, e
EOF
	echo "$output"
	[ "$status" -eq 0 ]
}
