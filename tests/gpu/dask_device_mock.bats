#!/usr/bin/env bats
# tierfs.dask.TierfsDeviceStore in real Dask clusters, on the cuda backend
# against tests/gpu/cuda_mock.c: the daemon relinked with the fake runtime,
# the workers loading it as their CUDA runtime (TIERFS_CUDART), values of
# the tests' own device array (tests/dask/devarray.py, with a "cuda"
# serializer). Each test runs one case of tests/dask/device_cluster.py,
# which says what it checks line by line.
# Run by tests/gpu/mock_check.sh, which sets:
#   TIERFS_BIN         the daemon relinked with the mock
#   MOCK_CUDART        the mock as a shared library (what Python loads)
#   TFS_MOCK_CAPACITY  each device's memory (256 MiB)

load ../integration/helpers

PY=/usr/bin/python3
TOP=$BATS_TEST_DIRNAME/../..

require_dask() {
	"$PY" -c 'import distributed, numpy, pandas' 2>/dev/null ||
		skip "$PY lacks distributed, numpy or pandas"
}

setup() {
	require_dask
	tfs_setup
	export PYTHONPATH=$TOP/python:$TOP/tests/dask
	export TIERFS_CUDART=$MOCK_CUDART
}

teardown() {
	tfs_teardown
}

stat_of() {
	getfattr --absolute-names --only-values -n user.tierfs.stats "$MNT" |
		sed -n "s/^$1=//p"
}

# cluster CASE: the case against $MNT, its lines shown, PASS required.
cluster() {
	run timeout 600 "$PY" "$TOP/tests/dask/device_cluster.py" "$1" "$MNT"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "${lines[-1]}" == "PASS: tests/dask/device_cluster.py $1" ]]
}

@test "device store: values stay on the device tier to its limit, spill, come back the same" {
	tfs_mount -o device_backend=cuda,device_limit=32M,host_limit=64M
	cluster tiers
	# Spilled by the daemon, and not a byte through the workers' host
	# memory (the case checks the arrays' host serializer never ran).
	[ "$(stat_of device.spills)" -ge 1 ]
}

@test "device store: a transfer between two workers on one mount is a hard link" {
	tfs_mount -o device_backend=cuda,device_limit=64M,host_limit=64M
	cluster link
}

@test "device store: without links the same transfer copies through host memory" {
	tfs_mount -o device_backend=cuda,device_limit=64M,host_limit=64M
	cluster nolink
}

@test "device store: a worker SIGKILLed with a value leased leaves nothing" {
	tfs_mount -o device_backend=cuda,device_limit=64M,host_limit=64M
	cluster kill
	[ "$(stat_of device.used)" = 0 ]
}

@test "device store: one mount for two GPUs, each worker on its own, one host tier" {
	export TFS_MOCK_DEVICES=2
	tfs_mount -o device_backend=cuda,device_gpus=0:1,device_limit=24M,host_limit=64M
	cluster gpus
	[ "$(stat_of gpus)" = 0,1 ]
}

@test "device store: an RMM allocation that fails makes tierfs spill and succeeds" {
	# Daemon and workers share the fake devices' memory, as processes on
	# one GPU do.
	export TFS_MOCK_SHARED=$TFS_TMP/shared
	tfs_mount -o device_backend=cuda,device_limit=224M,host_limit=512M,device_reserve=0
	cluster rmm
	[ "$(stat_of device.reclaims)" -ge 1 ]
}

@test "device store: without the failure callback that allocation fails" {
	export TFS_MOCK_SHARED=$TFS_TMP/shared
	tfs_mount -o device_backend=cuda,device_limit=224M,host_limit=512M,device_reserve=0
	cluster normm
	[ "$(stat_of device.reclaims)" = 0 ]
}

@test "device store: device_memory_limit below the mount's limit holds for every put and get" {
	tfs_mount -o device_backend=cuda,device_limit=64M,host_limit=128M
	cluster budget
}

@test "device store: a put returns once its copies on the stream ran (commit(stream=) waits)" {
	tfs_mount -o device_backend=cuda,device_limit=64M,host_limit=64M
	cluster commit
}
