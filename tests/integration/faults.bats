#!/usr/bin/env bats
# Faults under the disk and host tiers: the daemon runs with the test-only
# injector tests/fault/tfsfault.c preloaded, which fails the spill files'
# reads and writes, or the host tier's chunk allocations, on a schedule the
# test writes into a control file.
#
# The contract: the operation hit gets an errno, or the buffer stays where
# it was; no other file loses or changes a byte; the daemon stays up; the
# log shows each fault; once the fault stops, spilling works again.

load helpers

FAULT_SO=${TFS_BUILD:-$BATS_TEST_DIRNAME/../../build}/tests/libtfsfault.so

setup() {
	tfs_setup
	# Built with the tests (tests/meson.build): missing is a broken build.
	[ -f "$FAULT_SO" ]
	CTL=$TFS_TMP/fault.ctl
	FLOG=$TFS_TMP/faults.log
	: >"$CTL"
	: >"$FLOG"
}

teardown() { tfs_teardown; }

# fault_mount [-o opts]...: tfs_mount with the injector preloaded. ASan
# wants to come first among the preloaded libraries; the injector only
# wraps calls and passes them on, so the order does not matter here.
fault_mount() {
	LD_PRELOAD=$FAULT_SO TFS_FAULT_DIR=$SPILL TFS_FAULT_CTL=$CTL \
		TFS_FAULT_LOG=$FLOG \
		ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
		tfs_mount "$@"
}

# fault WORDS...: the new schedule, in place at once (a new file, so the
# injector never reads half of it).
fault() {
	printf '%s\n' "$*" >"$CTL.new"
	mv "$CTL.new" "$CTL"
}

faults() { wc -l <"$FLOG"; }

# The daemon's log lines of the disk tier's failed calls.
fault_lines() {
	grep -cE "cannot (read|write) chunk [0-9]+ of spill file '$SPILL/.*': (Input/output error|No space left on device)|cannot free room in spill file" "$LOG"
}

src() { # src NAME MIB: random bytes to copy in and compare against
	head -c "$(($2 * 1024 * 1024))" /dev/urandom >"$TFS_TMP/$1"
}

tier() { getfattr --only-values -n user.tierfs.tier "$1"; }

alive() {
	kill -0 "$TFS_PID" && mountpoint -q "$MNT" && stat "$MNT" >/dev/null
}

@test "a spill whose write fails returns EIO and leaves the file in host" {
	fault_mount -o device_backend=none,host_limit=8M
	src a 2
	src b 1
	cp "$TFS_TMP/a" "$MNT/a"
	cp "$TFS_TMP/b" "$MNT/b"
	fault ops=write err=EIO
	run setfattr -n user.tierfs.tier -v disk "$MNT/a"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Input/output error"* ]]
	[ "$(tier "$MNT/a")" = host ]
	[ "$(faults)" -ge 1 ]
	# Each failed write counted and logged once.
	[ "$(tfs_stat spill_write_errors)" -eq "$(faults)" ]
	[ "$(fault_lines)" -eq "$(faults)" ]
	cmp "$TFS_TMP/a" "$MNT/a"
	cmp "$TFS_TMP/b" "$MNT/b"
	alive

	fault off
	setfattr -n user.tierfs.tier -v disk "$MNT/a"
	[ "$(tier "$MNT/a")" = disk ]
	cmp "$TFS_TMP/a" "$MNT/a"
}

@test "a disk that is full under the spill files gives ENOSPC to the move" {
	fault_mount -o device_backend=none,host_limit=8M
	src a 3
	cp "$TFS_TMP/a" "$MNT/a"
	# The third chunk fails: the first two were written already.
	fault ops=write err=ENOSPC after=2
	run setfattr -n user.tierfs.tier -v disk "$MNT/a"
	[ "$status" -ne 0 ]
	[[ "$output" == *"No space left on device"* ]]
	[ "$(tier "$MNT/a")" = host ]
	grep -q "cannot write chunk .*No space left on device" "$LOG"
	cmp "$TFS_TMP/a" "$MNT/a"
	# The failed spill left no file behind.
	[ -z "$(find "$SPILL" -type f ! -name lock)" ]
	fault off
	setfattr -n user.tierfs.tier -v disk "$MNT/a"
	cmp "$TFS_TMP/a" "$MNT/a"
}

@test "when no spill can write, writers get an error and written files stay" {
	fault_mount -o device_backend=none,host_limit=4M
	fault ops=write err=EIO
	ok=() failed=0
	for i in 1 2 3 4 5 6; do
		src "f$i" 1
		if cp "$TFS_TMP/f$i" "$MNT/f$i" 2>"$TFS_TMP/cp.err"; then
			ok+=("f$i")
		else
			# ENOSPC from a full host, or EIO from the write
			# on disk a full host sends the writer to.
			grep -qE "No space left on device|Input/output error" \
				"$TFS_TMP/cp.err"
			failed=$((failed + 1))
		fi
	done
	# 4M of host holds at most four of them; the spiller tried the rest.
	[ "$failed" -ge 2 ]
	[ "$(faults)" -ge 1 ]
	[ "$(tfs_stat spill_write_errors)" -eq "$(faults)" ]
	# The writers' scans for room tried to move the others and failed:
	# trouble, and counted as such.
	[ "$(tfs_stat evict_move_errors)" -ge 1 ]
	grep -q "cannot move buffer [0-9]* out of host: Input/output error" "$LOG"
	alive
	for f in "${ok[@]}"; do
		cmp "$TFS_TMP/$f" "$MNT/$f"
		[ "$(tier "$MNT/$f")" = host ]
	done

	# Once the disk works, the same writes go through by spilling.
	fault off
	for i in 1 2 3 4 5 6; do
		cp "$TFS_TMP/f$i" "$MNT/f$i"
	done
	for i in 1 2 3 4 5 6; do
		cmp "$TFS_TMP/f$i" "$MNT/f$i"
	done
	[ "$(tfs_stat disk.buffers)" -ge 2 ]
}

@test "a read that fails returns EIO, and the file reads again after" {
	fault_mount -o device_backend=none,host_limit=8M,policy_unspill=none
	src a 2
	src b 1
	cp "$TFS_TMP/a" "$MNT/a"
	cp "$TFS_TMP/b" "$MNT/b"
	setfattr -n user.tierfs.tier -v disk "$MNT/a"
	fault ops=read err=EIO
	run cat "$MNT/a"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Input/output error"* ]]
	grep -q "cannot read chunk .*Input/output error" "$LOG"
	# An I/O error is not a checksum error: the chunk is fine.
	run ! grep -q "checksum mismatch\|too short" "$LOG"
	[ "$(tfs_stat spill_read_errors)" -eq "$(faults)" ]
	[ "$(tfs_stat checksum_errors)" -eq 0 ]
	[ "$(tier "$MNT/a")" = disk ]
	cmp "$TFS_TMP/b" "$MNT/b"
	fault off
	cmp "$TFS_TMP/a" "$MNT/a"
}

@test "an unspill whose read fails serves the read from disk" {
	fault_mount -o device_backend=none,host_limit=8M
	src a 1
	cp "$TFS_TMP/a" "$MNT/a"
	setfattr -n user.tierfs.tier -v disk "$MNT/a"
	fault ops=read err=EIO count=1
	# The first read brings the file up into host, which fails; the read
	# itself is then served from the disk copy.
	cmp "$TFS_TMP/a" "$MNT/a"
	[ "$(faults)" -eq 1 ]
	[ "$(tfs_stat spill_read_errors)" -eq 1 ]
	grep -q "unspill failed" "$LOG"
	alive
	cmp "$TFS_TMP/a" "$MNT/a"
}

@test "short reads and writes of the spill files change no byte" {
	fault_mount -o device_backend=none,host_limit=8M
	fault ops=write,read err=short
	src a 3
	src big 12
	cp "$TFS_TMP/a" "$MNT/a"
	setfattr -n user.tierfs.tier -v disk "$MNT/a"
	setfattr -n user.tierfs.tier -v host "$MNT/a"
	setfattr -n user.tierfs.tier -v disk "$MNT/a"
	# Larger than host: written on disk in place, chunk by chunk.
	cp "$TFS_TMP/big" "$MNT/big"
	[ "$(faults)" -ge 10 ]
	cmp "$TFS_TMP/a" "$MNT/a"
	cmp "$TFS_TMP/big" "$MNT/big"
	[ "$(tier "$MNT/big")" = disk ]
	run ! grep -q "cannot" "$LOG"
	[ "$(tfs_stat spill_read_errors)" -eq 0 ]
	[ "$(tfs_stat spill_write_errors)" -eq 0 ]
	[ "$(tfs_stat checksum_errors)" -eq 0 ]
}

@test "random disk faults under load lose no acknowledged byte" {
	fault_mount -o device_backend=sim,device_limit=2M,host_limit=4M
	for i in 1 2 3 4 5 6 7 8; do
		src "f$i" $((1 + i % 3))
	done
	src big 10
	fault ops=write,read,fallocate err=EIO prob=0.2 seed=${SEED:-17}
	ok=()
	for round in 1 2 3; do
		for i in 1 2 3 4 5 6 7 8; do
			if cp "$TFS_TMP/f$i" "$MNT/f$i" 2>/dev/null; then
				ok[i]=1
			else
				ok[i]=0
			fi
			cat "$MNT/f$(((i + 3) % 8 + 1))" >/dev/null 2>&1 || true
			setfattr -n user.tierfs.tier -v disk \
				"$MNT/f$(((i + 5) % 8 + 1))" 2>/dev/null || true
		done
		if cp "$TFS_TMP/big" "$MNT/big" 2>/dev/null; then
			big_ok=1
		else
			big_ok=0
		fi
	done
	[ "$(faults)" -ge 5 ]
	alive
	fault off
	# Every fault counted once and logged once, whatever it hit.
	local counted=$(($(tfs_stat spill_read_errors) +
		$(tfs_stat spill_write_errors) + $(tfs_stat spill_punch_errors)))
	[ "$counted" -eq "$(faults)" ]
	[ "$(fault_lines)" -eq "$(faults)" ]
	[ "$(tfs_stat checksum_errors)" -eq 0 ]
	for i in 1 2 3 4 5 6 7 8; do
		[ "${ok[i]}" = 1 ] || continue
		cmp "$TFS_TMP/f$i" "$MNT/f$i"
	done
	[ "$big_ok" = 0 ] || cmp "$TFS_TMP/big" "$MNT/big"
	# Writing and spilling work again.
	for i in 1 2 3 4 5 6 7 8; do
		[ "${ok[i]}" = 1 ] || cp "$TFS_TMP/f$i" "$MNT/f$i"
		setfattr -n user.tierfs.tier -v disk "$MNT/f$i"
		cmp "$TFS_TMP/f$i" "$MNT/f$i"
	done
}

@test "a host chunk that cannot be allocated fails that write only" {
	fault_mount -o device_backend=none,host_limit=16M
	src a 2
	src b 2
	cp "$TFS_TMP/a" "$MNT/a"
	echo small >"$MNT/s"
	fault ops=chunk err=ENOMEM
	run cp "$TFS_TMP/b" "$MNT/b"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Cannot allocate memory"* ||
		"$output" == *"No space left on device"* ]]
	[ "$(faults)" -ge 1 ]
	[ "$(tfs_stat host_alloc_failures)" -eq "$(faults)" ]
	[ "$(grep -c "cannot allocate a host chunk" "$LOG")" -eq "$(faults)" ]
	alive
	cmp "$TFS_TMP/a" "$MNT/a"
	[ "$(cat "$MNT/s")" = small ]
	# Small files do not take chunks and still work.
	echo other >"$MNT/t"
	[ "$(cat "$MNT/t")" = other ]
	fault off
	cp "$TFS_TMP/b" "$MNT/b"
	cmp "$TFS_TMP/b" "$MNT/b"
	[ "$(tfs_stat host.used)" -le $((5 * 1024 * 1024)) ]
}

@test "a tier full of pinned files counts contention, not trouble" {
	fault_mount -o device_backend=none,host_limit=4M
	for i in 1 2 3 4; do
		src "p$i" 1
		cp "$TFS_TMP/p$i" "$MNT/p$i"
		setfattr -n user.tierfs.pin -v 1 "$MNT/p$i"
	done
	# Nothing in host can move, so the new file is written on disk.
	src n 2
	cp "$TFS_TMP/n" "$MNT/n"
	[ "$(tier "$MNT/n")" = disk ]
	[ "$(tfs_stat evict_nothing_movable)" -ge 1 ]
	[ "$(tfs_stat evict_move_errors)" -eq 0 ]
	run ! grep -q "cannot move buffer" "$LOG"
	for i in 1 2 3 4; do
		cmp "$TFS_TMP/p$i" "$MNT/p$i"
	done
	cmp "$TFS_TMP/n" "$MNT/n"
	[ "$(faults)" -eq 0 ]
}

# [policy] prefetch_queue bounds the files queued and not yet moving. A
# slow disk (each spill-file read held 300 ms) keeps the first move going
# while six requests come back to back from one process: one moving and
# two queued at most, the rest EAGAIN. tierfsctl waits through the full
# queue and brings the whole tree up. A reload applies a new bound.
@test "a full prefetch queue answers EAGAIN at [policy] prefetch_queue; tierfsctl waits through it" {
	local conf=$TFS_TMP/tierfs.conf i
	printf '[policy]\nprefetch_queue = 2\n' >"$conf"
	fault_mount -o "config=$conf,device_backend=none,host_limit=16M"
	[ "$(tfs_stat prefetch.max)" -eq 2 ]
	mkdir "$MNT/t"
	for i in 1 2 3 4 5 6; do
		src "s$i" 1
		cp "$TFS_TMP/s$i" "$MNT/t/f$i"
		setfattr -n user.tierfs.tier -v disk "$MNT/t/f$i"
	done
	fault ops=read err=delay ms=300
	run /usr/bin/python3 "$BATS_TEST_DIRNAME/prefetch.py" queue host \
		"$MNT"/t/f{1,2,3,4,5,6}
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c '^queued' <<<"$output")" -ge 2 ]
	[ "$(grep -c '^queued' <<<"$output")" -le 3 ]
	[ "$(grep -c '^EAGAIN$' <<<"$output")" -ge 3 ]
	run "$TIERFSCTL_BIN" prefetch --tier host --wait "$MNT/t"
	echo "$output"
	[ "$status" -eq 0 ]
	fault off
	for i in 1 2 3 4 5 6; do
		[ "$(tier "$MNT/t/f$i")" = host ]
		cmp "$TFS_TMP/s$i" "$MNT/t/f$i"
	done
	printf '[policy]\nprefetch_queue = 5\n' >"$conf"
	kill -HUP "$TFS_PID"
	tfs_wait_for tfs_stat_is prefetch.max -eq 5
}
