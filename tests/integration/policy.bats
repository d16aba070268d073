#!/usr/bin/env bats
# Policies a user sets (issue 28): soft pins, the write policy, admission to
# the device tier, and a directory's policy that what is made in it takes.
# Each test mounts its own tierfs with the sim device backend.

load helpers

SIM="device_backend=sim,device_limit=4M,host_limit=64M"

setup() {
	tfs_setup
}

teardown() {
	tfs_teardown
}

xa() { # xa NAME FILE: one user.tierfs.NAME xattr's value
	getfattr --only-values -n "user.tierfs.$1" "$2"
}

xa_is() { # xa_is NAME FILE VALUE: for polling
	[ "$(xa "$1" "$2")" = "$3" ]
}

set_xa() { setfattr -n "user.tierfs.$1" -v "$3" "$2"; }

show_stats() {
	getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT" >&2
}

# mk FILE SIZE: a file of SIZE random bytes, its source kept beside as
# FILE's name under $TFS_TMP/src.
mk() {
	mkdir -p "$TFS_TMP/src"
	head -c "$2" /dev/urandom >"$TFS_TMP/src/$(basename "$1")"
	cp "$TFS_TMP/src/$(basename "$1")" "$1"
}

@test "a soft pin is evicted only after every unpinned file" {
	tfs_mount -o "$SIM"
	mk "$MNT/a" 1M
	[ "$(tfs_tier "$MNT/a")" = device ]
	set_xa pin "$MNT/a" prio=1
	[ "$(xa pin "$MNT/a")" = prio=1 ]
	[ "$(xa pins "$MNT/a")" = 0 ] # it holds nothing in place
	[ "$(tfs_stat soft_pins)" = 1 ]
	# a is the least recently used of five 1 MiB files in a 4 MiB device
	# tier: every other file is pushed out before it.
	local f
	for f in b c d e; do
		mk "$MNT/$f" 1M
	done
	tfs_wait_for tfs_stat_is device.used -le $((4 * 1024 * 1024))
	[ "$(tfs_tier "$MNT/a")" = device ]
	[ "$(tfs_tier "$MNT/b")" != device ]
	[ "$(tfs_tier "$MNT/c")" != device ]
	# an explicit move still moves it, as for any unpinned file
	set_xa tier "$MNT/a" disk
	[ "$(tfs_tier "$MNT/a")" = disk ]
	for f in a b c d e; do
		cmp "$TFS_TMP/src/$f" "$MNT/$f"
	done
	# a hard pin replaces it, and 0 ends either
	set_xa pin "$MNT/a" 1
	[ "$(xa pin "$MNT/a")" = 1 ]
	[ "$(tfs_stat soft_pins)" = 0 ]
	set_xa pin "$MNT/a" prio=3
	[ "$(xa pin "$MNT/a")" = prio=3 ]
	[ "$(xa pins "$MNT/a")" = 0 ]
	set_xa pin "$MNT/a" 0
	[ "$(xa pin "$MNT/a")" = 0 ]
	[ "$(tfs_stat soft_pins)" = 0 ]
}

@test "soft pins rank by priority, and one with a ttl lapses once idle that long" {
	tfs_mount -o "$SIM"
	local f p
	# Pinned on host, then moved up one by one: a 4 MiB device tier
	# keeps three of these 1 MiB files (its target is 85%).
	for f in lo:2 hi:5 c:7 d:7 e:7; do
		p=${f#*:}
		f=${f%:*}
		mk "$MNT/$f" 1M
		set_xa tier "$MNT/$f" host
		set_xa pin "$MNT/$f" "prio=$p"
	done
	for f in lo hi c d; do
		set_xa tier "$MNT/$f" device
	done
	# Only soft pins: the lowest priority goes first, then the next.
	tfs_wait_for tfs_stat_is device.used -le $((3 * 1024 * 1024))
	[ "$(tfs_tier "$MNT/lo")" != device ]
	[ "$(tfs_tier "$MNT/hi")" = device ]
	set_xa tier "$MNT/e" device
	tfs_wait_for tfs_stat_is device.used -le $((3 * 1024 * 1024))
	[ "$(tfs_tier "$MNT/hi")" != device ]
	for f in c d e; do
		[ "$(tfs_tier "$MNT/$f")" = device ]
	done
	# A ttl: gone after two idle seconds, without anyone asking, and its
	# file is unpinned.
	set_xa pin "$MNT/hi" prio=5,ttl=2s
	[ "$(xa pin "$MNT/hi")" = prio=5,ttl=2s ]
	[ "$(tfs_stat soft_pins)" = 5 ]
	tfs_wait_for tfs_stat_is soft_pins -eq 4
	[ "$(xa pin "$MNT/hi")" = 0 ]
	cmp "$TFS_TMP/src/hi" "$MNT/hi"
	# An access restarts the count: read every 0.5 s, it stays.
	set_xa pin "$MNT/lo" ttl=2
	for f in 1 2 3 4 5 6; do
		cat "$MNT/lo" >/dev/null
		sleep 0.5
	done
	[ "$(xa pin "$MNT/lo")" = prio=1,ttl=2s ]
}

@test "soft pins count against the user's share as hard ones" {
	local bob
	tfs_user bob
	tfs_mount -o "allow_other,device_backend=sim,device_limit=64M,host_limit=64M,device_user_share=1M"
	chmod 1777 "$MNT"
	local f
	for f in b1 b2; do
		head -c 600000 /dev/urandom >"$TFS_TMP/$f"
		chmod 644 "$TFS_TMP/$f"
		tfs_as "$bob" cp "$TFS_TMP/$f" "$MNT/$f"
		[ "$(tfs_tier "$MNT/$f")" = device ]
	done
	tfs_as "$bob" setfattr -n user.tierfs.pin -v prio=2 "$MNT/b1"
	run tfs_as "$bob" setfattr -n user.tierfs.pin -v ttl=1h "$MNT/b2"
	[[ "$output" == *"Disk quota exceeded"* ]]
	[ "$(xa pin "$MNT/b2")" = 0 ]
	run tfs_as "$bob" setfattr -n user.tierfs.pin -v 1 "$MNT/b2"
	[[ "$output" == *"Disk quota exceeded"* ]]
	# Unpinning the soft one gives the share back.
	tfs_as "$bob" setfattr -n user.tierfs.pin -v 0 "$MNT/b1"
	tfs_as "$bob" setfattr -n user.tierfs.pin -v prio=1 "$MNT/b2"
	[ "$(xa pin "$MNT/b2")" = prio=1 ]
}

@test "write_through: a clean disk copy after close, so that evicting it writes 0 bytes" {
	tfs_mount -o "$SIM,policy_write=write_through"
	[ "$(xa write_policy "$MNT")" = write_through ]
	mk "$MNT/f" 1M
	[ "$(xa write_policy "$MNT/f")" = write_through ]
	[ "$(tfs_tier "$MNT/f")" = device ]
	tfs_wait_for tfs_stat_is write_through.copies -eq 1 || { show_stats; false; }
	[ "$(tfs_stat write_through.bytes)" -eq 1048576 ]
	[ "$(tfs_stat write_through.errors)" -eq 0 ]
	[ "$(tfs_stat write_through.pending)" -eq 0 ]
	run "$TIERFSCTL_BIN" metrics "$MNT"
	[ "$status" -eq 0 ]
	[[ "$output" == *"tierfs_write_through_copies_total{mount=\"$MNT\"} 1"* ]]
	[[ "$output" == *"tierfs_write_through_bytes_total{mount=\"$MNT\"} 1048576"* ]]
	[[ "$output" == *"tierfs_write_through_pending{mount=\"$MNT\"} 0"* ]]
	[[ "$output" == *"tierfs_write_through_errors_total{mount=\"$MNT\"} 0"* ]]
	local w
	w=$(tfs_stat disk.written_bytes)
	[ "$w" -gt 0 ]
	# Down to disk: only copies are dropped, nothing is written.
	set_xa tier "$MNT/f" disk
	[ "$(tfs_tier "$MNT/f")" = disk ]
	[ "$(tfs_stat disk.written_bytes)" -eq "$w" ]
	cmp "$TFS_TMP/src/f" "$MNT/f"
	# A rewrite drops the copy and its close makes a new one.
	head -c 4096 /dev/urandom | dd of="$MNT/f" conv=notrunc status=none
	tfs_wait_for tfs_stat_is write_through.copies -eq 2 || { show_stats; false; }
	# Reading it does not: its copy is clean.
	cat "$MNT/f" >/dev/null
	sleep 0.3
	[ "$(tfs_stat write_through.copies)" -eq 2 ]
}

@test "write_back (the default) writes at eviction; a file's write_policy overrides the mount's" {
	tfs_mount -o "$SIM"
	[ "$(xa write_policy "$MNT")" = write_back ]
	mk "$MNT/f" 1M
	[ "$(xa write_policy "$MNT/f")" = write_back ]
	local w
	w=$(tfs_stat disk.written_bytes)
	set_xa tier "$MNT/f" disk
	[ "$(tfs_stat disk.written_bytes)" -gt "$w" ]
	[ "$(tfs_stat write_through.copies)" -eq 0 ]
	# One file made write_through: its next close copies it down.
	mk "$MNT/g" 1M
	set_xa write_policy "$MNT/g" write_through
	[ "$(xa write_policy "$MNT/g")" = write_through ]
	head -c 4096 /dev/urandom | dd of="$MNT/g" conv=notrunc status=none
	tfs_wait_for tfs_stat_is write_through.copies -eq 1 || { show_stats; false; }
	w=$(tfs_stat disk.written_bytes)
	set_xa tier "$MNT/g" disk
	[ "$(tfs_stat disk.written_bytes)" -eq "$w" ]
}

@test "a directory's pin, write policy and tier apply to the files and directories made in it" {
	tfs_mount -o "$SIM"
	mkdir "$MNT/d" "$MNT/old"
	mk "$MNT/d/before" 64K
	set_xa pin "$MNT/d" prio=2,ttl=1h
	set_xa write_policy "$MNT/d" write_through
	set_xa tier "$MNT/d" host
	[ "$(xa pin "$MNT/d")" = prio=2,ttl=3600s ]
	[ "$(xa write_policy "$MNT/d")" = write_through ]
	[ "$(xa tier "$MNT/d")" = host ]
	mk "$MNT/d/f" 1M
	[ "$(xa pin "$MNT/d/f")" = prio=2,ttl=3600s ]
	[ "$(xa write_policy "$MNT/d/f")" = write_through ]
	[ "$(tfs_tier "$MNT/d/f")" = host ]
	tfs_wait_for tfs_stat_is write_through.copies -eq 1 || { show_stats; false; }
	# a subdirectory carries it on
	mkdir "$MNT/d/sub"
	[ "$(xa pin "$MNT/d/sub")" = prio=2,ttl=3600s ]
	[ "$(xa tier "$MNT/d/sub")" = host ]
	mk "$MNT/d/sub/g" 64K
	[ "$(xa pin "$MNT/d/sub/g")" = prio=2,ttl=3600s ]
	[ "$(tfs_tier "$MNT/d/sub/g")" = host ]
	# what was there before, and other directories, keep their own
	[ "$(xa pin "$MNT/d/before")" = 0 ]
	[ "$(xa write_policy "$MNT/d/before")" = write_back ]
	[ "$(tfs_tier "$MNT/d/before")" = device ]
	mk "$MNT/old/h" 64K
	[ "$(xa pin "$MNT/old/h")" = 0 ]
	[ "$(tfs_tier "$MNT/old/h")" = device ]
	run getfattr -n user.tierfs.tier "$MNT/old"
	[ "$status" -ne 0 ]
	[[ "$output" == *"No such attribute"* ]]
	# a file's own value overrides what it took; default clears a
	# directory's
	set_xa pin "$MNT/d/f" 0
	[ "$(xa pin "$MNT/d/f")" = 0 ]
	set_xa tier "$MNT/d" default
	set_xa write_policy "$MNT/d" default
	set_xa pin "$MNT/d" 0
	mk "$MNT/d/later" 64K
	[ "$(tfs_tier "$MNT/d/later")" = device ]
	[ "$(xa write_policy "$MNT/d/later")" = write_back ]
	[ "$(xa pin "$MNT/d/later")" = 0 ]
	cmp "$TFS_TMP/src/f" "$MNT/d/f"
}

@test "bad pin, write_policy and directory tier values are EINVAL and change nothing" {
	tfs_mount -o "$SIM"
	mkdir "$MNT/d"
	mk "$MNT/f" 64K
	set_xa pin "$MNT/f" prio=2
	set_xa pin "$MNT/d" prio=3
	set_xa tier "$MNT/d" host
	local v
	for v in 2 soft prio=0 prio=8 ttl=0 ttl=8d ttl=5x prio=1,prio=2 \
		prio=1, "prio=1 ttl=2"; do
		run setfattr -n user.tierfs.pin -v "$v" "$MNT/f"
		[ "$status" -ne 0 ]
		[[ "$output" == *"Invalid argument"* ]]
		run setfattr -n user.tierfs.pin -v "$v" "$MNT/d"
		[[ "$output" == *"Invalid argument"* ]]
	done
	[ "$(xa pin "$MNT/f")" = prio=2 ]
	[ "$(xa pin "$MNT/d")" = prio=3 ]
	for v in through write-back WRITE_BACK ""; do
		run setfattr -n user.tierfs.write_policy -v "$v" "$MNT/f"
		[[ "$output" == *"Invalid argument"* ]]
		run setfattr -n user.tierfs.write_policy -v "$v" "$MNT/d"
		[[ "$output" == *"Invalid argument"* ]]
	done
	[ "$(xa write_policy "$MNT/f")" = write_back ]
	[ "$(xa write_policy "$MNT/d")" = write_back ]
	for v in device:0 gpu nvme; do
		run setfattr -n user.tierfs.tier -v "$v" "$MNT/d"
		[[ "$output" == *"Invalid argument"* ]]
	done
	[ "$(xa tier "$MNT/d")" = host ]
	[ "$(tfs_stat soft_pins)" = 1 ]
	# and a bad mount option is refused at mount with what it takes
	tfs_unmount
	run "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,policy_write=through"
	[ "$status" -ne 0 ]
	[[ "$output" == *"policy_write"*"write_back"* ]]
}

# The scan-plus-hot-set workload: two 512 KiB files opened four times
# each, then twelve others read once, on a 4 MiB device tier; every file
# starts on disk, so that each first read asks to come up.
scan_with_hot_set() {
	local f i
	mkdir -p "$TFS_TMP/src"
	for f in h1 h2 s01 s02 s03 s04 s05 s06 s07 s08 s09 s10 s11 s12; do
		mk "$MNT/$f" 512K
		set_xa tier "$MNT/$f" disk
	done
	for i in 1 2 3 4; do
		cat "$MNT/h1" "$MNT/h2" >/dev/null
	done
	[ "$(tfs_tier "$MNT/h1")" = device ]
	[ "$(tfs_tier "$MNT/h2")" = device ]
	for f in s01 s02 s03 s04 s05 s06 s07 s08 s09 s10 s11 s12; do
		cmp "$TFS_TMP/src/$f" "$MNT/$f"
	done
	# what the spiller does once the device is above its watermark
	sleep 0.5
}

@test "admission keeps a hot set on the device through a scan" {
	tfs_mount -o "$SIM,policy_admission=yes"
	scan_with_hot_set
	[ "$(tfs_tier "$MNT/h1")" = device ] || { show_stats; false; }
	[ "$(tfs_tier "$MNT/h2")" = device ]
	local r
	r=$(tfs_stat admission.rejects)
	[ "$r" -ge 1 ]
	run "$TIERFSCTL_BIN" metrics "$MNT"
	[[ "$output" == *"tierfs_admission_rejects_total{mount=\"$MNT\"} $r"* ]]
	# the scan was served, from host
	[ "$(tfs_tier "$MNT/s12")" = host ]
	cmp "$TFS_TMP/src/h1" "$MNT/h1"
}

@test "without admission (the default) the same scan pushes the hot set off the device" {
	tfs_mount -o "$SIM"
	scan_with_hot_set
	run tfs_tier "$MNT/h1"
	[ "$output" != device ]
	[ "$(tfs_stat admission.rejects)" -eq 0 ]
	[ "$(tfs_tier "$MNT/s12")" = device ]
}

@test "a persistent mount keeps soft pins, write policies and directory policy" {
	local opts="$SIM,disk_persist=yes,disk_name=pol$$"
	tfs_mount -o "$opts"
	mkdir "$MNT/d"
	set_xa pin "$MNT/d" prio=4,ttl=1d
	set_xa write_policy "$MNT/d" write_through
	set_xa tier "$MNT/d" host
	mk "$MNT/f" 64K
	set_xa pin "$MNT/f" prio=6
	set_xa write_policy "$MNT/f" write_through
	mk "$MNT/d/g" 64K
	tfs_unmount
	tfs_mount -o "$opts"
	[ "$(xa pin "$MNT/f")" = prio=6 ]
	[ "$(xa write_policy "$MNT/f")" = write_through ]
	[ "$(xa pin "$MNT/d")" = prio=4,ttl=86400s ]
	[ "$(xa write_policy "$MNT/d")" = write_through ]
	[ "$(xa tier "$MNT/d")" = host ]
	[ "$(xa pin "$MNT/d/g")" = prio=4,ttl=86400s ]
	[ "$(tfs_stat soft_pins)" = 2 ]
	cmp "$TFS_TMP/src/f" "$MNT/f"
}
