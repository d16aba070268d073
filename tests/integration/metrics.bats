#!/usr/bin/env bats
# The metrics users ask for: reads by the tier that served them, moves per
# direction (count, bytes, latency histogram), why spills did not happen,
# prefetches; in user.tierfs.stats and tierfsctl metrics, the latter read
# back with Prometheus' own parser (python3-prometheus-client).

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

# snap: the stats now, into $TFS_TMP/snap.N (N counting up)
SNAPS=0
snap() {
	SNAPS=$((SNAPS + 1))
	getfattr --only-values -n user.tierfs.stats "$MNT" >"$TFS_TMP/snap.$SNAPS"
}

# delta KEY: how much KEY grew between the last two snaps
delta() {
	local a b
	a=$(sed -n "s/^$1=//p" "$TFS_TMP/snap.$((SNAPS - 1))")
	b=$(sed -n "s/^$1=//p" "$TFS_TMP/snap.$SNAPS")
	echo $((b - a))
}

# moved PATTERN: every number of the stats that changed between the last
# two snaps, "key=delta" sorted, but for keys matching PATTERN (timings)
moved() {
	local skip="$1"
	sort "$TFS_TMP/snap.$((SNAPS - 1))" >"$TFS_TMP/a"
	sort "$TFS_TMP/snap.$SNAPS" >"$TFS_TMP/b"
	join -t= "$TFS_TMP/a" "$TFS_TMP/b" |
		awk -F= '$2 ~ /^[0-9]+$/ && $3 != $2 { print $1 "=" ($3 - $2) }' |
		grep -Ev "${skip:-^\$}" | sort
}

# The parser is Debian's python3-prometheus-client (scripts/install-deps).
require_prometheus_client() {
	"$PY" -c 'import prometheus_client' 2>/dev/null ||
		skip "python3-prometheus-client is not installed (scripts/install-deps)"
}

rd() { # rd FILE COUNT [FLAGS]: COUNT reads of 64 KiB the kernel does not cache
	dd if="$1" of=/dev/null bs=65536 count="$2" iflag="direct${3:+,$3}" status=none
}

@test "reads count under the tier whose copy served them, and per GPU" {
	"$PY" "$PF" alloc "$MNT/dev" 131072
	head -c 1M /dev/urandom >"$MNT/f"
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	snap
	rd "$MNT/dev" 2
	snap
	[ "$(delta device.reads)" -eq 2 ]
	[ "$(delta device.read_bytes)" -eq 131072 ]
	[ "$(delta device0.reads)" -eq 2 ]
	[ "$(delta device0.read_bytes)" -eq 131072 ]
	[ "$(delta host.reads)" -eq 0 ]
	# O_NOATIME: no unspill, so the disk copy serves them
	rd "$MNT/f" 3 noatime
	snap
	[ "$(delta disk.reads)" -eq 3 ]
	[ "$(delta disk.read_bytes)" -eq 196608 ]
	[ "$(delta device.reads)" -eq 0 ]
	[ "$(tfs_tier "$MNT/f")" = disk ]
	setfattr -n user.tierfs.tier -v host "$MNT/f"
	snap
	rd "$MNT/f" 1
	snap
	[ "$(delta host.reads)" -eq 1 ]
	[ "$(delta host.read_bytes)" -eq 65536 ]
	[ "$(delta disk.reads)" -eq 0 ]
}

@test "each move counts once under its direction, with its bytes and a histogram" {
	head -c 1M /dev/urandom >"$MNT/f"
	[ "$(tfs_tier "$MNT/f")" = device ]
	snap
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	snap
	# of every move, spill and read counter, only these moved
	run moved 'sum_ns='
	echo "$output"
	[ "$(grep -E '^(move|spill_|prefetch|[a-z0-9]+\.(reads|read_bytes|spills|unspills)=)' <<<"$output")" = \
		"$(printf '%s\n' device.spills=1 move.device.disk.bytes=1048576 \
			move.device.disk.count=1)" ]
	[ "$(delta move.device.disk.count)" -eq 1 ]
	[ "$(delta move.device.disk.bytes)" -eq 1048576 ]
	"$PY" "$BATS_TEST_DIRNAME/prefetch.py" ioctl "$MNT/f" host wait
	snap
	[ "$(delta move.disk.host.count)" -eq 1 ]
	[ "$(delta move.disk.host.bytes)" -eq 1048576 ]
	[ "$(delta prefetch.queued)" -eq 1 ]
	[ "$(delta prefetch.done)" -eq 1 ]
	setfattr -n user.tierfs.tier -v device "$MNT/f"
	snap
	[ "$(delta move.host.device.count)" -eq 1 ]
	[ "$(delta move.disk.device.count)" -eq 0 ]
	# the +Inf bucket is the count; the buckets only grow
	local b
	b=$(sed -n 's/^move.device.disk.buckets=//p' "$TFS_TMP/snap.$SNAPS")
	[ "${b##*,}" -le 1 ]
	[ "$(sed -n 's/^move.device.disk.count=//p' "$TFS_TMP/snap.$SNAPS")" -eq 1 ]
}

@test "a scan that finds only pinned buffers counts one spill skipped" {
	head -c 3M /dev/urandom >"$MNT/p"
	setfattr -n user.tierfs.tier -v device "$MNT/p"
	setfattr -n user.tierfs.pin -v 1 "$MNT/p"
	head -c 2M /dev/urandom >"$MNT/q"
	setfattr -n user.tierfs.tier -v host "$MNT/q"
	snap
	run ! setfattr -n user.tierfs.tier -v device "$MNT/q"
	snap
	[ "$(delta spill_skipped.nothing_movable)" -eq 1 ]
	[ "$(delta spill_dropped.no_room_below)" -eq 0 ]
	[ "$(delta spill_failed.eio)" -eq 0 ]
	run "$TIERFSCTL_BIN" metrics "$MNT"
	[[ "$output" == *"tierfs_spills_skipped_total{reason=\"nothing_movable\",mount=\"$MNT\"} $(tfs_stat spill_skipped.nothing_movable)"* ]]
}

@test "tierfsctl metrics parses as Prometheus text, one family each, values as the stats say" {
	require_prometheus_client
	head -c 1M /dev/urandom >"$MNT/f"
	setfattr -n user.tierfs.tier -v disk "$MNT/f"
	rd "$MNT/f" 1 noatime
	"$PY" "$PF" ioctl "$MNT/f" host wait
	"$TIERFSCTL_BIN" metrics "$MNT" >"$TFS_TMP/m.prom"
	getfattr --only-values -n user.tierfs.stats "$MNT" >"$TFS_TMP/stats"
	"$PY" - "$TFS_TMP/m.prom" "$TFS_TMP/stats" "$MNT" <<'PYEOF'
import collections, sys
from prometheus_client.parser import text_string_to_metric_families
text = open(sys.argv[1]).read()
stats = dict(l.split("=", 1) for l in open(sys.argv[2]).read().splitlines())
mnt = sys.argv[3]
fams = {f.name: f for f in text_string_to_metric_families(text)}
types = [l.split()[2] for l in text.splitlines() if l.startswith("# TYPE ")]
helps = [l.split()[2] for l in text.splitlines() if l.startswith("# HELP ")]
dup = [n for n, c in collections.Counter(types).items() if c > 1]
assert not dup, dup
assert sorted(types) == sorted(helps)
def val(name, **labels):
    labels["mount"] = mnt
    for f in fams.values():
        for s in f.samples:
            if s.name == name and s.labels == labels:
                return s.value
    raise KeyError((name, labels))
for t in ("device", "host", "disk"):
    assert val("tierfs_tier_reads_total", tier=t) == int(stats[t + ".reads"])
    assert val("tierfs_tier_read_bytes_total", tier=t) == int(stats[t + ".read_bytes"])
assert val("tierfs_tier_reads_total", tier="disk") == 1
assert val("tierfs_gpu_reads_total", gpu="0") == int(stats["device0.reads"])
for k in ("queued", "done", "failed", "skipped", "cancelled"):
    assert val("tierfs_prefetches_%s_total" % k) == int(stats["prefetch." + k])
assert val("tierfs_prefetches_done_total") == 1
assert val("tierfs_prefetch_pending") == 0
assert val("tierfs_spills_skipped_total", reason="nothing_movable") == 0
for r in ("no_room_below", "disk_full"):
    assert val("tierfs_spills_dropped_total", reason=r) == 0
for r in ("eio", "enomem", "enodev", "other"):
    assert val("tierfs_spills_failed_total", reason=r) == 0
for name, down in (("tierfs_spill_duration_seconds", True),
                   ("tierfs_unspill_duration_seconds", False)):
    f = fams[name]
    assert f.type == "histogram", f.type
    per = collections.defaultdict(list)
    for s in f.samples:
        key = (s.labels["from"], s.labels["to"])
        per[key].append(s)
    assert len(per) == 3, per.keys()
    for (a, b), ss in per.items():
        order = ["device", "host", "disk"]
        assert (order.index(a) < order.index(b)) == down
        bk = [s for s in ss if s.name.endswith("_bucket")]
        les = [float(s.labels["le"]) for s in bk]
        assert les == sorted(les) and les[-1] == float("inf")
        vals = [s.value for s in bk]
        assert vals == sorted(vals)
        count = [s.value for s in ss if s.name.endswith("_count")][0]
        assert vals[-1] == count == int(stats["move.%s.%s.count" % (a, b)])
assert val("tierfs_spill_duration_seconds_count", **{"from": "device", "to": "disk"}) == 1
assert val("tierfs_unspill_duration_seconds_count", **{"from": "disk", "to": "host"}) == 1
assert val("tierfs_unspill_direction_bytes_total", **{"from": "disk", "to": "host"}) == 1048576
assert val("tierfs_spill_direction_bytes_total", **{"from": "device", "to": "disk"}) == 1048576
assert 0 < val("tierfs_spill_duration_seconds_sum", **{"from": "device", "to": "disk"}) < 10
print("ok", len(fams), "families")
PYEOF
	run "$TIERFSCTL_BIN" status --ascii "$MNT"
	[[ "$output" == *"reads    device 0 (0 B), host 0 (0 B), disk 1 (64.0 KiB)"* ]]
	[[ "$output" == *"spills   0 skipped, 0 dropped (0 no room, 0 disk full), 0 failed"* ]]
	[[ "$output" == *"moves    device->disk 1 (1.0 MiB), "*" ms each"$'\n'"         disk->host 1 (1.0 MiB), "*" ms each"* ]]
	[[ "$output" == *"prefetch 1 queued, 1 done, 0 failed, 0 pending (of 1024)"* ]]
}

@test "a spill the disk tier has no room for counts as dropped, not failed" {
	tfs_unmount
	tfs_mount -o device_backend=none,host_limit=4M,disk_limit=1M,policy_overcommit=yes
	local i
	# f1 goes to disk; f2 finds it full, and nothing else can go.
	for i in 1 2 3 4 5; do head -c 900K /dev/urandom >"$MNT/f$i"; done
	run ! dd if=/dev/urandom of="$MNT/f6" bs=900K count=1 status=none
	snap
	[ "$(tfs_stat disk.full)" -eq 1 ]
	[ "$(sed -n 's/^spill_dropped.no_room_below=//p' "$TFS_TMP/snap.$SNAPS")" -eq 1 ]
	[ "$(sed -n 's/^spill_dropped.disk_full=//p' "$TFS_TMP/snap.$SNAPS")" -ge 1 ]
	# every move that was tried and failed is one of these
	local errs failed=0 r
	errs=$(sed -n 's/^evict_move_errors=//p' "$TFS_TMP/snap.$SNAPS")
	for r in eio enomem enodev other; do
		failed=$((failed + $(sed -n "s/^spill_failed.$r=//p" "$TFS_TMP/snap.$SNAPS")))
	done
	[ "$failed" -eq 0 ]
	[ "$errs" -eq 1 ]
	run "$TIERFSCTL_BIN" metrics "$MNT"
	[[ "$output" == *"tierfs_spills_dropped_total{reason=\"no_room_below\",mount=\"$MNT\"} 1"* ]]
}
