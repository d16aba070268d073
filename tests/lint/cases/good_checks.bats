#!/usr/bin/env bats
# Checks that can fail, and conditions that are not checks: nothing here
# may be reported.

load ../../integration/helpers

@test "run !, ! || false and ! || fail" {
	run ! grep -q x /etc/hostname
	! grep -q "no such line" /etc/hostname || false
	! false || { echo "false did not fail" >&2; false; }
	[ ! -e /nonexistent ]
	[[ ! -e /nonexistent ]]
	true
}

@test "the last line may be negated" {
	true
	! grep -q "no such line" /etc/hostname
}

@test "a comment after the last line changes nothing" {
	true
	! grep -q "no such line" /etc/hostname
	# it's the last command; this comment's quote ( and paren are not shell
}

@test "the last line may be a chain of tests" {
	true
	[ -e /etc/hostname ] && [ -s /etc/hostname ]
}

@test "the last line of each branch of a last if, case, group or subshell" {
	if [ -e /etc ]; then
		true
		! [ -e /nonexistent ]
	elif false; then
		[ 1 = 1 ] && [ 2 = 2 ]
	else
		! false
	fi
}

@test "a last case" {
	case x in
	x) true; ! false ;;
	*) [ 1 = 1 ] && [ 2 = 2 ] ;;
	esac
}

@test "a last group and subshell" {
	true
	{ true; ! false; } && ( true; [ 1 = 1 ] && ! false )
}

@test "conditions are not checks" {
	if ! false && [ 1 = 1 ]; then true; fi
	while ! true && [ 1 = 2 ]; do :; done
	until [ 1 = 1 ] && ! false; do :; done
	if [[ -e /etc ]] && test -d /etc; then true; fi
	true
}

@test "a guard: the list goes on to ||" {
	[ -e /etc ] && [ -d /etc ] || false
	[ -n "$HOME" ] && echo home || echo none
	! false || false
	true
}

@test "jumps" {
	local i
	for i in 1 2 3; do
		[ "$i" = 2 ] && continue
		[ "$i" = 3 ] && [ -e /etc ] && break
	done
	f() {
		[ "$1" = a ] && return 0
		test "$1" = b && return 1
		[[ $1 == c ]] && exit 3
		echo "$1"
	}
	f a
}

@test "a function's last line sets its status" {
	gone() { [ ! -e /nonexistent ] && [ ! -e /nonexistent2 ]; }
	gone
	absent() { ! [ -e /nonexistent ]; }
	absent
	true
}

@test "mountpoint as a condition, and tfs_mounted" {
	local MNT=/
	if ! mountpoint -q "$MNT"; then false; fi
	mountpoint -q "$MNT"
	run ! tfs_mounted /nonexistent
	! tfs_mounted /nonexistent
}

@test "&& with a command on its left is not a chain of tests" {
	true && [ 1 = 1 ]
	cd / && pwd
	true
}

@test "skips for a missing tool and for long tests" {
	require_thing
	command -v sh >/dev/null || skip "no sh"
	command -v bash >/dev/null 2>&1 || skip "no bash"
	[ "${TFS_LONG:-0}" = 1 ] || skip "set TFS_LONG=1 (tests/run --long)"
}

# require_thing: a prerequisite probe may skip, with a reason.
require_thing() {
	if [ ! -e / ]; then
		skip "no root directory"
	fi
	[ -d /etc ] || skip "no /etc"
}

tfs_helper() {
	[ -n "${1:-}" ] && [ -e "$1" ] || return 1
	! [ -e /nonexistent ]
}
