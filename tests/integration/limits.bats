#!/usr/bin/env bats
# Limits: every byte a tier holds is charged to it before it is written,
# a write past the limits gets ENOSPC with the bytes before it intact, and
# what df, stat and tierfsctl report agrees with what the tiers hold.

load helpers

setup() {
	tfs_setup
}

teardown() {
	tfs_unmount
	if [ -n "${SMALL:-}" ] && mountpoint -q "$SMALL"; then
		umount "$SMALL"
	fi
	if [ -n "${CG:-}" ] && [ -d "$CG" ]; then
		rmdir "$CG"
	fi
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

# refused MESSAGE OPTS: the daemon, with -o OPTS, exits non-zero with
# MESSAGE (a substring) as its one line, and leaves no mount.
refused() {
	run timeout 20 "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,$2"
	echo "status $status, output: $output"
	[ "$status" -ne 0 ]
	[ "$status" -ne 124 ]
	[[ "$output" == *"$1"* ]]
	[ "$(printf '%s\n' "$output" | grep -c .)" -eq 1 ]
	! tfs_mounted "$MNT"
}

# human BYTES: the size as the daemon's messages write it.
human() {
	awk -v v="$1" 'BEGIN { split("B KiB MiB GiB TiB PiB", u, " ");
		i = 1; while (v >= 1024 && i < 6) { v /= 1024; i++ }
		if (i == 1) printf "%d B", v; else printf "%.1f %s", v, u[i] }'
}

@test "every kind of limit above what the machine has is refused with what it has, and overcommit allows it" {
	local ram
	ram=$(($(getconf _PHYS_PAGES) * $(getconf PAGE_SIZE)))
	refused "-o host_limit: 97.7 PiB is more than the $(human "$ram") of RAM this machine has (policy_overcommit=yes allows it)" \
		device_backend=none,host_limit=99999T
	refused "-o device_limit: 1.0 TiB is more than the " \
		device_backend=sim,device_limit=1T,host_limit=8M
	[[ "$output" == *"of host memory the sim device can have"* ]]
	# the disk: more than is free on the filesystem under disk_path
	mkdir "$TFS_TMP/small"
	mount -t tmpfs -o size=8M tmpfs "$TFS_TMP/small"
	SMALL=$TFS_TMP/small
	run timeout 20 "$TIERFS_BIN" "$MNT" -f -o \
		"disk_path=$SMALL,device_backend=none,host_limit=8M,disk_limit=64M"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"-o disk_limit: 64.0 MiB is more than the 8.0 MiB free on '$SMALL' (policy_overcommit=yes allows it)"* ]]
	# a config file names its line
	printf '[host]\nlimit = 99999T\n' >"$TFS_TMP/c.conf"
	refused "$TFS_TMP/c.conf:2: limit: 97.7 PiB is more than the " \
		"config=$TFS_TMP/c.conf,device_backend=none"
	# zero is no limit either
	refused "-o host_limit: '0': a limit of zero is not allowed" host_limit=0
	# with overcommit each one mounts, at the limit asked for
	tfs_mount -o device_backend=sim,device_limit=1T,host_limit=99999T,policy_overcommit=yes
	[ "$(tstat host.limit)" -eq $((99999 << 40)) ]
	[ "$(tstat device.limit)" -eq $((1 << 40)) ]
	tfs_unmount
	SPILL=$SMALL tfs_mount -o device_backend=none,host_limit=8M,disk_limit=64M,policy_overcommit=yes
	[ "$(tstat disk.limit)" -eq $((64 << 20)) ]
	tfs_unmount
	umount "$SMALL"
	SMALL=
}

@test "a reload asking for more than the machine has changes nothing and says why" {
	printf '[host]\nlimit = 8M\n' >"$TFS_TMP/c.conf"
	tfs_mount -o "config=$TFS_TMP/c.conf,device_backend=none"
	[ "$(tstat host.limit)" -eq $((8 << 20)) ]
	printf '[host]\nlimit = 99999T\n' >"$TFS_TMP/c.conf"
	kill -HUP "$TFS_PID"
	local i
	for i in $(seq 1 200); do
		[ -n "$(tstat reload_error)" ] && break
		sleep 0.05
	done
	tstat reload_error
	[[ "$(tstat reload_error)" == *"c.conf:2: limit: 97.7 PiB is more than the "*"of RAM this machine has"* ]]
	[ "$(tstat host.limit)" -eq $((8 << 20)) ]
}

@test "the log says where each limit came from: defaults from RAM and free disk, or the option" {
	tfs_mount -o device_backend=sim
	cat "$LOG"
	local ram
	ram=$(($(getconf _PHYS_PAGES) * $(getconf PAGE_SIZE)))
	grep -F "host: limit $(human $((ram / 4))): 25% of the $(human "$ram") of RAM" "$LOG"
	grep -E "device: limit 1.0 GiB: the sim device's size" "$LOG"
	grep -E "disk: limit .*: (50% of the .* filesystem of|the .* free on) '$SPILL'" "$LOG"
	[ "$(tstat host.limit)" -eq $((ram / 4)) ]
	tfs_unmount
	tfs_mount -o device_backend=none,host_limit=8M,disk_limit=16M
	grep -F "host: limit 8.0 MiB: from -o host_limit" "$LOG"
	grep -F "disk: limit 16.0 MiB: from -o disk_limit" "$LOG"
}

@test "the default disk limit is half the filesystem, or its free space less 5% of its size when that is less" {
	mkdir "$TFS_TMP/small"
	mount -t tmpfs -o size=8M tmpfs "$TFS_TMP/small"
	SMALL=$TFS_TMP/small
	SPILL=$SMALL tfs_mount -o device_backend=none,host_limit=8M
	[ "$(tstat disk.limit)" -eq $((4 << 20)) ]
	tfs_unmount
	# 6 MiB taken by someone else: 2 MiB free, 5% of 8 MiB kept
	head -c 6M /dev/zero >"$SMALL/other"
	SPILL=$SMALL tfs_mount -o device_backend=none,host_limit=8M
	local free keep
	free=$(($(stat -f -c '%a * %S' "$SMALL")))
	keep=$((8 * 1048576 / 20))
	echo "free $free"
	cat "$LOG"
	# within a block of what was free when it started
	[ "$(tstat disk.limit)" -le $((free - keep + 4096)) ]
	[ "$(tstat disk.limit)" -ge $((free - keep - 8192)) ]
	grep -F "free on '$SMALL' less 409.6 KiB (5% of its size) left to others" "$LOG"
	tfs_unmount
	umount "$SMALL"
	SMALL=
}

# require_memory_cgroup BYTES: a child memory cgroup of our own limited to BYTES,
# in CG (v1 memory.limit_in_bytes, or v2 memory.max); skips the test with
# the reason when none can be made.
require_memory_cgroup() {
	local name=tfs-limits-$$-$BATS_TEST_NUMBER
	if [ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]; then
		CG=/sys/fs/cgroup/memory/$name
		mkdir "$CG" 2>/dev/null ||
			skip "cannot make a memory cgroup in /sys/fs/cgroup/memory"
		echo "$1" >"$CG/memory.limit_in_bytes" ||
			skip "cannot limit the memory cgroup '$CG'"
	elif grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
		CG=/sys/fs/cgroup/$name
		mkdir "$CG" 2>/dev/null ||
			skip "cannot make a memory cgroup in /sys/fs/cgroup"
		echo "$1" >"$CG/memory.max" ||
			skip "cannot limit the memory cgroup '$CG'"
	else
		skip "no memory cgroup controller (v1 or v2) to make a group in"
	fi
}

@test "in a child memory cgroup of 256 MiB without host_limit: 1 GiB written, nothing killed, every byte intact" {
	require_memory_cgroup $((256 << 20))
	# The daemon joins the group before it starts.
	(echo "$BASHPID" >"$CG/cgroup.procs" &&
		exec "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,device_backend=none" 2>"$LOG") &
	TFS_PID=$!
	local i
	for i in $(seq 1 200); do
		mountpoint -q "$MNT" && break
		sleep 0.05
	done
	mountpoint -q "$MNT" || { cat "$LOG"; false; }
	cat "$LOG"
	grep -q "^$TFS_PID\$" "$CG/cgroup.procs"
	# half the group's limit, not a quarter of RAM
	[ "$(tstat host.limit)" -eq $((128 << 20)) ]
	grep -F "host: limit 128.0 MiB: half the 256.0 MiB its memory cgroup '/${CG##*/}' allows" "$LOG"
	# and more than the group allows is refused
	mkdir "$TFS_TMP/mnt2"
	run timeout 20 sh -c 'echo $$ >"$1/cgroup.procs" && exec "$2" "$3" -f -o "disk_path=$4,device_backend=none,host_limit=512M"' \
		sh "$CG" "$TIERFS_BIN" "$TFS_TMP/mnt2" "$SPILL"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"-o host_limit: 512.0 MiB is more than the 256.0 MiB its memory cgroup '/${CG##*/}' allows"* ]]
	# 1 GiB in 16 files of 64 MiB
	head -c 64M /dev/urandom >"$TFS_TMP/src"
	for i in $(seq -w 1 16); do
		dd if="$TFS_TMP/src" of="$MNT/f$i" bs=1M conv=fsync status=none
		kill -0 "$TFS_PID"
	done
	local rss
	rss=$(awk '/^VmRSS/ { print $2 * 1024 }' "/proc/$TFS_PID/status")
	echo "daemon RSS $rss"
	getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT"
	[ "$rss" -lt $((256 << 20)) ]
	for i in $(seq -w 1 16); do
		cmp "$TFS_TMP/src" "$MNT/f$i"
	done
	kill -0 "$TFS_PID"
	within_limits
	[ "$(tstat disk.used)" -ge $((800 << 20)) ]
}

@test "df agrees with tierfsctl status at every step of a random workload, and st_blocks is the stored size" {
	tfs_mount -o device_backend=sim,device_limit=4M,host_limit=8M,disk_limit=64M
	# The first 100 of the same steps under the sanitizers (tfs_scale):
	# each check starts tierfsctl twice, some 0.15 s of CPU sanitized.
	/usr/bin/python3 - "$MNT" "$TIERFSCTL_BIN" "$(tfs_scale 300 100)" <<'PY'
import json, os, random, subprocess, sys
mnt, ctl, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(12)

def status():
    j = json.loads(subprocess.check_output([ctl, "status", "--json", mnt]))
    t = j["tiers"]
    return (sum(t[x]["used"] for x in t), sum(t[x]["limit"] for x in t))

def df():
    # size, used, free (f_bfree: what all tiers leave) and avail
    # (f_bavail: the largest file one writer can make), as df takes them
    out = subprocess.check_output(["stat", "-f", "-c", "%S %b %f %a",
                                   mnt]).decode().split()
    bs, blocks, bfree, bavail = (int(x) for x in out)
    return (blocks * bs, (blocks - bfree) * bs, bfree * bs, bavail * bs)

def check(step, what):
    # The spiller may move a buffer between two samples: take df between
    # two equal status samples.
    for _ in range(50):
        a = status()
        size, used, free, avail = df()
        if status() == a:
            break
    else:
        raise SystemExit("step %d: usage never settled" % step)
    u, lim = a
    ok = (used - 4096 < u <= used and size == used + free and
          abs(size - max(lim, u)) < 8192 and 0 <= avail <= free)
    if not ok:
        raise SystemExit("step %d (%s): df size %d used %d free %d "
                         "avail %d, tierfsctl used %d limit %d" %
                         (step, what, size, used, free, avail, u, lim))

def data(n):
    k = rng.random()
    if k < 0.4:
        return rng.randbytes(n)
    if k < 0.7:
        return (b"tierfs limits %d\n" % rng.randrange(1000)) * (n // 18 + 1)
    return bytes(n)

names = ["f%d" % i for i in range(12)]
for step in range(steps):
    name = os.path.join(mnt, rng.choice(names))
    k = rng.random()
    if k < 0.35:
        n = rng.choice((0, 1, 100, 4095, 4096, 70000, 1 << 20,
                        rng.randrange(3 << 20)))
        off = rng.choice((0, 0, rng.randrange(2 << 20)))
        what = "write %s %d at %d" % (name, n, off)
        try:
            with open(name, "r+b" if os.path.exists(name) else "wb") as f:
                f.seek(off)
                f.write(data(n)[:n])
        except OSError as e:
            what += " (%s)" % e.strerror
    elif k < 0.5:
        n = rng.randrange(3 << 20)
        what = "truncate %s %d" % (name, n)
        if os.path.exists(name):
            os.truncate(name, n)
    elif k < 0.6:
        what = "unlink %s" % name
        if os.path.exists(name):
            os.unlink(name)
    elif k < 0.85:
        tier = rng.choice(("device", "host", "disk"))
        what = "move %s to %s" % (name, tier)
        if os.path.exists(name):
            try:
                os.setxattr(name, "user.tierfs.tier", tier.encode())
            except OSError as e:
                what += " (%s)" % e.strerror
    else:
        what = "read %s" % name
        if os.path.exists(name):
            with open(name, "rb") as f:
                f.read()
    check(step, what)
    # st_blocks is the stored size of the file's tier (asked of the
    # daemon: the kernel may cache attributes for a second)
    for n in names:
        p = os.path.join(mnt, n)
        if os.path.exists(p):
            # between two equal stored sizes: the spiller may move it
            for _ in range(20):
                stored = int(os.getxattr(p, "user.tierfs.stored_size"))
                blocks = int(subprocess.check_output(
                    ["stat", "--cached=never", "-c", "%b", p]))
                if stored == int(os.getxattr(p, "user.tierfs.stored_size")):
                    break
            if blocks != (stored + 511) // 512:
                raise SystemExit("step %d: %s st_blocks %d, stored_size %d"
                                 % (step, n, blocks, stored))
print("%d steps, df and tierfsctl agreed at each" % steps)
PY
	within_limits
}
