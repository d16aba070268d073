#!/usr/bin/env bats
# The metadata budget ([fs] metadata_limit, issue 10 finding 7): inodes,
# names, symlink targets and xattrs are charged, ENOSPC past the limit, and
# the memory goes back to the system once they are removed.

load helpers

PY=/usr/bin/python3

setup() { tfs_setup; }
teardown() { tfs_teardown; }

# wait_used_below BYTES: wait (bounded) for metadata.used to drop below
# BYTES; the kernel forgets removed inodes asynchronously.
wait_used_below() {
	local i
	for i in $(seq 1 200); do
		[ "$(tfs_stat metadata.used)" -lt "$1" ] && return 0
		sleep 0.05
	done
	echo "metadata.used stayed at $(tfs_stat metadata.used)" >&2
	return 1
}

rss_kib() {
	awk '/^VmRSS:/ { print $2 }' "/proc/$TFS_PID/status"
}

@test "the default budget is 10% of the host limit, and the stats show it" {
	tfs_mount -o device_backend=none,host_limit=100M
	[ "$(tfs_stat metadata.limit)" -eq $((100 * 1024 * 1024 / 10)) ]
	local before
	before=$(tfs_stat metadata.used)
	[ "$before" -gt 0 ]
	touch "$MNT/a"
	[ "$(tfs_stat metadata.used)" -gt "$before" ]
	tfs_unmount
	tfs_mount -o device_backend=none,host_limit=100M,fs_metadata_limit=2M
	[ "$(tfs_stat metadata.limit)" -eq $((2 * 1024 * 1024)) ]
}

@test "files past the metadata budget get ENOSPC, and removing some gives room back" {
	tfs_mount -o device_backend=none,fs_metadata_limit=1M
	run "$PY" - "$MNT" <<'EOF'
import errno, os, sys
d = sys.argv[1]
assert os.path.ismount(d)
n = 0
try:
    while n < 100000:
        os.close(os.open("%s/f%06d" % (d, n), os.O_CREAT | os.O_WRONLY, 0o644))
        n += 1
except OSError as e:
    print(n, errno.errorcode[e.errno])
EOF
	echo "$output"
	[ "${lines[0]#* }" = ENOSPC ]
	local n=${lines[0]% *}
	# about 500 bytes an empty file: well short of 100,000
	[ "$n" -gt 100 ]
	[ "$n" -lt 10000 ]
	[ "$(tfs_stat metadata.used)" -le "$(tfs_stat metadata.limit)" ]
	# A name alone costs less than a file: what is left may take a few
	# links; then nothing else fits either.
	local k
	for k in $(seq 1 50); do
		ln "$MNT/f000000" "$MNT/hard$k" 2>"$TFS_TMP/err" || break
	done
	[ "$k" -lt 50 ]
	grep -q "No space left on device" "$TFS_TMP/err"
	run mkdir "$MNT/d"
	[[ "$output" == *"No space left on device"* ]]
	run ln -s "$(printf 'x%.0s' $(seq 1 1000))" "$MNT/l"
	[[ "$output" == *"No space left on device"* ]]
	run setfattr -n user.a -v "$(head -c 4000 /dev/zero | tr '\0' a)" "$MNT/f000000"
	[[ "$output" == *"No space left on device"* ]]
	# What exists is intact and usable.
	echo data >"$MNT/f000001"
	[ "$(cat "$MNT/f000001")" = data ]
	# Removing files gives their room back.
	local full
	full=$(tfs_stat metadata.used)
	rm -f "$MNT"/f0000*
	wait_used_below $((full - 20000))
	mkdir "$MNT/d"
	touch "$MNT/d/again"
}

@test "xattrs are charged: a full budget refuses a new value, a removed one makes room" {
	tfs_mount -o device_backend=none,fs_metadata_limit=1M
	local i val rc=0
	val=$(head -c 60000 /dev/zero | tr '\0' v)
	for i in $(seq 1 40); do
		touch "$MNT/f$i"
		if ! setfattr -n user.big -v "$val" "$MNT/f$i" 2>"$TFS_TMP/err"; then
			rc=$i
			break
		fi
	done
	# 1 MiB holds about 17 values of 60,000 bytes, not 40.
	[ "$rc" -gt 5 ]
	[ "$rc" -lt 40 ]
	grep -q "No space left on device" "$TFS_TMP/err"
	[ "$(tfs_stat metadata.used)" -le "$(tfs_stat metadata.limit)" ]
	# Replacing a value with one as large needs no more room...
	setfattr -n user.big -v "$(head -c 60000 /dev/zero | tr '\0' w)" "$MNT/f1"
	# ...and removing one makes room for another.
	setfattr -x user.big "$MNT/f2"
	setfattr -n user.big -v "$val" "$MNT/f$rc"
	[ "$(getfattr --only-values -n user.big "$MNT/f$rc" | wc -c)" -eq 60000 ]
}

# require_glibc_malloc: ASan's allocator quarantines freed memory; glibc's
# is what a test of memory given back measures.
require_glibc_malloc() {
	! ldd "$TIERFS_BIN" | grep -q libasan ||
		skip "the daemon is built with ASan's allocator"
}

@test "memory goes back to the system after mass deletion" {
	require_glibc_malloc
	tfs_mount -o device_backend=none
	local r0 r1 r2 i
	r0=$(rss_kib)
	"$PY" - "$MNT" <<'EOF'
import os, sys
d = sys.argv[1]
assert os.path.ismount(d)
os.mkdir(d + "/many")
for i in range(100000):
    f = "%s/many/f%06d" % (d, i)
    os.close(os.open(f, os.O_CREAT | os.O_WRONLY, 0o644))
    if i % 10 == 0:
        os.setxattr(f, "user.note", b"n" * 2000)
EOF
	r1=$(rss_kib)
	echo "rss: $r0 KiB at mount, $r1 KiB with 100,000 files"
	[ $((r1 - r0)) -gt 40000 ]
	rm -rf "$MNT/many"
	wait_used_below 100000
	# The idle timer gives what is left back after a quiet second.
	for i in $(seq 1 100); do
		r2=$(rss_kib)
		[ $((r2 - r0)) -lt $(((r1 - r0) / 4)) ] && break
		sleep 0.1
	done
	echo "rss after removing them: $r2 KiB"
	[ $((r2 - r0)) -lt $(((r1 - r0) / 4)) ]
}
