#!/usr/bin/env bats
# Tiers: bytes really move between device, host and compressed disk under
# pressure, come back when read, and stay byte-identical throughout.
# Every test mounts its own tierfs with its own limits (helpers.bash); the
# device is the sim backend, so all of this runs without a GPU.

load helpers

SIM="device_backend=sim,device_limit=4M,host_limit=8M"

setup() {
	tfs_setup
	EXTRA_MOUNTS=()
}

teardown() {
	local m
	tfs_unmount
	for m in "${EXTRA_MOUNTS[@]}"; do
		mountpoint -q "$m" && umount "$m"
	done
	tfs_teardown
}

rank() { # device 0, host 1, disk 2
	case $1 in
	device) echo 0 ;;
	host) echo 1 ;;
	disk) echo 2 ;;
	*) echo "bad tier '$1'" >&2; echo 9 ;;
	esac
}

xa() { # xa NAME FILE: one user.tierfs.NAME xattr's value
	getfattr --only-values -n "user.tierfs.$1" "$2"
}

set_tier() { setfattr -n user.tierfs.tier -v "$2" "$1"; }

# Every tier's used bytes within its limit (and the spiller settled below
# the high watermark once idle).
within_limits() {
	local t used limit
	for t in device host disk; do
		used=$(tstat "$t.used")
		limit=$(tstat "$t.limit")
		[ -n "$used" ] && [ -n "$limit" ] || return 1
		if [ "$used" -gt "$limit" ]; then
			echo "$t.used=$used > $t.limit=$limit" >&2
			return 1
		fi
	done
}

show_stats() {
	getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT" >&2
}

# tstat KEY: one key of the root's user.tierfs.stats (tfs_stat, quieter).
tstat() {
	getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT" |
		sed -n "s/^$1=//p"
}

# make_src N SIZE: N files of SIZE bytes of random data, src/fNN.
make_src() {
	local i
	mkdir -p "$TFS_TMP/src"
	for i in $(seq 0 $(($1 - 1))); do
		head -c "$2" /dev/urandom >"$TFS_TMP/src/f$(printf %02d "$i")"
	done
}

# The one spill file in the disk tier's private directory.
only_spill_file() {
	local files f
	files=()
	for f in "$SPILL"/tierfs.*/*; do
		[ "${f##*/}" = lock ] || files+=("$f")
	done
	[ "${#files[@]}" -eq 1 ] && [ -f "${files[0]}" ] ||
		{ echo "expected one spill file: ${files[*]}" >&2; return 1; }
	echo "${files[0]}"
}

write_64() {
	local f
	make_src 64 1M
	for f in "$TFS_TMP"/src/f*; do
		cp "$f" "$MNT/${f##*/}"
	done
}

@test "64 x 1 MiB under 4M device / 8M host: oldest on disk, newest on device, LRU order, limits kept" {
	tfs_mount -o "$SIM"
	write_64
	[ "$(tstat backend)" = sim ]
	[ "$(tstat files)" -eq 64 ]
	tfs_wait_for within_limits || { show_stats; false; }
	[ "$(tfs_tier "$MNT/f00")" = disk ]
	[ "$(tfs_tier "$MNT/f01")" = disk ]
	[ "$(tfs_tier "$MNT/f63")" = device ]
	# Least recently used moved first: in write order, tiers only go up.
	local i t r prev=2 n_device=0 n_host=0 n_disk=0
	for i in $(seq -w 0 63); do
		t=$(tfs_tier "$MNT/f$i")
		r=$(rank "$t")
		if [ "$r" -gt "$prev" ]; then
			echo "f$i is on $t after a newer file higher up" >&2
			false
		fi
		prev=$r
		eval "n_$t=\$((n_$t + 1))"
		[ "$(xa size "$MNT/f$i")" -eq 1048576 ]
	done
	echo "device=$n_device host=$n_host disk=$n_disk"
	[ "$n_device" -ge 1 ]
	[ "$n_device" -le 4 ]
	[ "$n_host" -ge 1 ]
	[ "$n_host" -le 8 ]
	[ "$n_disk" -ge 52 ]
	[ "$(tstat device.used)" -le 4194304 ]
	[ "$(tstat host.used)" -le 8388608 ]
	[ "$(tstat device.spills)" -ge 60 ]
	[ "$(tstat host.spills)" -ge 52 ]
	[ "$(tstat disk.buffers)" -ge 52 ]
	# last_access follows the order the files were written in.
	[ "$(xa last_access "$MNT/f63")" -gt "$(xa last_access "$MNT/f00")" ]
	[ "$(xa last_access "$MNT/f00")" -gt 1500000000000000000 ]
	[ "$(xa stored_size "$MNT/f63")" -eq 1048576 ]
	[ "$(xa pins "$MNT/f00")" -eq 0 ]
	[ "$(tstat evict_nothing_movable)" -eq 0 ]
	[ "$(tstat evict_move_errors)" -eq 0 ]
	[ "$(tstat checksum_errors)" -eq 0 ]
}

@test "cat of a spilled file brings it to the device and pushes another down; all 64 still cmp equal" {
	tfs_mount -o "$SIM"
	write_64
	tfs_wait_for within_limits
	[ "$(tfs_tier "$MNT/f00")" = disk ]
	local on_dev=() i spills0
	for i in $(seq -w 0 63); do
		if [ "$(tfs_tier "$MNT/f$i")" = device ]; then
			on_dev+=("f$i")
		fi
	done
	[ "${#on_dev[@]}" -ge 1 ]
	spills0=$(tstat device.spills)
	cmp "$TFS_TMP/src/f00" "$MNT/f00"
	[ "$(tfs_tier "$MNT/f00")" = device ]
	# The device had no room for it: something else went down.
	pushed() {
		local f
		[ "$(tstat device.spills)" -gt "$spills0" ] || return 1
		for f in "${on_dev[@]}"; do
			[ "$(tfs_tier "$MNT/$f")" != device ] && return 0
		done
		return 1
	}
	tfs_wait_for pushed || { show_stats; false; }
	tfs_wait_for within_limits
	[ "$(tstat device.unspills)" -ge 1 ]
	[ "$(tstat device.unspill_bytes)" -ge 1048576 ]
	# Reading the middle of the pack brings each up in turn.
	cat "$MNT/f10" "$MNT/f20" >/dev/null
	[ "$(tfs_tier "$MNT/f10")" = device ]
	[ "$(tfs_tier "$MNT/f20")" = device ]
	for i in $(seq -w 0 63); do
		cmp "$TFS_TMP/src/f$i" "$MNT/f$i"
	done
	tfs_wait_for within_limits || { show_stats; false; }
	[ "$(tstat checksum_errors)" -eq 0 ]
}

@test "policy_unspill=host brings a read back to host, none leaves it on disk" {
	make_src 2 1M
	tfs_mount -o "$SIM,policy_unspill=host"
	cp "$TFS_TMP/src/f00" "$MNT/a"
	set_tier "$MNT/a" disk
	[ "$(tfs_tier "$MNT/a")" = disk ]
	cmp "$TFS_TMP/src/f00" "$MNT/a"
	[ "$(tfs_tier "$MNT/a")" = host ]
	tfs_unmount
	tfs_mount -o "$SIM,policy_unspill=none"
	cp "$TFS_TMP/src/f01" "$MNT/b"
	set_tier "$MNT/b" disk
	cmp "$TFS_TMP/src/f01" "$MNT/b"
	[ "$(tfs_tier "$MNT/b")" = disk ]
	# an explicit move still works under unspill=none
	set_tier "$MNT/b" device
	[ "$(tfs_tier "$MNT/b")" = device ]
	cmp "$TFS_TMP/src/f01" "$MNT/b"
}

@test "a read through O_NOATIME is no access: no unspill, no younger, no atime" {
	make_src 1 1M
	tfs_mount -o "$SIM"
	cp "$TFS_TMP/src/f00" "$MNT/a"
	set_tier "$MNT/a" disk
	local seen atime
	seen=$(xa last_access "$MNT/a")
	atime=$(stat -c %X "$MNT/a")
	sleep 1.1 # so that a touch or an atime update would show
	dd if="$MNT/a" iflag=noatime bs=64K status=none | cmp "$TFS_TMP/src/f00" -
	dd if="$MNT/a" iflag=noatime,direct bs=1M status=none |
		cmp "$TFS_TMP/src/f00" -
	[ "$(tfs_tier "$MNT/a")" = disk ]
	[ "$(xa last_access "$MNT/a")" = "$seen" ]
	[ "$(stat -c %X "$MNT/a")" = "$atime" ]
	[ "$(tstat checksum_errors)" -eq 0 ]
	# the same read without the flag brings it up, as policy_unspill says
	cmp "$TFS_TMP/src/f00" "$MNT/a"
	[ "$(tfs_tier "$MNT/a")" = device ]
	[ "$(xa last_access "$MNT/a")" -gt "$seen" ]
}

@test "compressible data takes fewer bytes on disk than its size; st_blocks follows" {
	tfs_mount -o "$SIM"
	yes 'tierfs spills compressible text' | head -c 2M >"$TFS_TMP/text"
	# 2 MiB: well under the device's target (0.85 of 4 MiB), so the
	# spiller leaves it there
	cp "$TFS_TMP/text" "$MNT/text"
	[ "$(tfs_tier "$MNT/text")" = device ]
	[ "$(xa stored_size "$MNT/text")" -eq 2097152 ]
	# resident on the device it counts in full
	[ "$(stat -c %b "$MNT/text")" -ge 4096 ]
	set_tier "$MNT/text" disk
	[ "$(tfs_tier "$MNT/text")" = disk ]
	[ "$(tstat device.buffers)" -eq 0 ]
	[ "$(tstat host.buffers)" -eq 0 ]
	local stored spill du
	stored=$(xa stored_size "$MNT/text")
	echo "stored_size=$stored"
	[ "$(xa size "$MNT/text")" -eq 2097152 ]
	[ "$stored" -gt 0 ]
	[ "$stored" -lt $((2097152 / 4)) ]
	spill=$(only_spill_file)
	du=$(du -B1 "$spill" | cut -f1)
	echo "du=$du"
	[ "$du" -lt $((2097152 / 4)) ]
	[ "$(tstat disk.used)" -lt $((2097152 / 4)) ]
	[ "$(stat -c %b "$MNT/text")" -lt $((2097152 / 512)) ]
	[ "$(stat -c %s "$MNT/text")" -eq 2097152 ]
	cmp "$TFS_TMP/text" "$MNT/text"
}

@test "random data on disk takes its size plus at most a block per chunk, and stored_size is what du says" {
	tfs_mount -o "$SIM,disk_chunk_size=256K"
	head -c 3000000 /dev/urandom >"$TFS_TMP/rand"
	cp "$TFS_TMP/rand" "$MNT/rand"
	set_tier "$MNT/rand" disk
	[ "$(tfs_tier "$MNT/rand")" = disk ]
	local stored chunks du spill
	chunks=$(((3000000 + 262143) / 262144))
	stored=$(xa stored_size "$MNT/rand")
	echo "stored_size=$stored chunks=$chunks"
	[ "$stored" -ge 3000000 ]
	# raw chunks, a header each, each rounded up to a 4 KiB block
	[ "$stored" -le $((3000000 + 4096 * chunks)) ]
	spill=$(only_spill_file)
	du=$(du -B1 "$spill" | cut -f1)
	echo "du=$du"
	# the blocks charged are the blocks the file takes
	[ "$du" -eq "$stored" ]
	cmp "$TFS_TMP/rand" "$MNT/rand"
}

@test "disk_compression=none stores compressible data raw" {
	tfs_mount -o "$SIM,disk_compression=none"
	yes 'tierfs' | head -c 2M >"$TFS_TMP/text"
	cp "$TFS_TMP/text" "$MNT/text"
	set_tier "$MNT/text" disk
	[ "$(xa stored_size "$MNT/text")" -ge 2097152 ]
	cmp "$TFS_TMP/text" "$MNT/text"
}

# corrupt_test DATA: spill a 2 MiB file of DATA, flip bytes in the data area
# of its first chunk, and expect EIO and a log line naming the spill file.
corrupt_test() {
	tfs_mount -o "$SIM"
	cp "$1" "$MNT/c"
	set_tier "$MNT/c" disk
	[ "$(tfs_tier "$MNT/c")" = disk ]
	# no copy left above the disk to serve the read from
	[ "$(tstat device.buffers)" -eq 0 ]
	[ "$(tstat host.buffers)" -eq 0 ]
	local spill
	spill=$(only_spill_file)
	# 8 bytes at 40: past the 32-byte header, in chunk 0's stored bytes;
	# inverted so they surely differ.
	dd if="$spill" bs=1 skip=40 count=8 status=none |
		perl -0777 -pe '$_ = ~$_' >"$TFS_TMP/garbage"
	[ "$(stat -c %s "$TFS_TMP/garbage")" -eq 8 ]
	dd if="$TFS_TMP/garbage" of="$spill" bs=1 seek=40 conv=notrunc status=none
	run cat "$MNT/c"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Input/output error"* ]]
	# not wrong bytes either: whatever came out is a prefix of the truth
	run cmp "$1" "$MNT/c"
	[ "$status" -ne 0 ]
	[[ "$output" != *"differ"* ]]
	grep -F "$spill" "$LOG"
	[ "$(tstat checksum_errors)" -ge 1 ]
	[ "$(tfs_tier "$MNT/c")" = disk ]
	# the mount is still fine for everyone else
	echo still >"$MNT/other"
	[ "$(cat "$MNT/other")" = still ]
}

@test "a corrupt raw spill chunk gives EIO, not wrong bytes, and a log line naming the spill file" {
	head -c 2M /dev/urandom >"$TFS_TMP/data"
	corrupt_test "$TFS_TMP/data"
}

@test "a corrupt lz4 spill chunk gives EIO, not wrong bytes, and a log line naming the spill file" {
	seq 1 1000000 | head -c 2M >"$TFS_TMP/data"
	corrupt_test "$TFS_TMP/data"
}

# fill_until_enospc DIR OPTS MIN MAX: mount with OPTS, write 1 MiB random
# files until one fails; it must fail with ENOSPC after MIN..MAX files, the
# next write must fail too, every earlier file must read back intact, and
# freeing room must make writes work again.
fill_until_enospc() {
	make_src 24 1M
	tfs_mount -o "$2"
	local i ok=() failed=
	for i in $(seq -w 0 23); do
		run dd if="$TFS_TMP/src/f$i" of="$MNT/f$i" bs=256K status=none
		if [ "$status" -ne 0 ]; then
			failed=f$i
			break
		fi
		ok+=("f$i")
	done
	echo "written: ${ok[*]}; failed: $failed: $output"
	show_stats 2>&1
	df -k "$1"
	[ -n "$failed" ]
	[[ "$output" == *"No space left on device"* ]]
	[ "${#ok[@]}" -ge "$3" ]
	[ "${#ok[@]}" -le "$4" ]
	# The next writer either gets ENOSPC too or, if a clean copy could
	# be dropped to make room, stores its bytes intact: never silent loss.
	run cp "$TFS_TMP/src/f23" "$MNT/next"
	echo "$output"
	if [ "$status" -ne 0 ]; then
		[[ "$output" == *"No space left on device"* ]]
	else
		cmp "$TFS_TMP/src/f23" "$MNT/next"
	fi
	for i in "${ok[@]}"; do
		cmp "$TFS_TMP/src/$i" "$MNT/$i"
	done
	# once room is freed, writes work again
	local before gone=0 f
	before=$(tfs_stat files)
	for f in "$failed" next "${ok[0]}" "${ok[1]}"; do
		if [ -e "$MNT/$f" ]; then
			gone=$((gone + 1))
		fi
		rm -f "$MNT/$f"
	done
	# A removed file's buffer goes when the kernel forgets the inode,
	# which it sends just after the unlink, asynchronously: wait for all.
	for i in $(seq 1 200); do
		[ "$(tfs_stat files)" -le $((before - gone)) ] && break
		sleep 0.05
	done
	[ "$(tfs_stat files)" -le $((before - gone)) ]
	cp "$TFS_TMP/src/f23" "$MNT/again"
	cmp "$TFS_TMP/src/f23" "$MNT/again"
	for i in "${ok[@]:2}"; do
		cmp "$TFS_TMP/src/$i" "$MNT/$i"
	done
	within_limits
}

small_tmpfs() { # DIR: an 8 MiB tmpfs at DIR, unmounted in teardown
	mkdir -p "$1"
	mount -t tmpfs -o size=8M tmpfs "$1"
	EXTRA_MOUNTS+=("$1")
}

@test "a disk tier on a small tmpfs: at disk_limit the next write gets ENOSPC, earlier files intact" {
	local disk=$TFS_TMP/smalldisk
	small_tmpfs "$disk"
	# disk_limit defaults to 50% of the filesystem: 4 MiB here. Room for
	# 1 + 2 + 3 files of 1 MiB (each takes 1 MiB + a chunk header on disk).
	fill_until_enospc "$disk" \
		"device_backend=sim,device_limit=1M,host_limit=2M,disk_path=$disk" 4 7
}

@test "at disk_limit, 50 runs in a row: ENOSPC only there, no tier ever over its limit, nothing lost (TFS_LONG=1)" {
	[ "${TFS_LONG:-0}" = 1 ] || skip "set TFS_LONG=1 (tests/run --long)"
	# The intermittent ENOSPC of issue 12 failed 1 run in 20: a run of 50
	# shows whether it is back.
	local disk=$TFS_TMP/smalldisk r
	for r in $(seq 1 50); do
		echo "run $r"
		small_tmpfs "$disk"
		fill_until_enospc "$disk" \
			"device_backend=sim,device_limit=1M,host_limit=2M,disk_path=$disk" 4 7
		tfs_unmount
		umount "$disk"
		rm -rf "$TFS_TMP/src"
	done
}

@test "a disk tier on a small tmpfs that really fills up: the next write gets ENOSPC, earlier files intact" {
	local disk=$TFS_TMP/smalldisk
	small_tmpfs "$disk"
	# disk_limit above the filesystem's size (which needs overcommit):
	# the tmpfs itself runs out (7 spill files of 1 MiB + 4 KiB fit in
	# 8 MiB of 4 KiB pages).
	fill_until_enospc "$disk" \
		"device_backend=sim,device_limit=1M,host_limit=2M,disk_path=$disk,disk_limit=64M,policy_overcommit=yes" 7 10
	# nothing is held above the limits in the daemon's memory instead
	# (a tmpfs is sticky and world-writable: the spill directory is in
	# the private tierfs-<uid> there)
	local f n=0
	for f in "$disk"/tierfs-*/tierfs.*/*; do
		[ "${f##*/}" = lock ] && continue
		[ "$(stat -c %b "$f")" -gt 0 ] || n=$((n + 1))
	done
	[ "$n" -eq 0 ]
}

@test "a pinned file does not move under pressure, and cannot be moved (EBUSY) until unpinned" {
	make_src 20 1M
	tfs_mount -o "$SIM"
	cp "$TFS_TMP/src/f00" "$MNT/pinned"
	[ "$(tfs_tier "$MNT/pinned")" = device ]
	[ "$(xa pin "$MNT/pinned")" = 0 ]
	setfattr -n user.tierfs.pin -v 1 "$MNT/pinned"
	[ "$(xa pin "$MNT/pinned")" = 1 ]
	[ "$(xa pins "$MNT/pinned")" -ge 1 ]
	local i
	for i in $(seq -w 1 19); do
		cp "$TFS_TMP/src/f$i" "$MNT/f$i"
	done
	tfs_wait_for within_limits
	[ "$(tstat device.spills)" -ge 10 ]
	[ "$(tfs_tier "$MNT/pinned")" = device ]
	[ "$(tfs_tier "$MNT/f01")" = disk ]
	run setfattr -n user.tierfs.tier -v disk "$MNT/pinned"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Device or resource busy"* ]]
	run setfattr -n user.tierfs.tier -v host "$MNT/pinned"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Device or resource busy"* ]]
	[ "$(tfs_tier "$MNT/pinned")" = device ]
	# a pinned file on disk stays there too, even when read
	set_tier "$MNT/f02" disk
	setfattr -n user.tierfs.pin -v 1 "$MNT/f02"
	cmp "$TFS_TMP/src/f02" "$MNT/f02"
	[ "$(tfs_tier "$MNT/f02")" = disk ]
	cmp "$TFS_TMP/src/f00" "$MNT/pinned"
	setfattr -n user.tierfs.pin -v 0 "$MNT/pinned"
	[ "$(xa pin "$MNT/pinned")" = 0 ]
	[ "$(xa pins "$MNT/pinned")" -eq 0 ]
	set_tier "$MNT/pinned" disk
	[ "$(tfs_tier "$MNT/pinned")" = disk ]
	cmp "$TFS_TMP/src/f00" "$MNT/pinned"
}

@test "bad tier or pin values give EINVAL and move nothing" {
	tfs_mount -o "$SIM"
	echo data >"$MNT/f"
	[ "$(tfs_tier "$MNT/f")" = device ]
	local v
	# Names are taken in any case (operator.bats), not misspelt.
	for v in bogus dsik devices '' 'disk ' 2; do
		run setfattr -n user.tierfs.tier -v "$v" "$MNT/f"
		echo "'$v': $output"
		[ "$status" -ne 0 ]
		[[ "$output" == *"Invalid argument"* ]]
	done
	[ "$(tfs_tier "$MNT/f")" = device ]
	run setfattr -n user.tierfs.pin -v 2 "$MNT/f"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Invalid argument"* ]]
	[ "$(xa pins "$MNT/f")" -eq 0 ]
	[ "$(cat "$MNT/f")" = data ]
}

@test "stress: two writers and two readers under constant spilling, every file byte-identical at the end" {
	local W=20 R=3 k i r
	mkdir -p "$TFS_TMP/src"
	for k in 0 1; do
		for i in $(seq -w 0 $((W - 1))); do
			for r in $(seq 0 $((R - 1))); do
				head -c $(((RANDOM % 768 + 256) * 1024)) /dev/urandom \
					>"$TFS_TMP/src/w${k}_${i}_$r"
			done
		done
	done
	make_src 12 512K
	tfs_mount -o "device_backend=sim,device_limit=2M,host_limit=4M,disk_chunk_size=128K"
	# stable files the readers check the whole time
	for i in $(seq -w 0 11); do
		cp "$TFS_TMP/src/f$i" "$MNT/s$i"
	done
	writer() { # K: R rounds over W files, new content each round
		local r i
		for r in $(seq 0 $((R - 1))); do
			for i in $(seq -w 0 $((W - 1))); do
				cp "$TFS_TMP/src/w${1}_${i}_$r" "$MNT/w${1}_$i" || return 1
			done
		done
	}
	reader() { # K: cmp stable files, read the writers' files, move some
		local n=0 i f
		while [ ! -e "$TFS_TMP/stop" ]; do
			i=$(printf %02d $((RANDOM % 12)))
			cmp "$TFS_TMP/src/f$i" "$MNT/s$i" || return 1
			f=$MNT/w$((RANDOM % 2))_$(printf %02d $((RANDOM % W)))
			if [ -e "$f" ]; then
				# a concurrent cp may truncate it; any error but ENOENT
				# is a failure
				cat "$f" >/dev/null 2>"$TFS_TMP/rerr$1" ||
					grep -q 'No such file' "$TFS_TMP/rerr$1" || {
					cat "$TFS_TMP/rerr$1"; return 1; }
			fi
			if [ $((n % 5)) = 0 ]; then
				setfattr -n user.tierfs.tier -v disk "$MNT/s$i" 2>/dev/null || true
			fi
			n=$((n + 1))
		done
		echo "reader $1: $n rounds" >&2
	}
	writer 0 & local w0=$!
	writer 1 & local w1=$!
	reader 0 & local r0=$!
	reader 1 & local r1=$!
	local rc=0
	wait "$w0" || { echo "writer 0 failed" >&2; rc=1; }
	wait "$w1" || { echo "writer 1 failed" >&2; rc=1; }
	touch "$TFS_TMP/stop"
	wait "$r0" || { echo "reader 0 failed" >&2; rc=1; }
	wait "$r1" || { echo "reader 1 failed" >&2; rc=1; }
	[ $rc = 0 ]
	for k in 0 1; do
		for i in $(seq -w 0 $((W - 1))); do
			cmp "$TFS_TMP/src/w${k}_${i}_$((R - 1))" "$MNT/w${k}_$i"
		done
	done
	for i in $(seq -w 0 11); do
		cmp "$TFS_TMP/src/f$i" "$MNT/s$i"
	done
	show_stats
	[ "$(tstat files)" -eq $((2 * W + 12)) ]
	[ "$(tstat device.spills)" -ge 40 ]
	[ "$(tstat host.spills)" -ge 20 ]
	[ "$(tstat checksum_errors)" -eq 0 ]
	tfs_wait_for within_limits
}

@test "a 256 MiB file with host_limit=32M writes and reads back identical" {
	head -c 256M /dev/urandom >"$TFS_TMP/big"
	tfs_mount -o "device_backend=sim,device_limit=8M,host_limit=32M"
	dd if="$TFS_TMP/big" of="$MNT/big" bs=1M status=none
	[ "$(stat -c %s "$MNT/big")" -eq 268435456 ]
	[ "$(xa size "$MNT/big")" -eq 268435456 ]
	[ "$(tfs_tier "$MNT/big")" = disk ]
	within_limits
	cmp "$TFS_TMP/big" "$MNT/big"
	within_limits
	local hwm
	hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$TFS_PID/status")
	echo "daemon peak RSS ${hwm} kB"
	# streamed, not staged whole in memory
	[ "$hwm" -lt $((200 * 1024)) ]
	rm "$MNT/big"
	gone() { [ "$(tstat files)" -eq 0 ] && [ "$(tstat disk.used)" -eq 0 ]; }
	tfs_wait_for gone || { show_stats; false; }
}

@test "an empty file moved to disk, then grown by truncate, reads back as zeroes" {
	tfs_mount -o "$SIM"
	: >"$MNT/e"
	set_tier "$MNT/e" disk
	truncate -s 238401 "$MNT/e"
	cmp <(head -c 238401 /dev/zero) "$MNT/e"
	[ "$(stat -c %s "$MNT/e")" -eq 238401 ]
	mountpoint -q "$MNT"
}

@test "truncating a spilled file bigger than host while it is held open forgets its old bytes" {
	tfs_mount -o "device_backend=sim,device_limit=256K,host_limit=512K,disk_chunk_size=64K"
	/usr/bin/python3 - "$MNT/f" <<'PY'
import os, sys
p = sys.argv[1]
with open(p, "wb") as f:
    f.write(b"a" * 100)
os.truncate(p, 983039)              # bigger than host_limit
os.setxattr(p, "user.tierfs.tier", b"disk")
held = os.open(p, os.O_RDWR)        # another open file: no placing at close
fd = os.open(p, os.O_WRONLY)
os.pwrite(fd, b"x" * 10, 362284)
os.close(fd)
fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
os.pwrite(fd, b"y", 988039)
os.close(fd)
data = open(p, "rb").read()
os.close(held)
assert len(data) == 988040, len(data)
bad = [i for i in range(len(data) - 1) if data[i]]
assert not bad, "old bytes back after O_TRUNC at %d..%d: %r" % (
    bad[0], bad[-1], data[bad[0]:bad[-1] + 1])
PY
}

# Promotion when room returns ([policy] promote): write_64 leaves the
# oldest 52 or more on disk; deleting the newest 24 empties device and host.
promoted() {
	[ "$(tstat host.promotes)" -ge 1 ] && [ "$(tstat device.promotes)" -ge 1 ]
}

# One read of the stats: each tier's unspills are its promotions.
counted_once() {
	local st t
	st=$(getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT")
	for t in device host; do
		[ "$(sed -n "s/^$t.unspills=//p" <<<"$st")" = \
			"$(sed -n "s/^$t.promotes=//p" <<<"$st")" ] || return 1
		[ "$(sed -n "s/^$t.unspill_bytes=//p" <<<"$st")" = \
			"$(sed -n "s/^$t.promote_bytes=//p" <<<"$st")" ] || return 1
	done
}

@test "room returns: the newest files eviction pushed to disk come back up, pushing nothing out, counted" {
	tfs_mount -o "$SIM,policy_promote=yes"
	write_64
	tfs_wait_for within_limits || { show_stats; false; }
	local dspills hspills i
	dspills=$(tstat device.spills)
	hspills=$(tstat host.spills)
	for i in $(seq 40 63); do
		rm "$MNT/f$i"
	done
	tfs_wait_for promoted || { show_stats; false; }
	tfs_wait_for within_limits || { show_stats; false; }
	# The hottest first: f39 is up, the oldest stay on disk.
	[ "$(tfs_tier "$MNT/f39")" != disk ]
	[ "$(tfs_tier "$MNT/f00")" = disk ]
	# Up to the target (0.85 of each limit), and nothing went down.
	[ "$(tstat host.used)" -le $((8388608 * 85 / 100)) ]
	[ "$(tstat device.used)" -le $((4194304 * 85 / 100)) ]
	[ "$(tstat device.spills)" -eq "$dspills" ]
	[ "$(tstat host.spills)" -eq "$hspills" ]
	[ "$(tstat host.promote_bytes)" -ge 1048576 ]
	[ "$(tstat device.promote_bytes)" -ge 1048576 ]
	# Nothing was read: every unspill is a promotion, counted once.
	tfs_wait_for counted_once || { show_stats; false; }
	local m
	run "$TIERFSCTL_BIN" metrics "$MNT"
	[ "$status" -eq 0 ]
	m=$(echo "$output" | sed -n "s/^tierfs_tier_promotes_total{tier=\"host\",mount=\"${MNT//\//\\/}\"} //p")
	[ "$m" -ge 1 ]
	m=$(echo "$output" | sed -n "s/^tierfs_tier_promote_bytes_total{tier=\"device\",mount=\"${MNT//\//\\/}\"} //p")
	[ "$m" -ge 1048576 ]
	for i in $(seq -w 0 39); do
		cmp "$TFS_TMP/src/f$i" "$MNT/f$i"
	done
	[ "$(tstat checksum_errors)" -eq 0 ]
}

@test "policy_promote=no leaves them on disk; a file moved to disk by hand stays there" {
	tfs_mount -o "$SIM,policy_promote=no"
	write_64
	tfs_wait_for within_limits || { show_stats; false; }
	local i
	for i in $(seq 40 63); do
		rm "$MNT/f$i"
	done
	sleep 3
	[ "$(tfs_tier "$MNT/f39")" = disk ]
	[ "$(tstat host.promotes)" -eq 0 ]
	[ "$(tstat device.promotes)" -eq 0 ]
	tfs_unmount
	# Promotion is for what eviction pushed down, not what a user put.
	make_src 1 1M
	tfs_mount -o "$SIM,policy_promote=yes"
	cp "$TFS_TMP/src/f00" "$MNT/a"
	set_tier "$MNT/a" disk
	sleep 3
	[ "$(tfs_tier "$MNT/a")" = disk ]
	[ "$(tstat host.promotes)" -eq 0 ]
}

@test "policy_promote_rate bounds the bytes promotion moves up a second" {
	tfs_mount -o "$SIM,policy_promote=yes,policy_promote_rate=1M"
	write_64
	tfs_wait_for within_limits || { show_stats; false; }
	local i t0 t1
	t0=$(date +%s)
	for i in $(seq 40 63); do
		rm "$MNT/f$i"
	done
	tfs_wait_for promoted || { show_stats; false; }
	sleep 2
	t1=$(date +%s)
	# A second's worth saved up at most, then the rate: one 1 MiB file
	# a second, against seven that would fit at once.
	i=$(($(tstat host.promote_bytes) + $(tstat device.promote_bytes)))
	echo "promoted $i bytes in $((t1 - t0)) s"
	[ "$i" -le $(((t1 - t0 + 2) * 1048576)) ]
}

@test "one list of tiers: the stats list the chain, and tierfsctl status, metrics and tierfs.xattr.tiers() follow it" {
	tfs_mount -o "$SIM"
	echo x >"$MNT/f"
	local chain got
	chain=$(tstat tiers)
	[ "$chain" = device,host,disk ]
	# Each consumer's tiers, in order, are the daemon's.
	got=$(PYTHONPATH="$BATS_TEST_DIRNAME/../../python" python3 -c '
import sys
from tierfs import xattr
print(",".join(xattr.tiers(sys.argv[1])))' "$MNT")
	[ "$got" = "$chain" ]
	got=$("$TIERFSCTL_BIN" status --json "$MNT" | python3 -c '
import json, sys
print(",".join(json.load(sys.stdin)["tiers"]))')
	[ "$got" = "$chain" ]
	got=$("$TIERFSCTL_BIN" status "$MNT" |
		awk '/^TIER .*SPILLED/ { on = 1; next } on && NF == 0 { exit } on { print $1 }' |
		paste -sd,)
	[ "$got" = "$chain" ]
	got=$("$TIERFSCTL_BIN" metrics "$MNT" |
		sed -n 's/^tierfs_tier_used_bytes{tier="\([^"]*\)".*/\1/p' | paste -sd,)
	[ "$got" = "$chain" ]
}

@test "one list of tiers: user.tierfs.tier, tierfsctl ls and spill, set_tier() and the Dask store take the daemon's names and order" {
	tfs_mount -o "$SIM"
	local chain t i n last got
	local -a T
	# Nothing below names a tier: every name and every order is the chain's.
	chain=$(tstat tiers)
	IFS=, read -ra T <<<"$chain"
	n=${#T[@]}
	last=${T[n - 1]}
	[ "$n" -ge 3 ]
	# user.tierfs.tier takes each name, in any case, and gives it back;
	# "FIRST:N" names a GPU of the first (device) tier. Files f_2, f_1, f_0
	# sort by name against the chain's order.
	for ((i = 0; i < n; i++)); do
		echo "$i" >"$MNT/f_$((n - 1 - i))"
		set_tier "$MNT/f_$((n - 1 - i))" "${T[i]^^}"
		[ "$(tfs_tier "$MNT/f_$((n - 1 - i))")" = "${T[i]}" ]
	done
	run ! setfattr -n user.tierfs.tier -v "${T[1]}:0" "$MNT/f_0"
	set_tier "$MNT/f_0" "${T[0]}:0"
	[ "$(tfs_tier "$MNT/f_0")" = "${T[0]}" ]
	set_tier "$MNT/f_0" "$last"
	# tierfsctl ls: the names as the daemon gives them, sorted by tier in
	# the chain's order (the fastest first), in text and JSON.
	got=$("$TIERFSCTL_BIN" ls --sort tier "$MNT" | awk 'NR > 1 { print $1 ":" $NF }' | paste -sd,)
	[ "$got" = "${T[0]}:f_$((n - 1)),${T[1]}:f_$((n - 2)),$last:f_0" ]
	got=$("$TIERFSCTL_BIN" ls --json -r --sort tier "$MNT" | python3 -c '
import json, sys
print(",".join(e["tier"] for e in json.load(sys.stdin)))')
	[ "$got" = "$last,${T[1]},${T[0]}" ]
	# tierfsctl spill goes down the chain to its last tier, or to a tier
	# below the first; prefetch up to the first, or to one above the last.
	run "$TIERFSCTL_BIN" spill "$MNT/f_$((n - 1))"
	[ "$status" -eq 0 ]
	[ "$output" = "spill: 1 file (2 B) moved to $last" ]
	[ "$(tfs_tier "$MNT/f_$((n - 1))")" = "$last" ]
	run "$TIERFSCTL_BIN" prefetch --wait --to "${T[1]}" "$MNT/f_$((n - 1))"
	[ "$status" -eq 0 ]
	[ "$output" = "prefetch: 1 file (2 B) moved to ${T[1]}" ]
	[ "$(tfs_tier "$MNT/f_$((n - 1))")" = "${T[1]}" ]
	run "$TIERFSCTL_BIN" spill --to "${T[1]}" "$MNT/f_$((n - 1))"
	[ "$status" -eq 0 ]
	[[ "$output" == *"moved to ${T[1]}, 1 already there or lower" ]]
	run "$TIERFSCTL_BIN" prefetch --wait "$MNT/f_$((n - 1))"
	[ "$status" -eq 0 ]
	[ "$(tfs_tier "$MNT/f_$((n - 1))")" = "${T[0]}" ]
	run "$TIERFSCTL_BIN" spill --to "${T[0]}" "$MNT/f_0"
	[ "$status" -eq 2 ]
	[[ "$output" == *"cannot spill to '${T[0]}'"* ]]
	run "$TIERFSCTL_BIN" prefetch --to "$last" "$MNT/f_0"
	[ "$status" -eq 2 ]
	# Python: set_tier() takes the chain's names (a GPU with the first),
	# refuses others naming the chain; the Dask store counts by them.
	mkdir "$MNT/dask"
	run env PYTHONPATH="$BATS_TEST_DIRNAME/../../python" python3 - "$MNT" "$chain" <<'PY'
import os, sys
from tierfs import xattr
from tierfs.store import TierfsStore
mnt, chain = sys.argv[1], tuple(sys.argv[2].split(","))
p = os.path.join(mnt, "f_0")
assert xattr.tiers(p) == chain, xattr.tiers(p)
for t in reversed(chain):
    xattr.set_tier(p, t)
    assert xattr.tier(p) == t, (xattr.tier(p), t)
xattr.set_tier(p, chain[-1])
xattr.set_tier(p, chain[0], gpu=0)
assert xattr.tier(p) == chain[0]
for bad in ("nope", chain[0] + ":0"):
    try:
        xattr.set_tier(p, bad)
        raise SystemExit("accepted %r" % bad)
    except ValueError as e:
        assert ", ".join(chain) in str(e), e
try:
    xattr.set_tier(p, chain[1], gpu=0)
    raise SystemExit("a gpu with %r accepted" % chain[1])
except ValueError:
    pass
with TierfsStore(os.path.join(mnt, "dask")) as s:
    s.metrics_interval = 0
    s["a"] = b"x" * 1000
    xattr.set_tier(s.file_of("a"), chain[1])
    assert s.tiers() == chain, s.tiers()
    got = s.tier_bytes()
    assert tuple(got) == chain + ("unread",), got
    assert got[chain[1]] == os.path.getsize(s.file_of("a")), got

    class W:
        metrics = {}
    s.attach(W)
    assert sorted(W.metrics) == sorted("tierfs_%s_bytes" % t for t in chain)
print("ok")
PY
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$output" = ok ]
}

@test "a [tiers] entry below disk: what disk has no room for goes down into it, named disk:NAME, counted, and every byte comes back" {
	local nv=$TFS_TMP/nvme f t n=0 blocks bsize avail out hl nl
	mkdir -p "$nv"
	tfs_mount -o "device_backend=none,host_limit=4M,disk_limit=2M,tiers_nvme=disk:$nv:64M"
	[ "$(tstat tiers)" = device,host,disk,disk:nvme ]
	[ "$(tstat disk:nvme.limit)" -eq $((64 << 20)) ]
	# statfs counts its room: 4M of host and 2M of disk alone are 6M.
	read -r blocks bsize < <(stat -f -c '%b %S' "$MNT")
	[ $((blocks * bsize)) -gt $((64 << 20)) ]
	make_src 16 512K
	for f in "$TFS_TMP"/src/f*; do
		cp "$f" "$MNT/${f##*/}"
	done
	# The oldest went down first.
	tfs_wait_for tfs_tier_is "$MNT/f00" = disk:nvme
	for f in "$MNT"/f*; do
		t=$(tfs_tier "$f")
		[ "$(rank "${t%%:*}")" -le 2 ]
		[ "$t" != disk:nvme ] || n=$((n + 1))
	done
	[ "$n" -ge 1 ]
	[ "$(tstat disk:nvme.buffers)" -eq "$n" ]
	[ "$(tstat disk:nvme.used)" -gt 0 ]
	[ "$(tstat disk:nvme.used)" -le $((64 << 20)) ]
	[ "$(tstat disk.spills)" -ge "$n" ]
	within_limits
	# The largest file df offers fits: the disk tier makes room for it by
	# pushing others down, whatever it holds now.
	avail=$(df -B1 --output=avail "$MNT" | tail -1)
	[ "$avail" -ge $((1 << 20)) ]
	head -c "$avail" /dev/urandom >"$TFS_TMP/big"
	cp "$TFS_TMP/big" "$MNT/big"
	cmp "$TFS_TMP/big" "$MNT/big"
	rm "$MNT/big"
	tfs_wait_for tfs_stat_is disk:nvme.buffers -ge "$n"
	n=$(tstat disk:nvme.buffers)
	# Its spill files are under the tier's own path, not under disk_path.
	[ "$(find "$nv" -path '*/tierfs.*' -type f ! -name lock | wc -l)" -eq "$n" ]
	# Every byte back; a read brings a file up from it (to host: there
	# is no device).
	for f in "$TFS_TMP"/src/f*; do
		cmp "$f" "$MNT/${f##*/}"
	done
	for f in "$MNT"/f*; do
		if [ "$(tfs_tier "$f")" = disk:nvme ]; then break; fi
	done
	[ "$(tfs_tier "$f")" = disk:nvme ]
	cat "$f" >/dev/null
	[ "$(tfs_tier "$f")" = host ]
	# By hand: tierfsctl spill goes to the chain's last tier; the xattr
	# takes its name (any case), and disk moves it back up to disk.
	run "$TIERFSCTL_BIN" spill "$MNT/f15"
	[ "$status" -eq 0 ]
	[[ "$output" == *"moved to disk:nvme" ]]
	[ "$(tfs_tier "$MNT/f15")" = disk:nvme ]
	set_tier "$MNT/f15" disk
	[ "$(tfs_tier "$MNT/f15")" = disk ]
	set_tier "$MNT/f15" DISK:NVME
	[ "$(tfs_tier "$MNT/f15")" = disk:nvme ]
	# TFS_IOC_STAT: disk (2) unless TFS_STAT_CHAIN asks for its place (3).
	run python3 -c '
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
for flags in (0, 1):
    out = fcntl.ioctl(fd, (3 << 30) | (88 << 16) | (0xf7 << 8) | 6,
                      struct.pack("<II", 1, flags) + bytes(80))
    print(struct.unpack("<III", out[:12])[2])' "$MNT/f15"
	[ "$status" -eq 0 ]
	echo "$output"
	[ "${lines[0]}" = 2 ]
	[ "${lines[1]}" = 3 ]
	cmp "$TFS_TMP/src/f15" "$MNT/f15"
	# tierfsctl status: its row, the LIMIT column where the header has it.
	out=$("$TIERFSCTL_BIN" status --ascii "$MNT")
	hl=$(grep -m1 '^TIER .* LIMIT' <<<"$out")
	nl=$(grep -m1 '^disk:nvme .* 64\.0 MiB' <<<"$out")
	hl=${hl%%LIMIT*}
	nl=${nl%%64.0 MiB*}
	[ $((${#hl} + 5)) -eq $((${#nl} + 8)) ]
	run ! setfattr -n user.tierfs.tier -v disk:nvm "$MNT/f15"
	# Deleting them empties it; unmounting removes its directory.
	rm "$MNT"/f*
	tfs_wait_for tfs_stat_is disk:nvme.buffers -eq 0
	[ "$(tstat disk:nvme.used)" -eq 0 ]
	tfs_unmount
	[ -z "$(find "$nv" -mindepth 1)" ]
}

@test "a reload that changes [tiers] keeps the chain the mount has, and says so" {
	local nv=$TFS_TMP/nvme
	mkdir -p "$nv" "$TFS_TMP/other"
	printf '[tiers]\nnvme = disk:%s:64M\n' "$nv" >"$TFS_TMP/conf"
	tfs_mount -o "config=$TFS_TMP/conf,device_backend=none"
	[ "$(tstat tiers)" = device,host,disk,disk:nvme ]
	# The same [tiers]: nothing to say.
	kill -HUP "$TFS_PID"
	tfs_wait_for grep -q "configuration reloaded" "$LOG"
	run ! grep -q "\[tiers\] changed" "$LOG"
	printf '[tiers]\nnvme = disk:%s:32M\nfar = disk:%s\n' "$nv" \
		"$TFS_TMP/other" >"$TFS_TMP/conf"
	kill -HUP "$TFS_PID"
	tfs_wait_for grep -q "\[tiers\] changed: .* keeps the 1 the mount has" "$LOG"
	[ "$(tstat tiers)" = device,host,disk,disk:nvme ]
	[ "$(tstat disk:nvme.limit)" -eq $((64 << 20)) ]
	echo x >"$MNT/f"
	[ "$(cat "$MNT/f")" = x ]
}
