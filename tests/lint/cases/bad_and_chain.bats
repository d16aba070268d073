#!/usr/bin/env bats
# Planted: tests on the left of && in the middle of a test.

@test "[ ] && [ ]" {
	# expect: and-chain
	[ 1 = 2 ] && [ 1 = 1 ]
	true
}

@test "[[ ]] && anything, test && anything" {
	# expect: and-chain
	[[ a == b ]] && echo same
	# expect: and-chain
	test -e /nonexistent && echo there
	# expect: and-chain
	[ -n "$HOME" ] && HOME_SET=1
	true
}

@test "a chain of three tests is reported once, at its first false-able test" {
	# expect: and-chain
	[ 1 = 1 ] && [ 2 = 2 ] && [ 3 = 4 ]
	true
}

@test "a command, then a test, then more" {
	# expect: and-chain
	true && [ 1 = 2 ] && true
	true
}

@test "in a loop body, and in an if branch that is not last" {
	local i
	for i in 1 2; do
		# expect: and-chain
		[ "$i" -ge 1 ] && [ "$i" -le 1 ]
	done
	if true; then
		# expect: and-chain
		[ 1 = 2 ] && [ 2 = 2 ]
	fi
	true
}

@test "a jump that is not the whole right side" {
	local i
	for i in 1 2; do
		# expect: and-chain
		[ "$i" = 1 ] && break && true
		# expect: and-chain
		[ "$i" = 1 ] && echo hi && continue && [ 1 = 1 ]
	done
}

helper() {
	# expect: and-chain
	[ -n "$1" ] && [ -n "$2" ]
	echo "$1$2"
}
