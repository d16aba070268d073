#!/usr/bin/env bats
# Configuration end to end: bad input stops the daemon before it mounts with
# one message naming the file and line or the -o option; -o wins over the
# file; SIGHUP applies a smaller limit live; fstab-style mounts through
# mount.fuse3; the man pages render cleanly.
# tests/run: long (started first, so that the lanes end together)

load helpers

SRC=$BATS_TEST_DIRNAME/../..

setup() {
	tfs_setup
	CONF=$TFS_TMP/t.conf
}

teardown() {
	local clean=0
	tfs_teardown_extra
	tfs_unmount
	# Under -Db_sanitize the daemon reports leaks and errors at exit.
	if [ -f "${LOG:-}" ] && grep -q "Sanitizer" "$LOG"; then
		cat "$LOG" >&2
		clean=1
	fi
	tfs_teardown
	return $clean
}

# Undo what a test set up outside $TFS_TMP, before $TFS_TMP goes.
tfs_teardown_extra() {
	if [ -n "${RO_BIND:-}" ]; then
		umount "$RO_BIND" 2>/dev/null || true
		RO_BIND=
	fi
	if [ -n "${HELPER_LINK:-}" ]; then
		rm -f "$HELPER_LINK"
		HELPER_LINK=
	fi
}

# mount_fails MESSAGE [ARGS...]: the daemon, run with ARGS after the mount
# point, exits non-zero, prints MESSAGE (a substring) and leaves no mount.
mount_fails() {
	local msg=$1
	shift
	run timeout 20 "$TIERFS_BIN" "$MNT" "$@"
	echo "status $status, output: $output"
	[ "$status" -ne 0 ]
	[ "$status" -ne 124 ]
	[[ "$output" == *"$msg"* ]]
	# One message, not a cascade.
	[ "$(printf '%s\n' "$output" | grep -c .)" -eq 1 ]
	! tfs_mounted "$MNT"
}

# bad_file LINE-MESSAGE TEXT: a config file holding TEXT (printf format)
# fails with "$CONF:LINE-MESSAGE".
bad_file() {
	local msg=$1
	shift
	printf "$@" >"$CONF"
	mount_fails "$CONF:$msg" -f -o "config=$CONF,disk_path=$SPILL"
}

# bad_option MESSAGE OPTS: -o OPTS fails with MESSAGE.
bad_option() {
	mount_fails "$1" -f -o "disk_path=$SPILL,$2"
}

@test "config file: an unknown key is named with its line" {
	bad_file "3: limt: unknown key in [host] (known: limit, pinned, user_share)" \
		'[host]\nlimit = 8M\nlimt = 8G\n'
}

@test "config file: an unknown section is named at its line" {
	bad_file "4: [gpu]: unknown section" \
		'; comment\n[host]\nlimit = 8M\n[gpu]\nlimit = 1G\n'
}

@test "config file: a key outside any section" {
	bad_file "1: limit: key outside any section" 'limit = 8M\n'
}

@test "config file: a line that is not key = value" {
	bad_file "2: 'limit 8G': expected 'key = value' or '[section]'" \
		'[host]\nlimit 8G\n'
	bad_file "1: '[host': missing ']'" '[host\nlimit = 8G\n'
}

@test "config file: bad numbers" {
	bad_file "2: threads: 'many' is not a whole number" '[fs]\nthreads = many\n'
	bad_file "2: threads: '1000' is out of range, must be 0 to 256" \
		'[fs]\nthreads = 1000\n'
	bad_file "2: gpu: '-1' is negative" '[device]\ngpu = -1\n'
	bad_file "2: high_watermark: '1.5' is out of range" \
		'[policy]\nhigh_watermark = 1.5\n'
	bad_file "2: limit: '0x100' is not a size: hexadecimal is not accepted" \
		'[host]\nlimit = 0x100\n'
	bad_file "2: limit: '99999999999T' is too large" \
		'[host]\nlimit = 99999999999T\n'
}

@test "config file: a bad suffix" {
	bad_file "3: limit: '8X' is not a size: unknown suffix 'X' (use K, M, G or T)" \
		'[host]\n\nlimit = 8X\n'
	bad_file "2: chunk_size: '25%': a percentage is only allowed for limits" \
		'[disk]\nchunk_size = 25%%\n'
}

@test "config file: bad words" {
	bad_file "2: backend: 'opencl' is not one of auto, cuda, sim or none" \
		'[device]\nbackend = opencl\n'
	bad_file "2: pinned: 'perhaps' is not a boolean, use yes or no" \
		'[host]\npinned = perhaps\n'
	bad_file "2: compression: 'zstd' is not one of lz4 or none" \
		'[disk]\ncompression = zstd\n'
	bad_file "2: eviction: 'lfu' is not supported, only lru is" \
		'[policy]\neviction = lfu\n'
}

@test "a limit of zero is refused" {
	bad_file "2: limit: '0': a limit of zero is not allowed" '[host]\nlimit = 0\n'
	bad_file "2: limit: '0': a limit of zero is not allowed" '[device]\nlimit = 0\n'
	bad_file "2: limit: '0%': a percentage must be above 0" '[disk]\nlimit = 0%%\n'
	bad_option "-o host_limit: '0': a limit of zero is not allowed" host_limit=0
	bad_option "-o device_limit: '0G': a limit of zero is not allowed" \
		device_backend=sim,device_limit=0G
	bad_option "-o disk_limit: '0': a limit of zero is not allowed" disk_limit=0
}

@test "a chunk size out of range is refused" {
	bad_option "-o disk_chunk_size: '32K' is out of range, must be 64K to 64M" \
		disk_chunk_size=32K
	bad_option "-o disk_chunk_size: '128M' is out of range" disk_chunk_size=128M
	bad_option "-o disk_chunk_size: '3M' is not a power of two" disk_chunk_size=3M
	bad_file "2: chunk_size: '96K' is not a power of two" '[disk]\nchunk_size = 96K\n'
}

@test "bad -o values are named as options" {
	bad_option "-o host_limit: 'lots' is not a size" host_limit=lots
	bad_option "-o host_limit: '-8G' is negative" host_limit=-8G
	bad_option "-o device_backend: 'gpu' is not one of auto, cuda, sim or none" \
		device_backend=gpu
	bad_option "-o policy_unspill: 'disk' is not one of device, host or none" \
		policy_unspill=disk
	bad_option "-o fs_read_ahead_kb: '65537' is out of range" \
		fs_read_ahead_kb=65537
	bad_option "-o host_limit: empty value" host_limit=
}

@test "a misspelt -o key is refused by tierfs, with the keys it knows" {
	bad_option "-o host_limt: unknown key (known: host_limit, host_pinned, host_user_share)" \
		host_limt=1G
}

@test "the disk path must exist" {
	bad_option "-o disk_path: '$TFS_TMP/nope' does not exist" \
		"disk_path=$TFS_TMP/nope"
	printf '[disk]\n# spill here\npath = %s\n' "$TFS_TMP/nope" >"$CONF"
	mount_fails "$CONF:3: path: '$TFS_TMP/nope' does not exist" \
		-f -o "config=$CONF"
}

@test "the disk path must be a directory" {
	touch "$TFS_TMP/file"
	bad_option "-o disk_path: '$TFS_TMP/file' is not a directory" \
		"disk_path=$TFS_TMP/file"
}

# require_read_only_bind DIR: root writes through any mode; a read-only
# bind mount of DIR on itself stops it. Skips where the machine allows none.
require_read_only_bind() {
	mount --bind "$1" "$1" 2>/dev/null ||
		skip "root, and a read-only bind mount is not allowed here"
	RO_BIND=$1
	mount -o remount,bind,ro "$1" ||
		skip "root, and a bind mount cannot be made read-only here"
}

@test "the disk path must be writable" {
	local ro=$TFS_TMP/ro
	mkdir "$ro"
	chmod 0555 "$ro"
	if [ "$(id -u)" -eq 0 ]; then
		require_read_only_bind "$ro"
	fi
	bad_option "-o disk_path: '$ro' is not writable: " "disk_path=$ro"
}

@test "the disk path must not be inside the mount point" {
	mkdir -p "$MNT/spill"
	bad_option "-o disk_path: '$MNT/spill' is inside the mount point" \
		"disk_path=$MNT/spill"
	bad_option "is inside the mount point" "disk_path=$MNT"
	ln -s "$MNT/spill" "$TFS_TMP/link"
	bad_option "-o disk_path: '$TFS_TMP/link' is inside the mount point" \
		"disk_path=$TFS_TMP/link"
}

@test "the target must be below the high watermark" {
	bad_option "-o policy_target: 0.95 must be below the high watermark (0.95)" \
		policy_target=0.95
	printf '[policy]\nhigh_watermark = 0.8\n' >"$CONF"
	mount_fails "$CONF:2: high_watermark: 0.8 must be above the target (0.85)" \
		-f -o "config=$CONF,disk_path=$SPILL"
}

@test "a config file that cannot be read" {
	mount_fails "$TFS_TMP/none.conf: cannot open: No such file or directory" \
		-f -o "config=$TFS_TMP/none.conf,disk_path=$SPILL"
	mount_fails "$TFS_TMP: cannot read: Is a directory" \
		-f -o "config=$TFS_TMP,disk_path=$SPILL"
}

@test "without -f, a bad config still fails before detaching" {
	run timeout 20 "$TIERFS_BIN" "$MNT" -o "disk_path=$SPILL,host_limit=0"
	[ "$status" -ne 0 ]
	[ "$status" -ne 124 ]
	[[ "$output" == *"-o host_limit: '0': a limit of zero is not allowed"* ]]
	! tfs_mounted "$MNT"
}

@test "-o options win over the config file, whatever their order" {
	cat >"$CONF" <<-EOF
		# indented keys and comments
		[device]
		    backend = none
		[host]
		    limit = 16M   ; overridden below
		[disk]
		    limit = 100M
		[policy]
		    target = 0.5
	EOF
	tfs_mount -o host_limit=32M -o "config=$CONF"
	[ "$(tfs_stat host.limit)" -eq $((32 << 20)) ]
	# What only the file sets comes from the file.
	[ "$(tfs_stat disk.limit)" -eq $((100 << 20)) ]
	[ "$(tfs_stat backend)" = none ]
}

@test "percentages resolve against the tier's capacity" {
	tfs_mount -o device_backend=sim,device_limit=4M,host_limit=1%,disk_limit=1%
	local ram disk
	ram=$(($(getconf _PHYS_PAGES) * $(getconf PAGE_SIZE)))
	disk=$(stat -f -c '%b * %S' "$SPILL")
	disk=$((disk))
	[ "$(tfs_stat host.limit)" -eq $((ram / 100)) ] ||
		[ "$(tfs_stat host.limit)" -eq $((ram / 100 - 1)) ]
	[ "$(tfs_stat disk.limit)" -eq $((disk / 100)) ] ||
		[ "$(tfs_stat disk.limit)" -eq $((disk / 100 - 1)) ]
	[ "$(tfs_stat device.limit)" -eq $((4 << 20)) ]
}

# Host tier usage is within its limit and the limit is the new one.
host_shrunk() {
	local used limit
	used=$(tfs_stat host.used)
	limit=$(tfs_stat host.limit)
	[ "$limit" -eq $((4 << 20)) ] && [ "$used" -le "$limit" ]
}

@test "SIGHUP applies a smaller host limit from the file and files spill" {
	printf '[device]\nbackend = none\n[host]\nlimit = 64M\n' >"$CONF"
	tfs_mount -o "config=$CONF"
	local i
	for i in $(seq -w 1 16); do
		head -c 1048576 /dev/urandom >"$TFS_TMP/src$i"
		cp "$TFS_TMP/src$i" "$MNT/f$i"
	done
	[ "$(tfs_stat disk.buffers)" -eq 0 ]
	[ "$(tfs_tier "$MNT/f01")" = host ]

	printf '[device]\nbackend = none\n[host]\nlimit = 4M\n' >"$CONF"
	kill -HUP "$TFS_PID"
	tfs_wait_for host_shrunk
	[ "$(tfs_stat disk.buffers)" -ge 12 ]
	# The oldest went first.
	[ "$(tfs_tier "$MNT/f01")" = disk ]
	for i in $(seq -w 1 16); do
		cmp "$TFS_TMP/src$i" "$MNT/f$i"
	done
	grep -q "reload" "$LOG"
}

@test "SIGHUP with a bad file keeps the running configuration" {
	printf '[host]\nlimit = 64M\n' >"$CONF"
	tfs_mount -o "config=$CONF"
	printf '[host]\nlimit = 0\n' >"$CONF"
	kill -HUP "$TFS_PID"
	tfs_wait_for grep -q "$CONF:2: limit: '0': a limit of zero is not allowed" "$LOG"
	mountpoint -q "$MNT"
	[ "$(tfs_stat host.limit)" -eq $((64 << 20)) ]
	echo hello >"$MNT/after"
	[ "$(cat "$MNT/after")" = hello ]
}

@test "SIGHUP re-applies the -o options over the reloaded file" {
	printf '[host]\nlimit = 64M\n' >"$CONF"
	tfs_mount -o "config=$CONF,host_limit=48M"
	[ "$(tfs_stat host.limit)" -eq $((48 << 20)) ]
	printf '[host]\nlimit = 16M\n[disk]\nlimit = 200M\n' >"$CONF"
	kill -HUP "$TFS_PID"
	tfs_wait_for tfs_stat_is disk.limit -eq $((200 << 20))
	[ "$(tfs_stat host.limit)" -eq $((48 << 20)) ]
}

# A directory holding a "tierfs" that runs the daemon under test.
helper_bin() {
	mkdir -p "$TFS_TMP/bin"
	ln -sf "$(readlink -f "$TIERFS_BIN")" "$TFS_TMP/bin/tierfs"
}

fstab_mounted() {
	mountpoint -q "$MNT" || return 1
	[ "$(tfs_stat host.limit)" -eq $((8 << 20)) ]
	echo fstab >"$MNT/f"
	[ "$(cat "$MNT/f")" = fstab ]
	grep -q " $MNT fuse.tierfs " /proc/mounts
}

@test "mount.fuse3 runs tierfs with fstab-style arguments" {
	command -v mount.fuse3 >/dev/null || skip "no mount.fuse3"
	helper_bin
	PATH=$TFS_TMP/bin:$PATH run mount.fuse3 none "$MNT" -t tierfs \
		-o "defaults,host_limit=8M,disk_path=$SPILL,_netdev,nofail"
	echo "$output"
	[ "$status" -eq 0 ]
	fstab_mounted
	fusermount3 -u "$MNT"
	! tfs_mounted "$MNT"
}

# require_usr_local_sbin: mount(8) clears PATH, so the helper finds tierfs
# in the shell's default path only; a test borrows /usr/local/sbin when it
# may write there and no tierfs is installed there.
require_usr_local_sbin() {
	[ -w /usr/local/sbin ] || skip "/usr/local/sbin is not writable"
	[ ! -e /usr/local/sbin/tierfs ] ||
		skip "/usr/local/sbin/tierfs exists; not replacing an install"
}

@test "mount -t fuse.tierfs and an fstab line work" {
	command -v mount.fuse3 >/dev/null || skip "no mount.fuse3"
	require_usr_local_sbin
	HELPER_LINK=/usr/local/sbin/tierfs
	ln -s "$(readlink -f "$TIERFS_BIN")" "$HELPER_LINK"

	run mount -t fuse.tierfs none "$MNT" \
		-o "host_limit=8M,disk_path=$SPILL"
	echo "$output"
	[ "$status" -eq 0 ]
	fstab_mounted
	umount "$MNT"
	tfs_wait_for eval '! tfs_mounted "$MNT"'

	printf 'none %s fuse.tierfs defaults,host_limit=8M,disk_path=%s,_netdev 0 0\n' \
		"$MNT" "$SPILL" >"$TFS_TMP/fstab"
	run mount --fstab "$TFS_TMP/fstab" "$MNT"
	echo "$output"
	[ "$status" -eq 0 ]
	fstab_mounted
	umount "$MNT"
	tfs_wait_for eval '! tfs_mounted "$MNT"'

	# A bad option fails the mount with the daemon's message.
	run mount -t fuse.tierfs none "$MNT" -o "host_limit=0,disk_path=$SPILL"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ "$output" == *"-o host_limit: '0': a limit of zero is not allowed"* ]]
	! tfs_mounted "$MNT"
}

@test "the example config file mounts, commented and uncommented" {
	tfs_mount -o "config=$SRC/config/tierfs.conf"
	tfs_unmount
	# Every ';' key set to its documented default.
	sed 's/^;//' "$SRC/config/tierfs.conf" >"$CONF"
	[ "$(grep -c '^[a-z_]* = ' "$CONF")" -eq 28 ]
	tfs_mount -o "config=$CONF,device_backend=sim,device_limit=4M"
	[ "$(tfs_stat host.limit)" -gt 0 ]
}

@test "--help lists every key and --version prints the version" {
	run "$TIERFS_BIN" --help
	[ "$status" -eq 0 ]
	local key
	for key in device_backend device_gpu device_limit host_limit \
		host_pinned disk_path disk_limit disk_compression \
		disk_chunk_size policy_eviction policy_unspill \
		policy_overcommit policy_high_watermark policy_target \
		policy_promote policy_promote_rate policy_prefetch_queue fs_threads \
		fs_read_ahead_kb device_user_share \
		device_user_exports host_user_share fs_metadata_user_share; do
		[[ "$output" == *"-o $key="* ]]
	done
	[[ "$output" == *"-o config=FILE"* ]]
	run "$TIERFS_BIN" --version
	[ "$status" -eq 0 ]
	[[ "$output" == *"tierfs version "* ]]
}

@test "every key in --help is documented in tierfs(8) and tierfs.conf(5)" {
	[ -f "$SRC/man/tierfs.8" ]
	local opt section key n=0
	for opt in $("$TIERFS_BIN" --help | sed -n 's/^ *-o \([a-z]*_[a-z_]*\)=.*/\1/p'); do
		section=${opt%%_*}
		key=${opt#*_}
		echo "$opt"
		grep -qE "^\.B[IR] $opt=" "$SRC/man/tierfs.8"
		grep -q "^\.SS \[$section\]" "$SRC/man/tierfs.conf.5"
		grep -q "^\.BR $key \" = \"" "$SRC/man/tierfs.conf.5"
		n=$((n + 1))
	done
	# The keys the test above names, at least: a --help the sed no longer
	# reads must not pass as "nothing undocumented".
	[ "$n" -ge 17 ]
}

@test "man pages render without warnings" {
	command -v groff >/dev/null || skip "no groff"
	local page n=0 out
	for page in "$SRC"/man/*.[1-8]; do
		[ -e "$page" ] || continue
		n=$((n + 1))
		echo "$page"
		out=$(groff -man -ww -z "$page" 2>&1)
		[ -z "$out" ] || { echo "$out"; false; }
		if command -v man >/dev/null; then
			out=$(MANWIDTH=80 man -l "$page" 2>&1 >/dev/null)
			[ -z "$out" ] || { echo "$out"; false; }
			MANWIDTH=80 man -l "$page" 2>/dev/null | grep -q "^NAME"
		fi
	done
	# tierfs(8), tierfs.conf(5), tierfsctl(1), libtierfs(3)
	[ "$n" -ge 4 ]
}

@test "[tiers]: each entry is checked, and a mount with a kind not served is refused, naming it" {
	mkdir -p "$TFS_TMP/nvme"
	bad_option "-o tiers_nvme: unknown kind 'tape' (known: disk, shared)" \
		"tiers_nvme=tape:$TFS_TMP/nvme"
	bad_option "is the directory of" "tiers_nvme=disk:$SPILL"
	bad_option "-o tiers_nvme: limit 1.0 PiB is more than the" \
		"device_backend=none,tiers_nvme=disk:$TFS_TMP/nvme:1024T"
	printf '[tiers]\nlustre = shared:%s\n' "$TFS_TMP/nvme" >"$CONF"
	mount_fails "$CONF:2: lustre: kind 'shared' is not served yet" \
		-f -o "config=$CONF,disk_path=$SPILL,device_backend=none"
	# Nothing of either is left under the tier's path.
	[ -z "$(find "$TFS_TMP/nvme" -mindepth 1)" ]
}
