#!/usr/bin/env bats
# Prefetch: TFS_IOC_PREFETCH queued and waited for, failures reported to
# the waiter, what the kernel's WILLNEED hints bring up, tierfsctl
# prefetch. The device is the sim backend.

load helpers

setup() {
	tfs_setup
	tfs_mount -o device_backend=sim,device_limit=4M,host_limit=8M
	PY=/usr/bin/python3
	[ -x "$PY" ] || PY=python3
	PF="$BATS_TEST_DIRNAME/prefetch.py"
}

teardown() {
	tfs_teardown
}

pf() {
	"$PY" "$PF" "$@"
}

ctl() {
	"$TIERFSCTL_BIN" "$@"
}

# on_disk FILE [SIZE]: a file of SIZE (1M) random bytes, spilled to disk;
# what it holds is kept in $TFS_TMP/src.
on_disk() {
	head -c "${2:-1M}" /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$1"
	setfattr -n user.tierfs.tier -v disk "$1"
	[ "$(tfs_tier "$1")" = disk ]
}

@test "a prefetch returns at once, a waiting one once the file is there; one there already queues nothing" {
	on_disk "$MNT/g"
	on_disk "$MNT/f"
	run pf ioctl "$MNT/f" host wait
	[ "$status" -eq 0 ]
	[ "${lines[0]%% *}" = done ]
	[ "$(tfs_tier "$MNT/f")" = host ]
	run pf ioctl "$MNT/g" device
	[ "$status" -eq 0 ]
	[ "${lines[0]%% *}" = queued ]
	tfs_wait_for tfs_tier_is "$MNT/g" = device
	run pf ioctl "$MNT/g" host
	[ "${lines[0]%% *}" = there ]
	cmp "$TFS_TMP/src" "$MNT/f"
	[ "$(tfs_stat prefetch.queued)" -eq 2 ]
	tfs_wait_for tfs_stat_is prefetch.done -eq 2
	[ "$(tfs_stat prefetch.failed)" -eq 0 ]
	[ "$(tfs_stat prefetch.skipped)" -eq 1 ]
	[ "$(tfs_stat prefetch.pending)" -eq 0 ]
}

@test "a prefetch that cannot get there reports its error to the waiter" {
	# 6 MiB never fits a 4 MiB device tier.
	on_disk "$MNT/big" 6M
	run pf ioctl "$MNT/big" device wait
	[ "$status" -eq 1 ]
	[ "$output" = ENOSPC ]
	[ "$(tfs_tier "$MNT/big")" = disk ]
	# A pinned file does not move, not even up.
	on_disk "$MNT/p"
	setfattr -n user.tierfs.pin -v 1 "$MNT/p"
	run pf ioctl "$MNT/p" host wait
	[ "$output" = EBUSY ]
	[ "$(tfs_tier "$MNT/p")" = disk ]
	[ "$(tfs_stat prefetch.failed)" -eq 2 ]
	[ "$(tfs_stat prefetch.done)" -eq 0 ]
}

@test "a prefetch pushes out no pinned buffer to make room" {
	head -c 3M /dev/urandom >"$MNT/pinned"
	setfattr -n user.tierfs.tier -v device "$MNT/pinned"
	setfattr -n user.tierfs.pin -v 1 "$MNT/pinned"
	on_disk "$MNT/f" 2M
	run pf ioctl "$MNT/f" device wait
	[ "$output" = ENOSPC ]
	[ "$(tfs_tier "$MNT/pinned")" = device ]
	# (a move to the device comes by way of host memory, where it stays)
	[ "$(tfs_tier "$MNT/f")" != device ]
}

@test "prefetch refuses bad arguments and a descriptor it may not read through" {
	on_disk "$MNT/f"
	"$PY" - "$MNT/f" <<'PYEOF'
import errno, fcntl, os, struct, sys
S = struct.Struct("=IIIIQQII3Q")
IOC = (3 << 30) | (S.size << 16) | (0xF7 << 8) | 8
def call(fd, *f):
    try:
        fcntl.ioctl(fd, IOC, bytearray(S.pack(*f)), True)
        return 0
    except OSError as e:
        return e.errno
fd = os.open(sys.argv[1], os.O_RDONLY)
ok = (1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0)
assert call(fd, 2, *ok[1:]) == errno.EINVAL            # version
assert call(fd, 1, 2, *ok[2:]) == errno.EINVAL         # unknown flag
assert call(fd, 1, 0, 3, *ok[3:]) == errno.EINVAL      # no such tier
assert call(fd, 1, 0, 1, 1, *ok[4:]) == errno.EINVAL   # state is out
assert call(fd, *ok[:4], 1 << 62, 1 << 62, *ok[6:]) == errno.EINVAL
assert call(fd, *ok[:-1], 1) == errno.EINVAL           # reserved
os.close(fd)
fd = os.open(sys.argv[1], os.O_WRONLY)
assert call(fd, *ok) == errno.EBADF
os.close(fd)
PYEOF
	[ "$(tfs_tier "$MNT/f")" = disk ]
	[ "$(tfs_stat prefetch.queued)" -eq 0 ]
}

@test "a mount without a device tier refuses a prefetch to it at once" {
	tfs_unmount
	tfs_mount -o device_backend=none,host_limit=8M
	on_disk "$MNT/f"
	run pf ioctl "$MNT/f" device
	[ "$output" = ENODEV ]
	[ "$(tfs_stat prefetch.queued)" -eq 0 ]
}

@test "files deleted while their prefetch is queued are taken out of the queue" {
	local i
	for i in $(seq 1 12); do on_disk "$MNT/f$i" 256K; done
	for i in $(seq 1 12); do
		pf ioctl "$MNT/f$i" host >/dev/null
		rm "$MNT/f$i"
	done
	tfs_wait_for tfs_stat_is prefetch.pending -eq 0
	tfs_wait_for tfs_stat_is prefetch.active -eq 0
	local q d f c
	q=$(tfs_stat prefetch.queued)
	d=$(tfs_stat prefetch.done)
	f=$(tfs_stat prefetch.failed)
	c=$(tfs_stat prefetch.cancelled)
	[ "$q" -eq 12 ]
	[ $((d + f + c)) -eq 12 ]
	[ "$(tfs_stat files)" -eq 0 ]
	kill -0 "$TFS_PID"
}

# posix_fadvise(WILLNEED) has no FUSE request of its own: the kernel reads
# ahead, and those READs reach the daemon as reads do, which bring the file
# up as [policy] unspill says (the device, by default).
@test "posix_fadvise(WILLNEED) and madvise(MADV_WILLNEED) bring a spilled file up" {
	local hint
	for hint in fadvise madvise; do
		on_disk "$MNT/$hint"
		pf "$hint" "$MNT/$hint"
		tfs_wait_for tfs_tier_is "$MNT/$hint" != disk
	done
	[ "$(tfs_stat disk.reads)" -eq 0 ]
	[ "$(tfs_stat host.reads)" -ge 2 ]
	[ "$(tfs_stat prefetch.queued)" -eq 0 ]
}

@test "with [policy] unspill none, WILLNEED brings nothing up, and TFS_IOC_PREFETCH still does" {
	tfs_unmount
	tfs_mount -o device_backend=sim,device_limit=4M,host_limit=8M,policy_unspill=none
	on_disk "$MNT/f"
	pf fadvise "$MNT/f"
	tfs_wait_for tfs_stat_is disk.reads -ge 1
	[ "$(tfs_tier "$MNT/f")" = disk ]
	run pf ioctl "$MNT/f" host wait
	[ "${lines[0]%% *}" = done ]
	[ "$(tfs_tier "$MNT/f")" = host ]
}

@test "tierfsctl prefetch queues a tree and returns; --wait waits for it, drawing progress" {
	mkdir -p "$MNT/d/e"
	on_disk "$MNT/d/a" 100K
	on_disk "$MNT/d/e/b" 100K
	on_disk "$MNT/d/e/c" 100K
	run ctl prefetch --wait --tier host --progress "$MNT/d"
	[ "$status" -eq 0 ]
	[[ "$output" == *"prefetch ["*"] 3/3 files"* ]]
	[[ "$output" == *"prefetch: 3 files (300.0 KiB) moved to host" ]]
	[ "$(tfs_tier "$MNT/d/a")" = host ]
	[ "$(tfs_tier "$MNT/d/e/c")" = host ]
	run ctl prefetch "$MNT/d"
	[ "$status" -eq 0 ]
	[ "$output" = "prefetch: 3 files (300.0 KiB) queued for device" ]
	tfs_wait_for tfs_tier_is "$MNT/d/e/b" = device
	tfs_wait_for tfs_tier_is "$MNT/d/a" = device
	run ctl prefetch --wait "$MNT/d"
	[ "$output" = "prefetch: 0 files (0 B) moved to device, 3 already there or higher" ]
	run ctl spill --wait "$MNT/d/a"
	[ "$status" -eq 2 ]
}

@test "tierfs.device.prefetch() waits as the ioctl does and raises the move's error" {
	on_disk "$MNT/f"
	on_disk "$MNT/big" 6M
	PYTHONPATH="$BATS_TEST_DIRNAME/../../python" run "$PY" - "$MNT" <<'PYEOF'
import errno, sys
import tierfs.device as d
m = sys.argv[1]
print(d.prefetch(m + "/f", "host", wait=True), d.prefetch(m + "/f", "host"))
try:
    d.prefetch(m + "/big", wait=True)
except OSError as e:
    print(errno.errorcode[e.errno])
PYEOF
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "done there" ]
	[ "${lines[1]}" = ENOSPC ]
	[ "$(tfs_tier "$MNT/f")" = host ]
}
