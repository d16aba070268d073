#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# tests/gpu/mock_check.sh [BUILD]: the cuda backend and libtierfs's CUDA
# path where there is no GPU, with tests/gpu/cuda_mock.c in place of cudart.
#
# The mock is as strict as a GPU (see its header): 2 MiB blocks shared by
# small allocations and mapped whole by IPC, sticky context-wide errors,
# cudaFree that synchronises and aborts when an importer still maps the
# memory, IPC refused in the exporting process, several devices.
#
# 1. tests/gpu/backend_check.c against tiers/device_cuda.c, under ASan and
#    UBSan: 2 MiB-rounded allocations, batched copies waiting once,
#    chunking and double buffering against asynchronous copies, ranges, the
#    slot pool from 8 threads, out of memory, free while the device is busy,
#    copies refused when queued, a sticky error failing the device for good
#    (logged once, no CUDA call after), the message when there is no
#    driver and for the compute modes no client could map in, and all of it
#    on the second of two GPUs, with copies between the two both ways
#    (cudaMemcpyPeerAsync, with and without peer access); host_register: direct copies inside
#    registered ranges only, staging for the rest, unregister, failing
#    registers, the pool page-locked on the backend's own thread, placed on
#    the GPU's NUMA node (TFS_CUDA_NUMA_NODE=0 here, where sysfs says -1)
#    and faulted in before cudaHostRegister; readers sharing a snapshot;
#    many copies at once; sparse allocations through the driver's VMM
#    calls (holes read as zeroes, writes into them refused, an export
#    densifying), and without VMM (TFS_MOCK_NO_VMM) none offered. Needs
#    only the CUDA headers.
# 2. With BUILD, a meson build dir configured with CUDA (sanitized or not):
#    its tierfs relinked with the mock instead of libcudart_static.a, and
#    tests/integration/export.bats and tests/gpu/mock_export.bats run on
#    device_backend=cuda, the clients (libtierfs -> cudaIpcOpenMemHandle)
#    with the mock preloaded. The daemon's pool goes through
#    cudaHostRegister as with host.pinned.
# 3. tests/gpu/mock_reclaim.bats on the same daemon, with the daemon and
#    its clients sharing the mock's device memory (TFS_MOCK_SHARED):
#    tfs_cuda_malloc() and tfs_reclaim() against a full device, the reserve
#    against a competing cudaMalloc loop, and tierfs.device from Python
#    with the mock as its CUDA runtime.
# 4. tests/gpu/mock_gpus.bats: [device] gpus against the mock's two
#    devices, the count from cudaGetDeviceCount.
# 4b. tests/gpu/mock_sparse.bats: sparse files through the daemon, device
#    copies taking only their granules with data, across tiers and GPUs.
# 5. tests/gpu/dask_device_mock.bats: tierfs.dask.TierfsDeviceStore in real
#    Dask clusters on this daemon, the workers loading the mock as their
#    CUDA runtime (skipped without Debian's python3-distributed).
#
# Prints a TAP line ("ok - what" / "not ok - what") per check and, for
# 2-4, every bats test's own line, so that tests/run counts each test and
# each skip. Exit 0 when all of it behaves, 1 otherwise, 77 without CUDA
# headers.
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
	tests/gpu/backend_check.c tiers/device_cuda.c tiers/device_cuda_copy.c tiers/device_cuda_vmm.c config/log.c \
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
# TFS_MOCK_ONLY="FILE.bats ...": those bats files alone (with BUILD), for
# working on one; part 1 and the totals at the end are left out.
only=${TFS_MOCK_ONLY:-}
if [ -z "$only" ]; then
expect "round trips from 8 threads, staged and page-locked; failing copies" 0 \
	"^1\.\.19$" TFS_MOCK_CAPACITY=$((1 << 30)) TFS_CUDA_NUMA_NODE=0
expect "no virtual memory management: no sparse allocations offered" 0 \
	"sparse allocations.*# SKIP no sparse allocations" \
	TFS_MOCK_CAPACITY=$((1 << 30)) TFS_MOCK_NO_VMM=1 \
	TFS_CHECK_ONLY="sparse allocations"
expect "no driver: -ENODEV and the CUDA error's name" 77 \
	"cudaGetDeviceCount: mock error (cudaErrorInsufficientDriver, 35)" \
	TFS_MOCK_NODEV=1
expect "the same on the second of two GPUs, and peer copies" 0 \
	"gpu 1 -> gpu 0: peer access yes" \
	TFS_MOCK_CAPACITY=$((1 << 30)) TFS_MOCK_DEVICES=2 TFS_GPU=1
expect "peer copies without peer access: staged, byte-identical" 0 \
	"gpu 0 -> gpu 1: peer access no" \
	TFS_MOCK_CAPACITY=$((1 << 30)) TFS_MOCK_DEVICES=2 TFS_MOCK_PEER=0
expect "exclusive-process compute mode: refused, with the reason" 77 \
	"gpu 0 is in exclusive-process compute mode: tierfs would hold its only context" \
	TFS_MOCK_COMPUTE_MODE=3
expect "prohibited compute mode: refused, with the reason" 77 \
	"gpu 0 is in prohibited compute mode" TFS_MOCK_COMPUTE_MODE=2
fi

BUILD=${1:-}
if [ -z "$BUILD" ]; then
	exit $failed
fi
ninja -C "$BUILD" >/dev/null || exit 1
link=$(ninja -C "$BUILD" -t commands fs/tierfs | tail -1)
case $link in
*libcudart_static.a*) ;;
*) echo "not ok - $BUILD has no CUDA backend"; exit 1 ;;
esac
cc -std=gnu11 -O1 -g -D_GNU_SOURCE -fPIC -Wall -isystem "$CUDA/include" \
	-c tests/gpu/cuda_mock.c -o "$out/cuda_mock.o" &&
	cc -shared "$out/cuda_mock.o" -lpthread -lrt -o "$out/libcudamock.so" ||
	exit 1
link=$(sed -e "s| -o fs/tierfs | -o $out/tierfs |" \
	-e "s|[^ ]*libcudart_static\.a|$out/cuda_mock.o|" <<<"$link")
(cd "$BUILD" && eval "$link") || exit 1
build=$(cd "$BUILD" && pwd)
# The store over the backend without a mount (tests/gpu/store_check.c),
# relinked the same way.
link=$(ninja -C "$BUILD" -t commands tests/gpu/store_check | tail -1)
link=$(sed -e "s| -o tests/gpu/store_check | -o $out/store_check |" \
	-e "s|[^ ]*libcudart_static\.a|$out/cuda_mock.o|" <<<"$link")
(cd "$BUILD" && eval "$link") || exit 1
case " ${only:-store_check} " in
*" store_check "*)
	if TFS_MOCK_CAPACITY=$((256 << 20)) timeout 300 "$out/store_check" \
		>"$out/store.log" 2>&1; then
		echo "ok - the store over the backend without a mount (store_check):" \
			"$(grep -c '^ok' "$out/store.log") ok"
	else
		echo "not ok - the store over the backend without a mount (store_check)"
		sed 's/^/    /' "$out/store.log"
		failed=1
	fi
	;;
esac
only=${only/store_check/}
only=${only# }
[ -n "${TFS_MOCK_ONLY:-}" ] && [ -z "$only" ] && exit $failed
client=$build/client/lib/export_client
# A sanitized client wants its ASan runtime first among preloads.
preload=$out/libcudamock.so
asan=$(ldd "$client" 2>/dev/null | awk '/libasan/ { print $3 }')
[ -n "$asan" ] && preload="$asan $preload"
san=
[ -n "$asan" ] && san=-fsanitize=address,undefined
cc -std=gnu11 -O1 -g -D_GNU_SOURCE -Wall -Werror $san -I include -I client \
	-isystem "$CUDA/include" \
	tests/gpu/mock_client.c -L "$build/client/lib" -ltierfs \
	-L "$CUDA/lib64" -lcudart \
	-Wl,-rpath,"$build/client/lib" -o "$out/mock_client.bin" || exit 1
for c in export_client:"$client" mock_client:"$out/mock_client.bin"; do
	cat >"$out/${c%%:*}" <<EOS
#!/bin/sh
LD_PRELOAD="$preload" EXPORT_CLIENT_MOCK_CUDA=1 exec ${c#*:} "\$@"
EOS
	chmod +x "$out/${c%%:*}"
done
for f in ${only:-tests/integration/export.bats tests/gpu/mock_export.bats \
	tests/gpu/mock_reclaim.bats tests/gpu/mock_gpus.bats \
	tests/gpu/mock_lease.bats tests/gpu/mock_sparse.bats \
	tests/gpu/dask_device_mock.bats}; do
	shared=
	case $f in *mock_reclaim.bats) shared=$out/shared ;; esac
	if TIERFS_BIN=$out/tierfs EXPORT_CLIENT=$out/export_client \
		TIERFSCTL_BIN=$build/client/tierfsctl \
		MOCK_CLIENT=$out/mock_client MOCK_CUDART=$out/libcudamock.so \
		TFS_MOCK_SHARED=$shared \
		TFS_EXPORT_BACKEND=cuda TFS_MOCK_CAPACITY=$((256 << 20)) \
		TFS_MOCK_STATS=$out/stats bats --tap "$f" >"$out/bats.log" 2>&1; then
		rc=0
	else
		rc=$?
	fi
	# Each test's own TAP line, named after its file, so that a caller
	# (tests/run) counts every test and every skip, not one line a file.
	name=$(basename "$f" .bats)
	sed -nE "s/^(not )?ok ([0-9]+) /\1ok \2 $name (mock cuda): /p" "$out/bats.log"
	echo "# $name on the cuda backend (mock):" \
		"$(grep -c "^ok" "$out/bats.log") ok ($(grep -ci "^ok .*# skip" "$out/bats.log") skipped)," \
		"$(grep -c "^not ok" "$out/bats.log") not ok, bats exit $rc"
	if [ $rc != 0 ]; then
		grep -q "^not ok" "$out/bats.log" ||
			echo "not ok - $name on the cuda backend (mock): bats exited $rc"
		sed 's/^/    /' "$out/bats.log"
		failed=1
	fi
done
[ -z "$only" ] || exit $failed
# host.pinned is on by default: the daemons must have page-locked their
# pool, copied some directly, and unregistered all of it; and at exit no
# device memory may be left (the mock frees it then, as the driver does,
# and counts it).
read -r reg unreg left direct staged devleft < <(awk '
	{ r += $2; u += $4; l += $6; d += $8; s += $10; v += $16 }
	END { print r + 0, u + 0, l + 0, d + 0, s + 0, v + 0 }' "$out/stats" 2>/dev/null)
if [ "${reg:-0}" -gt 0 ] && [ "$direct" -gt 0 ] && [ "$left" -eq 0 ] &&
	[ "$reg" -eq "$unreg" ]; then
	echo "ok - daemon pool chunks page-locked: $reg registered and" \
		"unregistered, $direct direct copies, $staged staged"
else
	echo "not ok - daemon pool chunks page-locked: registers ${reg:-none}," \
		"unregisters ${unreg:-none}, left ${left:-none}," \
		"direct copies ${direct:-none}"
	failed=1
fi
if [ "${devleft:-1}" -ne 0 ]; then
	echo "not ok - $devleft device allocations never freed"
	failed=1
fi
exit $failed
