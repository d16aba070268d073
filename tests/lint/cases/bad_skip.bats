#!/usr/bin/env bats
# Planted: skips a regression of tierfs would hide.

setup() {
	# expect: skip
	[ -x "$TIERFSCTL_BIN" ] || skip "no tierfsctl"
}

@test "skip when the feature answers not supported" {
	if ! fallocate -p -o 0 -l 1 "$MNT/f"; then
		# expect: skip
		skip "this tierfs does not punch holes"
	fi
}

@test "an unconditional skip" {
	# expect: skip
	skip "later"
}

@test "a skip without a reason" {
	# expect: skip
	command -v groff >/dev/null || skip
	# expect: skip
	command -v groff >/dev/null || skip ""
}

@test "command -v of tierfs's own programs, or of a variable" {
	# expect: skip
	command -v tierfsctl >/dev/null || skip "no tierfsctl"
	# expect: skip
	command -v "$TOOL" >/dev/null || skip "no tool"
}

@test "a probe that is more than command -v" {
	# expect: skip
	command -v groff >/dev/null && [ -f man/x.1 ] || skip "no groff"
	# expect: skip
	! command -v groff >/dev/null || skip "groff is there"
	# expect: skip
	[ "${TFS_LONG:-0}" = 0 ] || skip "short only"
}

check_tool() {
	# expect: skip
	command -v "$1" >/dev/null || skip "no $1"
}

@test "require_ in a test's name does not count" {
	run true
}

@test "require_x" {
	# expect: skip
	skip "a test named like a probe"
}
