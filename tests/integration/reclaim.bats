#!/usr/bin/env bats
# Giving GPU memory back: TFS_IOC_RECLAIM through tierfsctl reclaim and
# Python, and [device] reserve, with the sim backend's test hook standing in
# for another process that takes device memory (TFS_SIM_CLAIM).

load helpers

PY=/usr/bin/python3

setup() {
	tfs_setup
	export PYTHONPATH=$BATS_TEST_DIRNAME/../../python
	unset TFS_SIM_CLAIM
}

teardown() {
	tfs_teardown
}

# mkfiles N SIZE: N files $MNT/fI of SIZE random bytes, copies in $TFS_TMP.
mkfiles() {
	local i
	for i in $(seq 1 "$1"); do
		head -c "$2" /dev/urandom >"$TFS_TMP/f$i"
		cp "$TFS_TMP/f$i" "$MNT/f$i"
	done
}

tier_of() {
	getfattr --absolute-names --only-values -n user.tierfs.tier "$1"
}

# One key of the mount's stats.
stat_of() {
	getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT" |
		sed -n "s/^$1=//p"
}

same_files() {
	local i
	for i in $(seq 1 "$1"); do
		cmp "$TFS_TMP/f$i" "$MNT/f$i"
	done
}

on_device() {
	local i n=0
	for i in $(seq 1 "$1"); do
		if [ "$(tier_of "$MNT/f$i")" = device ]; then
			n=$((n + 1))
		fi
	done
	echo $n
}

# wait_for 'SHELL CONDITION': evaluate it until it holds, for up to 10 s
# (the machine is busy).
wait_for() {
	local i
	for i in $(seq 1 200); do
		eval "$1" && return 0
		sleep 0.05
	done
	echo "not within 10 s: $1" >&2
	return 1
}

@test "reclaim frees at least the bytes asked, and the files stay identical" {
	tfs_mount -o device_backend=sim,device_limit=64M,host_limit=256M
	mkfiles 6 $((8 << 20))
	[ "$(on_device 6)" = 6 ]
	local before after
	before=$(stat_of device.used)
	run "$TIERFSCTL_BIN" reclaim "$MNT" 20M
	[ "$status" -eq 0 ]
	[[ "$output" == "gpu 0: gave back "* ]]
	after=$(stat_of device.used)
	[ $((before - after)) -ge $((20 << 20)) ]
	# The coldest went first, and only as many as it took.
	[ "$(on_device 6)" = 3 ]
	[ "$(tier_of "$MNT/f1")" = host ]
	[ "$(tier_of "$MNT/f6")" = device ]
	[ "$(stat_of device.reclaims)" = 1 ]
	[ "$(stat_of device.reclaimed_bytes)" -eq $((before - after)) ]
	same_files 6
}

@test "reclaim on any descriptor of the mount: a file, a directory, the root" {
	tfs_mount -o device_backend=sim,device_limit=64M,host_limit=256M
	mkdir "$MNT/d"
	mkfiles 3 $((4 << 20))
	chmod 0400 "$MNT/f2"
	run "$PY" -c '
import sys, tierfs.device as d
m = sys.argv[1]
print(d.reclaim(m + "/d", 1))
print(d.reclaim(m + "/f2", 1))
print(d.reclaim(m, 1 << 30))
' "$MNT"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" -ge 1 ]
	[ "${lines[1]}" -ge 1 ]
	[ "${lines[2]}" -ge 1 ]
	[ "$(on_device 3)" = 0 ]
	[ "$(stat_of device.used)" = 0 ]
	same_files 3
}

@test "reclaim stops when nothing more can move: write-leased and pinned stay" {
	tfs_mount -o device_backend=sim,device_limit=64M,host_limit=256M
	mkfiles 4 $((4 << 20))
	setfattr -n user.tierfs.pin -v 1 "$MNT/f1"
	"$PY" -c '
import sys, time, tierfs.device as d
b = d.open(sys.argv[1], write=True)
print("ready", flush=True)
time.sleep(60)
' "$MNT/f2" >"$TFS_TMP/hold" &
	TFS_BG+=($!)
	wait_for 'grep -q ready "$TFS_TMP/hold"'
	run "$TIERFSCTL_BIN" reclaim "$MNT" 1G
	[ "$status" -eq 1 ]
	[[ "$output" == *"gave back 8.0 MiB of 1.0 GiB"* ]]
	[ "$(tier_of "$MNT/f1")" = device ]
	[ "$(tier_of "$MNT/f2")" = device ]
	[ "$(tier_of "$MNT/f3")" = host ]
	[ "$(tier_of "$MNT/f4")" = host ]
	# Nothing movable left: 0 given back, still not an error of the ioctl.
	run "$PY" -c 'import sys, tierfs.device as d; print(d.reclaim(sys.argv[1], 1 << 20))' "$MNT"
	[ "$output" = 0 ]
	same_files 4
}

@test "reclaim: bad requests are refused and change nothing" {
	tfs_mount -o device_backend=sim,device_limit=64M
	mkfiles 1 $((1 << 20))
	run "$TIERFSCTL_BIN" reclaim "$MNT" 0
	[ "$status" -eq 2 ]
	[[ "$output" == *"'0': not a size"* ]]
	run "$TIERFSCTL_BIN" reclaim "$MNT" 12Q
	[ "$status" -eq 2 ]
	run "$TIERFSCTL_BIN" reclaim --gpu x "$MNT" 1M
	[ "$status" -eq 2 ]
	[[ "$output" == *"--gpu 'x': not a GPU number"* ]]
	run "$TIERFSCTL_BIN" reclaim --gpu 3 "$MNT" 1M
	[ "$status" -eq 1 ]
	[[ "$output" == *"does not use gpu 3"* ]]
	run "$TIERFSCTL_BIN" reclaim "$MNT"
	[ "$status" -eq 2 ]
	# The ABI's rules: version, unknown flags, reserved words, freed in.
	run "$PY" -c '
import errno, fcntl, os, sys
import tierfs.device as d
fd = os.open(sys.argv[1], os.O_RDONLY)
def ask(*f):
    try:
        fcntl.ioctl(fd, d.IOC_RECLAIM, bytearray(d._RECLAIM.pack(*f)), True)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
print(ask(2, 0, -1, 0, 1, 0, b"", 0, 0, 0, 0))
print(ask(1, 2, -1, 0, 1, 0, b"", 0, 0, 0, 0))
print(ask(1, 0, -1, 0, 1, 0, b"", 0, 0, 0, 9))
print(ask(1, 0, -1, 0, 1, 5, b"", 0, 0, 0, 0))
print(ask(1, 0, -2, 0, 1, 0, b"", 0, 0, 0, 0))
print(ask(1, 0, -1, 0, 1, 0, b"x", 0, 0, 0, 0))
print(ask(1, 1, 0, 0, 1, 0, b"\x01" * 16, 0, 0, 0, 0))
' "$MNT"
	[ "${lines[0]}" = EINVAL ]
	[ "${lines[1]}" = EINVAL ]
	[ "${lines[2]}" = EINVAL ]
	[ "${lines[3]}" = EINVAL ]
	[ "${lines[4]}" = EINVAL ]
	[ "${lines[5]}" = EINVAL ]
	[ "${lines[6]}" = ENXIO ]
	[ "$(tier_of "$MNT/f1")" = device ]
	[ "$(stat_of device.reclaims)" = 0 ]
	same_files 1
}

@test "reclaim without a device tier says so" {
	tfs_mount -o device_backend=none
	run "$TIERFSCTL_BIN" reclaim "$MNT" 1M
	[ "$status" -eq 1 ]
	[[ "$output" == *"has no device tier"* ]]
}

@test "the RMM failure callback retries while tierfs gives memory back" {
	tfs_mount -o device_backend=sim,device_limit=64M,host_limit=256M
	mkfiles 3 $((4 << 20))
	run "$PY" -c '
import sys, tierfs.device as d
cb = d.rmm_failure_callback(sys.argv[1])
print(cb(4 << 20), cb(4 << 20), cb(4 << 20), cb(4 << 20))
print(d.rmm_failure_callback(sys.argv[1], gpu=7)(1))
print(d.rmm_failure_callback("/")(1))
' "$MNT"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "True True True False" ]
	[ "${lines[1]}" = False ]
	[ "${lines[2]}" = False ]
	[ "$(on_device 3)" = 0 ]
	[ "$(stat_of device.reclaims)" = 4 ]
	same_files 3
}

@test "reserve: another process claims device memory and tierfs yields" {
	export TFS_SIM_CLAIM=$TFS_TMP/claim
	tfs_mount -o device_backend=sim,device_limit=64M,device_reserve=8M,host_limit=256M
	mkfiles 5 $((10 << 20))
	[ "$(stat_of device.used)" -eq $((50 << 20)) ]
	[ "$(stat_of device.yields)" = 0 ]
	[ "$(stat_of device.reserve)" -eq $((8 << 20)) ]
	# Capacity 64M - claimed 30M - reserve 8M leaves tierfs 26M.
	echo 30M >"$TFS_TMP/claim"
	wait_for '[ "$(stat_of device.used)" -le $((26 << 20)) ]'
	[ "$(stat_of device.yields)" -ge 1 ]
	[ "$(stat_of device.yield_bytes)" -ge $((24 << 20)) ]
	[ "$(stat_of device.others)" -eq $((30 << 20)) ]
	[ "$(stat_of device.room)" -eq $((26 << 20)) ]
	grep -q "device: yielded [0-9]* bytes to other processes" "$LOG"
	same_files 5
	# While the pressure lasts, new files stay under the room too.
	head -c $((10 << 20)) /dev/urandom >"$TFS_TMP/f6"
	cp "$TFS_TMP/f6" "$MNT/f6"
	[ "$(stat_of device.used)" -le $((26 << 20)) ]
	# The other process is gone: the tier may fill to its limit again.
	rm "$TFS_TMP/claim"
	wait_for '[ "$(stat_of device.room)" -eq $((64 << 20)) ]'
	setfattr -n user.tierfs.tier -v device "$MNT/f1"
	setfattr -n user.tierfs.tier -v device "$MNT/f2"
	setfattr -n user.tierfs.tier -v device "$MNT/f3"
	[ "$(stat_of device.used)" -gt $((26 << 20)) ]
	same_files 6
}

@test "reserve: a device nobody else uses keeps its whole limit" {
	export TFS_SIM_CLAIM=$TFS_TMP/claim
	tfs_mount -o device_backend=sim,device_limit=64M,host_limit=256M,device_poll_ms=20
	# The default reserve is 10% of the device.
	[ "$(stat_of device.reserve)" -eq 6710886 ]
	# 54M: below the spiller's target (85%), above 64M - reserve.
	mkfiles 6 $((9 << 20))
	wait_for '[ "$(stat_of device.free)" -eq $((10 << 20)) ]'
	# Several more polls: nothing is spilled to keep the reserve.
	sleep 0.2
	[ "$(on_device 6)" = 6 ]
	[ "$(stat_of device.yields)" = 0 ]
	[ "$(stat_of device.others)" = 0 ]
}

@test "reserve: write-leased buffers cannot yield, and that is said once" {
	export TFS_SIM_CLAIM=$TFS_TMP/claim
	tfs_mount -o device_backend=sim,device_limit=32M,device_reserve=0,host_limit=256M
	mkfiles 2 $((8 << 20))
	"$PY" -c '
import sys, time, tierfs.device as d
a = d.open(sys.argv[1], write=True)
b = d.open(sys.argv[2], write=True)
print("ready", flush=True)
time.sleep(60)
' "$MNT/f1" "$MNT/f2" >"$TFS_TMP/hold" &
	TFS_BG+=($!)
	wait_for 'grep -q ready "$TFS_TMP/hold"'
	echo 28M >"$TFS_TMP/claim"
	wait_for 'grep -q "cannot yield to other processes" "$LOG"'
	sleep 0.5
	[ "$(grep -c "cannot yield to other processes" "$LOG")" = 1 ]
	[ "$(on_device 2)" = 2 ]
	[ "$(stat_of device.yields)" = 0 ]
	same_files 2
}

@test "reserve and poll_ms: bad values are refused" {
	run "$TIERFS_BIN" "$MNT" -f -o device_backend=sim,device_reserve=12Q
	[ "$status" -ne 0 ]
	[[ "$output" == *"device_reserve"* ]]
	run "$TIERFS_BIN" "$MNT" -f -o device_backend=sim,device_poll_ms=5
	[ "$status" -ne 0 ]
	[[ "$output" == *"device_poll_ms"* ]]
	run "$TIERFS_BIN" "$MNT" -f -o device_backend=sim,device_reserve=150%
	[ "$status" -ne 0 ]
	! tfs_mounted "$MNT"
}
