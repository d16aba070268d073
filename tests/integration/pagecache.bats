#!/usr/bin/env bats
# The kernel's page cache in front of the store (issue 18): pages kept
# across opens while the bytes are unchanged, dropped when a spill takes the
# buffer out of memory, never stale after a spill, an unspill, or a change
# made by another process; attributes the store changes by itself reach
# stat. fincore(1) counts a file's resident pages without reading it.

load helpers

setup() {
	tfs_setup
}

teardown() {
	# the ENOSPC test's small disk, under the daemon's spill directory
	if [ -n "${TFS_TMP:-}" ] && mountpoint -q "$TFS_TMP/small"; then
		tfs_unmount
		umount "$TFS_TMP/small"
	fi
	tfs_teardown
}

# Bytes of FILE resident in the page cache.
resident() {
	fincore --bytes --noheadings --output RES "$1"
}

# wait_until CMD...: poll CMD for up to 20 s (the store's notifications
# come from a thread of the daemon's, a moment after the change).
wait_until() {
	local i
	for i in $(seq 1 400); do
		"$@" && return 0
		sleep 0.05
	done
	return 1
}

no_pages() {
	[ "$(resident "$1")" -eq 0 ]
}

on_tier() {
	[ "$(tfs_tier "$1")" = "$2" ]
}

blocks_below() {
	[ "$(stat -c %b "$1")" -lt "$2" ]
}

@test "a file's pages stay cached across opens while it is unchanged" {
	tfs_mount -o device_backend=none,host_limit=64M
	head -c 4M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/f"
	cat "$MNT/f" >/dev/null
	# fincore opens the file again: the pages survive that open
	[ "$(resident "$MNT/f")" -eq 4194304 ]
	cmp "$TFS_TMP/src" "$MNT/f"
	[ "$(resident "$MNT/f")" -eq 4194304 ]
}

# FLUSH requests the daemon has received so far (libfuse's -d log).
flushes() {
	grep -c "opcode: FLUSH" "$LOG" || true
}

@test "a reader's close costs no FLUSH round trip; a writer's does, and so does a reader's under persist=close" {
	tfs_mount -d -o device_backend=none,host_limit=64M
	printf 'abc' >"$MNT/f"
	local n
	n=$(flushes)
	[ "$n" -ge 1 ]
	cat "$MNT/f" >/dev/null
	cat "$MNT/f" >/dev/null
	[ "$(flushes)" -eq "$n" ]
	[ "$(cat "$MNT/f")" = abc ]
	printf 'd' >>"$MNT/f"
	[ "$(flushes)" -gt "$n" ]
	tfs_unmount
	tfs_mount -d -o device_backend=none,host_limit=64M,disk_persist=close
	printf 'abc' >"$MNT/g"
	n=$(flushes)
	cat "$MNT/g" >/dev/null
	[ "$(flushes)" -gt "$n" ]
}

@test "the open after a change, or each under strictatime, reaches the store for the atime" {
	tfs_mount -o device_backend=none,host_limit=64M,strictatime
	head -c 1M /dev/urandom >"$MNT/f"
	cat "$MNT/f" >/dev/null
	# every read must update the atime, which the kernel leaves to us:
	# fincore's open drops the pages so that a read would reach us
	[ "$(resident "$MNT/f")" -eq 0 ]
	touch -a -d '2001-01-01' "$MNT/f"
	cat "$MNT/f" >/dev/null
	[ "$(stat -c %X "$MNT/f")" -gt 978307200 ]
}

@test "relatime: the first read after a write reaches the store, later ones the page cache" {
	tfs_mount -o device_backend=none,host_limit=64M
	head -c 1M /dev/urandom >"$MNT/f"
	touch -a -d '2001-01-01' "$MNT/f"
	# fill the cache without updating the atime: none of it is read
	cat "$MNT/f" >/dev/null
	[ "$(stat -c %X "$MNT/f")" -gt 978307200 ]
	[ "$(resident "$MNT/f")" -eq 1048576 ]
}

@test "a spill to disk drops the file's cached pages; the bytes come back intact" {
	tfs_mount -o device_backend=none,host_limit=64M
	head -c 3M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/f"
	cat "$MNT/f" >/dev/null
	[ "$(resident "$MNT/f")" -gt 0 ]
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	wait_until no_pages "$MNT/f"
	on_tier "$MNT/f" disk
	cmp "$TFS_TMP/src" "$MNT/f"
	on_tier "$MNT/f" host
}

@test "a file the spiller pushes to disk loses its cached pages, and st_blocks follows" {
	tfs_mount -o device_backend=none,host_limit=8M
	yes 'tierfs compresses text on disk' | head -c 3M >"$TFS_TMP/a"
	cp "$TFS_TMP/a" "$MNT/a"
	cat "$MNT/a" >/dev/null
	[ "$(resident "$MNT/a")" -gt 0 ]
	[ "$(stat -c %b "$MNT/a")" -ge 6144 ]
	local k
	for k in 1 2 3; do
		head -c 3M /dev/urandom >"$MNT/z$k"
	done
	wait_until on_tier "$MNT/a" disk
	wait_until no_pages "$MNT/a"
	# the kernel keeps attributes for long: only a notification tells it
	# that st_blocks now counts the compressed copy on disk
	wait_until blocks_below "$MNT/a" 1024
	cmp "$TFS_TMP/a" "$MNT/a"
}

@test "stale bytes are never served after a spill and an unspill, or a write from another process" {
	tfs_mount -o device_backend=none,host_limit=64M
	head -c 2M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/f"
	cp "$TFS_TMP/src" "$TFS_TMP/want"
	python3 - "$MNT/f" "$TFS_TMP/want" "$TFS_TMP/fifo" <<'EOF' &
import mmap, os, sys, time
path, want, fifo = sys.argv[1:]
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 0)
old = m[:]                       # every page cached and mapped
os.mkfifo(fifo)
with open(fifo) as f:            # the shell spills and writes, then says
    f.read()
w = open(want, "rb").read()
size = os.fstat(fd).st_size
assert size == len(w), (size, len(w))
got = os.pread(fd, size, 0)
assert got == w, "pread through the old descriptor is stale"
m2 = mmap.mmap(fd, 0)
assert m2[:] == w, "a mapping made after the write is stale"
assert m[:len(w)] == w, "the old mapping is stale"
print("ok")
EOF
	local py=$!
	wait_until [ -p "$TFS_TMP/fifo" ]
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	on_tier "$MNT/f" disk
	# a writer in another process: in the middle, and past the old end
	head -c 100000 /dev/urandom >"$TFS_TMP/patch"
	dd if="$TFS_TMP/patch" of="$MNT/f" bs=1000 seek=1000 conv=notrunc status=none
	dd if="$TFS_TMP/patch" of="$TFS_TMP/want" bs=1000 seek=1000 conv=notrunc status=none
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	setfattr -n user.tierfs.tier -v host "$MNT/f"
	echo go >"$TFS_TMP/fifo"
	wait "$py"
	cmp "$TFS_TMP/want" "$MNT/f"
}

@test "a truncate from another process is seen through a descriptor that cached the bytes" {
	tfs_mount -o device_backend=none,host_limit=64M
	head -c 1M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/f"
	python3 - "$MNT/f" "$TFS_TMP/fifo" "$TFS_TMP/src" <<'EOF' &
import os, sys
path, fifo, src = sys.argv[1:]
fd = os.open(path, os.O_RDONLY)
assert os.pread(fd, 1 << 20, 0) == open(src, "rb").read()
os.mkfifo(fifo)
with open(fifo) as f:
    f.read()
# truncated to 1000 bytes, then grown back to 1 MiB: the rest is zeroes
got = os.pread(fd, 1 << 20, 0)
s = open(src, "rb").read()
assert got == s[:1000] + bytes((1 << 20) - 1000), "stale bytes after truncate"
print("ok")
EOF
	local py=$!
	wait_until [ -p "$TFS_TMP/fifo" ]
	truncate -s 1000 "$MNT/f"
	truncate -s 1M "$MNT/f"
	echo go >"$TFS_TMP/fifo"
	wait "$py"
}

# random_io.py: reads, writes, mmaps, truncates, fallocate (KEEP_SIZE,
# punch hole), copy_file_range, reopens and tier moves checked byte for
# byte against the same operations on a local file. random_io [MAX]: files
# of up to MAX bytes (3 MiB).
random_io() {
	mkdir -p "$TFS_TMP/ref"
	local seed
	for seed in 1 2; do
		rm -f "$MNT"/f* "$TFS_TMP"/ref/*
		python3 "$BATS_TEST_DIRNAME/random_io.py" "$MNT" "$TFS_TMP/ref" \
			"$seed" "$(tfs_scale 1500 600)" ${1:+"$1"}
	done
}

@test "random reads, writes, mmaps and truncates match a local file byte for byte" {
	tfs_mount -o device_backend=sim,device_limit=8M,host_limit=8M
	random_io
}

@test "the same with the kernel's writeback cache" {
	tfs_mount -o device_backend=sim,device_limit=8M,host_limit=8M,fs_writeback_cache=yes
	random_io
}

# Issue 31: files of 3 MiB stay in device and host; of 8 MiB against a
# 2 MiB host limit their bytes live on the disk tier, written in place,
# where punch holes and KEEP_SIZE take other paths.
@test "the same with 8 MiB files against a 2 MiB host limit: the bytes on the disk tier" {
	tfs_mount -o device_backend=sim,device_limit=1M,host_limit=2M
	random_io 8M
	[ "$(tfs_stat disk.written_bytes)" -gt $((8 * 1048576)) ]
	[ "$(tfs_stat host.enospc)" -eq 0 ]
	[ "$(tfs_stat disk.enospc)" -eq 0 ]
}

# race_rw.py: readers against growing writers, rewriters and tier moves,
# each read's length checked against the kernel's size (a short READ
# reply would shrink it) and each byte against the source. Files grow by
# whole pages: a write into the page a file ends in can be left behind a
# stale cached page by the kernel (doc/design.md, "The kernel's caches").
@test "reads racing growing writes, spills and moves are never short or stale" {
	tfs_mount -o device_backend=sim,device_limit=2M,host_limit=4M,disk_chunk_size=64K
	run python3 "$BATS_TEST_DIRNAME/race_rw.py" "$MNT" 3 --max-mb 8 --align
	echo "$output"
	[ "$status" -eq 0 ]
	# the files outgrew host: the disk tier took part
	[ "$(tfs_stat disk.written_bytes)" -gt 0 ]
}

@test "ENOSPC reaches the writer, from write(2) or, with the writeback cache, close(2)" {
	local small=$TFS_TMP/small wb
	mkdir "$small"
	mount -t tmpfs -o size=8M "tfs-pagecache-$$" "$small"
	for wb in no yes; do
		tfs_mount -o "device_backend=none,host_limit=4M,disk_path=$small,fs_writeback_cache=$wb"
		run dd if=/dev/urandom of="$MNT/big" bs=1M count=32
		echo "writeback_cache=$wb: $output"
		[ "$status" -ne 0 ]
		[ $wb = no ] || [[ "$output" == *"closing output file"* ]]
		[[ "$output" == *"No space left on device"* ]]
		# what did fit is still there and readable
		cat "$MNT/big" >/dev/null
		tfs_unmount
	done
	umount "$small"
}
