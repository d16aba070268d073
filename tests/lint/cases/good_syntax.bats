#!/usr/bin/env bats
# The shell the lint must read without being misled: nothing reported.

@test "heredocs of each kind, with bad-looking bodies" {
	cat >"$BATS_TEST_TMPDIR/a" <<EOF
! true
[ 1 = 2 ] && [ 1 = 1 ]
$(echo "subst in a heredoc")
EOF
	cat >"$BATS_TEST_TMPDIR/b" <<-'EOF'
		! true
		skip "no"
	EOF
	python3 - "$BATS_TEST_TMPDIR" <<'PY' | grep -q ok
import sys
print("ok" if sys.argv[1] else "! no")
PY
	cat <<"A" >/dev/null; cat <<B >/dev/null
! a
A
[ b ] && [ c ]
B
	tr a b <<<"! here-string" >/dev/null
	true
}

@test "quotes, escapes, substitutions" {
	local x y
	x="a \"quoted\" ! && || ; ( ) string"
	y='single ! && ; ( quoted'
	echo "$x" "$y" $'ansi \' ! &&' \! \&\& "${x//!/}" "${#y}" "$((1 + 2))" \
		"$(echo "nested $(echo "! deep") )")" `echo back ! &&`
	echo "$(case x in x) echo ok ;; esac)"
	diff <(echo a) <(echo a) >/dev/null
	arr=(one "! two" '[ a ] && b')
	arr+=(three)
	declare -A map=([k]=v)
	(( ${#arr[@]} == 4 ))
	true
}

@test "redirections and fd numbers" {
	echo x 2>/dev/null >"$BATS_TEST_TMPDIR/r" 2>&1
	exec 5>"$BATS_TEST_TMPDIR/fd"
	echo y >&5
	exec 5>&-
	true &>/dev/null
	{ echo z; } >"$BATS_TEST_TMPDIR/g" 2>&1
	true
}

@test "compound commands of every kind" {
	local i
	for i in a b; do :; done
	for i; do :; done
	for ((i = 0; i < 2; i++)); do :; done
	select i in a; do break; done </dev/null
	while read -r i; do :; done <<<"x"
	case "$i" in
	a|b) echo ab ;;
	(c) echo c ;&
	d) echo d ;;&
	*)
		echo other
		;;
	esac
	if true; then :; elif false; then :; else :; fi
	{ :; }
	( : )
	time true
	function inner { :; }
	inner
	true
}

@test "lines continued, pipelines and lists over lines" {
	echo a \
		b |
		cat |&
		cat &&
		true ||
		false
	true
}

@test "a [[ ]] with operators of its own" {
	local s="a&&b"
	[[ $s == *"&&"* && -n $s || -z $s ]]
	[[ ( $s =~ ^a(&&|\|\|)b$ ) ]]
	[[ $s < b ]]
	true
}
