#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# tests/gpu/mock_check.sh: run tests/gpu/backend_check.c against the cuda
# backend (tiers/device_cuda.c) linked with tests/gpu/cuda_mock.c instead of
# cudart, under ASan and UBSan. Needs only the CUDA headers. It checks the
# backend's own logic where no GPU is: chunking and double buffering against
# asynchronous copies, ranges, the slot pool from 8 threads, out of memory,
# failing copies, and the message when there is no driver.
#
# Exit 0 when both runs behave, 1 otherwise, 77 without CUDA headers.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
CUDA=${CUDA_HOME:-/usr/local/cuda}
[ -f "$CUDA/include/cuda_runtime_api.h" ] || {
	echo "SKIP: no CUDA headers under $CUDA"
	exit 77
}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -std=gnu11 -g -O1 -D_GNU_SOURCE -DTFS_HAVE_CUDA=1 -Wall -Wextra \
	-Wno-unused-parameter -Werror -fsanitize=address,undefined \
	-fno-sanitize-recover=undefined -I include -I . -isystem "$CUDA/include" \
	tests/gpu/backend_check.c tiers/device_cuda.c config/log.c \
	tests/gpu/cuda_mock.c -lpthread -o "$out/check" || exit 1

failed=0
expect() { # WHAT WANT_RC GREP [ENV...]
	local what=$1 want=$2 pat=$3 got
	shift 3
	env "$@" timeout 120 "$out/check" >"$out/log" 2>&1
	got=$?
	if [ $got -eq "$want" ] && grep -q -- "$pat" "$out/log"; then
		echo "ok - $what"
	else
		echo "not ok - $what (exit $got, want $want)"
		sed 's/^/    /' "$out/log"
		failed=1
	fi
}
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1
expect "round trips from 8 threads on async copies; failing copies" 0 \
	"^ok 1" TFS_MOCK_CAPACITY=$((1 << 30))
expect "no driver: -ENODEV and the CUDA error's name" 77 \
	"cudaGetDeviceCount: mock error (cudaErrorInsufficientDriver, 35)" \
	TFS_MOCK_NODEV=1
exit $failed
