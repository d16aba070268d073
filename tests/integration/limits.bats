#!/usr/bin/env bats
# Limits: every byte a tier holds is charged to it before it is written,
# a write past the limits gets ENOSPC with the bytes before it intact, and
# what df, stat and tierfsctl report agrees with what the tiers hold.

load helpers

setup() {
	tfs_setup
}

teardown() {
	tfs_teardown
}

# tstat KEY: one key of the mount root's user.tierfs.stats.
tstat() {
	getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT" |
		sed -n "s/^$1=//p"
}

# Every tier's use within its limit.
within_limits() {
	local t used limit
	for t in device host disk; do
		used=$(tstat "$t.used")
		limit=$(tstat "$t.limit")
		if [ "$used" -gt "$limit" ]; then
			echo "$t.used=$used > $t.limit=$limit" >&2
			return 1
		fi
	done
}

@test "dd of 200 MiB past host_limit=32M,disk_limit=64M: ENOSPC, the spill directory within the limit plus a chunk, earlier bytes intact" {
	head -c 200M /dev/urandom >"$TFS_TMP/src"
	tfs_mount -o device_backend=none,host_limit=32M,disk_limit=64M
	run dd if="$TFS_TMP/src" of="$MNT/big" bs=1M count=200
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"No space left on device"* ]]
	local size spilled
	size=$(stat -c %s "$MNT/big")
	spilled=$(du -sB1 "$SPILL" | cut -f1)
	echo "file $size bytes, spill directory $spilled bytes"
	getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT"
	[ "$spilled" -le $((64 * 1048576 + 1048576)) ]
	# most of what fits was written, and reads back as it was
	[ "$size" -ge $((48 * 1048576)) ]
	cmp -n "$size" "$TFS_TMP/src" "$MNT/big"
	within_limits
	[ "$(tstat disk.enospc)" -ge 1 ]
	# ENOSPC again at the next write, at close nothing is lost
	run dd if="$TFS_TMP/src" of="$MNT/big" bs=1M seek=$((size / 1048576)) \
		skip=$((size / 1048576)) count=1 conv=notrunc
	[ "$status" -ne 0 ]
	[[ "$output" == *"No space left on device"* ]]
	cmp -n "$size" "$TFS_TMP/src" "$MNT/big"
	[ "$(du -sB1 "$SPILL" | cut -f1)" -le $((65 * 1048576)) ]
	within_limits
}
