#!/usr/bin/env bats
# [device] gpus on the cuda backend against tests/gpu/cuda_mock.c with two
# devices (TFS_MOCK_DEVICES=2): the backend's count (cudaGetDeviceCount)
# decides what 'all' is and which ordinals exist, and the GPU picked is the
# one the files and the stats are on.
# Run by tests/gpu/mock_check.sh, which sets TIERFS_BIN (the daemon relinked
# with the mock) and TFS_MOCK_CAPACITY (each device's memory).

load ../integration/helpers

setup() {
	tfs_setup
	export TFS_MOCK_DEVICES=2
}

teardown() {
	tfs_teardown
}

stat_of() {
	getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT" |
		sed -n "s/^$1=//p"
}

mount_fails() {
	local msg=$1
	shift
	run timeout 60 "$TIERFS_BIN" "$MNT" -f -o "disk_path=$SPILL,$1"
	echo "status $status, output: $output"
	[ "$status" -ne 0 ]
	[ "$status" -ne 124 ]
	[[ "$output" == *"$msg"* ]]
	! mountpoint -q "$MNT"
}

@test "cuda: device_gpus=1 serves the second of two GPUs" {
	tfs_mount -o device_backend=cuda,device_gpus=1,device_limit=64M
	head -c 3M /dev/urandom >"$TFS_TMP/a"
	cp "$TFS_TMP/a" "$MNT/a"
	[ "$(tfs_tier "$MNT/a")" = device ]
	[ "$(getfattr --absolute-names --only-values -n user.tierfs.device "$MNT/a")" = 1 ]
	[ "$(stat_of gpus)" = 1 ]
	[ "$(stat_of device1.used)" -ge $((3 << 20)) ]
	cmp "$TFS_TMP/a" "$MNT/a"
}

@test "cuda: the machine's count bounds the list and 'all'" {
	mount_fails "-o device_gpus: no GPU 2, the machine has 2" \
		device_backend=cuda,device_gpus=2
	mount_fails "device_gpus: 2 GPUs: one mount serves one GPU so far" \
		device_backend=cuda,device_gpus=all
	TFS_MOCK_DEVICES=1 tfs_mount -o device_backend=cuda,device_gpus=all,device_limit=64M
	[ "$(stat_of gpus)" = 0 ]
}
