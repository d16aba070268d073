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
	ROW_MOUNTS=()
	CHURN_PID=
}

teardown() {
	local m
	[ -z "${CHURN_PID:-}" ] || { kill "$CHURN_PID"; wait "$CHURN_PID"; } 2>/dev/null
	# mounts a test made besides the tierfs, newest first
	for m in $(printf '%s\n' "${ROW_MOUNTS[@]}" | tac); do
		if mountpoint -q "$m"; then
			umount "$m"
		fi
	done
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

# fill_files DIR: create empty files f0000000, f0000001... in DIR until
# one fails; print how many were made and the errno name that stopped it.
fill_files() {
	"$PY" - "$1" <<'EOF2'
import errno, os, sys
n = 0
while True:
    try:
        os.close(os.open(os.path.join(sys.argv[1], "f%07d" % n),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except OSError as e:
        print(n, errno.errorcode[e.errno])
        break
    n += 1
EOF2
}

@test "df -i: the free inodes are the files that can still be made, as on tmpfs" {
	# tmpfs: IFree is exact
	mkdir "$TFS_TMP/t"
	mount -t tmpfs -o nr_inodes=300 tfs-row "$TFS_TMP/t"
	local ifree
	ifree=$(df --output=iavail "$TFS_TMP/t" | tail -1 | tr -d " ")
	run fill_files "$TFS_TMP/t"
	umount "$TFS_TMP/t"
	echo "tmpfs: IFree $ifree, made $output"
	[ "$output" = "$ifree ENOSPC" ]
	# tierfs: inodes cost metadata memory, 1.6 MB of it under host 16M
	tfs_mount -o device_backend=none,host_limit=16M
	local files0 made
	ifree=$(df --output=iavail "$MNT" | tail -1 | tr -d " ")
	files0=$(df --output=itotal "$MNT" | tail -1 | tr -d " ")
	run fill_files "$MNT"
	echo "tierfs: IFree $ifree of $files0, made $output"
	[ "${output#* }" = ENOSPC ]
	made=${output% *}
	[ "$made" -ge $((ifree * 95 / 100)) ]
	[ "$made" -le $((ifree * 105 / 100)) ]
	# and once creates fail, next to nothing is left
	ifree=$(df --output=iavail "$MNT" | tail -1 | tr -d " ")
	echo "IFree now $ifree"
	[ "$ifree" -le $((made / 100 + 1)) ]
	# the total stays about what it was: used plus free
	[ "$(df --output=itotal "$MNT" | tail -1 | tr -d " ")" -le $((files0 * 105 / 100)) ]
}

# avail_fits DIR: df's Avail of DIR, then whether fallocate of it less
# 512 KiB succeeds for one new file; prints "AVAIL ok" or "AVAIL failed".
avail_fits() {
	local avail
	avail=$(df -B1 --output=avail "$1" | tail -1 | tr -d " ")
	if fallocate -l $((avail - 524288)) "$1/big"; then
		echo "$avail ok"
	else
		echo "$avail failed"
	fi
	rm -f "$1/big"
}

@test "df's Avail is what one file can take: fallocate of it less 512 KiB succeeds, as on tmpfs" {
	mkdir "$TFS_TMP/t"
	mount -t tmpfs -o size=8M tfs-row "$TFS_TMP/t"
	head -c 1M /dev/urandom >"$TFS_TMP/t/a"
	run avail_fits "$TFS_TMP/t"
	umount "$TFS_TMP/t"
	echo "tmpfs: $output"
	[ "${output#* }" = ok ]
	local opts free avail
	# the disk limit binds; then the host limit does
	for opts in device_limit=8M,host_limit=16M,disk_limit=64M \
		device_limit=8M,host_limit=32M,disk_limit=8M; do
		tfs_mount -o "device_backend=sim,$opts"
		head -c 3M /dev/urandom >"$MNT/a"
		head -c 3M /dev/urandom >"$MNT/b"
		setfattr -n user.tierfs.tier -v disk "$MNT/b"
		free=$(($(stat -f -c '%f * %S' "$MNT")))
		run avail_fits "$MNT"
		echo "$opts: free $free, avail and fallocate: $output"
		[ "${output#* }" = ok ]
		avail=${output% *}
		[ "$avail" -le "$free" ]
		# and the room all tiers leave is the sum, more than one file's
		[ "$free" -gt "$avail" ]
		tfs_unmount
	done
}

# acl_steps DIR USER: the same ACL work in DIR, printing what getfacl and
# stat say after each step (without the names of DIR), and what USER may
# read and write.
acl_steps() {
	local d=$1 u=$2 f
	cd "$d" || return 1
	echo secret >f
	chmod 600 f
	setfacl -m "u:$u:r" f
	getfacl -cn f
	stat -c '%A' f
	tfs_as "$u" cat f
	tfs_as "$u" sh -c 'echo x >>f' 2>/dev/null || echo "write refused"
	# chmod moves the mask, not group::
	chmod 640 f
	getfacl -cn f
	chmod 604 f
	getfacl -cn f
	tfs_as "$u" cat f 2>/dev/null || echo "read refused"
	# an ACL the mode says all of is not kept
	setfacl -b f
	setfacl -m u::rw,g::r,o::- f
	getfacl -cn f
	stat -c '%A' f
	# default ACLs: new files and directories take them, the umask left
	# out; without one the umask applies
	mkdir d
	setfacl -d -m "u:$u:rwx,g::r-x,o::-" d
	(umask 077 && touch d/new && mkdir d/sub && mkdir d/sub/deeper &&
		mknod d/fifo p && "$PY" -c 'import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("d", os.O_TMPFILE | os.O_WRONLY, 0o640)
AT_FDCWD, AT_SYMLINK_FOLLOW = -100, 0x400
if libc.linkat(AT_FDCWD, b"/proc/self/fd/%d" % fd, AT_FDCWD, b"d/tmpf",
               AT_SYMLINK_FOLLOW):
    raise OSError(ctypes.get_errno(), "linkat")')
	for f in d d/new d/sub d/sub/deeper d/fifo d/tmpf; do
		echo "$f"
		getfacl -cn "$f"
		stat -c '%A' "$f"
	done
	tfs_as "$u" sh -c 'echo hi >d/sub/deeper/by-user' && echo "user wrote"
	(umask 027 && mkdir plain && touch plainf)
	stat -c '%A' plain plainf
	getfacl -cn plain
	# removing the default ACL stops inheritance
	setfacl -k d
	(umask 022 && touch d/after)
	getfacl -cn d/after
	stat -c '%A' d/after
}

@test "POSIX ACLs: setfacl and getfacl work, the kernel enforces them, defaults are inherited, chmod moves the mask, as on tmpfs" {
	local u want got
	tfs_user u
	chmod 755 "$SHM"
	tfs_mount -o device_backend=none,host_limit=16M,allow_other
	chmod 755 "$MNT"
	want=$(acl_steps "$SHM" "$u" 2>&1)
	got=$(acl_steps "$MNT" "$u" 2>&1)
	echo "tmpfs:"
	echo "$want"
	echo "tierfs:"
	echo "$got"
	[ -n "$want" ]
	[[ "$want" == *user:$(id -u "$u"):r--* ]]
	[ "$got" = "$want" ]
}

@test "ACLs count against the metadata budget, and a persistent mount keeps them" {
	local u used0 used1 spec i acl0
	tfs_user u
	tfs_mount -o disk_persist=yes,device_backend=none,host_limit=16M,allow_other
	chmod 755 "$MNT"
	mkdir "$MNT/d"
	setfacl -d -m "u:$u:rwx" "$MNT/d"
	echo data >"$MNT/d/f"
	# an ACL of 500 named users is 4 KB of metadata (the most FUSE takes:
	# the kernel refuses an ACL of more than a page)
	spec=$(seq -f "u:%g:r" 100000 100499 | paste -sd,)
	used0=$(tfs_stat metadata.used)
	touch "$MNT/big"
	setfacl -m "$spec" "$MNT/big"
	used1=$(tfs_stat metadata.used)
	echo "metadata.used $used0 -> $used1"
	[ $((used1 - used0)) -ge 4000 ]
	setfacl -b "$MNT/big"
	[ "$(tfs_stat metadata.used)" -lt $((used0 + 2000)) ]
	# past the budget (1.6 MB under host 16M) setfacl fails, as a full
	# filesystem would, and the file keeps what it had
	for i in $(seq 1 800); do
		touch "$MNT/big$i"
		setfacl -m "$spec" "$MNT/big$i" 2>"$TFS_TMP/err" || break
	done
	cat "$TFS_TMP/err"
	[ "$i" -lt 800 ]
	grep -q "No space left on device" "$TFS_TMP/err"
	[ "$(getfacl -cn "$MNT/big$i" | grep -c '^user:[0-9]')" -eq 0 ]
	rm -f "$MNT"/big*
	acl0=$(cd "$MNT" && getfacl -Rn d)
	tfs_as "$u" sh -c "echo more >>'$MNT/d/f'"
	tfs_unmount
	tfs_mount -o disk_persist=yes,device_backend=none,host_limit=16M,allow_other
	[ "$(cd "$MNT" && getfacl -Rn d)" = "$acl0" ]
	# and the kernel still enforces them
	tfs_as "$u" sh -c "echo again >>'$MNT/d/f'"
	[ "$(cat "$MNT/d/f")" = "$(printf 'data\nmore\nagain')" ]
	chmod 600 "$MNT/d/f"
	setfacl -m "u:$u:-" "$MNT/d/f"
	run tfs_as "$u" cat "$MNT/d/f"
	[ "$status" -ne 0 ]
}

# statx_of FILE: "MASK BTIME ATTRIBUTES ATTRIBUTES_MASK" as statx(2) gives
# them, asking for everything (python 3.11 has no os.statx).
statx_of() {
	"$PY" - "$1" <<'EOF2'
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(256)
SYS_statx, AT_FDCWD = 332, -100
if libc.syscall(SYS_statx, AT_FDCWD, sys.argv[1].encode(), 0, 0xfff, buf):
    sys.exit(os.strerror(ctypes.get_errno()))
mask, = struct.unpack_from("<I", buf, 0)
attrs, = struct.unpack_from("<Q", buf, 8)
amask, = struct.unpack_from("<Q", buf, 56)
btime, = struct.unpack_from("<q", buf, 80)
print("%#x %d %#x %#x" % (mask, btime if mask & 0x800 else -1, attrs, amask))
EOF2
}

@test "statx: files have a birth time, as on tmpfs" {
	tfs_mount -o device_backend=none,host_limit=16M
	local d t0 t1 out btime
	for d in "$SHM" "$MNT"; do
		t0=$(date +%s)
		mkdir "$d/dir"
		echo data >"$d/dir/f"
		t1=$(date +%s)
		for f in "$d/dir" "$d/dir/f"; do
			out=$(statx_of "$f")
			echo "$f: $out"
			btime=$(echo "$out" | cut -d' ' -f2)
			[ "$btime" -ge "$t0" ]
			[ "$btime" -le "$t1" ]
			[ "$(stat -c %W "$f")" -eq "$btime" ]
		done
		# a change later moves ctime, never the birth time
		sleep 1.1
		echo more >>"$d/dir/f"
		chmod 600 "$d/dir/f"
		[ "$(stat -c %W "$d/dir/f")" -eq "$btime" ]
		[ "$(stat -c %Z "$d/dir/f")" -gt "$btime" ]
	done
}

@test "statx: the daemon answers with the chattr attributes tmpfs reports" {
	echo data >"$SHM/f"
	chattr +a +d "$SHM/f"
	local want
	want=$(statx_of "$SHM/f" | cut -d' ' -f3-)
	chattr -a -d "$SHM/f"
	echo "tmpfs: attributes and mask $want"
	[ "$(( ${want% *} & 0x70 ))" -eq $((0x20 | 0x40)) ]
	[ "$(( ${want#* } & 0x70 ))" -eq $((0x70)) ]
	tfs_mount -d -o device_backend=none,host_limit=16M
	echo data >"$MNT/f"
	chattr +a +d "$MNT/f"
	local got
	got=$(statx_of "$MNT/f" | cut -d' ' -f3-)
	echo "tierfs: attributes and mask $got"
	# what the daemon sent (its debug log), whatever the kernel does
	# with it
	grep "statx of inode" "$LOG"
	grep -q "statx of inode .*: answered, attributes 0x60 of 0x70" "$LOG"
	chattr +i "$MNT/f"
	statx_of "$MNT/f"
	grep -q "statx of inode .*: answered, attributes 0x70 of 0x70" "$LOG"
	chattr -i -a "$MNT/f"
	# Linux up to 6.18 drops both words of a FUSE_STATX reply
	# (fuse_do_statx() copies neither): where it passes them on, they
	# are tmpfs's
	if [ "$(( ${got#* } & 0x70 ))" -ne 0 ]; then
		[ "$got" = "$want" ]
	fi
}

# mount_id PATH: the id mountinfo gives the mount on top at PATH.
mount_id() {
	awk -v p="$1" '$5 == p { id = $1 } END { print id }' /proc/self/mountinfo
}

# exec_keeps_atime DIR: DIR/x, run and read, keeps the atime it was given.
exec_keeps_atime() {
	"$1/x" >/dev/null
	cat "$1/x" >/dev/null
	[ "$(stat -c %X "$1/x")" -eq 946684800 ]
}

# make_x DIR: an executable DIR/x whose atime (2000) is older than its
# mtime, which relatime would update at the next read.
make_x() {
	printf '#!/bin/sh\necho hi\n' >"$1/x"
	chmod +x "$1/x"
	touch -a -d 2000-01-01T00:00:00Z "$1/x"
}

# require_mount_id_reused ID: mount tmpfs instances (kept in ROW_MOUNTS)
# until one takes mount id ID; the kernel hands out the lowest free id, but
# another process may take it first, and then the test cannot be made here.
require_mount_id_reused() {
	local k
	for k in $(seq 1 40); do
		if awk -v id="$1" '$1 == id { f = 1 } END { exit !f }' \
			/proc/self/mountinfo; then
			return 0
		fi
		mkdir "$TFS_TMP/t$k"
		mount -t tmpfs tfs-row "$TFS_TMP/t$k"
		ROW_MOUNTS+=("$TFS_TMP/t$k")
	done
	skip "no mount took id $1 within 40 mounts"
}

@test "noatime holds when the mount's id goes to another mount while the daemon still serves" {
	tfs_mount -o noatime,device_backend=none,host_limit=16M
	make_x "$MNT"
	# A bind mount keeps the filesystem and its daemon; the first mount
	# goes, and mount ids are reused, the lowest free first.
	mkdir "$TFS_TMP/b"
	mount --bind "$MNT" "$TFS_TMP/b"
	ROW_MOUNTS+=("$TFS_TMP/b")
	local id
	id=$(mount_id "$MNT")
	umount "$MNT"
	require_mount_id_reused "$id"
	echo "id $id now: $(awk -v id="$id" '$1 == id' /proc/self/mountinfo)"
	# the watcher has seen the table change by now
	sleep 0.5
	exec_keeps_atime "$TFS_TMP/b"
	cat "$LOG"
	run grep "the mount is now" "$LOG"
	[ "$status" -ne 0 ]
	umount "$TFS_TMP/b"
}

@test "-o noatime stays noatime over 50 mounts while other mounts come and go" {
	mkdir "$TFS_TMP/churn"
	# other mounts, taking the ids ours leave
	(while :; do
		mount -t tmpfs tfs-row "$TFS_TMP/churn" && umount "$TFS_TMP/churn"
	done) 2>/dev/null &
	CHURN_PID=$!
	ROW_MOUNTS+=("$TFS_TMP/churn")
	local n
	# Fewer under the sanitizers (tfs_scale): the churn spins all along.
	for n in $(seq 1 "$(tfs_scale 50 10)"); do
		tfs_mount -o noatime,device_backend=none,host_limit=16M
		grep -q " $MNT .*noatime" /proc/self/mountinfo
		make_x "$MNT"
		exec_keeps_atime "$MNT"
		tfs_unmount
		if grep "the mount is now" "$LOG"; then
			echo "mount $n:"
			cat "$LOG"
			return 1
		fi
	done
}

# extents FILE: its data extents as SEEK_DATA and SEEK_HOLE give them, one
# "start end" a line.
extents() {
	"$PY" - "$1" <<'EOF2'
import errno, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
off = 0
while True:
    try:
        d = os.lseek(fd, off, os.SEEK_DATA)
    except OSError as e:
        if e.errno != errno.ENXIO:
            raise
        break
    off = os.lseek(fd, d, os.SEEK_HOLE)
    print(d, off)
EOF2
}

# stored FILE: what the file takes in its tier, asked of the daemon.
stored() {
	getfattr --absolute-names --only-values -n user.tierfs.stored_size "$1"
}

# sparse_ops FILE PART: 50,000 bytes at 1.6 MB, a page at 3 MB (the
# fourth chunk), 8 KiB fallocate'd at 2 MiB and nothing written there.
sparse_ops() {
	dd if="$2" of="$1" bs=50000 seek=1600000 oflag=seek_bytes \
		conv=notrunc status=none
	head -c 4096 "$2" | dd of="$1" bs=4096 seek=$((3 << 20)) \
		oflag=seek_bytes conv=notrunc status=none
	fallocate -n -o 2M -l 8K "$1"
}

@test "a sparse file keeps its holes and bytes through every tier, the device included, as on tmpfs" {
	tfs_mount -o device_backend=sim,device_gpus=0:1,device_limit=8M,host_limit=16M
	head -c 50000 /dev/urandom >"$TFS_TMP/part"
	sparse_ops "$SHM/f" "$TFS_TMP/part"
	sparse_ops "$MNT/f" "$TFS_TMP/part"
	local want pages t s i dev
	want=$(extents "$SHM/f")
	# what tmpfs takes: its pages, the fallocate'd ones too
	pages=$(($(stat -c %b "$SHM/f") * 512 / 4096))
	echo "tmpfs: $pages pages, extents: $want"
	[ "$pages" -eq 16 ]
	for t in device host disk device disk host device; do
		setfattr -n user.tierfs.tier -v "$t" "$MNT/f"
		[ "$(tfs_tier "$MNT/f")" = "$t" ]
		s=$(stored "$MNT/f")
		dev=$(tfs_stat device.used)
		echo "$t: stored $s, device.used $dev"
		# its pages, not the 3 MB (the disk adds a header per chunk)
		[ "$s" -ge 50000 ]
		[ "$s" -le $(((pages + 3) * 4096)) ]
		if [ "$t" = device ]; then
			[ "$dev" -eq "$s" ]
		fi
		[ "$(extents "$MNT/f")" = "$want" ]
		cmp "$SHM/f" "$MNT/f"
	done
	# from one GPU to another, and back
	for t in device:1 device:0; do
		setfattr -n user.tierfs.tier -v "$t" "$MNT/f"
		[ "$(getfattr --absolute-names --only-values -n user.tierfs.device "$MNT/f")" = "${t#device:}" ]
		echo "$t: stored $(stored "$MNT/f")"
		[ "$(stored "$MNT/f")" -eq "$s" ]
		[ "$(extents "$MNT/f")" = "$want" ]
		cmp "$SHM/f" "$MNT/f"
	done
	# du: st_blocks follows once the daemon's notice of the move lands
	for i in $(seq 1 100); do
		[ "$(du -B4096 "$MNT/f" | cut -f1)" -le $((pages + 1)) ] && break
		sleep 0.05
	done
	du -B4096 "$SHM/f" "$MNT/f"
	[ "$(du -B4096 "$MNT/f" | cut -f1)" -le $((pages + 1)) ]
	# a write into a hole of the device copy takes its page there
	printf 'into a hole' | dd of="$SHM/f" bs=1 seek=2600000 conv=notrunc status=none
	printf 'into a hole' | dd of="$MNT/f" bs=1 seek=2600000 conv=notrunc status=none
	[ "$(tfs_tier "$MNT/f")" = device ]
	echo "after a write in a hole: stored $(stored "$MNT/f")"
	[ "$(stored "$MNT/f")" -eq $((s + 4096)) ]
	[ "$(tfs_stat device.used)" -eq $((s + 4096)) ]
	[ "$(extents "$MNT/f")" = "$(extents "$SHM/f")" ]
	cmp "$SHM/f" "$MNT/f"
}

@test "a sparse file on the device exports whole: a GPU program maps every page" {
	local ec
	ec=$(dirname "$TIERFS_BIN")/../client/lib/export_client
	# export_client is built with tierfs (client/lib/meson.build).
	[ -x "$ec" ]
	tfs_mount -o device_backend=sim,device_limit=8M,host_limit=16M
	head -c 50000 /dev/urandom >"$TFS_TMP/part"
	sparse_ops "$SHM/f" "$TFS_TMP/part"
	sparse_ops "$MNT/f" "$TFS_TMP/part"
	setfattr -n user.tierfs.tier -v device "$MNT/f"
	[ "$(stored "$MNT/f")" -le $((17 * 4096)) ]
	"$ec" cat "$MNT/f" | cmp - "$SHM/f"
	# the copy is dense from the export on: it costs its size
	[ "$(stored "$MNT/f")" -ge "$(stat -c %s "$MNT/f")" ]
	[ "$(extents "$MNT/f")" = "$(extents "$SHM/f")" ]
	# and sparse again once it comes back to the device
	setfattr -n user.tierfs.tier -v host "$MNT/f"
	setfattr -n user.tierfs.tier -v device "$MNT/f"
	[ "$(stored "$MNT/f")" -le $((17 * 4096)) ]
	cmp "$SHM/f" "$MNT/f"
}
