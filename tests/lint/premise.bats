#!/usr/bin/env bats
# What tests/lint/batslint.py rests on, checked with the bats installed:
# "dead:" tests pass although their check is false (the lint reports those
# forms); "live:" tests fail (the forms it accepts). tests/lint/test_batslint.py
# runs this file and wants every dead one ok and every live one not ok.
# It is not part of any suite; the lint does not read it.

bats_require_minimum_version 1.5.0

@test "dead: ! cmd in the middle" {
	! true
	true
}

@test "dead: [ a ] && [ b ] in the middle" {
	[ 1 = 2 ] && [ 1 = 1 ]
	true
}

@test "dead: ! cmd as the last of an if in the middle" {
	if true; then
		! true
	fi
	true
}

@test "dead: ! cmd as the last of a loop body that is last" {
	for i in 1 2; do
		! [ "$i" = 1 ]
	done
}

@test "dead: ! cmd on the right of &&" {
	true && ! true
	true
}

@test "dead: ! cmd in the middle of a function" {
	f() {
		! true
		true
	}
	f
}

@test "live: run ! cmd" {
	run ! true
	true
}

@test "live: ! cmd || false" {
	! true || false
	true
}

@test "live: ! cmd as the last line" {
	true
	! true
}

@test "live: [ a ] && [ b ] as the last line" {
	true
	[ 1 = 2 ] && [ 1 = 1 ]
}

@test "live: [ a ] && [ b ] || false" {
	[ 1 = 2 ] && [ 1 = 1 ] || false
	true
}

@test "live: ! cmd as the last of an if that is last" {
	true
	if true; then
		! true
	fi
}

@test "live: the last line of a function fails its call" {
	f() { [ 1 = 2 ] && true; }
	f
	true
}
