#!/usr/bin/env bats
# Root's own tools and the daemon's log, on paths users can change (issue
# 24, findings 2 to 4): what removes or writes as root must never be led
# outside the mount, or into a file it did not mean, by a name a user
# swaps for a symlink, plants in advance, or renames under it.

load helpers

setup() {
	tfs_setup
	# tierfsctl is part of tierfs: its absence is a failure.
	[ -x "$TIERFSCTL_BIN" ]
	tfs_user bob
	PY=/usr/bin/python3
}

teardown() {
	tfs_teardown
}

ctl() {
	"$TIERFSCTL_BIN" "$@"
}

as() {
	tfs_as "$@"
}

# secret NAME: a file of root's only, holding "secret", in $TFS_TMP/root
# (which bob cannot even look into).
secret() {
	mkdir -p "$TFS_TMP/root"
	chmod 700 "$TFS_TMP/root"
	echo secret >"$TFS_TMP/root/$1"
	chmod 600 "$TFS_TMP/root/$1"
}

# is_secret NAME: it still holds only that.
is_secret() {
	[ "$(cat "$TFS_TMP/root/$1")" = secret ]
}

@test "cleanup never follows a directory a user swaps for a symlink: 500 tries (finding 2)" {
	tfs_mount -o allow_other,device_backend=sim,device_limit=16M,host_limit=16M
	chmod 1777 "$MNT"
	mkdir -p "$TFS_TMP/root/work"
	chmod 700 "$TFS_TMP/root"
	local k
	for k in a b c; do
		echo "$k" >"$TFS_TMP/root/work/$k"
	done
	as "$bob" mkdir -p "$MNT/bob/work"
	as "$bob" ln -s "$TFS_TMP/root" "$MNT/bobl"
	# bob swaps his directory and his symlink as fast as he can, and
	# fills his work directory again whenever root emptied it.
	cat >"$TFS_TMP/swap.py" <<'PY'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
mnt = sys.argv[1].encode()
a, b = mnt + b"/bob", mnt + b"/bobl"
home = os.open(a, os.O_RDONLY | os.O_DIRECTORY)
n = 0
while True:
    if libc.renameat2(-100, a, -100, b, 2) == 0:
        n += 1
    try:
        os.mkdir("work", dir_fd=home)
    except FileExistsError:
        pass
    try:
        os.close(os.open("work/x", os.O_CREAT | os.O_WRONLY, 0o644,
                         dir_fd=home))
    except OSError:
        pass
    if n % 1000 == 0:
        with open(sys.argv[2], "w") as f:
            f.write(str(n))
PY
	chmod 644 "$TFS_TMP/swap.py"
	touch "$TFS_TMP/swaps"
	chmod 666 "$TFS_TMP/swaps"
	tfs_bg_as "$bob" "$PY" "$TFS_TMP/swap.py" "$MNT" "$TFS_TMP/swaps"
	local swapper=$BG_PID removed=0 tries
	# Fewer under the sanitizers (tfs_scale): each sanitized tierfsctl
	# start costs some 0.15 s of CPU, and the swapper spins on the other
	# core all along; the normal stage runs the race 500 times.
	tries=$(tfs_scale 500 100)
	tfs_wait_for test -s "$TFS_TMP/swaps"
	for k in $(seq 1 "$tries"); do
		if ctl cleanup -q "$MNT/bob/work" 2>/dev/null; then
			removed=$((removed + 1))
		fi
	done
	# Under load every try may meet a swap mid-walk and be refused; go
	# on, the swapper still running, until one goes through (at most
	# 30 s more), so that the race is known to have been run.
	local until=$((SECONDS + 30))
	while [ "$removed" -eq 0 ] && [ "$SECONDS" -lt "$until" ]; do
		if ctl cleanup -q "$MNT/bob/work" 2>/dev/null; then
			removed=1
		fi
	done
	kill -0 "$swapper"
	echo "swaps: $(cat "$TFS_TMP/swaps"), cleanups that removed: $removed"
	# The race was run: bob swapped all along, and root's cleanups
	# went through whenever his directory was in place.
	[ "$(cat "$TFS_TMP/swaps")" -ge 1000 ]
	[ "$removed" -gt 0 ]
	# Nothing outside the mount was touched.
	for k in a b c; do
		[ "$(cat "$TFS_TMP/root/work/$k")" = "$k" ]
	done
	[ "$(ls "$TFS_TMP/root/work" | wc -l)" -eq 3 ]
}

@test "cleanup refuses a path that leaves the mount, and a symlink on the way (finding 2)" {
	tfs_mount
	mkdir -p "$MNT/real/work" "$TFS_TMP/out/work"
	touch "$MNT/real/work/f" "$TFS_TMP/out/work/g"
	ln -s "$TFS_TMP/out" "$MNT/away"
	ln -s real "$MNT/link"
	run ctl cleanup "$MNT/away/work"
	echo "$output"
	[ "$status" -eq 1 ]
	[ -e "$TFS_TMP/out/work/g" ]
	# A symlink within the mount, resolved when the command starts, is
	# followed to where it leads then: the tree there goes.
	run ctl cleanup "$MNT/link/work"
	[ "$status" -eq 0 ]
	[ "$output" = "cleanup: '$MNT/link/work': removed 1 file and 1 directory" ]
	[ ! -e "$MNT/real/work" ]
}

@test "recover and reclaim work from a descriptor of the mount's root (finding 2)" {
	tfs_mount -o device_backend=sim,device_limit=16M,disk_persist=yes
	run ctl recover --list "$MNT"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"nothing to recover"* ]]
	head -c 2000000 /dev/urandom >"$MNT/f"
	[ "$(tfs_tier "$MNT/f")" = device ]
	run ctl reclaim "$MNT" 1M
	echo "$output"
	[ "$status" -eq 0 ]
	# Not a mount's root: refused, as before.
	run ctl recover --list "$TFS_TMP"
	[ "$status" -eq 1 ]
}

# plant_tmp DIR PIDFILE: wait for the pid root's metrics will run as, then
# plant, as bob, its old temporary name as a link to a secret of root's.
plant_tmp() {
	local dir=$1 pidfile=$2
	tfs_wait_for test -s "$pidfile"
	as "$bob" ln -s "$TFS_TMP/root/s2" \
		"$dir/tierfs.prom.$(cat "$pidfile").tmp"
}

# metrics_as_planned DIR: root's "tierfsctl metrics -o DIR/tierfs.prom",
# started, then held until bob planted its names, then run; its exit status
# in $TFS_TMP/rc, its output in $TFS_TMP/mout.
metrics_as_planned() {
	local dir=$1
	rm -f "$TFS_TMP/pid" "$TFS_TMP/go"
	mkfifo "$TFS_TMP/go"
	( rc=0
	  sh -c 'echo $$ >"$1"; read x <"$2"; exec "$3" metrics -o "$4" "$5"' \
		sh "$TFS_TMP/pid" "$TFS_TMP/go" "$TIERFSCTL_BIN" \
		"$dir/tierfs.prom" "$MNT" >"$TFS_TMP/mout" 2>&1 || rc=$?
	  echo "$rc" >"$TFS_TMP/rc" ) &
	local runner=$!
	plant_tmp "$dir" "$TFS_TMP/pid"
	echo go >"$TFS_TMP/go"
	wait "$runner"
	cat "$TFS_TMP/mout"
}

@test "metrics -o follows no planted link and refuses a directory others could swap (finding 3)" {
	tfs_mount
	secret s1
	secret s2
	chmod 711 "$TFS_TMP/root"
	# A directory bob may write, not sticky: refused, and nothing of his
	# is followed.
	mkdir "$TFS_TMP/open"
	chmod 777 "$TFS_TMP/open"
	as "$bob" ln -s "$TFS_TMP/root/s1" "$TFS_TMP/open/tierfs.prom"
	metrics_as_planned "$TFS_TMP/open"
	[ "$(cat "$TFS_TMP/rc")" -eq 1 ]
	grep -q "refusing to write '$TFS_TMP/open/tierfs.prom': other users may write its directory '$TFS_TMP/open', which is not sticky" "$TFS_TMP/mout"
	is_secret s1
	is_secret s2
	# bob's own directory: refused too.
	mkdir "$TFS_TMP/bobs"
	chown "$bob" "$TFS_TMP/bobs"
	run ctl metrics -o "$TFS_TMP/bobs/tierfs.prom" "$MNT"
	[ "$status" -eq 1 ]
	[[ "$output" == *"its directory '$TFS_TMP/bobs' belongs to uid"* ]]
	[ ! -e "$TFS_TMP/bobs/tierfs.prom" ]
	# Sticky, as /tmp: written, under a name nobody could plant, and
	# bob's links are replaced, never followed.
	mkdir "$TFS_TMP/sticky"
	chmod 1777 "$TFS_TMP/sticky"
	as "$bob" ln -s "$TFS_TMP/root/s1" "$TFS_TMP/sticky/tierfs.prom"
	metrics_as_planned "$TFS_TMP/sticky"
	[ "$(cat "$TFS_TMP/rc")" -eq 0 ]
	is_secret s1
	is_secret s2
	[ -f "$TFS_TMP/sticky/tierfs.prom" ]
	[ ! -L "$TFS_TMP/sticky/tierfs.prom" ]
	[ "$(stat -c %U "$TFS_TMP/sticky/tierfs.prom")" = root ]
	grep -q '^# TYPE tierfs_tier_used_bytes gauge$' "$TFS_TMP/sticky/tierfs.prom"
	# bob's planted temporary is his still; no temporary of ours is left.
	[ -L "$TFS_TMP/sticky/tierfs.prom.$(cat "$TFS_TMP/pid").tmp" ]
	[ "$(find "$TFS_TMP/sticky" -name '*.tmp' ! -user "$bob" | wc -l)" -eq 0 ]
}

@test "log_file: no link is followed, at start or at SIGHUP, and no directory others could swap it in (finding 4)" {
	secret s
	# A directory bob may write, not sticky, and one of his: refused at
	# start, with why.
	mkdir "$TFS_TMP/open" "$TFS_TMP/bobs"
	chmod 777 "$TFS_TMP/open"
	chown "$bob" "$TFS_TMP/bobs"
	run timeout 20 "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,log_file=$TFS_TMP/open/t.log"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"log_file: refusing '$TFS_TMP/open/t.log': other users may write its directory '$TFS_TMP/open', which is not sticky"* ]]
	[ ! -e "$TFS_TMP/open/t.log" ]
	run timeout 20 "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,log_file=$TFS_TMP/bobs/t.log"
	[ "$status" -eq 1 ]
	[[ "$output" == *"its directory '$TFS_TMP/bobs' belongs to uid"* ]]
	# A link at start.
	mkdir "$TFS_TMP/logs"
	ln -s "$TFS_TMP/root/s" "$TFS_TMP/logs/t.log"
	run timeout 20 "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,log_file=$TFS_TMP/logs/t.log"
	[ "$status" -eq 1 ]
	[[ "$output" == *"log_file: refusing '$TFS_TMP/logs/t.log': it is a symlink"* ]]
	is_secret s
	# A link planted where the log was, before a SIGHUP (as a rotation
	# that moved it would leave the name free): the daemon keeps writing
	# the file it has and touches nothing else.
	rm "$TFS_TMP/logs/t.log"
	tfs_mount -o "log_file=$TFS_TMP/logs/t.log"
	mv "$TFS_TMP/logs/t.log" "$TFS_TMP/logs/t.log.1"
	ln -s "$TFS_TMP/root/s" "$TFS_TMP/logs/t.log"
	kill -HUP "$TFS_PID"
	tfs_wait_for tfs_stat_is reloads -eq 1
	is_secret s
	grep -q "t.log': it is a symlink" "$TFS_TMP/logs/t.log.1"
	[ -L "$TFS_TMP/logs/t.log" ]
	# Once the name is free again, the next SIGHUP opens a new file.
	rm "$TFS_TMP/logs/t.log"
	kill -HUP "$TFS_PID"
	tfs_wait_for tfs_stat_is reloads -eq 2
	tfs_wait_for grep -q "configuration reloaded" "$TFS_TMP/logs/t.log"
	is_secret s
}
