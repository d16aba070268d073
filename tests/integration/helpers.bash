# Shared by every bats file: mount a private tierfs for each test and always
# unmount it in teardown.
#
#   setup()    { tfs_setup; tfs_mount -o host_limit=8M; }
#   teardown() { tfs_teardown; }
#
# TIERFS_BIN points at the daemon (tests/run sets it); TFS_TMP is the test's
# own mktemp -d, MNT the mount point, SPILL the disk tier's directory, LOG
# the daemon's stderr.

# `run ! cmd` checks that cmd fails: a bare `! cmd` that is not a test's last
# command can never fail it (tests/lint/batslint.py says why).
bats_require_minimum_version 1.5.0

: "${TIERFS_BIN:=$BATS_TEST_DIRNAME/../../build/fs/tierfs}"
: "${TIERFSCTL_BIN:=$(dirname "$TIERFS_BIN")/../client/tierfsctl}"

# tfs_scale N M: N, or M when the binaries under test are built with the
# sanitizers (tests/run --sanitize sets TFS_SANITIZED=1). For tests that
# repeat one path many times or move a lot of bytes: the sanitizers find a
# bad access on the first pass through a path, and the normal stage runs
# the full count. M keeps every path the test takes.
tfs_scale() {
	if [ "${TFS_SANITIZED:-0}" = 1 ]; then
		echo "$2"
	else
		echo "$1"
	fi
}

# tfs_wait_for CMD...: retry CMD every 50 ms for up to 10 s; the last try's
# status (and what it says) is the result.
tfs_wait_for() {
	local i
	for i in $(seq 1 200); do
		"$@" && return 0
		sleep 0.05
	done
	"$@"
}

# tfs_wait_line OUT WANT PID: wait until the file OUT has a line that starts
# with WANT (a client in the background saying "ready"), for 20 s at most;
# fails at once, showing OUT, when process PID exits first.
tfs_wait_line() {
	local out=$1 want=$2 pid=$3 i
	for i in $(seq 1 400); do
		grep -q "^$want" "$out" && return 0
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "client exited:" >&2
			cat "$out" >&2
			return 1
		fi
		sleep 0.05
	done
	echo "client not at '$want' within 20s" >&2
	cat "$out" >&2
	return 1
}

tfs_setup() {
	TFS_TMP=$(mktemp -d /tmp/tierfs-test.XXXXXX)
	MNT=$TFS_TMP/mnt
	SPILL=$TFS_TMP/spill
	LOG=$TFS_TMP/tierfs.log
	mkdir -p "$MNT" "$SPILL"
	TFS_USERS=()
	TFS_BG=()
	export TFS_TMP MNT SPILL LOG
}

# tfs_mount [-o opts]... [-d]: start the daemon in the foreground, in the
# background, and wait until the mount answers. -d logs every request.
tfs_mount() {
	local opts="disk_path=$SPILL" debug=
	while [ $# -gt 0 ]; do
		case $1 in
		-o) opts="$opts,$2"; shift 2 ;;
		-d) debug=-d; shift ;;
		*) opts="$opts,$1"; shift ;;
		esac
	done
	"$TIERFS_BIN" "$MNT" -f $debug -o "$opts" 2>"$LOG" &
	TFS_PID=$!
	export TFS_PID
	local i
	for i in $(seq 1 200); do
		if mountpoint -q "$MNT"; then
			# A persistent mount answers before its tree is back
			# (tierfs.8, PERSISTENT MOUNTS, Start-up), and logs how
			# it came back once it is: statfs waits for that.
			stat -f "$MNT" >/dev/null || true
			return 0
		fi
		if ! kill -0 "$TFS_PID" 2>/dev/null; then
			echo "tierfs exited before mounting:" >&2
			cat "$LOG" >&2
			return 1
		fi
		sleep 0.05
	done
	echo "tierfs did not mount within 10s" >&2
	cat "$LOG" >&2
	return 1
}

tfs_unmount() {
	# tfs_mounted, not mountpoint -q: a mount whose daemon died is
	# unmounted too, not left on the machine.
	if [ -n "${MNT:-}" ] && tfs_mounted "$MNT"; then
		fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT"
	fi
	if [ -n "${TFS_PID:-}" ]; then
		local i
		# A persistent mount writes out what it holds before it
		# exits: seconds for thousands of files on a loaded machine.
		for i in $(seq 1 1200); do
			kill -0 "$TFS_PID" 2>/dev/null || break
			sleep 0.05
		done
		if kill -0 "$TFS_PID" 2>/dev/null; then
			kill -9 "$TFS_PID" 2>/dev/null
			echo "tierfs did not exit after unmount" >&2
		fi
		wait "$TFS_PID" 2>/dev/null || true
		TFS_PID=
	fi
}

# tfs_user VAR: create an unprivileged user with a name unique to this
# test run (tfs_teardown removes it) and set VAR to it. The test's
# directory becomes searchable so that the user can reach the mount.
tfs_user() {
	local letters=abcdefgh name
	name=tfs${letters:${#TFS_USERS[@]}:1}$$
	# useradd and userdel lock /etc/passwd and fail at once when another
	# holds it: test files that run side by side take turns.
	flock /run/lock/tierfs-tests.users \
		useradd -M -U -s /usr/sbin/nologin "$name" || return 1
	TFS_USERS+=("$name")
	chmod 755 "$TFS_TMP"
	printf -v "$1" %s "$name"
}

# tfs_as USER CMD...: run CMD as USER, with USER's groups only.
tfs_as() {
	local u=$1
	shift
	setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups -- "$@"
}

# tfs_bg_as USER CMD...: run CMD as USER in the background until the test
# ends (tfs_teardown kills it); sets BG_PID to CMD's own pid.
tfs_bg_as() {
	local u=$1
	shift
	setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups -- "$@" &
	BG_PID=$!
	TFS_BG+=("$BG_PID")
}

tfs_teardown() {
	local bad=0 pid u
	for pid in "${TFS_BG[@]}"; do
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	TFS_BG=()
	tfs_unmount
	# Under ASan/UBSan a report in the daemon's log fails the test.
	if [ -n "${LOG:-}" ] && [ -f "$LOG" ] &&
		grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$LOG"; then
		echo "sanitizer report in the daemon's log:" >&2
		cat "$LOG" >&2
		bad=1
	fi
	if [ -n "${TFS_TMP:-}" ]; then
		rm -rf "$TFS_TMP"
	fi
	for u in "${TFS_USERS[@]}"; do
		flock /run/lock/tierfs-tests.users userdel "$u" || bad=1
	done
	TFS_USERS=()
	return $bad
}

# tfs_mounted DIR: DIR is a mount point here, whether or not its daemon
# still answers. mountpoint(1) stats DIR, and a mount whose daemon died
# answers ENOTCONN, which it takes for no mount: "no mount is left" is
# "! tfs_mounted DIR", never "! mountpoint -q DIR".
tfs_mounted() {
	awk -v m="$1" '$5 == m { found = 1 } END { exit !found }' \
		/proc/self/mountinfo
}

# The tier xattr of a file: device, host or disk.
tfs_tier() {
	getfattr --only-values -n user.tierfs.tier "$1" 2>/dev/null
}

# One key of the mount root's stats, e.g. tfs_stat host.used
tfs_stat() {
	getfattr --only-values -n user.tierfs.stats "$MNT" |
		sed -n "s/^$1=//p"
}

# tfs_stat_is KEY OP VALUE: test(1) on a stat read afresh, so that
# "wait_for tfs_stat_is reloads -eq 1" polls (wait_for test "$(...)" would
# read it once).
tfs_stat_is() {
	test "$(tfs_stat "$1")" "$2" "$3"
}

# tfs_tier_is FILE OP VALUE: the same for a file's tier.
tfs_tier_is() {
	test "$(tfs_tier "$1")" "$2" "$3"
}
