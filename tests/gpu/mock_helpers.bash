# Shared by the bats files mock_check.sh runs against a daemon linked with
# tests/gpu/cuda_mock.c: setup and teardown that end the clients a test
# left holding exports (HOLDERS), a CUDA mount, a file with its copy.

load ../integration/helpers

setup() {
	HOLDERS=()
	tfs_setup
}

teardown() {
	local pid
	for pid in "${HOLDERS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	tfs_teardown
}

mount_cuda() {
	tfs_mount -o device_backend=cuda,device_limit=64M,host_limit=64M "$@"
}

# mkfile NAME N: a file of N random bytes at $MNT/NAME with a copy at
# $TFS_TMP/NAME.
mkfile() {
	head -c "$2" /dev/urandom >"$TFS_TMP/$1"
	cp "$TFS_TMP/$1" "$MNT/$1"
}
