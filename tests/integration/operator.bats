#!/usr/bin/env bats
# What an operator meets first: the checks on the mount point and the
# options, where the logs go, the atime flags, the installed files.
# tests/run: long (started first, so that the lanes end together)

load helpers
# run ! CMD (a check that CMD fails, which set -e would not make).
bats_require_minimum_version 1.5.0

SRC=$BATS_TEST_DIRNAME/../..

setup() {
	tfs_setup
}

teardown() {
	local r
	tfs_teardown
	# Records of the daemons this test killed (tierfs --unmount-dead or
	# a clean exit removes the others).
	for r in /run/tierfs/mount.*; do
		if [ -f "$r" ] && grep -qxF "mount=$MNT" "$r"; then
			rm -f "$r"
		fi
	done
	return 0
}

# mount_fails MESSAGE [ARGS...]: the daemon, run with ARGS after the mount
# point, exits 1 with one line that holds MESSAGE, and mounts nothing.
mount_fails() {
	local msg=$1
	shift
	run timeout 20 "$TIERFS_BIN" "$MNT" "$@"
	echo "status $status, output: $output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"$msg"* ]]
	[ "$(printf '%s\n' "$output" | grep -c .)" -eq 1 ]
	! tfs_mounted "$MNT"
}

@test "an unknown option is one line naming it and the closest known one" {
	mount_fails "tierfs: -o foo: unknown option, see tierfs --help" \
		-f -o "disk_path=$SPILL,foo=bar"
	mount_fails "tierfs: --bogus: unknown option, see tierfs --help" \
		-f --bogus -o "disk_path=$SPILL"
	mount_fails "tierfs: -x: unknown option" -f -x -o "disk_path=$SPILL"
	# Typos of config keys, FUSE options and dash options.
	mount_fails "tierfs: -o hots_limit: unknown option, did you mean 'host_limit'?" \
		-f -o "disk_path=$SPILL,hots_limit=1G"
	mount_fails "tierfs: -o alow_other: unknown option, did you mean 'allow_other'?" \
		-f -o "disk_path=$SPILL,alow_other"
	mount_fails "tierfs: -o noatim: unknown option, did you mean 'noatime'?" \
		-f -o "disk_path=$SPILL,noatim"
	mount_fails "tierfs: --hepl: unknown option, did you mean '--help'?" --hepl
	mount_fails "tierfs: --allow-other: unknown option, did you mean '-o allow_other'?" \
		-f --allow-other -o "disk_path=$SPILL"
	mount_fails "tierfs: -o fsname: needs a value" -f -o "disk_path=$SPILL,fsname"
	mount_fails "tierfs: -o allow_other: takes no value" \
		-f -o "disk_path=$SPILL,allow_other=1"
	# Before the store starts: no CUDA or spill line in front of it.
	run "$TIERFS_BIN" "$MNT" -o "disk_path=$SPILL,foo=bar"
	[ "$status" -eq 1 ]
	[ "$output" = "tierfs: -o foo: unknown option, see tierfs --help" ]
	[ -z "$(ls -A "$SPILL")" ]
}

@test "the FUSE options tierfs lets through mount" {
	tfs_mount -o "fsname=mine,subtype=tierfs,nosuid,nodev" \
		-o "noexec,exec,suid,dev,rw,async,dirsync,atime,noatime" \
		-o "default_permissions,clone_fd,max_idle_threads=4,max_threads=8" \
		-o "defaults,_netdev,nofail,x-systemd.requires=foo"
	echo hi >"$MNT/f"
	[ "$(cat "$MNT/f")" = hi ]
	grep -q "^mine $MNT fuse.tierfs " /proc/mounts
}

@test "--help lists allow_other once" {
	run "$TIERFS_BIN" --help
	[ "$status" -eq 0 ]
	[ "$(grep -c -- '-o allow_other' <<<"$output")" -eq 1 ]
}

@test "a second tierfs on a tierfs mount is refused with the first one's pid" {
	tfs_mount
	echo kept >"$MNT/f"
	[ "$(tfs_stat pid)" = "$TFS_PID" ]
	run timeout 20 "$TIERFS_BIN" "$MNT" -o "disk_path=$SPILL"
	echo "$output"
	[ "$status" -eq 1 ]
	[ "$output" = "tierfs: $MNT: already a tierfs mount (pid $TFS_PID); unmount it first" ]
	# Through a relative path and with -o nonempty too: one mount only.
	run bash -c "cd '$TFS_TMP' && timeout 20 '$TIERFS_BIN' mnt -f -o nonempty,disk_path='$SPILL'"
	[ "$status" -eq 1 ]
	[[ "$output" == *"already a tierfs mount (pid $TFS_PID)"* ]]
	[ "$(grep -c " $MNT fuse.tierfs " /proc/mounts)" -eq 1 ]
	[ "$(cat "$MNT/f")" = kept ]
}

@test "a regular file is refused as a mount point" {
	: >"$TFS_TMP/file"
	run timeout 20 "$TIERFS_BIN" "$TFS_TMP/file" -f -o "disk_path=$SPILL"
	echo "$output"
	[ "$status" -eq 1 ]
	[ "$output" = "tierfs: $TFS_TMP/file: not a directory" ]
	! tfs_mounted "$TFS_TMP/file"
}

@test "a directory that is not empty needs -o nonempty" {
	echo under >"$MNT/hidden"
	mount_fails "tierfs: $MNT: directory not empty; mounting would hide its files (-o nonempty to do it anyway)" \
		-f -o "disk_path=$SPILL"
	tfs_mount -o nonempty
	[ ! -e "$MNT/hidden" ]
	tfs_unmount
	[ "$(cat "$MNT/hidden")" = under ]
}

# wait_for CMD...: retry CMD for up to 10 s (30 s for a daemon built with
# the sanitizers, which CI runs beside the normal stage on two cores).
wait_for() {
	local end=$((SECONDS + $(tfs_scale 10 30)))
	while [ $SECONDS -lt $end ]; do
		"$@" && return 0
		sleep 0.05
	done
	"$@"
}

# daemon_mount [ARGS...]: mount without -f, as mount(8) does, outside
# systemd. OUT holds what the command printed.
daemon_mount() {
	local rc=0
	env -u INVOCATION_ID -u JOURNAL_STREAM "$TIERFS_BIN" "$MNT" "$@" \
		>"$TFS_TMP/out" 2>&1 || rc=$?
	OUT=$(cat "$TFS_TMP/out")
	echo "exit $rc: $OUT"
	[ "$rc" -eq 0 ]
	mountpoint -q "$MNT"
	TFS_PID=$(tfs_stat pid)
	export TFS_PID
}

@test "a daemon says nothing on success; its log file records the mount" {
	daemon_mount -o "disk_path=$SPILL,log_file=$TFS_TMP/daemon.log"
	[ -z "$OUT" ]
	# Each line names the mount: several daemons share a log.
	grep -q "tierfs\[$TFS_PID\]: $MNT: mounted on '$MNT'" "$TFS_TMP/daemon.log"
	# So does mount(8) through mount.fuse3.
	tfs_unmount
	command -v mount.fuse3 >/dev/null || skip "no mount.fuse3"
	mkdir -p "$TFS_TMP/bin"
	ln -s "$(readlink -f "$TIERFS_BIN")" "$TFS_TMP/bin/tierfs"
	run env -u INVOCATION_ID -u JOURNAL_STREAM PATH="$TFS_TMP/bin:$PATH" \
		mount.fuse3 none "$MNT" -t tierfs \
		-o "disk_path=$SPILL,log_file=$TFS_TMP/daemon.log"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	TFS_PID=$(tfs_stat pid)
	[ "$(grep -c "mounted on '$MNT'" "$TFS_TMP/daemon.log")" -eq 2 ]
}

@test "a failed SIGHUP is logged, keeps the configuration and shows in the stats" {
	local conf=$TFS_TMP/t.conf
	printf '[host]\nlimit = 64M\n' >"$conf"
	daemon_mount -o "disk_path=$SPILL,config=$conf,log_file=$TFS_TMP/daemon.log"
	[ "$(tfs_stat reloads)" -eq 0 ]
	[ -z "$(tfs_stat reload_error)" ]
	printf '[host]\nlimit = banana\n' >"$conf"
	kill -HUP "$TFS_PID"
	wait_for tfs_stat_is reloads -eq 1
	[ "$(tfs_stat reload_error)" = "$conf:2: limit: 'banana' is not a size: expected a number such as 4096, 64K or 1.5G" ]
	grep -q "error: reload failed, keeping the running configuration: $conf:2: limit: 'banana'" \
		"$TFS_TMP/daemon.log"
	[ "$(tfs_stat host.limit)" -eq $((64 << 20)) ]
	echo still >"$MNT/f"
	[ "$(cat "$MNT/f")" = still ]
	# A good reload clears it, and reopens a log file moved away.
	mv "$TFS_TMP/daemon.log" "$TFS_TMP/daemon.log.1"
	printf '[host]\nlimit = 32M\n' >"$conf"
	kill -HUP "$TFS_PID"
	wait_for tfs_stat_is reloads -eq 2
	[ -z "$(tfs_stat reload_error)" ]
	[ "$(tfs_stat host.limit)" -eq $((32 << 20)) ]
	grep -q "configuration reloaded from '$conf'" "$TFS_TMP/daemon.log"
}

@test "a SIGHUP that shrinks a tier below its pinned buffers applies and says so" {
	local conf=$TFS_TMP/t.conf
	printf '[device]\nbackend = none\n[host]\nlimit = 16M\n' >"$conf"
	daemon_mount -o "disk_path=$SPILL,config=$conf,log_file=$TFS_TMP/daemon.log"
	head -c 6M /dev/urandom >"$TFS_TMP/src"
	cp "$TFS_TMP/src" "$MNT/pinned"
	setfattr -n user.tierfs.pin -v 1 "$MNT/pinned"
	[ "$(tfs_tier "$MNT/pinned")" = host ]
	printf '[device]\nbackend = none\n[host]\nlimit = 4M\n' >"$conf"
	kill -HUP "$TFS_PID"
	wait_for tfs_stat_is reloads -eq 1
	# Applied, not failed: the limit is the new one, the pin holds.
	[ -z "$(tfs_stat reload_error)" ]
	[ "$(tfs_stat host.limit)" -eq $((4 << 20)) ]
	grep -q "reload: host stays over its new limit of 4.0 MiB until buffers pinned, mapped or in use there are released (6.0 MiB used)" \
		"$TFS_TMP/daemon.log"
	grep -q "configuration reloaded from '$conf'" "$TFS_TMP/daemon.log"
	run ! grep -q "reload failed" "$TFS_TMP/daemon.log"
	[ "$(tfs_tier "$MNT/pinned")" = host ]
	# Unpinned, it goes down to the limit.
	setfattr -n user.tierfs.pin -v 0 "$MNT/pinned"
	wait_for tfs_stat_is host.used -le $((4 << 20))
	[ "$(tfs_tier "$MNT/pinned")" = disk ]
	cmp "$TFS_TMP/src" "$MNT/pinned"
}

@test "a log file that cannot be opened stops the mount" {
	mount_fails "-o log_file: cannot open '$TFS_TMP/no/such.log': No such file or directory" \
		-o "disk_path=$SPILL,log_file=$TFS_TMP/no/such.log"
}

@test "under systemd the log goes to stderr, with levels when it is the journal" {
	# A service whose stderr is not the journal: plain lines, kept
	# after the daemon detaches.
	local conf=$TFS_TMP/t.conf
	printf '[host]\nlimit = 64M\n' >"$conf"
	env -u JOURNAL_STREAM INVOCATION_ID=0123456789abcdef "$TIERFS_BIN" \
		"$MNT" -o "disk_path=$SPILL,config=$conf" 2>"$TFS_TMP/err"
	TFS_PID=$(tfs_stat pid)
	grep -qx "tierfs: mounted on '$MNT'" "$TFS_TMP/err"
	printf '[host]\nlimit = 0\n' >"$conf"
	kill -HUP "$TFS_PID"
	wait_for grep -q "reload failed" "$TFS_TMP/err"
	tfs_unmount

	# stderr connected to journald: "<level>message", which journald
	# files under that priority.
	: >"$LOG"
	local js
	js=$(stat -c '%d:%i' "$LOG")
	printf '[host]\nlimit = 64M\n' >"$conf"
	JOURNAL_STREAM=$js tfs_mount -o "config=$conf"
	printf '[host]\nlimit = 0\n' >"$conf"
	kill -HUP "$TFS_PID"
	wait_for grep -q "^<3>reload failed" "$LOG"
	grep -qx "<5>mounted on '$MNT'" "$LOG"
	# The same variable for another stream does not count.
	tfs_unmount
	JOURNAL_STREAM=1:1 tfs_mount
	grep -qx "tierfs: mounted on '$MNT'" "$LOG"
}

# in_private_ns SCRIPT: run SCRIPT in bash in a mount namespace of its own
# (so that it may hide /var/log or /dev from itself alone), with TIERFS_BIN,
# MNT, SPILL and TFS_TMP set. A daemon it starts writes its pid into
# $TFS_TMP/ns.pid, for teardown should the script stop half-way.
in_private_ns() {
	command -v unshare >/dev/null || skip "no unshare"
	env -u INVOCATION_ID -u JOURNAL_STREAM TIERFS_BIN="$TIERFS_BIN" \
		MNT="$MNT" SPILL="$SPILL" TFS_TMP="$TFS_TMP" \
		unshare -m --propagation private bash -euc "$1"
}

# The part of in_private_ns scripts that mounts, checks $1 holds the
# mount's line, unmounts and waits for the daemon to go.
NS_MOUNT='
	"$TIERFS_BIN" "$MNT" -o "disk_path=$SPILL" >"$TFS_TMP/out" 2>&1
	pid=$(getfattr --absolute-names --only-values -n user.tierfs.stats \
		"$MNT" | sed -n "s/^pid=//p")
	echo "$pid" >"$TFS_TMP/ns.pid"
	for i in $(seq 200); do
		grep -q "mounted on .$MNT." "$LOGFILE" 2>/dev/null && break
		sleep 0.05
	done
	cp "$LOGFILE" "$TFS_TMP/got.log" || true
	fusermount3 -u "$MNT"
	for i in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
'

ns_teardown() {
	local pid
	pid=$(cat "$TFS_TMP/ns.pid" 2>/dev/null) || return 0
	[ -n "$pid" ] && kill "$pid" 2>/dev/null || true
}

@test "a daemon with no syslog logs to /var/log/tierfs.log" {
	in_private_ns '
		mount -t tmpfs tfs-test-varlog /var/log
		[ ! -e /dev/log ] || mount --bind /dev/null /dev/log
		LOGFILE=/var/log/tierfs.log
		'"$NS_MOUNT" || { ns_teardown; false; }
	cat "$TFS_TMP/got.log"
	[ ! -s "$TFS_TMP/out" ]
	grep -q "tierfs\[[0-9]*\]: $MNT: mounted on '$MNT'" "$TFS_TMP/got.log"
}

@test "a daemon logs to syslog when /dev/log is there" {
	command -v python3 >/dev/null || skip "no python3"
	in_private_ns '
		d=$TFS_TMP/dev
		mkdir "$d"
		for n in null zero fuse urandom; do
			touch "$d/$n"
			mount --bind "/dev/$n" "$d/$n"
		done
		python3 -c "
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
open(sys.argv[1] + \".ready\", \"w\").close()
with open(sys.argv[2], \"a\") as out:
    while True:
        out.write(s.recv(4096).decode() + \"\\n\")
        out.flush()
" "$d/log" "$TFS_TMP/syslog.txt" &
		listener=$!
		for i in $(seq 200); do [ -e "$d/log.ready" ] && break; sleep 0.05; done
		mount --rbind "$d" /dev
		LOGFILE=$TFS_TMP/syslog.txt
		'"$NS_MOUNT"'
		kill $listener' || { ns_teardown; false; }
	cat "$TFS_TMP/got.log"
	[ ! -s "$TFS_TMP/out" ]
	grep -q "tierfs\[[0-9]*\]: $MNT: mounted on '$MNT'" "$TFS_TMP/got.log"
}

OLD=946684800 # 2000-01-01 00:00:00 UTC

# aged PATH: set PATH's atime back to 2000.
aged() {
	touch -a -d @$OLD "$1"
}

atime() {
	stat -c %X "$1"
}

atime_ns() {
	stat -c %.9X "$1"
}

@test "relatime by default: a read updates an atime older than the mtime, once" {
	tfs_mount
	echo data >"$MNT/f"
	mkdir "$MNT/d"
	aged "$MNT/f"
	aged "$MNT/d"
	cat "$MNT/f" >/dev/null
	[ "$(atime "$MNT/f")" -gt $OLD ]
	local first
	first=$(atime_ns "$MNT/f")
	cat "$MNT/f" >/dev/null
	[ "$(atime_ns "$MNT/f")" = "$first" ]
	# Directory reads count too.
	ls "$MNT/d" >/dev/null
	[ "$(atime "$MNT/d")" -gt $OLD ]
	grep " $MNT " /proc/mounts | grep -q relatime
}

@test "noatime: reads and directory reads leave atime alone" {
	tfs_mount -o noatime
	echo data >"$MNT/f"
	mkdir "$MNT/d"
	aged "$MNT/f"
	aged "$MNT/d"
	cat "$MNT/f" >/dev/null
	ls "$MNT/d" >/dev/null
	[ "$(atime "$MNT/f")" -eq $OLD ]
	[ "$(atime "$MNT/d")" -eq $OLD ]
	grep " $MNT " /proc/mounts | grep -q noatime
	# Writes still set mtime, and an explicit touch still sets atime.
	touch -a "$MNT/f"
	[ "$(atime "$MNT/f")" -gt $OLD ]
}

@test "strictatime: every read updates atime" {
	tfs_mount -o strictatime
	echo data >"$MNT/f"
	cat "$MNT/f" >/dev/null
	local first
	first=$(atime_ns "$MNT/f")
	cat "$MNT/f" >/dev/null
	[ "$(atime_ns "$MNT/f")" != "$first" ]
	# The kernel's flags say the same: neither relatime nor noatime.
	wait_for eval "! grep ' $MNT ' /proc/mounts | grep -qE 'relatime|noatime'"
}

@test "nodiratime: directory reads leave atime, file reads do not" {
	tfs_mount -o nodiratime
	echo data >"$MNT/f"
	mkdir "$MNT/d"
	aged "$MNT/f"
	aged "$MNT/d"
	ls "$MNT/d" >/dev/null
	cat "$MNT/f" >/dev/null
	[ "$(atime "$MNT/d")" -eq $OLD ]
	[ "$(atime "$MNT/f")" -gt $OLD ]
	wait_for eval "grep ' $MNT ' /proc/mounts | grep -q nodiratime"
}

# read_keeps_atime: after aging f, a read leaves its atime (noatime).
read_keeps_atime() {
	aged "$MNT/f"
	cat "$MNT/f" >/dev/null
	[ "$(atime "$MNT/f")" -eq $OLD ]
}

# read_moves_atime: a second read changes the atime (strictatime).
read_moves_atime() {
	local first
	cat "$MNT/f" >/dev/null
	first=$(atime_ns "$MNT/f")
	cat "$MNT/f" >/dev/null
	[ "$(atime_ns "$MNT/f")" != "$first" ]
}

@test "a remount changes the atime flags of the running mount" {
	tfs_mount
	echo data >"$MNT/f"
	run ! read_keeps_atime
	mount -o remount,bind,noatime "$MNT"
	wait_for read_keeps_atime
	grep -q "atime: the mount is now noatime" "$LOG"

	# mount -o remount through mount.fuse3, which runs "tierfs none MNT
	# -o remount,..." with every option of the mount, as mount(8) does.
	command -v mount.fuse3 >/dev/null || skip "no mount.fuse3"
	mkdir -p "$TFS_TMP/bin"
	ln -s "$(readlink -f "$TIERFS_BIN")" "$TFS_TMP/bin/tierfs"
	run env PATH="$TFS_TMP/bin:$PATH" mount.fuse3 none "$MNT" -t tierfs \
		-o "rw,nosuid,nodev,noatime,remount,strictatime,user_id=0,group_id=0,default_permissions"
	echo "$output"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	wait_for read_moves_atime
	[ "$(grep -c " $MNT fuse.tierfs " /proc/mounts)" -eq 1 ]
	# Not on something that is not a tierfs mount.
	run env PATH="$TFS_TMP/bin:$PATH" mount.fuse3 none "$SPILL" -t tierfs \
		-o remount,noatime
	[ "$status" -ne 0 ]
	[[ "$output" == *"tierfs: $SPILL: not a tierfs mount, nothing to remount"* ]]
}

@test "meson install puts every file that the unit and the man pages name" {
	command -v meson >/dev/null || skip "no meson"
	local dest=$TFS_TMP/dest unit exe e m name sec p
	run meson install -C "$TFS_BUILD" --no-rebuild --quiet --destdir "$dest"
	echo "$output"
	[ "$status" -eq 0 ]
	# The build's own layout.
	eval "$(meson introspect --buildoptions "$TFS_BUILD" | python3 -c '
import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
pre = o["prefix"]
def abs_(k):
    v = o[k]
    return v if v.startswith("/") else pre + "/" + v
print("prefix=%s sbindir=%s mandir=%s sysconfdir=%s unitdir=%s" % (
    pre, abs_("sbindir"), abs_("mandir"), abs_("sysconfdir"),
    o["systemdunitdir"] or pre + "/lib/systemd/system"))')"
	unit=$dest$unitdir/tierfs.service
	[ -f "$unit" ]

	# The unit runs the daemon where it was installed...
	exe=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")
	[ "$exe" = "$sbindir/tierfs" ]
	[ -x "$dest$exe" ]
	# ...with the system's own tools for the rest...
	for e in $(sed -n 's/^Exec[A-Za-z]*=-\{0,1\}\([^ ]*\).*/\1/p' "$unit"); do
		echo "$e"
		[ "$e" = "$exe" ] || [ -x "$e" ]
	done
	# ...needs no config file that nothing installs (tierfs reads
	# /etc/tierfs.conf only when it exists)...
	if grep -q 'config=' "$unit"; then
		p=$(sed -n 's/.*config=\([^ ,]*\).*/\1/p' "$unit")
		[ -f "$dest$p" ]
	fi
	# ...and its documentation is installed.
	for m in $(sed -n 's/^Documentation=//p' "$unit"); do
		name=${m#man:}
		sec=${name#*(}
		sec=${sec%)}
		echo "$dest$mandir/man$sec/${name%%(*}.$sec"
		[ -f "$dest$mandir/man$sec/${name%%(*}.$sec" ]
	done

	# Every path under the prefix the man pages name exists.
	for p in $(grep -ohE "$prefix/[A-Za-z0-9_./-]*[A-Za-z0-9_]" "$dest$mandir"/man*/*); do
		echo "$p"
		[ -e "$dest$p" ]
	done
	# Where tierfs(8) says meson install puts tierfs, and the unit.
	p=$(grep -A2 '^\.B meson install$' "$dest$mandir/man8/tierfs.8" |
		sed -n 's/^puts it in \.IR* \([^ ]*\).*/\1/p; s/^\.IR* \([^ ]*\).*/\1/p' | head -1)
	echo "tierfs(8) says: $p"
	[ -x "$dest$p/tierfs" ]
	grep -q "$unitdir/tierfs.service" "$dest$mandir/man8/tierfs.8"
	# tierfs.conf(5): the example in the configuration directory.
	[ -f "$dest$sysconfdir/tierfs.conf.example" ]

	# systemd's own check, with the installed tree where the unit looks
	# for it (a private mount namespace; the prefix is hidden from nobody
	# else).
	if command -v systemd-analyze >/dev/null && command -v unshare >/dev/null; then
		run unshare -m --propagation private sh -c \
			'mount --bind "$1$2" "$2" && systemd-analyze verify "$3"' \
			sh "$dest" "$prefix" "$unitdir/tierfs.service"
		echo "$output"
		[ "$status" -eq 0 ]
		[ -z "$output" ]
	fi
}

@test "the quick start mounts, says where the programs are, and how to unmount" {
	run "$SRC/scripts/quickstart" --build "$TFS_BUILD" "$MNT" \
		-o "disk_path=$SPILL,log_file=$TFS_TMP/daemon.log"
	echo "$output"
	[ "$status" -eq 0 ]
	TFS_PID=$(tfs_stat pid)
	[[ "$output" == *"tierfs is mounted at $MNT"* ]]
	# Each program on PATH, or its exact path, which runs.
	local prog path
	for prog in tierfs tierfsctl; do
		if path=$(command -v $prog); then
			continue
		fi
		path=$(sed -n "s/^$prog is not on PATH; run it as //p" <<<"$output")
		[ -n "$path" ]
		"$path" --version
	done
	[ "${lines[-1]}" = "unmount with: fusermount3 -u $MNT" ]

	# A second run reuses the mount and says so.
	run "$SRC/scripts/quickstart" --build "$TFS_BUILD" "$MNT"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "reusing the tierfs already mounted at $MNT (pid $TFS_PID); its options stay as they are" ]
	[ "$(grep -c " $MNT fuse.tierfs " /proc/mounts)" -eq 1 ]
	[ "${lines[-1]}" = "unmount with: fusermount3 -u $MNT" ]
	# The command it prints works.
	fusermount3 -u "$MNT"
	! tfs_mounted "$MNT"
}

# require_installed PACKAGE: the test reinstalls it, which only an
# installed package does without the network.
require_installed() {
	dpkg-query -W -f='${Status}' "$1" | grep -q 'install ok installed' ||
		skip "$1 is not installed"
}

@test "apt-get-wait waits for another apt's lock instead of failing" {
	command -v apt-get >/dev/null || skip "no apt-get"
	require_installed attr
	# Private copies of apt's lock files, in a mount namespace of its
	# own: the machine's apt and dpkg are not held up.
	in_private_ns '
		for f in /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock \
			/var/cache/apt/archives/lock /var/lib/apt/lists/lock; do
			[ -e "$f" ] || continue
			p=$TFS_TMP/$(echo "$f" | tr / _)
			: >"$p"
			mount --bind "$p" "$f"
		done
		python3 -c "
import fcntl, os, sys, time
f = open(\"/var/lib/dpkg/lock-frontend\", \"w\")
fcntl.lockf(f, fcntl.LOCK_EX)
open(sys.argv[1], \"w\").close()
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
" "$TFS_TMP/held" "$TFS_TMP/release" &
		holder=$!
		for i in $(seq 200); do [ -e "$TFS_TMP/held" ] && break; sleep 0.05; done
		cd "'"$SRC"'"
		scripts/apt-get-wait install -y attr >"$TFS_TMP/apt.out" \
			2>"$TFS_TMP/apt.err" &
		apt=$!
		for i in $(seq 400); do
			grep -q "Waiting for cache lock" "$TFS_TMP/apt.err" && break
			kill -0 $apt 2>/dev/null || break
			sleep 0.05
		done
		kill -0 $apt  # still waiting, not failed
		touch "$TFS_TMP/release"
		wait $holder
		wait $apt
	' || { cat "$TFS_TMP/apt.err" >&2; false; }
	grep -q "attr is already the newest version" "$TFS_TMP/apt.out"
}

@test "the README and tierfsctl(1) write metrics to the same file" {
	local readme man
	readme=$(grep -oE '/var/lib/[^ ]*\.prom' "$SRC/README.md" | sort -u)
	man=$(sed 's/\\-/-/g' "$SRC/man/tierfsctl.1" |
		grep -oE '/var/lib/[^ ]*\.prom' | sort -u)
	echo "README: $readme"
	echo "tierfsctl(1): $man"
	[ -n "$readme" ]
	[ "$readme" = "$man" ]
}

@test "tierfsctl status inside one of several mounts shows that one" {
	tfs_mount
	local other=$TFS_TMP/other pid2
	mkdir -p "$other" "$TFS_TMP/spill2"
	"$TIERFS_BIN" "$other" -f -o "disk_path=$TFS_TMP/spill2" \
		2>"$TFS_TMP/other.log" &
	pid2=$!
	wait_for mountpoint -q "$other"
	mkdir "$MNT/sub" "$other/sub"
	run bash -c "cd '$other/sub' && '$TIERFSCTL_BIN' status --ascii"
	fusermount3 -u "$other"
	wait "$pid2" || true
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "tierfs on $other" ]
	run bash -c "cd '$MNT/sub' && '$TIERFSCTL_BIN' status --json"
	[ "$status" -eq 0 ]
	[[ "$output" == *"\"mount\": \"$MNT\""* ]]
}

@test "tierfsctl metrics -o names the file it was given when it cannot write" {
	tfs_mount
	run "$TIERFSCTL_BIN" metrics -o /nonexistent/dir/x.prom "$MNT"
	echo "$output"
	[ "$status" -ne 0 ]
	[ "$output" = "tierfsctl: cannot write '/nonexistent/dir/x.prom': No such file or directory" ]
}

@test "tierfsctl status shows a failed reload" {
	local conf=$TFS_TMP/t.conf
	printf '[host]\nlimit = 64M\n' >"$conf"
	tfs_mount -o "config=$conf"
	run "$TIERFSCTL_BIN" status --ascii "$MNT"
	[[ "$output" != *"reload"* ]]
	printf '[host]\nlimit = banana\n' >"$conf"
	kill -HUP "$TFS_PID"
	wait_for tfs_stat_is reloads -eq 1
	run "$TIERFSCTL_BIN" status --ascii "$MNT"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[-1]}" = "config   last reload failed: $conf:2: limit: 'banana' is not a size: expected a number such as 4096, 64K or 1.5G" ]
	run "$TIERFSCTL_BIN" status --json "$MNT"
	[[ "$output" == *"\"reload_error\": \"$conf:2: limit: 'banana'"* ]]
}

# require_cuda_build: a build with the cuda backend (the CUDA toolkit was
# there when it was configured).
require_cuda_build() {
	grep -q TFS_HAVE_CUDA "$TFS_BUILD/build.ninja" ||
		skip "built without the cuda backend"
}

# require_no_nvidia_driver: a machine without libcuda.so.1.
require_no_nvidia_driver() {
	! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' ||
		skip "an NVIDIA driver is installed here"
}

@test "without NVIDIA's driver, backend=auto says so in one line and none says nothing" {
	require_cuda_build
	require_no_nvidia_driver
	tfs_mount
	cat "$LOG"
	[ "$(sed -n 1p "$LOG")" = "tierfs: no NVIDIA driver: running without a device tier" ]
	run ! grep -qi cuda "$LOG"
	[ "$(tfs_stat backend)" = none ]
	tfs_unmount
	tfs_mount -o device_backend=none
	run ! grep -qi "nvidia\|cuda" "$LOG"
	tfs_unmount
	# Asked for by name, it is an error that says why.
	run timeout 20 "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,device_backend=cuda"
	echo "$output"
	[ "$status" -eq 1 ]
	# One line that says what to do; the CUDA error is for -d.
	[ "$output" = "tierfs: cannot start the store: device_backend=cuda: no NVIDIA driver here; install it, or mount with device_backend=auto or none" ]
	# A daemon that fails after forking says it on the terminal and in
	# its log.
	run env -u INVOCATION_ID -u JOURNAL_STREAM timeout 20 "$TIERFS_BIN" \
		"$MNT" -o "disk_path=$SPILL,device_backend=cuda,log_file=$TFS_TMP/d.log"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == "tierfs: cannot start the store: device_backend=cuda: no NVIDIA driver"* ]]
	grep -q "error: cannot start the store: device_backend=cuda: no NVIDIA driver" \
		"$TFS_TMP/d.log"
	! tfs_mounted "$MNT"
}

@test "tier names are taken in any case" {
	tfs_mount
	echo data >"$MNT/f"
	setfattr -n user.tierfs.tier -v DISK "$MNT/f"
	[ "$(tfs_tier "$MNT/f")" = disk ]
	setfattr -n user.tierfs.tier -v Host "$MNT/f"
	[ "$(tfs_tier "$MNT/f")" = host ]
	[ "$(cat "$MNT/f")" = data ]
	run setfattr -n user.tierfs.tier -v disks "$MNT/f"
	[ "$status" -ne 0 ]
	[[ "$output" == *"Invalid argument"* ]]
}

# unit_cmd KEY: the command of KEY= in the unit this build installs (the
# "-" that makes systemd ignore a failure dropped), run on $MNT with this
# build's tierfs, as systemd would run it.
unit_cmd() {
	local line
	line=$(sed -n "s/^$1=-\{0,1\}//p" "$TFS_BUILD/config/tierfs.service")
	[ -n "$line" ] || return 1
	line=${line//\/mnt\/tierfs/$MNT}
	sed "s|^[^ ]*/tierfs |$TIERFS_BIN |" <<<"$line"
}

# unit_start INVOCATION: ExecStart in the background, as the unit's run
# INVOCATION ($INVOCATION_ID); waits for the mount. Its stderr (the
# journal) is $TFS_TMP/journal.INVOCATION.
unit_start() {
	local cmd i
	cmd=$(unit_cmd ExecStart)
	env -u JOURNAL_STREAM INVOCATION_ID="$1" ${NOTIFY:+NOTIFY_SOCKET=$NOTIFY} \
		$cmd -o "disk_path=$SPILL${UNIT_OPTS:+,$UNIT_OPTS}" \
		2>"$TFS_TMP/journal.$1" &
	TFS_PID=$!
	for i in $(seq 1 200); do
		mountpoint -q "$MNT" && return 0
		kill -0 "$TFS_PID" 2>/dev/null || break
		sleep 0.05
	done
	cat "$TFS_TMP/journal.$1" >&2
	return 1
}

# unit_stop_post INVOCATION: ExecStopPost, as that run would; OUT and RC
# hold what it printed and its status.
unit_stop_post() {
	local cmd
	cmd=$(unit_cmd ExecStopPost)
	RC=0
	OUT=$(env -u JOURNAL_STREAM INVOCATION_ID="$1" $cmd 2>&1) || RC=$?
	echo "ExecStopPost ($1): exit $RC: $OUT"
}

@test "the unit never unmounts a mount it did not make, and says why it refused" {
	# A tierfs from fstab (or by hand) holds the mount point.
	daemon_mount -o "disk_path=$SPILL"
	local fstab_pid=$TFS_PID
	echo precious >"$MNT/f"
	# The unit starts: ExecStart refuses, then systemd runs ExecStopPost.
	run env -u JOURNAL_STREAM INVOCATION_ID=run1 $(unit_cmd ExecStart) \
		-o "disk_path=$SPILL"
	echo "$output"
	[ "$status" -eq 1 ]
	[ "$output" = "tierfs: $MNT: already a tierfs mount (pid $fstab_pid); unmount it first" ]
	unit_stop_post run1
	[ "$OUT" = "tierfs: $MNT: left mounted: tierfs pid $fstab_pid serves it, and this unit did not start it" ]
	# The fstab mount lives on, with its file.
	mountpoint -q "$MNT"
	[ "$(cat "$MNT/f")" = precious ]
	[ "$(tfs_stat pid)" = "$fstab_pid" ]
	kill -0 "$fstab_pid"
	tfs_unmount

	# Another run's dead mount is left too, with what to do.
	unit_start run2
	local dead=$TFS_PID
	kill -9 "$dead"
	wait "$dead" 2>/dev/null || true
	TFS_PID=
	unit_stop_post run3
	[ "$OUT" = "tierfs: $MNT: left mounted: a dead tierfs mount (pid $dead is gone) that this unit did not make; unmount it with fusermount3 -u $MNT" ]
	grep -q " $MNT fuse.tierfs " /proc/mounts
	# Its own run's dead mount it takes down, so that the restart works.
	unit_stop_post run2
	[ "$RC" -eq 0 ]
	[ "$OUT" = "tierfs: $MNT: unmounted the mount of tierfs pid $dead, which died" ]
	run ! grep -q " $MNT fuse.tierfs " /proc/mounts
	unit_start run4
	echo again >"$MNT/f"
	[ "$(cat "$MNT/f")" = again ]
}

@test "a clean stop of the unit logs nothing after the daemon's own lines" {
	unit_start run1
	echo x >"$MNT/f"
	kill -TERM "$TFS_PID"   # systemctl stop
	wait "$TFS_PID"
	TFS_PID=
	run ! tfs_mounted "$MNT"
	unit_stop_post run1
	[ "$RC" -eq 0 ]
	[ -z "$OUT" ]
	cat "$TFS_TMP/journal.run1"
	run ! grep -i "failed to unmount\|invalid argument" "$TFS_TMP/journal.run1"
	# The same after an unmount from outside.
	unit_start run2
	fusermount3 -u "$MNT"
	wait "$TFS_PID"
	TFS_PID=
	unit_stop_post run2
	[ -z "$OUT" ]
	run ! grep -i "failed to unmount\|invalid argument" "$TFS_TMP/journal.run2"
}

# notify_listen: a socket at $NOTIFY that writes each datagram systemd's
# notify protocol would get, a line per field, to $TFS_TMP/notify.log.
notify_listen() {
	command -v python3 >/dev/null || skip "no python3"
	NOTIFY=$TFS_TMP/notify
	python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
open(sys.argv[1] + ".ready", "w").close()
with open(sys.argv[2], "a") as out:
    while True:
        out.write(s.recv(4096).decode() + "\n")
        out.flush()
' "$NOTIFY" "$TFS_TMP/notify.log" &
	TFS_BG+=($!)
	wait_for test -e "$NOTIFY.ready"
}

@test "the unit is told when the mount is ready, and a long save extends the stop" {
	notify_listen
	UNIT_OPTS=disk_persist=yes unit_start run1
	wait_for grep -qx "READY=1" "$TFS_TMP/notify.log"
	grep -qx "STATUS=mounted on $MNT" "$TFS_TMP/notify.log"
	local i
	for i in $(seq 1 40); do head -c 64K /dev/urandom >"$MNT/f$i"; done
	kill -TERM "$TFS_PID"
	wait "$TFS_PID"
	TFS_PID=
	cat "$TFS_TMP/notify.log"
	grep -qx "STOPPING=1" "$TFS_TMP/notify.log"
	grep -qx "EXTEND_TIMEOUT_USEC=[0-9]*" "$TFS_TMP/notify.log"
	grep -qx "STATUS=saving files: 40 of 40" "$TFS_TMP/notify.log"
	# The unit says so: notify, and a stop timeout for a stalled save.
	grep -qx "Type=notify" "$TFS_BUILD/config/tierfs.service"
	grep -qx "NotifyAccess=main" "$TFS_BUILD/config/tierfs.service"
}

@test "the unit starts after NVIDIA's units where they exist, and wants rather than requires them" {
	local unit=$TFS_BUILD/config/tierfs.service
	grep -q "^After=.*nvidia-persistenced.service" "$unit"
	grep -q "^Wants=.*nvidia-persistenced.service" "$unit"
	run ! grep -q "^Requires=.*nvidia" "$unit"
	# A crash restarts it; a refusal does not loop.
	grep -qx "Restart=on-abnormal" "$unit"
}

@test "fusermount3 -u and a new persistent mount at once: the new daemon waits for the old one's save" {
	tfs_mount -o disk_persist=yes
	local old=$TFS_PID i
	# Enough unsynced bytes that the save takes a while: random, so lz4
	# has them to write whole.
	head -c 96M /dev/urandom >"$TFS_TMP/big"
	for i in 1 2 3; do cp "$TFS_TMP/big" "$MNT/big$i"; done
	for i in $(seq 1 300); do echo "small $i" >"$MNT/s$i"; done
	fusermount3 -u "$MNT"
	# At once: the old daemon is still saving.
	"$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,disk_persist=yes" \
		2>"$TFS_TMP/second.log" &
	TFS_PID=$!
	for i in $(seq 1 1200); do mountpoint -q "$MNT" && break; sleep 0.05; done
	cat "$TFS_TMP/second.log"
	mountpoint -q "$MNT"
	wait "$old"   # it saved and exited cleanly
	grep -q "is held by tierfs pid $old, which is .*: waiting for it to finish (at most 600 s)" \
		"$TFS_TMP/second.log"
	run ! grep -q "in use by another tierfs" "$TFS_TMP/second.log"
	# Everything the old daemon held is back.
	for i in 1 2 3; do cmp "$TFS_TMP/big" "$MNT/big$i"; done
	[ "$(cat "$MNT/s300")" = "small 300" ]
}

@test "a persistent directory in use by a daemon that serves a mount is refused at once" {
	tfs_mount -o disk_persist=yes,disk_name=shared
	mkdir "$TFS_TMP/other"
	run timeout 20 "$TIERFS_BIN" "$TFS_TMP/other" -f \
		-o "disk_path=$SPILL,disk_persist=yes,disk_name=shared"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"is in use by another tierfs (pid $TFS_PID)"* ]]
	[[ "$output" != *"waiting"* ]]
}

@test "a full disk tier is a state: logged when it starts and ends, retried with a back-off" {
	tfs_mount -o device_backend=none,host_limit=16M,disk_limit=16M
	local i errs
	# Host full, disk full: nothing more can spill.
	for i in $(seq 1 8); do
		head -c 4M /dev/urandom >"$MNT/f$i" 2>/dev/null || break
	done
	wait_for tfs_stat_is disk.full -eq 1
	[ "$(tfs_stat disk.full_count)" -eq 1 ]
	errs=$(tfs_stat evict_move_errors)
	# Nothing writes: the spiller backs off (1, 2, 4 s...) instead of
	# failing each buffer every second.
	sleep 6
	cat "$LOG"
	[ "$(tfs_stat evict_move_errors)" -le $((errs + 4)) ]
	[ "$(grep -c "disk tier full: cannot spill buffer" "$LOG")" -eq 1 ]
	run ! grep -q "cannot move buffer" "$LOG"
	[ "$(tfs_stat disk.full)" -eq 1 ]
	run "$TIERFSCTL_BIN" status --ascii "$MNT"
	[[ "$output" == *"disk     full: spilling waits for room (full 1 time since the mount)"* ]]
	run "$TIERFSCTL_BIN" metrics "$MNT"
	[[ "$output" == *"tierfs_disk_full{mount=\"$MNT\"} 1"* ]]
	# Room made: the state ends, once.
	rm "$MNT/f1" "$MNT/f2" "$MNT/f3"
	wait_for tfs_stat_is disk.full -eq 0
	wait_for grep -q "disk tier has room again" "$LOG"
	[ "$(grep -c "disk tier has room again" "$LOG")" -eq 1 ]
	[ "$(tfs_stat disk.full_count)" -eq 1 ]
	head -c 2M /dev/urandom >"$MNT/g"
}

# beyond_tiers: the daemon's RSS less what its tiers and metadata hold, in
# MiB.
beyond_tiers() {
	local rss used meta dev
	rss=$(awk '/^VmRSS:/ {print $2 * 1024}' "/proc/$TFS_PID/status")
	used=$(tfs_stat host.used)
	meta=$(tfs_stat metadata.used)
	dev=$(tfs_stat device.used)
	echo $(((rss - used - meta - dev) >> 20))
}

# ASan's allocator quarantines freed memory; glibc's is what is tested.
require_glibc_allocator() {
	if ldd "$TIERFS_BIN" | grep -q libasan; then
		skip "the daemon is built with ASan's allocator"
	fi
}

@test "memory comes back: write and delete 1 GiB, and the RSS beyond the tiers falls within the bound" {
	require_glibc_allocator
	# The default limits (a host tier of a quarter of RAM), two workers.
	tfs_mount -o device_backend=none,fs_threads=2
	local i bound
	head -c 4M /dev/urandom >"$TFS_TMP/src"
	for i in $(seq 1 256); do cp "$TFS_TMP/src" "$MNT/f$i"; done
	[ "$(tfs_stat host.used)" -ge $((1 << 30)) ]
	rm "$MNT"/f*
	# tierfs(8), MEMORY: 16 MiB of pool + 8 MiB + 1.25 MiB per worker.
	bound=$((16 + 8 + 2 * 5 / 4))
	# The spiller halves the idle pool's surplus once a second: wait for
	# both, not the first one to get there.
	for i in $(seq 1 40); do
		if [ "$(beyond_tiers)" -le "$bound" ] &&
			[ "$(tfs_stat host.pool)" -le $((16 << 20)) ]; then
			break
		fi
		sleep 0.5
	done
	echo "beyond the tiers: $(beyond_tiers) MiB, pool $(tfs_stat host.pool)"
	[ "$(beyond_tiers)" -le "$bound" ]
	[ "$(tfs_stat host.pool)" -le $((16 << 20)) ]
	# Small files and the tails of large ones go back too (the heap).
	head -c 1300000 /dev/urandom >"$TFS_TMP/src"
	for i in $(seq 1 400); do cp "$TFS_TMP/src" "$MNT/g$i"; done
	rm "$MNT"/g*
	for i in $(seq 1 40); do
		[ "$(beyond_tiers)" -le "$bound" ] && break
		sleep 0.5
	done
	echo "beyond the tiers: $(beyond_tiers) MiB, pool $(tfs_stat host.pool)"
	[ "$(beyond_tiers)" -le "$bound" ]
}

@test "a size that is surely a slip is refused with the suffix it lacks" {
	mount_fails "tierfs: -o host_limit: '50' is 50 bytes: did you mean '50M' or '50G'? (a size without K, M, G or T is in bytes)" \
		-f -o "disk_path=$SPILL,host_limit=50"
	mount_fails "tierfs: -o host_limit: 512K is less than one chunk (1M, disk_chunk_size), the least a tier holds" \
		-f -o "disk_path=$SPILL,host_limit=512K"
	mount_fails "tierfs: -o fs_metadata_limit: '8K' is too small, at least 16K" \
		-f -o "disk_path=$SPILL,fs_metadata_limit=8K"
	# A size in bytes that is a size: fine.
	tfs_mount -o host_limit=8388608
	[ "$(tfs_stat host.limit)" -eq $((8 << 20)) ]
}

@test "a key the config file gives twice, and device settings with backend none, are refused" {
	local conf=$TFS_TMP/t.conf
	printf '[host]\nlimit = 1G\n[disk]\nlimit = 2G\n[host]\nlimit = 3G\n' >"$conf"
	mount_fails "tierfs: $conf:6: limit: set again in [host], first on line 2; keep one" \
		-f -o "disk_path=$SPILL,config=$conf"
	mount_fails "tierfs: -o device_limit: set for a device tier, but -o device_backend=none turns it off: drop one of them" \
		-f -o "disk_path=$SPILL,device_limit=1G,device_backend=none"
	printf '[device]\nbackend = none\nlimit = 1G\n' >"$conf"
	mount_fails "tierfs: $conf:3: limit: set for a device tier, but backend = none on line 2 turns it off: drop one of them" \
		-f -o "disk_path=$SPILL,config=$conf"
	# -o device_backend=none over a file that sets the device up turns
	# it off: an override, not a contradiction.
	printf '[device]\nlimit = 1G\n' >"$conf"
	tfs_mount -o "config=$conf,device_backend=none"
	[ "$(tfs_stat backend)" = none ]
}

@test "mount -t fuse.tierfs gives nosuid,nodev by default, as a direct mount does" {
	command -v mount.fuse3 >/dev/null || skip "no mount.fuse3"
	# mount(8) runs the helper with its own PATH: a private mount
	# namespace puts this build's tierfs in /usr/local/sbin for it alone
	# (where mount.fuse3 below finds it too).
	mkdir -p "$TFS_TMP/sbin"
	ln -s "$(readlink -f "$TIERFS_BIN")" "$TFS_TMP/sbin/tierfs"
	in_private_ns '
		mount --bind "$TFS_TMP/sbin" /usr/local/sbin
		export PATH=/usr/local/sbin:$PATH
		opts() { sed -n "s|^[^ ]* $MNT fuse.tierfs \([^ ]*\) .*|\1|p" /proc/self/mounts; }
		gone() { for i in $(seq 200); do mountpoint -q "$MNT" || return 0; sleep 0.05; done; return 1; }
		mount -t fuse.tierfs none "$MNT" -o "disk_path=$SPILL"
		opts >"$TFS_TMP/default"
		umount "$MNT"; gone
		# mount(8) passes no suid or dev on (they are its defaults):
		# mount.fuse3 itself, which appends both, takes them.
		mount.fuse3 none "$MNT" -t tierfs -o "disk_path=$SPILL,suid"
		opts >"$TFS_TMP/suid"
		umount "$MNT"; gone
		mount.fuse3 none "$MNT" -t tierfs -o "disk_path=$SPILL,dev,nosuid"
		opts >"$TFS_TMP/dev"
		umount "$MNT"; gone
		# A remount through mount.fuse3 keeps them.
		mount -t fuse.tierfs none "$MNT" -o "disk_path=$SPILL"
		mount -o remount,noatime "$MNT"
		opts >"$TFS_TMP/remount"
		umount "$MNT"; gone
	'
	local o
	for o in default suid dev remount; do echo "$o: $(cat "$TFS_TMP/$o")"; done
	[[ ",$(cat "$TFS_TMP/default")," == *,nosuid,nodev,* ]]
	[[ ",$(cat "$TFS_TMP/suid")," != *,nosuid,* ]]
	[[ ",$(cat "$TFS_TMP/suid")," == *,nodev,* ]]
	[[ ",$(cat "$TFS_TMP/dev")," == *,nosuid,* ]]
	[[ ",$(cat "$TFS_TMP/dev")," != *,nodev,* ]]
	[[ ",$(cat "$TFS_TMP/remount")," == *,nosuid,nodev,* ]]
	[[ ",$(cat "$TFS_TMP/remount")," == *,noatime,* ]]
}

@test "after kill -9, tierfs on the dead mount names the pid that is gone and what to run" {
	tfs_mount
	local dead=$TFS_PID
	kill -9 "$dead"
	wait "$dead" 2>/dev/null || true
	TFS_PID=
	run timeout 20 "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL"
	echo "$output"
	[ "$status" -eq 1 ]
	[ "$output" = "tierfs: $MNT: the tierfs mounted here is dead (its daemon, pid $dead, is gone); unmount it first: fusermount3 -u $MNT" ]
	fusermount3 -u "$MNT"
	tfs_mount
	echo back >"$MNT/f"
}

@test "recover --list after kill -9 of a persistent daemon that changed nothing says crash" {
	tfs_mount -o disk_persist=yes
	echo kept >"$MNT/f"
	tfs_unmount
	tfs_mount -o disk_persist=yes
	run "$TIERFSCTL_BIN" recover --list "$MNT"
	echo "$output"
	[[ "${lines[0]}" == "$MNT: started after a clean stop in "* ]]
	# Nothing changes, then the daemon dies.
	kill -9 "$TFS_PID"
	wait "$TFS_PID" 2>/dev/null || true
	TFS_PID=
	fusermount3 -u "$MNT"
	tfs_mount -o disk_persist=yes
	run "$TIERFSCTL_BIN" recover --list "$MNT"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == "$MNT: started after a crash or unclean stop in "* ]]
	[ "$(tfs_stat recovery)" = crash ]
	[ "$(cat "$MNT/f")" = kept ]
	# And a clean stop after it is clean again.
	tfs_unmount
	tfs_mount -o disk_persist=yes
	[ "$(tfs_stat recovery)" = clean ]
}

@test "a move to the device of a mount without one says why in the log, once" {
	tfs_mount -o device_backend=none
	echo data >"$MNT/f"
	run setfattr -n user.tierfs.tier -v device "$MNT/f"
	[ "$status" -ne 0 ]
	[[ "$output" == *"No such device"* ]]
	run setfattr -n user.tierfs.tier -v device "$MNT/f"
	[ "$status" -ne 0 ]
	cat "$LOG"
	[ "$(grep -c "a move to the device was refused (ENODEV): this mount has no device tier (backend none); without a GPU, device_backend=sim gives one in host memory" "$LOG")" -eq 1 ]
	[ "$(tfs_tier "$MNT/f")" = host ]
}

@test "meson install refreshes the dynamic linker's cache, but not for a DESTDIR install" {
	command -v unshare >/dev/null || skip "no unshare"
	grep -q "meson-ldconfig" "$TFS_BUILD/meson-private/install.dat"
	# The script as meson runs it, with ldconfig replaced by a recorder
	# in a mount namespace of its own.
	printf '#!/bin/sh\necho ran >>"%s"\n' "$TFS_TMP/ran" >"$TFS_TMP/ldconfig"
	chmod +x "$TFS_TMP/ldconfig"
	run unshare -m --propagation private sh -c '
		for l in /sbin/ldconfig /usr/sbin/ldconfig; do
			[ -e "$l" ] && mount --bind "$1" "$l"
		done
		DESTDIR=/tmp/staged "$2/scripts/meson-ldconfig"
		[ ! -e "$3" ] || exit 3
		env -u DESTDIR "$2/scripts/meson-ldconfig"' \
		sh "$TFS_TMP/ldconfig" "$SRC" "$TFS_TMP/ran"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(cat "$TFS_TMP/ran")" = ran ]
}
