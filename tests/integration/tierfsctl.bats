#!/usr/bin/env bats
# tierfsctl against a real mount: every subcommand's output checked against
# the xattrs it is drawn from.

load helpers

setup() {
	tfs_setup
	tfs_mount -o device_backend=sim,device_limit=4M,host_limit=8M
	[ -x "$TIERFSCTL_BIN" ]
	PY=/usr/bin/python3
	[ -x "$PY" ] || PY=python3
}

teardown() {
	tfs_teardown
}

ctl() {
	"$TIERFSCTL_BIN" "$@"
}

# write_files N: N files of 1 MiB, f01 oldest, each closed before the next
write_files() {
	local i
	for i in $(seq -w 1 "$1"); do
		head -c 1048576 /dev/urandom >"$MNT/f$i"
		sleep 0.02
	done
}

# Wait until the background spiller is done: every tier within its limit
# and the stats unchanged over 0.1 s, so that what tierfsctl prints and what
# the test reads next are the same numbers.
settle() {
	local i t used limit ok a b
	for i in $(seq 1 100); do
		a=$(getfattr --only-values -n user.tierfs.stats "$MNT")
		sleep 0.1
		b=$(getfattr --only-values -n user.tierfs.stats "$MNT")
		ok=1
		[ "$a" = "$b" ] || ok=0
		for t in device host; do
			used=$(tfs_stat $t.used)
			limit=$(tfs_stat $t.limit)
			[ "$limit" -eq 0 ] || [ "$used" -le "$limit" ] || ok=0
		done
		[ $ok -eq 1 ] && return 0
	done
	echo "tierfs did not settle" >&2
	return 1
}

@test "status shows every tier with the numbers of the stats xattr" {
	write_files 16
	settle
	run ctl status --ascii "$MNT"
	[ "$status" -eq 0 ]
	echo "$output"
	[[ "$output" == *"tierfs on $MNT"* ]]
	[[ "$output" == *"backend  sim"* ]]
	[[ "$output" == *"simulated"* ]]
	local stats t used limit bufs refused
	stats=$(getfattr --only-values -n user.tierfs.stats "$MNT")
	for t in device host disk; do
		used=$(tfs_stat $t.used)
		limit=$(tfs_stat $t.limit)
		bufs=$(tfs_stat $t.buffers)
		refused=$(tfs_stat $t.enospc)
		# the tier's row ends with its buffer count and its refusals
		echo "$output" | grep -E "^$t +.* $bufs +$refused\$"
		# the ASCII bar is drawn from used/limit
		if [ "$limit" -gt 0 ]; then
			pct=$(( (used * 100 + limit / 2) / limit ))
			echo "$output" | grep -E "^$t +.*\[[#.]{8,}\] +$pct%"
		fi
	done
	echo "$output" | grep -E "^files +$(tfs_stat files), "
	# never wider than a terminal
	[ "$(echo "$output" | awk '{ print length($0) }' | sort -n | tail -1)" -le 80 ]
	# no sleep and no rates without --interval
	[[ "$output" != *"SPILL/S"* ]]
}

@test "status --interval samples twice and shows rates" {
	write_files 2
	run ctl status --interval 0.2 "$MNT"
	[ "$status" -eq 0 ]
	[[ "$output" == *"SPILL/S"* ]]
	[[ "$output" == *"rates    over the last 0."* ]]
}

@test "status --json parses and matches the stats xattr" {
	write_files 16
	settle
	run ctl status --json "$MNT"
	[ "$status" -eq 0 ]
	echo "$output" | "$PY" -m json.tool >/dev/null
	local js=$output
	getfattr --only-values -n user.tierfs.stats "$MNT" >"$TFS_TMP/stats"
	echo "$js" | "$PY" -c '
import json, sys
j = json.load(sys.stdin)
kv = dict(l.split("=", 1) for l in open(sys.argv[1]).read().splitlines() if "=" in l)
assert j["mount"] == sys.argv[2], j["mount"]
assert j["backend"] == kv["backend"] == "sim"
assert j["version"] == 1
for k in ("files", "logical_bytes", "evict_nothing_movable",
          "evict_move_errors", "checksum_errors", "spill_read_errors",
          "spill_write_errors", "spill_punch_errors", "host_alloc_failures"):
    assert j[k] == int(kv[k]), k
for t in ("device", "host", "disk"):
    for f in ("used", "limit", "buffers", "spill_bytes", "unspill_bytes",
              "spills", "unspills", "enospc"):
        assert j["tiers"][t][f] == int(kv[t + "." + f]), (t, f)
assert j["tiers"]["device"]["limit"] == 4 << 20
assert j["tiers"]["host"]["limit"] == 8 << 20
assert j["files"] == 16
' "$TFS_TMP/stats" "$MNT"
}

@test "status --json --interval adds rates" {
	run ctl status --json -i 0.1 "$MNT"
	[ "$status" -eq 0 ]
	echo "$output" | "$PY" -c '
import json, sys
j = json.load(sys.stdin)
assert j["interval_s"] > 0
for t in ("device", "host", "disk"):
    assert j["tiers"][t]["spill_bytes_per_s"] >= 0
'
}

@test "status --watch --count stops after N samples" {
	run ctl status --watch -i 0.05 -n 3 --ascii "$MNT"
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | grep -c "^tierfs on ")" -eq 3 ]
}

@test "status without MOUNT takes the only tierfs mount, or names them all" {
	local n k
	# Other tests on this machine may mount and unmount beside this one:
	# judge a run of status only if the count of mounts held across it.
	for k in $(seq 20); do
		n=$(tierfs_mounts)
		run ctl status --ascii
		[ "$(tierfs_mounts)" != "$n" ] || break
	done
	if [ "$n" -eq 1 ]; then
		[ "$status" -eq 0 ]
		[[ "$output" == *"tierfs on $MNT"* ]]
	else
		[ "$status" -eq 1 ]
		[[ "${lines[0]}" == "tierfsctl: "*" tierfs mounts; name one, or run this inside it:" ]]
		echo "$output" | grep -Fx "  $MNT"
	fi
}

# tierfs_mounts: how many tierfs mounts this mount namespace has.
tierfs_mounts() {
	awk '{ for (i = 7; i <= NF; i++) if ($i == "-") { print $(i + 1); break } }' \
		/proc/self/mountinfo | grep -c '^fuse\.tierfs$' || true
}

@test "any path on the mount names it" {
	mkdir "$MNT/dir"
	run ctl status --json "$MNT/dir"
	[ "$status" -eq 0 ]
	[[ "$output" == *"\"mount\": \"$MNT\""* ]]
}

@test "a mount without a device tier: status says so, prefetch goes to host" {
	tfs_unmount
	tfs_mount -o device_backend=none,host_limit=8M
	write_files 2
	settle
	run ctl status --ascii "$MNT"
	[ "$status" -eq 0 ]
	echo "$output" | grep -E '^device +0 B +- +\(no device tier\) +0 +0$'
	[[ "$output" == *"backend  none"* ]]
	run ctl status --json "$MNT"
	echo "$output" | "$PY" -c '
import json, sys
j = json.load(sys.stdin)
assert j["backend"] == "none" and j["tiers"]["device"]["limit"] == 0
'
	ctl spill -q "$MNT/f1"
	[ "$(tfs_tier "$MNT/f1")" = disk ]
	run ctl prefetch --wait "$MNT/f1"
	[ "$status" -eq 0 ]
	[ "$output" = "prefetch: 1 file (1.0 MiB) moved to host" ]
	[ "$(tfs_tier "$MNT/f1")" = host ]
	ctl spill -q "$MNT/f1"
	run ctl prefetch --to device "$MNT/f1"
	[ "$status" -eq 1 ]
	[[ "$output" == *"tierfsctl: prefetch: '$MNT/f1': No such device (the mount has no device tier)"* ]]
	[ "$(tfs_tier "$MNT/f1")" = disk ]
}

@test "ls shows each file's tier: the oldest on disk, the newest on device" {
	write_files 16
	settle
	run ctl ls "$MNT"
	[ "$status" -eq 0 ]
	echo "$output"
	[ "${lines[0]}" = "$(echo "${lines[0]}" | grep -E '^TIER +SIZE +STORED +LAST ACCESS +PINS +NAME$')" ]
	[ "${#lines[@]}" -eq 17 ]
	local i f
	for i in $(seq -w 1 16); do
		f=f$i
		echo "$output" | grep -E "^$(tfs_tier "$MNT/$f") +1048576 +[0-9]+ +[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} +0  $f\$"
	done
	[ "$(tfs_tier "$MNT/f01")" = disk ]
	[ "$(tfs_tier "$MNT/f16")" = device ]
	echo "$output" | grep -E '^disk +.* f01$'
	echo "$output" | grep -E '^device +.* f16$'
	# sorted by name by default
	[[ "${lines[1]}" == *" f01" ]]
	[[ "${lines[16]}" == *" f16" ]]
}

@test "ls sorts by size, tier and name, and -r reverses" {
	head -c 3000 /dev/urandom >"$MNT/b"
	head -c 1000 /dev/urandom >"$MNT/c"
	head -c 2000 /dev/urandom >"$MNT/a"
	run ctl ls -s size "$MNT"
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | awk 'NR > 1 { print $NF }' | tr '\n' ' ')" = "b a c " ]
	run ctl ls -s size -r "$MNT"
	[ "$(echo "$output" | awk 'NR > 1 { print $NF }' | tr '\n' ' ')" = "c a b " ]
	run ctl ls -s name "$MNT"
	[ "$(echo "$output" | awk 'NR > 1 { print $NF }' | tr '\n' ' ')" = "a b c " ]
	ctl spill -q "$MNT/a"
	run ctl ls -s tier "$MNT"
	[ "$(echo "$output" | awk 'NR > 1 { print $NF }' | tail -1)" = a ]
	run ctl ls -s bogus "$MNT"
	[ "$status" -eq 2 ]
	[[ "$output" == *"unknown column 'bogus'"* ]]
}

@test "ls --json parses; -R walks directories; -h prints human sizes" {
	write_files 3
	mkdir -p "$MNT/d/e"
	head -c 5000 /dev/urandom >"$MNT/d/e/x"
	run ctl ls --json "$MNT"
	[ "$status" -eq 0 ]
	echo "$output" | "$PY" -c '
import json, sys
j = json.load(sys.stdin)
by = {e["path"]: e for e in j}
assert by["d"]["type"] == "directory"
for n in ("f1", "f2", "f3"):
    e = by[n]
    assert e["type"] == "file" and e["size"] == 1048576, e
    assert e["tier"] in ("device", "host", "disk")
    assert e["last_access_ns"] > 10**18 and e["pins"] == 0
'
	run ctl ls -R --json "$MNT"
	echo "$output" | "$PY" -c '
import json, sys
j = json.load(sys.stdin)
assert [e["path"] for e in j] == ["d/e/x", "f1", "f2", "f3"], j
assert j[0]["size"] == 5000
'
	run ctl ls -h "$MNT/f1"
	[[ "$output" == *"1.0 MiB"*"$MNT/f1" ]]
}

@test "spill moves a file to disk, prefetch brings it back up" {
	write_files 2
	settle
	[ "$(tfs_tier "$MNT/f2")" != disk ]
	run ctl spill "$MNT/f2"
	[ "$status" -eq 0 ]
	[ "$output" = "spill: 1 file (1.0 MiB) moved to disk" ]
	[ "$(tfs_tier "$MNT/f2")" = disk ]
	run ctl prefetch --wait --to host "$MNT/f2"
	[ "$status" -eq 0 ]
	[ "$(tfs_tier "$MNT/f2")" = host ]
	run ctl prefetch --wait "$MNT/f2"
	[ "$status" -eq 0 ]
	[ "$(tfs_tier "$MNT/f2")" = device ]
	# a file already as low as asked is left alone
	ctl spill -q "$MNT/f2"
	run ctl spill --to host "$MNT/f2"
	[ "$status" -eq 0 ]
	[[ "$output" == *"0 files (0 B) moved to host, 1 already there or lower" ]]
	[ "$(tfs_tier "$MNT/f2")" = disk ]
	run ctl spill --to device "$MNT/f2"
	[ "$status" -eq 2 ]
}

@test "spill -R moves a whole tree; a directory without -R is refused" {
	mkdir -p "$MNT/d/e"
	head -c 100000 /dev/urandom >"$MNT/d/a"
	head -c 100000 /dev/urandom >"$MNT/d/e/b"
	run ctl spill "$MNT/d"
	[ "$status" -eq 1 ]
	[[ "$output" == *"tierfsctl: spill: '$MNT/d': Is a directory"* ]]
	run ctl spill -R "$MNT/d"
	[ "$status" -eq 0 ]
	[[ "$output" == *"2 files"* ]]
	[ "$(tfs_tier "$MNT/d/a")" = disk ]
	[ "$(tfs_tier "$MNT/d/e/b")" = disk ]
}

@test "a pinned file does not move; unpin lets it go" {
	write_files 2
	settle
	local before
	before=$(tfs_tier "$MNT/f2")
	[ "$before" != disk ]
	run ctl pin "$MNT/f2"
	[ "$status" -eq 0 ]
	[ "$output" = "pin: 1 file pinned" ]
	[ "$(getfattr --only-values -n user.tierfs.pins "$MNT/f2")" -ge 1 ]
	run ctl spill "$MNT/f2" "$MNT/f1"
	echo "$output"
	[ "$status" -eq 1 ]
	[[ "$output" == *"tierfsctl: spill: '$MNT/f2': Device or resource busy"* ]]
	[[ "$output" == *", 1 failed"* ]]
	[ "$(tfs_tier "$MNT/f2")" = "$before" ]
	[ "$(tfs_tier "$MNT/f1")" = disk ]
	run ctl unpin "$MNT/f2"
	[ "$status" -eq 0 ]
	[ "$output" = "unpin: 1 file unpinned" ]
	[ "$(getfattr --only-values -n user.tierfs.pins "$MNT/f2")" -eq 0 ]
	run ctl spill "$MNT/f2"
	[ "$status" -eq 0 ]
	[ "$(tfs_tier "$MNT/f2")" = disk ]
}

@test "metrics is valid Prometheus text with HELP and TYPE per family" {
	write_files 16
	settle
	run ctl metrics "$MNT"
	[ "$status" -eq 0 ]
	echo "$output" >"$TFS_TMP/metrics"
	"$PY" - "$TFS_TMP/metrics" "$MNT" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
mount = sys.argv[2]
name = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
label = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
sample = re.compile(r"^(%s)(\{%s(?:,%s)*\})? (-?[0-9.eE+-]+|NaN|[+-]Inf)( -?[0-9]+)?$"
                    % (name, label, label))
help_ = re.compile(r"^# HELP (%s) .+$" % name)
type_ = re.compile(r"^# TYPE (%s) (counter|gauge|histogram|summary|untyped)$" % name)
helped, typed, seen, values = set(), {}, set(), {}
for line in text.splitlines():
    m = help_.match(line)
    if m:
        assert m.group(1) not in seen, line
        helped.add(m.group(1))
        continue
    m = type_.match(line)
    if m:
        assert m.group(1) in helped, "TYPE before HELP: " + line
        assert m.group(1) not in seen, line
        typed[m.group(1)] = m.group(2)
        continue
    assert not line.startswith("#"), line
    m = sample.match(line)
    assert m, "bad sample line: %r" % line
    n = fam = m.group(1)
    # a histogram's samples are its name with _bucket, _sum, _count
    for suf in ("_bucket", "_sum", "_count"):
        if n.endswith(suf) and typed.get(n[:-len(suf)]) == "histogram":
            fam = n[:-len(suf)]
    assert fam in helped and fam in typed, "no HELP/TYPE before " + line
    seen.add(fam)
    values[(n, m.group(2) or "")] = m.group(3)
    if typed[fam] == "counter":
        assert n.endswith("_total"), n
for n, t in typed.items():
    if n.endswith("_total"):
        assert t == "counter", n
want = ["tierfs_tier_used_bytes", "tierfs_tier_limit_bytes",
        "tierfs_tier_buffers", "tierfs_files", "tierfs_logical_bytes",
        "tierfs_tier_spill_bytes_total", "tierfs_tier_unspill_bytes_total",
        "tierfs_tier_spills_total", "tierfs_tier_unspills_total",
        "tierfs_tier_enospc_total",
        "tierfs_evict_nothing_movable_total",
        "tierfs_evict_move_errors_total", "tierfs_checksum_errors_total",
        "tierfs_spill_read_errors_total", "tierfs_spill_write_errors_total",
        "tierfs_host_alloc_failures_total"]
for n in want:
    assert n in seen, "missing " + n
lbl = lambda t: '{tier="%s",mount="%s"}' % (t, mount)
assert values[("tierfs_tier_limit_bytes", lbl("device"))] == str(4 << 20)
assert values[("tierfs_tier_limit_bytes", lbl("host"))] == str(8 << 20)
assert values[("tierfs_files", '{mount="%s"}' % mount)] == "16"
EOF
	# the numbers are the stats xattr's
	local t
	for t in device host disk; do
		grep -Fx "tierfs_tier_used_bytes{tier=\"$t\",mount=\"$MNT\"} $(tfs_stat $t.used)" "$TFS_TMP/metrics"
		grep -Fx "tierfs_tier_spills_total{tier=\"$t\",mount=\"$MNT\"} $(tfs_stat $t.spills)" "$TFS_TMP/metrics"
	done
}

@test "metrics -o writes the file whole, for the textfile collector" {
	run ctl metrics -o "$TFS_TMP/tierfs.prom" "$MNT"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
	grep -q '^# TYPE tierfs_files gauge$' "$TFS_TMP/tierfs.prom"
	[ "$(ls "$TFS_TMP" | grep -c '\.tmp$' || true)" -eq 0 ]
}

@test "cleanup removes a tree on the mount but never the mount root" {
	mkdir -p "$MNT/worker-1/a/b"
	head -c 10000 /dev/urandom >"$MNT/worker-1/a/b/x"
	echo y >"$MNT/worker-1/y"
	run ctl cleanup "$MNT/worker-1"
	[ "$status" -eq 0 ]
	[ "$output" = "cleanup: '$MNT/worker-1': removed 2 files and 3 directories" ]
	[ ! -e "$MNT/worker-1" ]
	[ "$(tfs_stat files)" -eq 0 ]
	run ctl cleanup "$MNT"
	[ "$status" -eq 1 ]
	[[ "$output" == *"refusing to remove the mount root"* ]]
	run ctl cleanup "$TFS_TMP"
	[ "$status" -eq 1 ]
	[[ "$output" == *"not on a tierfs mount"* ]]
}

@test "errors: not tierfs, missing file, unknown command, bad flag" {
	run ctl status /tmp
	[ "$status" -eq 1 ]
	[ "$output" = "tierfsctl: '/tmp': not on a tierfs mount" ]
	run ctl ls /tmp
	[ "$status" -eq 1 ]
	[ "$output" = "tierfsctl: '/tmp': not on a tierfs mount" ]
	run ctl spill "$TFS_TMP/tierfs.log"
	[ "$status" -eq 1 ]
	[[ "$output" == *"not on a tierfs mount"* ]]
	run ctl spill "$MNT/missing"
	[ "$status" -eq 1 ]
	[ "$output" = "tierfsctl: '$MNT/missing': No such file or directory" ]
	run ctl ls "$MNT/missing"
	[ "$status" -eq 1 ]
	[ "$output" = "tierfsctl: '$MNT/missing': No such file or directory" ]
	run ctl frobnicate
	[ "$status" -eq 2 ]
	[[ "${lines[0]}" == "tierfsctl: unknown command 'frobnicate'" ]]
	[[ "$output" == *"usage: tierfsctl"* ]]
	run ctl status --frob "$MNT"
	[ "$status" -eq 2 ]
	[[ "$output" == *"unknown option '--frob'"* ]]
	run ctl spill
	[ "$status" -eq 2 ]
	run ctl
	[ "$status" -eq 2 ]
	# usage errors go to stderr only
	[ -z "$(ctl frobnicate 2>/dev/null)" ]
}

@test "--help and --version" {
	run ctl --help
	[ "$status" -eq 0 ]
	[[ "$output" == *"usage: tierfsctl COMMAND"* ]]
	[[ "$output" == *"metrics"* ]]
	run ctl --version
	[ "$status" -eq 0 ]
	[[ "$output" == "tierfsctl (tierfs) "[0-9]* ]]
	run ctl spill --help
	[ "$status" -eq 0 ]
}

@test "the man page renders without warnings" {
	local page=$BATS_TEST_DIRNAME/../../man/tierfsctl.1
	[ -f "$page" ]
	command -v groff >/dev/null || skip "no groff"
	run groff -man -ww -z "$page"
	[ "$status" -eq 0 ]
	[ -z "$output" ]
}
