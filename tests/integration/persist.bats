#!/usr/bin/env bats
# Persistent mounts (disk_persist): a clean unmount and mount again brings
# everything back; after kill -9 every file whose fsync returned comes back
# with exactly its bytes, and nothing with mixed ones; damaged journals and
# directories of another version get a recovery of what checks out or a
# clear refusal; tierfsctl shows it all.
# tests/run: long (started first, so that the lanes end together)

load helpers

bats_require_minimum_version 1.5.0

setup() {
	tfs_setup
	MNT2=$TFS_TMP/mnt2
	mkdir -p "$MNT2"
	PIDS2=()
	CTL=$TIERFSCTL_BIN
}

teardown() {
	local p
	for p in "${PIDS2[@]}"; do
		kill "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	if grep -q " $MNT2 fuse" /proc/self/mounts; then
		fusermount3 -uz "$MNT2"
	fi
	# A daemon killed by a test leaves a mount that answers ENOTCONN.
	if grep -q " $MNT fuse" /proc/self/mounts && ! mountpoint -q "$MNT"; then
		fusermount3 -uz "$MNT"
	fi
	tfs_teardown
}

# The one persistent directory under $SPILL.
pdir() {
	local d
	for d in "$SPILL"/tierfs-persist.*; do
		echo "$d"
	done
}

# kill9: the daemon dies where it stands; its mount is cleared.
kill9() {
	kill -9 "$TFS_PID"
	wait "$TFS_PID" 2>/dev/null || true
	TFS_PID=
	fusermount3 -uz "$MNT"
}

# remount [OPTS]: a clean unmount, then a mount with the same options.
remount() {
	tfs_unmount
	tfs_mount "$@"
}

# What stat says of every name under the mount, inode numbers included;
# access times move with reads and are left out.
tree_state() {
	(cd "$MNT" && find . -printf '%p %i %y %m %n %U %G %s %T@ %C@ %l\n' |
		sort)
}

@test "unmount and mount again: tree, links, xattrs, modes, times, flags, pins, sparse and large files" {
	local opts=disk_persist=yes,device_backend=sim,device_limit=16M,host_limit=32M
	tfs_mount -o "$opts"
	mkdir -p "$MNT/t/sub" "$MNT/empty"
	echo hello >"$MNT/t/a"
	ln "$MNT/t/a" "$MNT/t/sub/a-link"
	ln -s ../a "$MNT/t/sub/sym"
	chown -h 1234:5678 "$MNT/t/sub/sym"
	setfattr -n user.color -v blue "$MNT/t/a"
	setfattr -n user.bin -v 0sAAEC/w== "$MNT/t/sub"
	setfattr -n trusted.overlay.opaque -v y "$MNT/empty"
	chmod 0640 "$MNT/t/a"
	chmod 1777 "$MNT/t/sub"
	chown 42:43 "$MNT/t/sub"
	mkfifo "$MNT/t/fifo"
	mknod "$MNT/t/null" c 1 3
	touch "$MNT/t/empty-file"
	# 50 MiB: above the host limit, written in place on disk; 8 MiB on
	# the (sim) device; a sparse file of 1 GiB with two bytes in it.
	head -c 50M /dev/urandom >"$TFS_TMP/big"
	head -c 8M /dev/urandom >"$TFS_TMP/dev"
	cp "$TFS_TMP/big" "$MNT/t/big"
	cp "$TFS_TMP/dev" "$MNT/t/dev"
	truncate -s 1G "$MNT/t/sparse"
	printf x | dd of="$MNT/t/sparse" bs=1 seek=500M conv=notrunc status=none
	printf y | dd of="$MNT/t/sparse" bs=1 seek=1023M conv=notrunc status=none
	touch -h -d '2001-02-03 04:05:06.123456789' "$MNT/t/a" "$MNT/t/sub/sym"
	chattr +a "$MNT/t/sub/a-link"
	chattr +d "$MNT/empty"
	setfattr -n user.tierfs.pin -v 1 "$MNT/t/dev"
	[ "$(tfs_tier "$MNT/t/dev")" = device ]
	[ "$(tfs_tier "$MNT/t/big")" = disk ]
	tree_state >"$TFS_TMP/before"
	getfattr -R -d -m - "$MNT" 2>/dev/null | grep -v '^$' >"$TFS_TMP/xa1"

	remount -o "$opts"
	grep -q "persist: [0-9]* files .* back from .* after a clean stop" "$LOG"
	tree_state >"$TFS_TMP/after"
	diff "$TFS_TMP/before" "$TFS_TMP/after"
	getfattr -R -d -m - "$MNT" 2>/dev/null | grep -v '^$' >"$TFS_TMP/xa2"
	diff "$TFS_TMP/xa1" "$TFS_TMP/xa2"
	# Files come back on disk and move up on their first read.
	[ "$(tfs_tier "$MNT/t/a")" = disk ]
	cmp "$TFS_TMP/big" "$MNT/t/big"
	cmp "$TFS_TMP/dev" "$MNT/t/dev"
	[ "$(cat "$MNT/t/sub/a-link")" = hello ]
	[ "$(readlink "$MNT/t/sub/sym")" = ../a ]
	[ "$(cat "$MNT/t/sub/sym")" = hello ]
	[ "$(dd if="$MNT/t/sparse" bs=1 skip=500M count=1 status=none)" = x ]
	[ "$(dd if="$MNT/t/sparse" bs=1 skip=1023M count=1 status=none)" = y ]
	[ "$(du -k "$MNT/t/sparse" | cut -f1)" -lt 4096 ]
	cmp <(head -c 1M "$MNT/t/sparse") <(head -c 1M /dev/zero)
	lsattr -d "$MNT/t/sub/a-link" | grep -q '^-----a'
	lsattr -d "$MNT/empty" | grep -q '^------d'
	[ "$(getfattr --only-values -n user.tierfs.pin "$MNT/t/dev")" = 1 ]
	# A pinned file stays where it came back: on disk.
	[ "$(tfs_tier "$MNT/t/dev")" = disk ]
	# New inodes take numbers none of the old ones had.
	touch "$MNT/new"
	[ "$(stat -c %i "$MNT/new")" -gt "$(cut -d' ' -f2 "$TFS_TMP/after" |
		sort -n | tail -1)" ]
}

@test "a second mount of the saved tree works on it like any other" {
	tfs_mount -o disk_persist=yes
	mkdir "$MNT/d"
	echo one >"$MNT/d/f"
	remount -o disk_persist=yes
	echo two >>"$MNT/d/f"
	mv "$MNT/d/f" "$MNT/d/g"
	rm -r "$MNT/d"/g "$MNT/d"
	mkdir "$MNT/e"
	echo three >"$MNT/e/h"
	remount -o disk_persist=yes
	[ ! -e "$MNT/d" ]
	[ "$(cat "$MNT/e/h")" = three ]
	# Only the live file has a spill file.
	[ "$(find "$(pdir)" -regex '.*/[0-9]+' | wc -l)" -eq 1 ]
}

# The copy loop: file c<CYCLE>_f<N> holds bytes a seed makes, is written,
# fsync'd and closed, and only then named in the log.
write_loop_py() {
	cat <<'PY'
import os, random, sys
mnt, log, cyc = sys.argv[1], sys.argv[2], int(sys.argv[3])
def content(c, i):
    r = random.Random(c * 100000 + i)
    return r.randbytes(r.choice([0, 10, 5000, 300000, 1100000, 2100000]))
if len(sys.argv) > 4:
    # check: every logged file intact, every other one intact or absent
    bad = n = 0
    for c in range(1, cyc + 1):
        for line in open(f"{log}.{c}"):
            n += 1
            name = line.split()[0]
            i = int(name.rsplit("_f", 1)[1])
            try:
                got = open(f"{mnt}/{name}", "rb").read()
            except OSError as e:
                print("fsynced but missing:", name, e); bad += 1; continue
            if got != content(c, i):
                print("fsynced but wrong:", name, len(got)); bad += 1
    present = os.listdir(mnt)
    for f in present:
        c, i = (int(x) for x in f[1:].split("_f"))
        if open(f"{mnt}/{f}", "rb").read() != content(c, i):
            print("mixed or wrong bytes:", f); bad += 1
    print(f"cycle {cyc}: {n} fsynced files intact, {len(present)} present, {bad} bad")
    sys.exit(1 if bad else 0)
out = open(f"{log}.{cyc}", "a")
i = 0
while True:
    name = f"c{cyc}_f{i}"
    fd = os.open(f"{mnt}/{name}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    data = content(cyc, i)
    for k in range(0, len(data), 65536):
        os.write(fd, data[k:k + 65536])
    os.fsync(fd)
    os.close(fd)
    out.write(name + "\n")
    out.flush()
    i += 1
PY
}

logged() { [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ]; }

@test "kill -9 during a copy loop that fsyncs each file, 20 times: every fsynced file is intact" {
	local opts=disk_persist=yes,host_limit=16M c w want i n
	n=$(tfs_scale 20 6)
	write_loop_py >"$TFS_TMP/loop.py"
	for c in $(seq 1 "$n"); do
		tfs_mount -o "$opts"
		python3 "$TFS_TMP/loop.py" "$MNT" "$TFS_TMP/log" "$c" \
			2>/dev/null &
		w=$!
		want=$((2 + RANDOM % 12))
		for i in $(seq 1 400); do
			logged "$TFS_TMP/log.$c" "$want" && break
			sleep 0.05
		done
		logged "$TFS_TMP/log.$c" "$want"
		kill9
		kill "$w" 2>/dev/null || true
		wait "$w" 2>/dev/null || true
		tfs_mount -o "$opts"
		grep -q "after a crash or unclean stop" "$LOG"
		python3 "$TFS_TMP/loop.py" "$MNT" "$TFS_TMP/log" "$c" check \
			>>"$TFS_TMP/results"
		tfs_unmount
	done
	cat "$TFS_TMP/results"
	[ "$(grep -c ' 0 bad$' "$TFS_TMP/results")" -eq "$n" ]
}

@test "persist=close: a file closed before kill -9 is there, one never closed is not" {
	tfs_mount -o disk_persist=close
	head -c 3M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/closed"
	echo small >"$MNT/small"
	# A writer that never closes: no dup games of the shell, whose
	# redirections close (and so sync) descriptors behind the scenes.
	python3 - "$MNT/open" "$TFS_TMP/ready" <<'PY' &
import os, sys, time
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"never closed\n")
open(sys.argv[2], "w").close()
time.sleep(60)
PY
	PIDS2+=($!)
	local i
	for i in $(seq 1 200); do [ -e "$TFS_TMP/ready" ] && break; sleep 0.05; done
	[ -e "$TFS_TMP/ready" ]
	kill9
	tfs_mount -o disk_persist=close
	cmp "$TFS_TMP/src" "$MNT/closed"
	[ "$(cat "$MNT/small")" = small ]
	[ ! -e "$MNT/open" ]
}

@test "writes after the last fsync roll back, and are listed" {
	tfs_mount -o disk_persist=yes
	python3 - "$MNT" <<'PY'
import os, sys
m = sys.argv[1]
fd = os.open(f"{m}/f", os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"synced\n"); os.fsync(fd)
os.pwrite(fd, b"SYNCED AND THEN SOME\n", 0)
os.close(fd)
fd = os.open(f"{m}/never", os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"never synced\n"); os.close(fd)
# Make the records so far durable without syncing f or never.
fd = os.open(f"{m}/other", os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"x"); os.fsync(fd); os.close(fd)
PY
	kill9
	tfs_mount -o disk_persist=yes
	[ "$(cat "$MNT/f")" = synced ]
	[ ! -e "$MNT/never" ]
	run "$CTL" recover --list "$MNT"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"crash or unclean stop"*"1 dropped, 1 rolled back"* ]]
	[[ "$output" == *"rolled back  $MNT/f "*"later writes are lost"* ]]
	[[ "$output" == *"dropped      $MNT/never "*"never synced"* ]]
	run "$CTL" recover --list --json "$MNT"
	python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["recovery"]=="crash" and len(d["entries"])==2' "$output"
	run "$CTL" status "$MNT"
	[[ "$output" == *"recovery after a crash: 2 files back, 1 dropped, 1 rolled back"* ]]
	# The next clean start has nothing to say.
	remount -o disk_persist=yes
	run "$CTL" recover --list "$MNT"
	[[ "$output" == *"after a clean stop"*"nothing was dropped"* ]]
}

@test "rename over a synced file: after kill -9 the old or the new one, never neither" {
	tfs_mount -o disk_persist=yes
	python3 - "$MNT" <<'PY'
import os, sys
m = sys.argv[1]
def put(name, data):
    fd = os.open(f"{m}/{name}", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, data); os.fsync(fd); os.close(fd)
put("a", b"old a\n" * 50000)
put("b", b"old b\n" * 50000)
# a: the new version is renamed over it and the directory synced
put("a.tmp", b"new a\n" * 50000)
os.rename(f"{m}/a.tmp", f"{m}/a")
d = os.open(m, os.O_RDONLY | os.O_DIRECTORY); os.fsync(d); os.close(d)
# b: renamed over, the daemon killed before anything syncs the rename
put("b.tmp", b"new b\n" * 50000)
os.rename(f"{m}/b.tmp", f"{m}/b")
PY
	kill9
	tfs_mount -o disk_persist=yes
	cmp "$MNT/a" <(yes "new a" | head -n 50000)
	cmp "$MNT/b" <(yes "old b" | head -n 50000) ||
		cmp "$MNT/b" <(yes "new b" | head -n 50000)
}

# write_cycle_py MNT [check]: files written with buffered, O_SYNC and
# O_DIRECT I/O, truncated down and up; check compares them.
write_cycle_py() {
	cat <<'PY'
import mmap, os, random, sys
m = sys.argv[1]
check = len(sys.argv) > 2
r = random.Random(7)
data = r.randbytes(6 << 20)
want = {
    "buffered": data[:3 << 20],
    "osync": data[:1 << 20] + data[:1 << 20],
    "odirect": data[:2 << 20],
    "cut": data[:1234567],
    "grown": data[:4 << 20] + bytes((10 << 20) - (4 << 20)),
    "overwritten": data[:3 << 20][:100] + b"Z" * 5000 + data[:3 << 20][5100:],
}
if check:
    bad = 0
    for k, v in want.items():
        got = open(f"{m}/{k}", "rb").read()
        if got != v:
            print("differs:", k, len(got), len(v)); bad += 1
    sys.exit(1 if bad else 0)
def w(name, flags, chunks):
    fd = os.open(f"{m}/{name}", os.O_CREAT | os.O_WRONLY | flags, 0o644)
    for off, b in chunks:
        os.pwrite(fd, b, off)
    os.close(fd)
w("buffered", 0, [(0, data[:3 << 20])])
w("osync", os.O_SYNC, [(k, data[k % (1 << 20):k % (1 << 20) + 65536])
                       for k in range(0, 2 << 20, 65536)])
# O_DIRECT wants aligned buffers: an anonymous map is page aligned
buf = mmap.mmap(-1, 1 << 20)
fd = os.open(f"{m}/odirect", os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644)
for k in range(2):
    buf[:] = data[k << 20:(k + 1) << 20]
    os.pwritev(fd, [buf], k << 20)
os.close(fd)
w("cut", 0, [(0, data[:5 << 20])])
os.truncate(f"{m}/cut", 1234567)
w("grown", 0, [(0, data[:4 << 20])])
os.truncate(f"{m}/grown", 10 << 20)
w("overwritten", 0, [(0, data[:3 << 20])])
w("overwritten", 0, [(100, b"Z" * 5000)])
PY
}

@test "write with buffered, O_SYNC and O_DIRECT I/O, truncate, unmount, mount: every byte and size" {
	local opts=disk_persist=yes,host_limit=64M
	write_cycle_py >"$TFS_TMP/cycle.py"
	tfs_mount -o "$opts"
	python3 "$TFS_TMP/cycle.py" "$MNT"
	python3 "$TFS_TMP/cycle.py" "$MNT" check
	stat -c '%n %s %i %Y' "$MNT"/* >"$TFS_TMP/st1"
	remount -o "$opts"
	python3 "$TFS_TMP/cycle.py" "$MNT" check
	stat -c '%n %s %i %Y' "$MNT"/* >"$TFS_TMP/st2"
	diff "$TFS_TMP/st1" "$TFS_TMP/st2"
	# Once more, with everything on disk and the files written in place.
	remount -o "$opts,host_limit=4M"
	python3 "$TFS_TMP/cycle.py" "$MNT"
	remount -o "$opts,host_limit=4M"
	python3 "$TFS_TMP/cycle.py" "$MNT" check
}

@test "punch a hole, unmount, mount: the hole and the rest come back" {
	tfs_mount -o disk_persist=yes
	head -c 4M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/f"
	# tierfs punches holes (holes.bats): a refusal is a regression.
	fallocate -p -o 1M -l 1M "$MNT/f"
	fallocate -p -o 1M -l 1M "$TFS_TMP/src"
	cmp "$TFS_TMP/src" "$MNT/f"
	remount -o disk_persist=yes
	cmp "$TFS_TMP/src" "$MNT/f"
}

# Flip one byte of FILE at OFFSET.
flip() {
	python3 - "$1" "$2" <<'PY'
import sys
p, off = sys.argv[1], int(sys.argv[2])
with open(p, "r+b") as f:
    f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0x40]))
PY
}

@test "a corrupted journal tail: recovery stops at the last good record" {
	tfs_mount -o disk_persist=yes
	python3 - "$MNT" <<'PY'
import os, sys
m = sys.argv[1]
for k in range(5):
    fd = os.open(f"{m}/f{k}", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"%d\n" % k * 1000); os.fsync(fd); os.close(fd)
PY
	kill9
	local j
	j=$(ls "$(pdir)"/journal.* | sort -t. -k2 -n | tail -1)
	# The last record is f4's committed data.
	flip "$j" $(($(stat -c %s "$j") - 5))
	tfs_mount -o disk_persist=yes
	for k in 0 1 2 3; do
		cmp "$MNT/f$k" <(python3 -c "import sys; sys.stdout.buffer.write(b'$k\n' * 1000)")
	done
	[ ! -e "$MNT/f4" ]
	grep -q "recovery: journal '$(basename "$j")': stopped at byte" "$LOG"
	run "$CTL" recover --list "$MNT"
	echo "$output"
	[[ "$output" == *"journal      $(basename "$j")"*"fails its checksum"* ]]
	[[ "$output" == *"dropped      $MNT/f4 "* ]]
	# Records after the cut are read back: nothing was appended after
	# the bad one.
	echo after >"$MNT/g"
	python3 -c "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)" "$MNT/g"
	kill9
	tfs_mount -o disk_persist=yes
	[ "$(cat "$MNT/g")" = after ]
	[ "$(cat "$MNT/f3" | head -c 1)" = 3 ]
}

@test "SIGTERM is a clean stop: files never fsynced come back, and clean copies are not written again" {
	local opts=disk_persist=yes,host_limit=32M i
	tfs_mount -o "$opts"
	head -c 5M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/f"
	echo small >"$MNT/s"
	kill -TERM "$TFS_PID"
	for i in $(seq 1 600); do
		kill -0 "$TFS_PID" 2>/dev/null || break
		sleep 0.05
	done
	run ! kill -0 "$TFS_PID"
	wait "$TFS_PID" || true
	TFS_PID=
	run ! tfs_mounted "$MNT"
	tfs_mount -o "$opts"
	grep -q "persist: 2 files .* after a clean stop" "$LOG"
	cmp "$TFS_TMP/src" "$MNT/f"
	[ "$(cat "$MNT/s")" = small ]
	# Both were read back to memory unchanged: the next stop leaves
	# their spill files as they are.
	find "$(pdir)" -regex '.*/[0-9]+' -printf '%p %s %T@\n' | sort >"$TFS_TMP/sp1"
	[ "$(wc -l <"$TFS_TMP/sp1")" -eq 2 ]
	[ "$(tfs_tier "$MNT/f")" != disk ]
	tfs_unmount
	find "$(pdir)" -regex '.*/[0-9]+' -printf '%p %s %T@\n' | sort >"$TFS_TMP/sp2"
	diff "$TFS_TMP/sp1" "$TFS_TMP/sp2"
}

@test "a journal cut short by a crash: recovery stops at the last whole record" {
	tfs_mount -o disk_persist=yes
	python3 - "$MNT" <<'PY'
import os, sys
m = sys.argv[1]
for k in range(5):
    fd = os.open(f"{m}/f{k}", os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"%d\n" % k * 1000); os.fsync(fd); os.close(fd)
PY
	kill9
	local j
	j=$(ls "$(pdir)"/journal.* | sort -t. -k2 -n | tail -1)
	# A torn write: the last record (f4's data) lost its last bytes.
	truncate -s -3 "$j"
	tfs_mount -o disk_persist=yes
	for k in 0 1 2 3; do
		cmp "$MNT/f$k" <(python3 -c "import sys; sys.stdout.buffer.write(b'$k\n' * 1000)")
	done
	[ ! -e "$MNT/f4" ]
	grep -q "recovery: journal '$(basename "$j")': stopped at byte .*: an incomplete record" "$LOG"
	run "$CTL" recover --list "$MNT"
	echo "$output"
	[[ "$output" == *"journal      $(basename "$j")"*"an incomplete record"* ]]
	[[ "$output" == *"dropped      $MNT/f4 "* ]]
}

@test "a damaged snapshot: what checks out comes back, nothing with wrong bytes; thousands dropped or in lost+found are listed" {
	tfs_mount -o disk_persist=yes
	python3 - "$MNT" <<'PY'
import os, sys
m = sys.argv[1]
for d in range(4):
    os.mkdir(f"{m}/d{d}")
    for k in range(1000):
        with open(f"{m}/d{d}/f{k}", "wb") as f:
            f.write(b"%d.%d\n" % (d, k) * (1 + k % 7))
PY
	tfs_unmount
	local s off
	s=$(ls "$(pdir)"/snap.*)
	# A byte every 100 KB of the body: most of its records, not all.
	[ "$(stat -c %s "$s")" -gt 500000 ]
	for off in $(seq 100000 100000 $(($(stat -c %s "$s") - 150000))); do
		flip "$s" "$off"
	done
	tfs_mount -o disk_persist=yes
	run "$CTL" recover --list "$MNT"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"snapshot     $(basename "$s")"*"fails its checksum"* ]]
	[[ "$output" == *"dropped      $MNT/d"*"its inode's record is lost"* ]]
	# More than an xattr holds: the rest are counted, and logged.
	[[ "$output" == *"more "*" more not shown here: the daemon's log has every one"* ]]
	[ "$(grep -c "recovery: dropped '" "$LOG")" -gt \
		"$(grep -c '^dropped ' <<<"$output")" ]
	run "$CTL" recover --list --json "$MNT"
	[ "$status" -eq 0 ]
	python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["recovery_dropped"] + d["recovery_lost_found"] > 1000 and d["entries"][-1]["kind"] == "more"' "$output"
	# Files whose inode survived but not their names, or their directory,
	# are in lost+found with their bytes: no file is twice, none wrong.
	python3 - "$MNT" <<'PY'
import os, sys
m = sys.argv[1]
n = found = bad = 0
seen = set()
for dp, dirs, files in os.walk(m):
    for f in files:
        got = open(os.path.join(dp, f), "rb").read()
        if os.path.basename(dp).startswith("lost+found"):
            d, k = (int(x) for x in got.split(b"\n")[0].split(b"."))
            found += 1
        else:
            d, k = int(os.path.basename(dp)[1:]), int(f[1:])
        n += 1
        if got != b"%d.%d\n" % (d, k) * (1 + k % 7) or (d, k) in seen:
            print("wrong bytes:", dp, f); bad += 1
        seen.add((d, k))
print(n, "files back,", found, "of them in lost+found,", bad, "bad")
sys.exit(1 if bad or not 0 < n < 4000 else 0)
PY
	# The mount goes on from there, and the next start is clean.
	echo new >"$MNT/new"
	tfs_unmount
	tfs_mount -o disk_persist=yes
	grep -q "after a clean stop" "$LOG"
	[ "$(cat "$MNT/new")" = new ]
}

PJSNAP=$BATS_TEST_DIRNAME/pjsnap.py

# Issue 31: recovery never drops a file whose bytes it can read. A table
# that would lose some (here one entry saying a chunk no disk tier can
# have, every CRC good: what a writer's bug makes) keeps every chunk that
# reads back, in lost+found, which only root may enter.
@test "a chunk table that would lose bytes: what reads back goes to lost+found, root's alone, and is listed" {
	local opts=disk_persist=yes,allow_other ino
	tfs_user alice
	tfs_mount -o "$opts"
	head -c 3M /dev/urandom >"$TFS_TMP/src"
	mkdir -m 0777 "$MNT/d"
	cp "$TFS_TMP/src" "$MNT/d/f"
	chmod 0644 "$MNT/d/f"
	echo ok >"$MNT/g"
	ino=$(stat -c %i "$MNT/d/f")
	tfs_unmount
	python3 "$PJSNAP" "$(ls "$(pdir)"/snap.*)" bad-entry "$ino" 1
	tfs_mount -o "$opts"
	[ ! -e "$MNT/d/f" ]
	[ -d "$MNT/d" ]
	[ "$(cat "$MNT/g")" = ok ]
	[ "$(stat -c '%a %U %h' "$MNT/lost+found")" = "700 root 2" ]
	[ "$(stat -c '%s %a %h' "$MNT/lost+found/#$ino")" = "3145728 644 1" ]
	cmp -n 1M "$TFS_TMP/src" "$MNT/lost+found/#$ino"
	cmp -i 2M:2M "$TFS_TMP/src" "$MNT/lost+found/#$ino"
	[ "$(dd if="$MNT/lost+found/#$ino" bs=1M skip=1 count=1 status=none |
		tr -d '\0' | wc -c)" -eq 0 ]
	grep -q "recovery: lost+found '/d/f': 1 of its chunks are lost, holes now (chunk 1: its entry in the chunk table says no chunk this disk tier can have): what reads back is kept as '/lost+found/#$ino'" "$LOG"
	[ "$(tfs_stat recovery_lost_found)" -eq 1 ]
	[ "$(tfs_stat recovery_dropped)" -eq 0 ]
	run "$CTL" recover --list "$MNT"
	echo "$output"
	[[ "$output" == *"0 dropped, 0 rolled back, 1 in lost+found"* ]]
	[[ "$output" == *"lost+found   $MNT/d/f "*"kept as '/lost+found/#$ino'"* ]]
	# the file would be anyone's to read: the directory is root's alone
	run tfs_as "$alice" cat "$MNT/lost+found/#$ino"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Permission denied"* ]]
	# the next clean start keeps it there and has nothing to say
	remount -o "$opts"
	grep -q "after a clean stop" "$LOG"
	cmp -n 1M "$TFS_TMP/src" "$MNT/lost+found/#$ino"
	run "$CTL" recover --list "$MNT"
	[[ "$output" == *"nothing was dropped"* ]]
}

@test "files whose names a damaged snapshot lost come back in lost+found, bytes and mode" {
	tfs_mount -o disk_persist=yes
	python3 - "$MNT" <<'PY'
import os, sys
m = sys.argv[1]
for d in range(3):
    os.mkdir(f"{m}/d{d}")
    for k in range(700):
        with open(f"{m}/d{d}/f{k}", "wb") as f:
            f.write(b"%d.%d\n" % (d, k) * (1 + k % 7))
        os.chmod(f"{m}/d{d}/f{k}", 0o600 + k % 8)
PY
	tfs_unmount
	local s
	s=$(ls "$(pdir)"/snap.*)
	# the last record holds names only: inodes come first
	flip "$s" $(($(stat -c %s "$s") - 20))
	tfs_mount -o disk_persist=yes
	run "$CTL" recover --list "$MNT"
	echo "${output:0:2000}"
	[[ "$output" == *"snapshot     $(basename "$s")"*"fails its checksum"* ]]
	[[ "$output" == *"lost+found   inode "*"kept as '/lost+found/#"* ]]
	[ "$(tfs_stat recovery_lost_found)" -gt 0 ]
	python3 - "$MNT" <<'PY'
import os, re, sys
m = sys.argv[1]
seen, bad = set(), 0
def want(d, k):
    return b"%d.%d\n" % (d, k) * (1 + k % 7)
for dp, dirs, files in os.walk(m):
    for f in files:
        p = os.path.join(dp, f)
        got = open(p, "rb").read()
        d, k = (int(x) for x in got.split(b"\n")[0].split(b"."))
        if got != want(d, k) or os.stat(p).st_mode & 0o777 != 0o600 + k % 8:
            print("wrong:", p); bad += 1
        if os.path.basename(dp) != "lost+found" and (dp, f) != (f"{m}/d{d}", f"f{k}"):
            print("misplaced:", p); bad += 1
        if (d, k) in seen:
            print("twice:", p); bad += 1
        seen.add((d, k))
print(len(seen), "files back,", bad, "bad")
sys.exit(1 if bad or len(seen) != 2100 else 0)
PY
}

@test "a directory an earlier tierfs wrote (format 1: chunk tables alone) comes back, rewritten in format 2" {
	tfs_mount -o disk_persist=yes
	head -c 3M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/f"
	head -c 300000 "$TFS_TMP/src" >"$MNT/k"
	fallocate -n -o 300000 -l 1M "$MNT/k"
	truncate -s 5M "$MNT/sparse"
	printf x | dd of="$MNT/sparse" bs=1 seek=2M conv=notrunc status=none
	tfs_unmount
	local s
	s=$(ls "$(pdir)"/snap.*)
	python3 "$PJSNAP" "$s" v1
	[ "$(python3 "$PJSNAP" "$s" version)" = 1 ]
	tfs_mount -o disk_persist=yes
	grep -q "persist: 3 files .* after a clean stop" "$LOG"
	run ! grep "recovery:" "$LOG"
	cmp "$TFS_TMP/src" "$MNT/f"
	cmp <(head -c 300000 "$TFS_TMP/src") "$MNT/k"
	[ "$(($(stat -c %b "$MNT/k") * 512))" -ge 1048576 ]
	[ "$(stat -c %s "$MNT/sparse")" -eq 5242880 ]
	[ "$(dd if="$MNT/sparse" bs=1 skip=2M count=1 status=none)" = x ]
	# rewritten at start: an earlier tierfs refuses it from now on
	s=$(ls "$(pdir)"/snap.*)
	[ "$(python3 "$PJSNAP" "$s" version)" = 2 ]
	remount -o disk_persist=yes
	cmp "$TFS_TMP/src" "$MNT/f"
	cmp <(head -c 300000 "$TFS_TMP/src") "$MNT/k"
}

# crc32c FILE OFF LEN: the CRC32C of LEN bytes of FILE at OFF.
py_crc32c='
def crc32c(b):
    t = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        t.append(c)
    c = 0xFFFFFFFF
    for x in b:
        c = t[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
'

@test "a spill directory of another format version is refused, and kept" {
	tfs_mount -o disk_persist=yes,disk_name=v
	echo keep >"$MNT/f"
	tfs_unmount
	local snap
	snap=$(ls "$(pdir)"/snap.*)
	cp "$snap" "$TFS_TMP/snap.orig"
	python3 - "$snap" <<PY
import struct, sys
$py_crc32c
assert crc32c(b"123456789") == 0xE3069283
p = sys.argv[1]
h = bytearray(open(p, "rb").read(56))
struct.pack_into("<I", h, 8, 99)
struct.pack_into("<I", h, 52, crc32c(bytes(h[:52])))
with open(p, "r+b") as f:
    f.write(h)
PY
	run "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,disk_persist=yes,disk_name=v"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"is of format version 99; this tierfs reads versions 1 to 2"* ]]
	run ! tfs_mounted "$MNT"
	# Nothing of it was touched: the original header brings it back.
	cp "$TFS_TMP/snap.orig" "$snap"
	tfs_mount -o disk_persist=yes,disk_name=v
	[ "$(cat "$MNT/f")" = keep ]
}

@test "another chunk size, and journals without a snapshot, are refused" {
	tfs_mount -o disk_persist=yes,disk_name=c
	echo x >"$MNT/f"
	tfs_unmount
	run "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,disk_persist=yes,disk_name=c,disk_chunk_size=4M"
	[ "$status" -ne 0 ]
	[[ "$output" == *"was written with chunk_size 1048576, this mount has 4194304"* ]]
	rm "$(pdir)"/snap.*
	run "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,disk_persist=yes,disk_name=c"
	[ "$status" -ne 0 ]
	[[ "$output" == *"holds journals but no snapshot"* ]]
}

@test "a second daemon on the same spill directory is refused" {
	tfs_mount -o disk_persist=yes,disk_name=shared
	run "$TIERFS_BIN" "$MNT2" -f -o "disk_path=$SPILL,disk_persist=yes,disk_name=shared"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"spill directory '$SPILL/tierfs-persist.shared' is in use by another tierfs (pid $TFS_PID)"* ]]
	run ! tfs_mounted "$MNT2"
	# Another name is another directory.
	"$TIERFS_BIN" "$MNT2" -f -o "disk_path=$SPILL,disk_persist=yes,disk_name=other" 2>"$TFS_TMP/log2" &
	PIDS2+=($!)
	local i
	for i in $(seq 1 200); do mountpoint -q "$MNT2" && break; sleep 0.05; done
	mountpoint -q "$MNT2"
	fusermount3 -u "$MNT2"
}

@test "a spill directory that is not private is refused" {
	mkdir -m 0755 "$SPILL/tierfs-persist.open"
	run "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,disk_persist=yes,disk_name=open"
	[ "$status" -ne 0 ]
	[[ "$output" == *"'$SPILL/tierfs-persist.open' is not a private directory"* ]]
	rmdir "$SPILL/tierfs-persist.open"
	ln -s /etc "$SPILL/tierfs-persist.link"
	run "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,disk_persist=yes,disk_name=link"
	[ "$status" -ne 0 ]
	[[ "$output" == *"is not a private directory"* ]]
}

@test "disk_name needs persist; bad names are refused" {
	run "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,disk_name=x"
	[ "$status" -ne 0 ]
	[[ "$output" == *"-o disk_name: 'x' names a persistent spill directory; set persist = yes or close too"* ]]
	run "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,disk_persist=yes,disk_name=../x"
	[ "$status" -ne 0 ]
	[[ "$output" == *"-o disk_name: '../x' is not a name"* ]]
	run "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,disk_persist=sometimes"
	[ "$status" -ne 0 ]
	[[ "$output" == *"'sometimes' is not one of no, yes or close"* ]]
}

@test "the name follows the mount point unless given; the default mount loses nothing" {
	tfs_mount
	echo x >"$MNT/f"
	[ -z "$(ls -d "$SPILL"/tierfs-persist.* 2>/dev/null)" ]
	run "$CTL" status "$MNT"
	[[ "$output" == *"persist  no: the files go with the mount"* ]]
	run "$CTL" recover --list "$MNT"
	[ "$status" -eq 1 ]
	[[ "$output" == *"is not a persistent mount"* ]]
	tfs_unmount
	tfs_mount -o disk_persist=yes
	[ -d "$(pdir)" ]
	[[ "$(basename "$(pdir)")" == tierfs-persist.m* ]]
	run "$CTL" status "$MNT"
	echo "$output"
	[[ "$output" == *"persist  yes: journal"*"snapshot"*" at 2"* ]]
	getfattr --only-values -n user.tierfs.stats "$MNT" | grep -q '^persist_dir='"$(pdir)"'$'
}

@test "what recovery dropped is for root and the daemon's user only" {
	tfs_user alice
	tfs_mount -o disk_persist=yes,allow_other
	run tfs_as "$alice" "$CTL" recover --list "$MNT"
	[ "$status" -eq 1 ]
	[[ "$output" == *"is for root and the daemon's user"* ]]
	run "$CTL" recover --list "$MNT"
	[ "$status" -eq 0 ]
}
