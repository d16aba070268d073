# Planted: a .bash file of helper functions, whose last line sets their
# status and whose middle lines cannot fail them.

tfs_thing() {
	# expect: negation
	! kill -0 "$1" 2>/dev/null
	# expect: and-chain
	[ -n "$1" ] && [ -e "/proc/$1" ]
	echo "$1"
}

function tfs_other {
	# expect: negation
	! true
	[ -n "$1" ] && [ -e "$1" ]
}
