#!/usr/bin/env bats
# open(O_TMPFILE): an unnamed file that lives while it is open, and that
# linkat() may name (FUSE_TMPFILE, which libfuse 3.14 does not know: see
# fs/tmpfile.c).

load helpers

PY=/usr/bin/python3

setup() {
	tfs_setup
	tfs_mount -o host_limit=8M
}

teardown() {
	tfs_teardown
}

# tmpfile DIR SCRIPT: run SCRIPT in python with tmpfile(dir, flags) and
# link(fd, name) defined; prints what SCRIPT prints.
tmpfile() {
	cat >"$TFS_TMP/t.py" <<'EOF'
import ctypes, errno, hashlib, os, sys
libc = ctypes.CDLL(None, use_errno=True)
AT_EMPTY_PATH = 0x1000
def tmpfile(d, flags=os.O_RDWR, mode=0o640):
    return os.open(d, os.O_TMPFILE | flags, mode)
def link(fd, name):
    if libc.linkat(fd, b"", -100, name.encode(), AT_EMPTY_PATH) == 0:
        return "ok"
    return errno.errorcode[ctypes.get_errno()]
def err(f, *a):
    try:
        f(*a)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
os.chdir(sys.argv[1])
exec(sys.argv[2])
EOF
	$PY "$TFS_TMP/t.py" "$1" "$2"
}

@test "O_TMPFILE: an unnamed file, named later by linkat" {
	run tmpfile "$MNT" '
fd = tmpfile(".")
os.write(fd, b"hello")
st = os.fstat(fd)
print(st.st_nlink, oct(st.st_mode & 0o777), os.listdir("."))
print(link(fd, "named"), link(fd, "again"))
print(open("named").read(), os.stat("named").st_nlink)
'
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "0 0o640 []" ]
	[ "${lines[1]}" = "ok ok" ]
	[ "${lines[2]}" = "hello 2" ]
	# The named file is an ordinary one, placed in its tier when closed.
	[ "$(cat "$MNT/named")" = hello ]
	tfs_wait_for tfs_tier_is "$MNT/named" != ""
}

@test "O_TMPFILE: O_EXCL never links, nor does a file whose name went" {
	run tmpfile "$MNT" '
fd = tmpfile(".", os.O_RDWR | os.O_EXCL)
print(link(fd, "excl"))
fd = tmpfile(".", os.O_WRONLY)
print(link(fd, "once"))
os.unlink("once")
print(link(fd, "twice"), sorted(os.listdir(".")))
'
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = ENOENT ]
	[ "${lines[1]}" = ok ]
	[ "${lines[2]}" = "ENOENT []" ]
}

@test "O_TMPFILE: the buffer lives while the file is open, and no longer" {
	[ "$(tfs_stat host.buffers)" -eq 0 ]
	run tmpfile "$MNT" '
fd = tmpfile(".")
data = os.urandom(3 << 20)
os.write(fd, data)
print(hashlib.sha1(os.pread(fd, len(data), 0)).hexdigest() ==
      hashlib.sha1(data).hexdigest())
print(int(os.getxattr("/proc/self/fd/%d" % fd, "user.tierfs.size")))
sys.stdout.flush()
'
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = True ]
	[ "${lines[1]}" -eq $((3 << 20)) ]
	tfs_wait_for tfs_stat_is host.buffers -eq 0
	[ "$(tfs_stat host.used)" -eq 0 ]
}

@test "O_TMPFILE: in a subdirectory, owned as a create would be" {
	mkdir -m 2777 "$MNT/sgid"
	chgrp daemon "$MNT/sgid"
	run tmpfile "$MNT/sgid" '
fd = tmpfile(".")
st = os.fstat(fd)
print(st.st_uid, st.st_gid)
print(link(fd, "x"))
'
	echo "$output"
	[ "${lines[0]}" = "0 $(getent group daemon | cut -d: -f3)" ]
	[ "${lines[1]}" = ok ]
	[ -f "$MNT/sgid/x" ]
	# Not in an immutable directory, nor one that is gone.
	mkdir "$MNT/frozen" "$MNT/gone"
	chattr +i "$MNT/frozen"
	run tmpfile "$MNT" '
print(err(tmpfile, "frozen"))
os.chdir("gone")
os.rmdir("../gone")
print(err(tmpfile, "."))
'
	echo "$output"
	[ "${lines[0]}" = EPERM ]
	[ "${lines[1]}" = ENOENT ]
	chattr -i "$MNT/frozen"
}

@test "tempfile.TemporaryFile and mkstemp work on the mount" {
	run tmpfile "$MNT" '
import tempfile
with tempfile.TemporaryFile(dir=".") as f:
    f.write(b"x" * 100000)
    f.seek(0)
    print(len(f.read()))
fd, name = tempfile.mkstemp(dir=".")
os.write(fd, b"kept")
print(open(name).read(), os.listdir(".") == [os.path.basename(name)])
'
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = 100000 ]
	[ "${lines[1]}" = "kept True" ]
}
