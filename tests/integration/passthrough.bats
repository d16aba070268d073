#!/usr/bin/env bats
# FUSE passthrough of reads (issue 29, [fs] passthrough): a host-tier file
# opened read-only is read by the kernel from a replica the daemon owns,
# with no READ request; every change made through the daemon reaches the
# replica before it is answered; a kernel that refuses the backing file
# leaves everything as it was, said once in the log.

load helpers

FAULT_SO=${TFS_BUILD:-$BATS_TEST_DIRNAME/../../build}/tests/libtfsfault.so

setup() {
	tfs_setup
}

teardown() { tfs_teardown; }

# require_kernel_passthrough: skips when the mount just made says this
# kernel does not offer passthrough (before Linux 6.9, or built without it).
require_kernel_passthrough() {
	if [ "$(tfs_stat passthrough)" != on ] &&
		grep -q "the kernel does not offer it" "$LOG"; then
		skip "this kernel has no FUSE passthrough"
	fi
}

# pt_mount [opts]: a mount with passthrough asked for.
pt_mount() {
	tfs_mount -o "device_backend=none,fs_passthrough=auto${1:+,$1}"
	require_kernel_passthrough
	[ "$(tfs_stat passthrough)" = on ]
}

@test "passthrough: a read-only open reads without a READ request" {
	pt_mount
	head -c 3M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/f"
	local before
	before=$(tfs_stat read_requests)
	cmp "$TFS_TMP/src" "$MNT/f"
	# mmap of it reads the replica too
	python3 - "$MNT/f" "$TFS_TMP/src" <<'PY'
import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
assert m[:] == open(sys.argv[2], "rb").read()
PY
	[ "$(tfs_stat read_requests)" -eq "$before" ]
	[ "$(tfs_stat passthrough.opens)" -ge 2 ]
	# the last close dropped the replica
	[ "$(tfs_stat passthrough.files)" -eq 0 ]
	[ "$(tfs_stat passthrough.bytes)" -eq 0 ]
}

@test "passthrough is off by default: reads go through the daemon" {
	tfs_mount -o device_backend=none
	[ "$(tfs_stat passthrough)" = off ]
	head -c 1M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/f"
	echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
	# a fresh inode number of the page cache: drop it by a new file
	cp "$MNT/f" "$MNT/g"
	cmp "$TFS_TMP/src" "$MNT/g"
	[ "$(tfs_stat read_requests)" -gt 0 ]
	[ "$(tfs_stat passthrough.opens)" -eq 0 ]
}

# Writes, truncates, fallocate and copy_file_range through other
# descriptors, while a reader holds the file open through passthrough:
# the reader sees each as soon as the call returned.
@test "passthrough: changes through the daemon reach an open reader at once" {
	pt_mount
	head -c 1M /dev/urandom >"$MNT/f"
	run python3 - "$MNT/f" <<'PY'
import mmap, os, sys
p = sys.argv[1]
r = os.open(p, os.O_RDONLY)
m = mmap.mmap(r, 0, prot=mmap.PROT_READ)
w = os.open(p, os.O_RDWR)
def check(what, want):
    got = os.pread(r, len(want) + 10, 0)
    if got != want:
        print("stale after", what, len(got), len(want)); sys.exit(1)
want = bytearray(os.pread(w, 1 << 20, 0))
os.pwrite(w, b"x" * 5000, 4000)
want[4000:9000] = b"x" * 5000
check("write", bytes(want))
if m[4000:9000] != b"x" * 5000:
    print("stale mapping"); sys.exit(1)
os.pwrite(w, b"y" * 100, len(want))
want += b"y" * 100
check("extending write", bytes(want))
os.truncate(p, 300000)
del want[300000:]
check("truncate from another path", bytes(want))
os.posix_fallocate(w, 0, 400000)
want += bytes(100000)
check("fallocate", bytes(want))
os.copy_file_range(w, w, 1000, 0, 200000)
want[200000:201000] = want[0:1000]
check("copy_file_range", bytes(want))
o = os.open(p, os.O_WRONLY | os.O_TRUNC)
os.write(o, b"new")
check("O_TRUNC open", b"new")
print("ok")
PY
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(tfs_stat passthrough.opens)" -ge 1 ]
	# after the last close, a cached open sees the bytes the daemon has
	[ "$(cat "$MNT/f")" = new ]
}

@test "passthrough: a spill and a move while open leave the reader right" {
	pt_mount host_limit=8M
	head -c 2M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/f"
	exec 5<"$MNT/f"
	[ "$(tfs_stat passthrough.files)" -eq 1 ]
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[ "$(tfs_tier "$MNT/f")" = disk ]
	cmp "$TFS_TMP/src" /dev/fd/5
	# more than host holds: the spiller runs with the file open
	head -c 12M /dev/urandom >"$MNT/big"
	cmp "$TFS_TMP/src" /dev/fd/5
	exec 5<&-
	cmp "$TFS_TMP/src" "$MNT/f"
}

@test "passthrough: readers racing growing writes, rewrites and moves" {
	pt_mount host_limit=64M,disk_chunk_size=64K
	# more files than writers: readers find idle ones, and open them
	# through passthrough, with writers opening them beside
	# (a map rewriter: writers' mappings beside passthrough readers)
	run python3 "$BATS_TEST_DIRNAME/race_rw.py" "$MNT" 3 --files 12 \
		--readers 6 --movers 1 --map-rewriters 1 --max-mb 4 --align
	echo "$output"
	[ "$status" -eq 0 ]
	# passthrough took part (how often depends on the machine's load)
	tfs_stat passthrough.opens
	[ "$(tfs_stat passthrough.opens)" -gt 0 ]
}

@test "passthrough: a refused backing file is said once, and reads go on" {
	[ -f "$FAULT_SO" ]
	local ctl=$TFS_TMP/fault.ctl flog=$TFS_TMP/faults.log
	printf 'ops=backing err=EPERM\n' >"$ctl"
	: >"$flog"
	LD_PRELOAD=$FAULT_SO TFS_FAULT_DIR=$SPILL TFS_FAULT_CTL=$ctl \
		TFS_FAULT_LOG=$flog \
		ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
		tfs_mount -o device_backend=none,fs_passthrough=on
	head -c 1M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/f"
	cmp "$TFS_TMP/src" "$MNT/f"
	cp "$MNT/f" "$MNT/g"
	cmp "$TFS_TMP/src" "$MNT/g"
	[ "$(tfs_stat passthrough)" = off ]
	[ "$(tfs_stat passthrough.opens)" -eq 0 ]
	[ "$(tfs_stat read_requests)" -gt 0 ]
	[ "$(grep -c 'passthrough refused' "$LOG")" -eq 1 ]
	[ "$(wc -l <"$flog")" -ge 1 ]
}

@test "passthrough: a shared writable mapping beside a reader reaches the store" {
	pt_mount
	head -c 1M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/f"
	run python3 - "$MNT/f" <<'PY'
import mmap, os, sys
p = sys.argv[1]
r = os.open(p, os.O_RDONLY)  # the passthrough reader
w = os.open(p, os.O_RDWR)
try:
    m = mmap.mmap(w, 1 << 20, mmap.MAP_SHARED,
                  mmap.PROT_READ | mmap.PROT_WRITE)
except OSError as e:
    print("mapping refused:", e)  # refused is no loss
    sys.exit(0)
m[4096:4096 + 5] = b"HELLO"
m.flush()
m.close()
os.close(w)
os.close(r)
print("mapped")
PY
	echo "$output"
	[ "$status" -eq 0 ]
	cp "$TFS_TMP/src" "$TFS_TMP/want"
	if [ "$output" = mapped ]; then
		printf HELLO | dd of="$TFS_TMP/want" bs=1 seek=4096 conv=notrunc status=none
	fi
	# the replica went back to the store at the last close (release
	# comes after close(2) returns)
	tfs_wait_for tfs_stat_is passthrough.files -eq 0
	# a spill, then a read through the daemon (no passthrough open)
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[ "$(tfs_tier "$MNT/f")" = disk ]
	cmp "$TFS_TMP/want" "$MNT/f"
}

# A writer's shared mapping beside a passthrough reader writes the
# replica, which then holds the file's bytes: read() and copy_file_range
# through the writer see them, a mapping that outlives the close keeps
# the replica (passthrough.held) and its later writes, and once it is
# unmapped the next stats read copies the replica back into the store.
@test "passthrough: a writer's mapping is read back, and outlives its close" {
	pt_mount
	head -c 1M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/f"
	run python3 - "$MNT" "$TFS_TMP/src" <<'PY'
import ctypes, mmap, os, sys, time
mnt, src = sys.argv[1], sys.argv[2]
p = mnt + "/f"
want = bytearray(open(src, "rb").read())
def stat(key):
    for line in os.getxattr(mnt, "user.tierfs.stats").decode().split("\n"):
        if line.startswith(key + "="):
            return int(line.split("=")[1])
def fail(what):
    print(what); sys.exit(1)
def until(key, value):  # release comes after close(2) returns
    for _ in range(200):
        if stat(key) == value:
            return True
        time.sleep(0.02)
    return False
r = os.open(p, os.O_RDONLY)  # the passthrough reader
w = os.open(p, os.O_RDWR)
# libc's mmap: Python's keeps a dup of the descriptor open
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                      ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
m = libc.mmap(None, 1 << 20, mmap.PROT_READ | mmap.PROT_WRITE,
              mmap.MAP_SHARED, w, 0)
if m in (None, ctypes.c_void_p(-1).value):
    fail("mmap: " + os.strerror(ctypes.get_errno()))
def put(off, data):
    ctypes.memmove(m + off, data, len(data))
put(4096, b"HELLO")
want[4096:4101] = b"HELLO"
if os.pread(w, 5, 4096) != b"HELLO":
    fail("read() through the writer missed its mapping's bytes")
d = os.open(mnt + "/g", os.O_RDWR | os.O_CREAT, 0o644)
if os.copy_file_range(w, d, 8192, 0, 0) <= 0:
    fail("copy_file_range copied nothing")
if os.pread(d, 5, 4096) != b"HELLO":
    fail("copy_file_range missed the mapping's bytes")
os.close(d)
os.close(w)
os.close(r)
if not until("passthrough.held", 1):
    fail("the mapped replica was not kept: " + os.getxattr(mnt, "user.tierfs.stats").decode().split("passthrough=")[1][:200])
put(8000, b"LATER")  # after the last close
want[8000:8005] = b"LATER"
with open(p, "rb") as f:  # joins the kept replica
    if f.read() != want:
        fail("a new open missed the mapping's bytes")
if not until("passthrough.held", 1):
    fail("still mapped, yet not kept")
libc.munmap(m, 1 << 20)
if not until("passthrough.held", 0) or stat("passthrough.files") != 0:
    fail("unmapped, yet kept: held=%s" % stat("passthrough.held"))
open(src + ".want", "wb").write(want)
print("ok")
PY
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(tfs_stat passthrough.settled)" -eq 1 ]
	# the store has them: spilled, and read through the daemon
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[ "$(tfs_tier "$MNT/f")" = disk ]
	cmp "$TFS_TMP/src.want" "$MNT/f"
}

# A replica kept past its close, unmapped, with nothing read since that
# would copy it back: unmount copies it into the store, which a
# persistent mount then keeps.
@test "passthrough: unmount copies a kept replica back" {
	pt_mount disk_persist=yes
	head -c 1M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/f"
	run python3 - "$MNT/f" <<'PY'
import ctypes, mmap, os, sys
p = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                      ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
r = os.open(p, os.O_RDONLY)  # the passthrough reader
w = os.open(p, os.O_RDWR)
m = libc.mmap(None, 1 << 20, mmap.PROT_READ | mmap.PROT_WRITE,
              mmap.MAP_SHARED, w, 0)
os.close(w)
os.close(r)
ctypes.memmove(m + 4096, b"HELLO", 5)
libc.munmap(m, 1 << 20)
print("ok")
PY
	echo "$output"
	[ "$status" -eq 0 ]
	cp "$TFS_TMP/src" "$TFS_TMP/want"
	printf HELLO | dd of="$TFS_TMP/want" bs=1 seek=4096 conv=notrunc status=none
	tfs_unmount
	tfs_mount -o device_backend=none,disk_persist=yes
	cmp "$TFS_TMP/want" "$MNT/f"
}

@test "passthrough: a replica is charged to the host tier while it lives" {
	pt_mount
	head -c 2M /dev/urandom >"$MNT/f"
	local before
	before=$(tfs_stat host.used)
	exec 5<"$MNT/f"
	[ "$(tfs_stat passthrough.files)" -eq 1 ]
	[ "$(tfs_stat host.used)" -eq $((before + 2097152)) ]
	exec 5<&-
	tfs_wait_for tfs_stat_is passthrough.files -eq 0
	[ "$(tfs_stat host.used)" -eq "$before" ]
}

# A device export copies the store's bytes: beside a replica a writer's
# mapping wrote, those may be older, so the export is refused until the
# replica settles.
@test "passthrough: no device export or allocation of a file whose replica a writer maps" {
	local ec
	ec=$(dirname "$TIERFS_BIN")/../client/lib/export_client
	# Built with the client (client/lib/meson.build): missing is a broken build.
	[ -x "$ec" ]
	pt_mount device_backend=sim,device_limit=64M
	head -c 1M /dev/urandom >"$MNT/f"
	setfattr -n user.tierfs.tier -v host "$MNT/f"
	run python3 - "$MNT" "$ec" <<'PY'
import ctypes, mmap, os, subprocess, sys
mnt, ec = sys.argv[1], sys.argv[2]
p = mnt + "/f"
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                      ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
r = os.open(p, os.O_RDONLY)  # the passthrough reader
w = os.open(p, os.O_RDWR)
m = libc.mmap(None, 1 << 20, mmap.PROT_READ | mmap.PROT_WRITE,
              mmap.MAP_SHARED, w, 0)
ctypes.memmove(m + 4096, b"HELLO", 5)
e = subprocess.run([ec, "cat", p], capture_output=True)
print("export rc", e.returncode, e.stderr.decode().strip()[-200:])
if e.returncode == 0 and e.stdout[4096:4101] != b"HELLO":
    print("the export has the store's older bytes"); sys.exit(1)
# TFS_IOC_ALLOC would copy the store's older bytes into the replica.
import errno, fcntl, struct
alloc = struct.Struct("=IIQ2Q")
try:
    fcntl.ioctl(w, (1 << 30) | (alloc.size << 16) | (0xF7 << 8) | 4,
                alloc.pack(1, 0, 1 << 20, 0, 0))
    print("alloc taken")
except OSError as x:
    print("alloc", errno.errorcode[x.errno])
libc.munmap(m, 1 << 20)
os.close(w)
os.close(r)
PY
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *busy* ]]
	[[ "$output" == *"alloc EBUSY"* ]]
}

# The settle copies back only what differs: a writer that changed
# nothing leaves the file clean and in the tier it was moved to.
@test "passthrough: a replica settles without rewriting what no one changed" {
	pt_mount
	head -c 1M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/f"
	exec 5<"$MNT/f" 6<>"$MNT/f"
	[ "$(tfs_stat passthrough.files)" -eq 1 ]
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	[ "$(tfs_tier "$MNT/f")" = disk ]
	exec 5<&- 6<&-
	tfs_wait_for tfs_stat_is passthrough.settled -eq 1
	[ "$(tfs_tier "$MNT/f")" = disk ]
	cmp "$TFS_TMP/src" "$MNT/f"
}

# Where the kernel grants no read lease on a memfd, the daemon cannot
# tell when a writer's mapping is gone: it says so once, and keeps such
# a replica (joined by later opens) until unmount, which copies it back.
@test "passthrough: without a lease probe a written replica is kept until unmount" {
	[ -f "$FAULT_SO" ]
	local ctl=$TFS_TMP/fault.ctl flog=$TFS_TMP/faults.log
	printf 'ops=lease err=EPERM\n' >"$ctl"
	: >"$flog"
	LD_PRELOAD=$FAULT_SO TFS_FAULT_DIR=$SPILL TFS_FAULT_CTL=$ctl \
		TFS_FAULT_LOG=$flog \
		ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
		pt_mount disk_persist=yes
	grep -q "no read lease on a memfd" "$LOG"
	head -c 1M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/f"
	python3 - "$MNT/f" <<'PY'
import mmap, os, sys
p = sys.argv[1]
r = os.open(p, os.O_RDONLY)  # the passthrough reader
w = os.open(p, os.O_RDWR)
m = mmap.mmap(w, 1 << 20, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[4096:4101] = b"HELLO"
m.close()
os.close(w)
os.close(r)
PY
	tfs_wait_for tfs_stat_is passthrough.held -eq 1
	[ "$(tfs_stat passthrough.settled)" -eq 0 ]
	cp "$TFS_TMP/src" "$TFS_TMP/want"
	printf HELLO | dd of="$TFS_TMP/want" bs=1 seek=4096 conv=notrunc status=none
	# a later open joins the kept replica
	cmp "$TFS_TMP/want" "$MNT/f"
	tfs_unmount
	tfs_mount -o device_backend=none,disk_persist=yes
	cmp "$TFS_TMP/want" "$MNT/f"
}
