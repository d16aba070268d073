#!/usr/bin/env bats
# The randomized differential test (tests/diff/difftest.py): random writes,
# truncates, reads, renames, links, unlinks, held descriptors and tier moves
# on tierfs with tiny limits and on tmpfs side by side. A short seed set
# here; TFS_LONG=1 (tests/run --long) runs the long one. The persistent
# variant (--persist N) unmounts and mounts again every N steps and compares
# every file as it came back. A failure prints the seed, the step and the
# op log; rerun one seed with
#   tests/diff/difftest.py --tierfs build/fs/tierfs --seed N --ops N
# tests/run: long (started first, so that the lanes end together)

load helpers

DIFFTEST=$BATS_TEST_DIRNAME/../diff/difftest.py

setup() {
	tfs_setup
}

teardown() {
	tfs_teardown
}

# run_seeds OPS SEED...: one fresh mount per seed; the daemon's log goes to
# $LOG, which tfs_teardown checks for sanitizer reports.
run_seeds() {
	local ops=$1 seed rc=0
	shift
	for seed in "$@"; do
		timeout 600 /usr/bin/python3 "$DIFFTEST" --tierfs "$TIERFS_BIN" \
			--seed "$seed" --ops "$ops" --log "$LOG.$seed" \
			${DIFF_OPTS:+--opts "$DIFF_OPTS"} $DIFF_ARGS || rc=1
		cat "$LOG.$seed" >>"$LOG"
		[ $rc = 0 ] || break
	done
	return $rc
}

@test "difftest: tierfs matches tmpfs op for op (short seed set)" {
	run_seeds "$(tfs_scale 2000 800)" 1 2 3
}

@test "difftest: long seed set (TFS_LONG=1)" {
	[ "${TFS_LONG:-0}" = 1 ] || skip "set TFS_LONG=1 (tests/run --long)"
	run_seeds 20000 $(seq 101 120)
}

@test "difftest: no device tier, unspill to host (TFS_LONG=1)" {
	[ "${TFS_LONG:-0}" = 1 ] || skip "set TFS_LONG=1 (tests/run --long)"
	DIFF_OPTS="device_backend=none,host_limit=512K,disk_chunk_size=64K,policy_unspill=host" \
		run_seeds 5000 $(seq 201 205)
}

# Issue 31: files up to 16 MiB (most bytes on the disk tier), fallocate's
# modes, punch holes, copy_file_range and xattrs in the mix; after every
# restart each file's size, bytes, extents, links, mode, flags, xattrs and
# the room fallocate took are what tmpfs has.
@test "difftest --persist: unmount and mount again every 200 steps, every file as it came back (short)" {
	DIFF_ARGS="--persist 200 --max-size 16M" run_seeds "$(tfs_scale 600 400)" 1 2
}

@test "difftest --persist: long seed set, a restart every 2500 steps (TFS_LONG=1)" {
	[ "${TFS_LONG:-0}" = 1 ] || skip "set TFS_LONG=1 (tests/run --long)"
	DIFF_ARGS="--persist 2500 --max-size 16M" run_seeds 20000 $(seq 301 305)
}

@test "difftest --persist: larger tiers, so that the stops sync from host and device (TFS_LONG=1)" {
	[ "${TFS_LONG:-0}" = 1 ] || skip "set TFS_LONG=1 (tests/run --long)"
	DIFF_OPTS="device_backend=sim,device_limit=8M,host_limit=16M" \
		DIFF_ARGS="--persist 2000 --max-size 16M" \
		run_seeds 10000 $(seq 311 313)
}

@test "difftest: the same seed gives the same op log" {
	local a b
	a=$(/usr/bin/python3 "$DIFFTEST" --help)
	[[ "$a" == *--seed* ]]
	# reproducibility: two runs of one seed perform the same operations
	a=$(/usr/bin/python3 "$DIFFTEST" --tierfs "$TIERFS_BIN" --seed 42 \
		--ops 100 --log "$LOG.a" | head -1)
	b=$(/usr/bin/python3 "$DIFFTEST" --tierfs "$TIERFS_BIN" --seed 42 \
		--ops 100 --log "$LOG.b" | head -1)
	cat "$LOG.a" "$LOG.b" >>"$LOG"
	echo "$a"
	echo "$b"
	a=$(grep -o 'oplog=[0-9a-f]*' <<<"$a")
	b=$(grep -o 'oplog=[0-9a-f]*' <<<"$b")
	[ -n "$a" ]
	[ "$a" = "$b" ]
}
