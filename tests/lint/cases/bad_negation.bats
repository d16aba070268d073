#!/usr/bin/env bats
# Planted: negated checks that can never fail their test. Each line after
# an "# expect: RULE" comment must be reported with RULE, and nothing else.

@test "a negated command in the middle" {
	echo x >"$BATS_TEST_TMPDIR/f"
	# expect: negation
	! grep -q x "$BATS_TEST_TMPDIR/f"
	echo done
}

@test "a negated command as the last of an if in the middle" {
	if true; then
		echo in
		# expect: negation
		! true
	fi
	echo after
}

@test "a negated command in a loop is never the last word" {
	local i
	for i in 1 2; do
		# expect: negation
		! [ "$i" = 1 ]
	done
}

@test "a negated pipeline" {
	# expect: negation
	! echo tierfs | grep -q tierfs
	true
}

@test "a negated command on the right of &&" {
	# expect: negation
	true && ! true
	true
}

@test "a negated command before && is dead on both counts" {
	# expect: negation
	! false && true
	true
}

@test "negations in each branch of a case in the middle" {
	case $HOME in
	/*)
		# expect: negation
		! true ;;
	*)
		# expect: negation
		! true
		;;
	esac
	true
}

@test "a negation inside a subshell, a group, and a while body" {
	# expect: negation
	( ! true; true )
	# expect: negation
	{ ! true; }
	while false; do
		# expect: negation
		! true
	done
	true
}

@test "the last statement of a group or subshell that || masks" {
	true
	# expect: negation
	( true; ! true ) || true
}

@test "the last of an if whose status a pipe drops" {
	true
	if true; then
		# expect: negation
		! true
	fi | cat
}

@test "several statements on one line" {
	# expect: negation
	true; ! true; true
}

@test "a negated test after an ! of its own" {
	# expect: negation
	! [ ! -e / ]
	true
}

@test "a function defined in a test: its middle line" {
	check() {
		# expect: negation
		! true
		true
	}
	check
}

teardown() {
	# expect: negation
	! true
	true
}

@test "no mount left, checked with mountpoint" {
	# expect: mountpoint
	run ! mountpoint -q "$MNT"
	# expect: negation mountpoint
	! mountpoint -q "$MNT"
	# expect: mountpoint
	! mountpoint -q "$MNT"
}
