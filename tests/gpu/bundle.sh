#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# tests/gpu/bundle.sh [DIR]: build here everything the GPU run needs and
# gather what the GPU machine's image lacks into DIR (default gpu-bundle/ at
# the top of the tree; git ignores it), so that tests/gpu/run.sh there uses
# only DIR and the working tree: no build, no apt, no network.
#
# The GPU machine (one H200, Firecracker or gVisor, the workplace's CUDA
# image: nvcc 13.0, its own python3 with cupy and torch, no Debian packages
# such as fuse3 or attr, nothing reachable) receives the working tree and
# the carried folders; how to call it is in tests/gpu/README.
#
# DIR holds:
#   bin/     tierfs (-Dcuda=enabled, static cudart), tierfsctl,
#            export_client, store_check, backend_check; the CUDA helpers
#            (gpu_fill, gpu_check, gpu_bw, gpu_probe, gpu_hog, gpu_peer)
#            built with -arch=sm_90 and compute_90 PTX; and the tools the
#            image lacks: fusermount3, setfattr, getfattr, cmp
#   lib/     the shared libraries those link that the image lacks
#            (libfuse3, liblz4, libinih, libtierfs, libcudart for the
#            helpers); run.sh puts it first on LD_LIBRARY_PATH
#   mock/    backend_check, store_check and tierfs on the fake CUDA runtime
#            (tests/gpu/cuda_mock.c), for the dry run here
#   MANIFEST the commit built, and every file with its size and sha256
#
# Files come from this machine's packages (what the build linked), or from
# `apt-get download` and `dpkg -x` when a tool is not installed here;
# nothing is installed. Nothing in DIR may need a glibc newer than 2.34,
# so that it starts on an older image than this machine. Exit 0 with DIR
# complete and under 32 MiB, 1 otherwise (what is missing is said).
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
CUDA=${CUDA_HOME:-/usr/local/cuda}
DIR=${1:-gpu-bundle}
case $DIR in /*) ;; *) DIR=$top/$DIR ;; esac
BUILD=${TFS_BUNDLE_BUILD:-$top/build-gpu-bundle}
MAX_BYTES=$((32 << 20))

die() {
	echo "bundle: $*" >&2
	exit 1
}
say() { echo "bundle: $*"; }

[ -x "$CUDA/bin/nvcc" ] || die "no nvcc under $CUDA (set CUDA_HOME)"
[ -f "$CUDA/lib64/libcudart_static.a" ] || die "no libcudart_static.a under $CUDA/lib64"
# The bundle must never be committed.
case $DIR in
"$top"/*)
	git check-ignore -q "$DIR/MANIFEST" ||
		die "${DIR#"$top"/} is not ignored by git: add it to .gitignore"
	;;
esac

# --- the build -----------------------------------------------------------------
if [ -f "$BUILD/build.ninja" ]; then
	meson configure "$BUILD" -Dcuda=enabled -Dcudadir="$CUDA" >/dev/null
else
	log=$(mktemp /tmp/tierfs-bundle-setup.XXXXXX)
	meson setup "$BUILD" --wrap-mode=nodownload -Dwerror=true \
		--buildtype=debugoptimized -Dcuda=enabled -Dcudadir="$CUDA" \
		-Dman=disabled >"$log" 2>&1 ||
		die "meson setup failed: $(tail -3 "$log") (all of it in $log)"
	rm -f "$log"
fi
ninja -C "$BUILD" fs/tierfs client/tierfsctl client/lib/export_client \
	tests/gpu/store_check >"$BUILD/bundle-ninja.log" 2>&1 ||
	die "build failed: $(grep -m3 -E 'error' "$BUILD/bundle-ninja.log")"
grep -q libcudart_static "$BUILD/build.ninja" ||
	die "$BUILD was configured without the CUDA backend"

rm -rf "$DIR.new"
mkdir -p "$DIR.new/bin" "$DIR.new/lib" "$DIR.new/mock"
B=$DIR.new
cp "$BUILD/fs/tierfs" "$BUILD/client/tierfsctl" \
	"$BUILD/client/lib/export_client" "$BUILD/tests/gpu/store_check" \
	"$B/bin/"
cp -P "$BUILD"/client/lib/libtierfs.so "$BUILD"/client/lib/libtierfs.so.0 \
	"$BUILD"/client/lib/libtierfs.so.[0-9]*[0-9] "$B/lib/"

cc_opts=(-std=gnu11 -O2 -D_GNU_SOURCE -DTFS_HAVE_CUDA=1 -Wall -Wextra
	-Wno-unused-parameter -Werror -I include -I . -isystem "$CUDA/include")
cc "${cc_opts[@]}" tests/gpu/backend_check.c tiers/device_cuda.c \
	tiers/device_cuda_copy.c tiers/device_cuda_vmm.c config/log.c "$CUDA/lib64/libcudart_static.a" \
	-ldl -lpthread -lrt -o "$B/bin/backend_check"

# Hopper machine code, and PTX the driver can compile for what else comes.
arch=(-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90)
pids=()
for src in tests/gpu/gpu_check.cu tests/gpu/gpu_bw.cu tests/gpu/gpu_probe.cu \
	tests/gpu/gpu_hog.cu bench/gpu_peer.cu examples/gpu_fill.cu; do
	h=$(basename "$src" .cu)
	"$CUDA/bin/nvcc" -O2 -std=c++17 "${arch[@]}" -cudart shared \
		-I include -I client -I examples -I tests/gpu "$src" \
		-L "$BUILD/client/lib" -ltierfs -Xlinker -rpath='$ORIGIN/../lib' \
		-o "$B/bin/$h" >"$BUILD/nvcc-$h.log" 2>&1 &
	pids+=("$!:$h")
done
for p in "${pids[@]}"; do
	wait "${p%%:*}" || die "nvcc ${p#*:}: $(head -5 "$BUILD/nvcc-${p#*:}.log")"
done
cp -L "$CUDA/lib64/libcudart.so.13" "$B/lib/"

# --- the fake runtime's builds, for the dry run ---------------------------------
cc -std=gnu11 -O1 -g -D_GNU_SOURCE -fPIC -Wall -isystem "$CUDA/include" \
	-c tests/gpu/cuda_mock.c -o "$BUILD/cuda_mock.o"
cc "${cc_opts[@]}" tests/gpu/backend_check.c tiers/device_cuda.c \
	tiers/device_cuda_copy.c tiers/device_cuda_vmm.c config/log.c "$BUILD/cuda_mock.o" -lpthread -lrt \
	-o "$B/mock/backend_check"
for t in fs/tierfs tests/gpu/store_check; do
	link=$(ninja -C "$BUILD" -t commands "$t" | tail -1)
	link=$(sed -e "s| -o $t | -o $B/mock/$(basename "$t") |" \
		-e "s|[^ ]*libcudart_static\.a|$BUILD/cuda_mock.o|" <<<"$link")
	(cd "$BUILD" && eval "$link") || die "cannot relink $t with the fake runtime"
done

# --- tools the image lacks -------------------------------------------------------
# from_deb PACKAGE PATH: PATH out of PACKAGE's .deb, without installing it.
from_deb() {
	local tmp
	tmp=$(mktemp -d)
	(cd "$tmp" && apt-get download "$1" >/dev/null 2>&1) ||
		die "$2 is not installed here and apt-get download $1 failed"
	dpkg -x "$tmp"/*.deb "$tmp/x"
	cp "$tmp/x$2" "$B/bin/"
	rm -rf "$tmp"
}
for t in fusermount3:fuse3 setfattr:attr getfattr:attr cmp:diffutils; do
	p=$(command -v "${t%%:*}" || true)
	if [ -n "$p" ]; then
		cp -L "$p" "$B/bin/"
	else
		from_deb "${t#*:}" "/usr/bin/${t%%:*}"
	fi
done

# --- libraries ------------------------------------------------------------------
# What any image has: the C library's own, the compiler's runtime, and the
# driver's (which comes with the GPU, never from here).
base_lib() {
	case $1 in
	linux-vdso.so.* | ld-linux-x86-64.so.* | libc.so.6 | libm.so.6 | \
		libpthread.so.0 | libdl.so.2 | librt.so.1 | libgcc_s.so.1 | \
		libstdc++.so.6 | libcuda.so.1 | libnvidia-*) return 0 ;;
	esac
	return 1
}
for f in "$B"/bin/* "$B"/mock/*; do
	while read -r name _ path _; do
		base_lib "$name" && continue
		[ -e "$B/lib/$name" ] && continue
		[ -f "$path" ] || die "$(basename "$f") needs $name, not found here"
		cp -L "$path" "$B/lib/$name"
	done < <(LD_LIBRARY_PATH=$B/lib ldd "$f" 2>/dev/null | awk '/=>/ { print $1, $2, $3 }')
done
# Nothing of ours may be missing once the bundle's lib is on the path.
for f in "$B"/bin/* "$B"/mock/* "$B"/lib/*.so*; do
	miss=$(LD_LIBRARY_PATH=$B/lib ldd "$f" 2>/dev/null |
		awk '/not found/ && $1 != "libcuda.so.1" { print $1 }')
	[ -z "$miss" ] || die "$(basename "$f"): $miss not found"
done
strip --strip-unneeded "$B"/bin/* "$B"/mock/* "$B"/lib/*.so* 2>/dev/null || true
# The image's C library may be older than this machine's (Ubuntu 22.04 has
# 2.35, EL9 2.34): nothing may need a glibc symbol newer than GLIBC_FLOOR.
GLIBC_FLOOR=2.34
for f in "$B"/bin/* "$B"/mock/* "$B"/lib/*.so*; do
	v=$(objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_2\.[0-9]*' | sort -uV | tail -1)
	[ -z "$v" ] || [ "$(printf '%s\n' "${v#GLIBC_}" "$GLIBC_FLOOR" | sort -V | tail -1)" = "$GLIBC_FLOOR" ] ||
		die "$(basename "$f") needs $v ($(objdump -T "$f" | grep -F "($v)" | awk '{ print $NF }' | tr '\n' ' ')), newer than glibc $GLIBC_FLOOR: call it through syscall(2)"
done

# --- the manifest --------------------------------------------------------------
{
	echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!gpu-bundle' 2>/dev/null || echo '+changes')"
	echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), $(. /etc/os-release && echo "$PRETTY_NAME"), $("$CUDA/bin/nvcc" --version | tail -1)"
	(cd "$B" && find . -type f | sort | while read -r f; do
		printf '%s %s %s\n' "$(sha256sum "$f" | cut -c1-16)" \
			"$(stat -c %s "$f")" "${f#./}"
	done)
} >"$BUILD/MANIFEST"
mv "$BUILD/MANIFEST" "$B/MANIFEST"
bytes=$(du -sb "$B" | cut -f1)
[ "$bytes" -lt "$MAX_BYTES" ] ||
	die "$bytes bytes, more than $MAX_BYTES: the run may carry 64 MiB in all"
rm -rf "$DIR"
mv "$B" "$DIR"
say "$(find "$DIR" -type f | wc -l) files, $((bytes >> 10)) KiB in ${DIR#"$top"/}"
