@test "an if without fi" {
	# expect: parse
	if true; then
		echo x
}
