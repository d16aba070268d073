#!/usr/bin/env bats
# Planted: bad checks spread over lines, beside heredocs and strings that
# only look like them. Reports are at the line the statement starts.

@test "continuations, pipelines and lists over several lines" {
	# expect: negation
	! grep -q "x" \
		/etc/hostname
	# expect: negation
	! cat /etc/hostname |
		grep -q "nothing like it"
	# expect: and-chain
	[ -e /etc/hostname ] &&
		[ -s /etc/hostname ]
	# expect: and-chain
	[[ -e /etc/hostname &&
		-s /etc/hostname ]] &&
		[ 1 = 1 ]
	true
}

@test "a heredoc whose body looks like bad checks, then a real one" {
	cat >"$BATS_TEST_TMPDIR/s" <<EOF
! true
[ a ] && [ b ]
skip "no"
EOF
	cat <<-'EOF' | wc -l
		! true
		[ 1 = 2 ] && [ 1 = 1 ]
	EOF
	cat <<A; cat <<"B"
! a
A
! b
B
	# expect: negation
	! true
	# expect: and-chain
	[ 1 = 2 ] && [ 1 = 1 ] <<<"! x"
	true
}

@test "strings, substitutions and comments that only look like checks" {
	echo "! true" '[ a ] && [ b ]' "$(! true)"
	x=$( [ 1 = 2 ] && [ 1 = 1 ]; echo "; ! y" )
	# ! true
	# [ 1 = 2 ] && [ 1 = 1 ]
	run bash -c '! true; [ 1 = 2 ] && true; skip'
	# expect: negation
	! [[ "a&&b" == *"&&"* ]]
	true
}

@test "arrays, arithmetic and case patterns do not hide the line after" {
	local a=(x "! y" '[ a ] && b') i
	(( i = 1 ))
	for ((i = 0; i < 2; i++)); do :; done
	case "$i" in
	x|y) echo xy ;;
	(*) echo other ;;
	esac
	# expect: negation
	! true
	true
}

@test "the last line of an if that is not the test's last" {
	if true; then
		# expect: negation
		! true
	else
		# expect: and-chain
		[ 1 = 2 ] && true
	fi
	echo after
}
