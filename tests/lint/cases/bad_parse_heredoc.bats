@test "a heredoc that never ends" {
	# expect: parse
	cat <<EOF
x
EO
}
