@test "a quote that never closes" {
	echo ok
	# expect: parse
	echo 'no end
}
