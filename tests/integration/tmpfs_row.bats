#!/usr/bin/env bats
# What tmpfs does and tierfs must do itself, item by item (issue 33): statx
# attributes and birth times, ctime after chattr, SEEK_DATA/SEEK_HOLE
# errors, honest df and df -i, sparse device copies, -o noatime, POSIX
# ACLs. Where a check can run on tmpfs too, the test runs it on /dev/shm
# first, so that what tierfs is held to is what tmpfs does here.

load helpers

PY=/usr/bin/python3

setup() {
	tfs_setup
	SHM=/dev/shm/tfs-row-$$-$BATS_TEST_NUMBER
	rm -rf "$SHM"
	mkdir "$SHM"
}

teardown() {
	rm -rf "${SHM:?}"
	tfs_unmount
	tfs_teardown
}

# seek_neg FILE: what SEEK_DATA and SEEK_HOLE at offset -1 say, as errno
# names ("ENXIO ENXIO"), or the offsets they returned.
seek_neg() {
	"$PY" - "$1" <<'EOF'
import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
out = []
for whence in (os.SEEK_DATA, os.SEEK_HOLE):
    try:
        out.append(str(os.lseek(fd, -1, whence)))
    except OSError as e:
        out.append(errno.errorcode[e.errno])
print(" ".join(out))
EOF
}

@test "SEEK_DATA and SEEK_HOLE at a negative offset say ENXIO, as on tmpfs" {
	tfs_mount -o device_backend=none,host_limit=16M
	echo data >"$SHM/f"
	echo data >"$MNT/f"
	run seek_neg "$SHM/f"
	echo "tmpfs: $output"
	[ "$output" = "ENXIO ENXIO" ]
	run seek_neg "$MNT/f"
	echo "tierfs: $output"
	[ "$output" = "ENXIO ENXIO" ]
}

@test "chattr sets ctime, and stat shows the new one at once, as on tmpfs" {
	tfs_mount -o device_backend=none,host_limit=16M
	local d c0 c1 c2
	for d in "$SHM" "$MNT"; do
		echo "$d"
		touch "$d/f"
		c0=$(stat -c %z "$d/f")
		sleep 0.05
		chattr +A "$d/f"
		c1=$(stat -c %z "$d/f")
		sleep 0.05
		chattr -A "$d/f"
		c2=$(stat -c %z "$d/f")
		echo "$c0 / $c1 / $c2"
		[ "$c1" != "$c0" ]
		[ "$c2" != "$c1" ]
		[ "$(lsattr -d "$d/f" | cut -c1-20 | tr -d -- '-')" = "" ]
	done
}
