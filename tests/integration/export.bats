#!/usr/bin/env bats
# Device export through the sim backend: TFS_IOC_EXPORT and friends, driven
# through libtierfs by export_client (tests/integration/export_client.c).
#
# EXPORT_CLIENT may point at a built export_client; by default the one next
# to TIERFS_BIN's build (client/lib/export_client) is used, else it is
# compiled here from the sources.
#
# TFS_EXPORT_BACKEND=cuda runs the same tests on the cuda backend (the
# shm-only ones skip): tests/gpu/mock_check.sh does that with a daemon and
# client linked to tests/gpu/cuda_mock.c.
# tests/run: alone (every daemon that starts sweeps a dead one's /dev/shm)
: "${TFS_EXPORT_BACKEND:=sim}"

load helpers

setup_file() {
	local top=$BATS_TEST_DIRNAME/../..
	local built
	built=$(dirname "$TIERFS_BIN")/../client/lib/export_client
	if [ -z "${EXPORT_CLIENT:-}" ] && [ -x "$built" ]; then
		EXPORT_CLIENT=$built
	fi
	if [ -z "${EXPORT_CLIENT:-}" ]; then
		EXPORT_CLIENT=$BATS_FILE_TMPDIR/export_client
		cc -std=gnu11 -D_GNU_SOURCE -Wall -O1 \
			-I "$top/include" -I "$top/client" -I "$top/examples" \
			"$top/client/libtierfs.c" \
			"$top/tests/integration/export_client.c" \
			-o "$EXPORT_CLIENT" -lrt
	fi
	export EXPORT_CLIENT
}

setup() {
	HOLDERS=()
	tfs_setup
	tfs_mount -o device_backend=$TFS_EXPORT_BACKEND,device_limit=64M,host_limit=64M
}

teardown() {
	local pid
	for pid in "${HOLDERS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	tfs_teardown
}

require_sim_export() {
	[ "$TFS_EXPORT_BACKEND" = sim ] ||
		skip "shared-memory export: sim backend only"
}

# The handle type an export of this backend gives.
handle_type() {
	case $TFS_EXPORT_BACKEND in
	sim) echo 2 ;;
	cuda) echo 1 ;;
	esac
}

ec() {
	"$EXPORT_CLIENT" "$@"
}

# hold FILE OUT [rw]: map FILE in a background export_client until stopped
# with unhold; waits until the map is up. Sets HOLD_PID.
hold() {
	local file=$1 out=$2
	"$EXPORT_CLIENT" hold "$file" ${3:-} >"$out" 2>&1 &
	HOLD_PID=$!
	HOLDERS+=("$HOLD_PID")
	tfs_wait_line "$out" ready "$HOLD_PID"
}

# unhold PID OUT: stop a holder; it closes its map and says so.
unhold() {
	kill -TERM "$1"
	wait "$1"
	grep -q '^closed$' "$2"
}

# A file of N random bytes at $MNT/NAME with a copy at $TFS_TMP/NAME.
mkfile() {
	head -c "$2" /dev/urandom >"$TFS_TMP/$1"
	cp "$TFS_TMP/$1" "$MNT/$1"
}

@test "export maps the file's bytes" {
	mkfile f 3000017
	ec cat "$MNT/f" >"$TFS_TMP/mapped" 2>"$TFS_TMP/err"
	grep -q "handle_type=$(handle_type) length=3000017" "$TFS_TMP/err"
	cmp "$TFS_TMP/f" "$TFS_TMP/mapped"
	cat "$MNT/f" | cmp - "$TFS_TMP/mapped"
}

@test "an export moves the buffer to the device tier" {
	mkfile f 1048576
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[ "$(tfs_tier "$MNT/f")" = disk ]
	ec cat "$MNT/f" >"$TFS_TMP/mapped"
	cmp "$TFS_TMP/f" "$TFS_TMP/mapped"
	[ "$(tfs_tier "$MNT/f")" = device ]
}

@test "writes through the mapping show in the file after commit" {
	mkfile f 2500000
	# Fill the kernel page cache first: commit must invalidate it.
	cmp "$TFS_TMP/f" "$MNT/f"
	ec fill "$MNT/f" 9
	ec pattern 2500000 9 >"$TFS_TMP/expected"
	cmp "$TFS_TMP/expected" "$MNT/f"
	cat "$MNT/f" | cmp - "$TFS_TMP/expected"
	# The committed bytes survive a spill and an unspill.
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	setfattr -n user.tierfs.tier -v host "$MNT/f"
	cmp "$TFS_TMP/expected" "$MNT/f"
}

@test "a descriptor that cached the bytes before a commit sees the committed ones" {
	mkfile f 1500000
	ec pattern 1500000 5 >"$TFS_TMP/expected"
	python3 - "$MNT/f" "$TFS_TMP/f" "$TFS_TMP/expected" "$TFS_TMP/fifo" <<'EOF' &
import os, sys, time
path, old, new, fifo = sys.argv[1:]
fd = os.open(path, os.O_RDONLY)
assert os.pread(fd, 1500000, 0) == open(old, "rb").read()
os.mkfifo(fifo)
with open(fifo) as f:
    f.read()
want = open(new, "rb").read()
# the kernel learns of the commit from the daemon's notification thread,
# a moment after the ioctl returned
for _ in range(400):
    if os.pread(fd, 1500000, 0) == want:
        print("ok")
        sys.exit(0)
    time.sleep(0.05)
sys.exit("still the old bytes through a descriptor opened before the commit")
EOF
	local py=$! i
	for i in $(seq 1 200); do
		[ -p "$TFS_TMP/fifo" ] && break
		sleep 0.05
	done
	ec fill "$MNT/f" 5
	echo go >"$TFS_TMP/fifo"
	wait "$py"
	cmp "$TFS_TMP/expected" "$MNT/f"
}

@test "commit bumps the generation and mtime" {
	mkfile f 65536
	touch -d '2001-01-01' "$MNT/f"
	local before
	before=$(stat -c %Y "$MNT/f")
	ec cat "$MNT/f" >/dev/null 2>"$TFS_TMP/err1"
	ec fill "$MNT/f" 3
	ec cat "$MNT/f" >/dev/null 2>"$TFS_TMP/err2"
	local g1 g2
	g1=$(sed -n 's/.*generation=//p' "$TFS_TMP/err1")
	g2=$(sed -n 's/.*generation=//p' "$TFS_TMP/err2")
	[ "$g2" -gt "$g1" ]
	[ "$(stat -c %Y "$MNT/f")" -gt "$before" ]
}

@test "a file leased for writing refuses to move with EBUSY and moves once closed" {
	mkfile f 1000000
	hold "$MNT/f" "$TFS_TMP/hold" rw
	[ "$(tfs_tier "$MNT/f")" = device ]
	run setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Device or resource busy"* ]]
	run ec ioctl "$MNT/f" move-disk
	[ "$output" = errno=EBUSY ]
	[ "$(tfs_tier "$MNT/f")" = device ]
	unhold "$HOLD_PID" "$TFS_TMP/hold"
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[ "$(tfs_tier "$MNT/f")" = disk ]
	cmp "$TFS_TMP/f" "$MNT/f"
}

@test "closing the map drops the lease" {
	mkfile f 100000
	ec cat "$MNT/f" >/dev/null
	[ "$(getfattr --only-values -n user.tierfs.pins "$MNT/f")" = 0 ]
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[ "$(tfs_tier "$MNT/f")" = disk ]
}

@test "export for writing on a read-only fd fails" {
	mkfile f 4096
	run ec ioctl "$MNT/f" export-write
	[ "$status" -eq 0 ]
	[[ "$output" =~ ^errno=(EBADF|EACCES|EPERM)$ ]]
	# ...while a read export on the same kind of fd works.
	run ec ioctl "$MNT/f" export
	[ "$output" = ok ]
}

@test "commit without a write export is refused" {
	mkfile f 4096
	run ec ioctl "$MNT/f" commit
	[[ "$output" =~ ^errno=(EPERM|EBADF)$ ]]
	cmp "$TFS_TMP/f" "$MNT/f"
}

@test "two processes export the same file at once" {
	mkfile f 2000000
	local sum
	sum=$(ec sum "$TFS_TMP/f")
	hold "$MNT/f" "$TFS_TMP/h1"
	local p1=$HOLD_PID
	hold "$MNT/f" "$TFS_TMP/h2" rw
	local p2=$HOLD_PID
	[ "$(awk '{print $4}' "$TFS_TMP/h1")" = "$sum" ]
	[ "$(awk '{print $4}' "$TFS_TMP/h2")" = "$sum" ]
	[ "$(getfattr --only-values -n user.tierfs.pins "$MNT/f")" -ge 2 ]
	# A third, short-lived map sees the same bytes.
	ec cat "$MNT/f" | cmp - "$TFS_TMP/f"
	unhold "$p1" "$TFS_TMP/h1"
	run setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[ "$status" -ne 0 ]
	unhold "$p2" "$TFS_TMP/h2"
	[ "$(getfattr --only-values -n user.tierfs.pins "$MNT/f")" = 0 ]
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	cmp "$TFS_TMP/f" "$MNT/f"
}

@test "malformed ioctls give EINVAL or ENOTTY" {
	mkfile f 4096
	run ec ioctl "$MNT/f" export-version
	[ "$output" = errno=EINVAL ]
	run ec ioctl "$MNT/f" export-reserved
	[ "$output" = errno=EINVAL ]
	run ec ioctl "$MNT/f" export-flags
	[ "$output" = errno=EINVAL ]
	run ec ioctl "$MNT/f" stat-version
	[ "$output" = errno=EINVAL ]
	run ec ioctl "$MNT/f" move-tier
	[ "$output" = errno=EINVAL ]
	run ec ioctl "$MNT/f" move-reserved
	[ "$output" = errno=EINVAL ]
	run ec ioctl "$MNT/f" unknown-cmd
	[ "$output" = errno=ENOTTY ]
	run ec ioctl "$MNT/f" wrong-size
	[[ "$output" =~ ^errno=(ENOTTY|EINVAL)$ ]]
	# Nothing leaked a lease, and the daemon still answers.
	[ "$(getfattr --only-values -n user.tierfs.pins "$MNT/f")" = 0 ]
	cmp "$TFS_TMP/f" "$MNT/f"
}

@test "the shm object is 0600, the daemon's, unguessable, and gone after release" {
	require_sim_export
	mkfile f 8192
	run ec shm "$MNT/f"
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" =~ ^name=/tierfs\.[0-9]+\.[0-9a-f]{32}$ ]]
	[ "${lines[1]}" = "mode=0600 uid=$(id -u)" ]
	[ "${lines[2]}" = "after release: gone" ]
}

@test "each map has its own shm object, gone when that map closes" {
	require_sim_export
	mkfile f 8192
	# The daemon's objects carry its pid (an mtime test races the clock).
	objs() { find /dev/shm -maxdepth 1 -name "tierfs.$TFS_PID.*" | wc -l; }
	hold "$MNT/f" "$TFS_TMP/h1"
	local p1=$HOLD_PID
	[ "$(objs)" -eq 1 ]
	hold "$MNT/f" "$TFS_TMP/h2"
	local p2=$HOLD_PID
	# A read map is a snapshot of its own.
	[ "$(objs)" -eq 2 ]
	hold "$MNT/f" "$TFS_TMP/h3" rw
	local p3=$HOLD_PID
	[ "$(objs)" -eq 3 ]
	unhold "$p1" "$TFS_TMP/h1"
	[ "$(objs)" -eq 2 ]
	unhold "$p3" "$TFS_TMP/h3"
	[ "$(objs)" -eq 1 ]
	unhold "$p2" "$TFS_TMP/h2"
	[ "$(objs)" -eq 0 ]
}

@test "alloc gives an empty file zeroed device memory" {
	ec alloc "$MNT/g" 1234567
	[ "$(stat -c %s "$MNT/g")" = 1234567 ]
	[ "$(tfs_tier "$MNT/g")" = device ]
	head -c 1234567 /dev/zero | cmp - "$MNT/g"
	run ec alloc "$MNT/g" 10
	[ "$status" -ne 0 ]
	[[ "$output" == *"File exists"* ]]
	ec fill "$MNT/g" 4
	ec pattern 1234567 4 | cmp - "$MNT/g"
}

@test "alloc's size shows under the writeback cache, where the kernel owns sizes" {
	tfs_unmount
	tfs_mount -o device_backend=$TFS_EXPORT_BACKEND,device_limit=64M,host_limit=64M,fs_writeback_cache=yes
	ec alloc "$MNT/g" 1234567
	[ "$(stat -c %s "$MNT/g")" = 1234567 ]
	head -c 1234567 /dev/zero | cmp - "$MNT/g"
	ec fill "$MNT/g" 4
	ec pattern 1234567 4 | cmp - "$MNT/g"
}

@test "shm objects a killed daemon left behind are removed by the next one" {
	require_sim_export
	mkfile f 8192
	hold "$MNT/f" "$TFS_TMP/hold"
	left=$(ls /dev/shm | grep "^tierfs\.$TFS_PID\." || true)
	[ -n "$left" ]
	kill -9 "$TFS_PID"
	wait "$TFS_PID" 2>/dev/null || true
	TFS_PID=
	kill -TERM "$HOLD_PID" 2>/dev/null || true
	wait "$HOLD_PID" 2>/dev/null || true
	HOLDERS=()
	fusermount3 -uz "$MNT"
	[ -e "/dev/shm/$left" ]
	tfs_mount -o device_backend=sim,device_limit=64M,host_limit=64M
	[ ! -e "/dev/shm/$left" ]
	grep -q "removed '/$left' left by a dead daemon" "$LOG"
}
