#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# tests/gpu/bare_root.sh ROOT TOP BUNDLE OUT -- RUN_ARGS...: the dry run of
# the GPU run inside a bare root, as close to the GPU machine as this
# machine can come: a chroot holding only the commands a CUDA image has
# (tests/gpu/run.sh's IMAGE_TOOLS) with the libraries they link, the image's
# python3 and its standard library, what the device tool sends (the tree as
# git sees it and the carried bundle) and nothing else of Debian: no fuse3,
# attr, libfuse3, liblz4, libinih, pkg-config, compiler or git. A file the
# bundle lacks fails there, not on the GPU machine.
#
# It runs in a private mount namespace (unshare -m), so that /proc, /dev,
# /sys and the test mounts it makes vanish with it, and leaves nothing:
# ROOT is removed at the end, and any process still rooted in it is ended by
# its pid. Called by tests/gpu/run.sh under TFS_GPU_DRYRUN=1 as root; exit
# status is run.sh's inside, 2 when the root cannot be built.
set -uo pipefail

[ $# -ge 5 ] && [ "$5" = -- ] || {
	echo "usage: bare_root.sh ROOT TOP BUNDLE OUT -- RUN_ARGS..." >&2
	exit 2
}
R=$1 TOP=$2 BUNDLE=$3 OUT=$4
shift 5
MADE=
die() {
	echo "bare root: $*" >&2
	[ -z "$MADE" ] || rm -rf --one-file-system "$R"
	exit 2
}
[ -d "$R" ] && [ -z "$(ls -A "$R")" ] || die "$R is not an empty directory"
MADE=1
command -v chroot >/dev/null && command -v unshare >/dev/null ||
	die "no chroot or unshare here"

# The layout of a merged-/usr image.
mkdir -p "$R"/usr/bin "$R"/usr/sbin "$R"/usr/lib "$R"/usr/lib64 "$R"/etc \
	"$R"/proc "$R"/sys "$R"/dev "$R"/tmp "$R"/root "$R"/work "$R"/out \
	"$R"/run "$R"/var/tmp || die "cannot make $R"
ln -s usr/bin "$R/bin"
ln -s usr/sbin "$R/sbin"
ln -s usr/lib "$R/lib"
ln -s usr/lib64 "$R/lib64"
chmod 1777 "$R/tmp" "$R/var/tmp"

# put FILE: FILE (and, if a link, what it points to) at its own path in R.
put() {
	local f=$1 real
	real=$(readlink -f "$f") || return 1
	[ -e "$R$real" ] || { mkdir -p "$R$(dirname "$real")" && cp -p "$real" "$R$real"; } || return 1
	if [ "$real" != "$f" ] && [ ! -e "$R$f" ] && [ ! -L "$R$f" ]; then
		mkdir -p "$R$(dirname "$f")" && ln -s "$real" "$R$f"
	fi
}
# put_prog FILE: a program and every library ldd says it links.
put_prog() {
	local lib
	put "$1" || return 1
	while read -r lib; do
		put "$lib" || return 1
	done < <(ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }
		$1 ~ /^\// { print $1 }')
}

tools=$(sed -n '/^IMAGE_TOOLS="/,/"$/p' "$TOP/tests/gpu/run.sh" |
	sed -e 's/^IMAGE_TOOLS="//' -e 's/"$//')
[ -n "$tools" ] || die "no IMAGE_TOOLS in run.sh"
for t in $tools; do
	case $t in
	# The image's own python (here Debian's, not a pyenv shim).
	python3) p=$(readlink -f /usr/bin/python3) ;;
	*) p=$(PATH=/usr/sbin:/usr/bin:/sbin:/bin type -P "$t") ||
		die "this machine has no $t to put in the image" ;;
	esac
	put_prog "$p" || die "cannot copy $p"
	[ -e "$R/usr/bin/$t" ] || ln -s "$p" "$R/usr/bin/$t"
done
# Every image has the C library whole (libdl, libpthread, librt are stubs
# no tool here links), and the compiler's runtime (libgcc_s, which
# pthread_cancel loads, and libstdc++).
for pkg in libc6 libgcc-s1 libstdc++6; do
	while read -r f; do
		[ -f "$f" ] && put "$f"
	done < <(dpkg -L "$pkg" 2>/dev/null | grep -E '^/(usr/)?lib(64)?/[^/]*(/[^/]*)?\.so[.0-9]*$')
done
[ -e "$R/lib/x86_64-linux-gnu/libgcc_s.so.1" ] || die "no libgcc_s.so.1 from this machine's libgcc-s1"
py=$(readlink -f /usr/bin/python3)
pylib=/usr/lib/$(basename "$py")
[ -d "$pylib" ] || die "no standard library at $pylib"
mkdir -p "$R$pylib"

# The little of /etc an image has.
printf 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$R/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$R/etc/group"
ln -s ../proc/self/mounts "$R/etc/mtab"
cp /etc/os-release "$R/etc/os-release" 2>/dev/null

# What the device tool sends: tracked and untracked files git does not
# ignore, and the carried bundle.
mkdir -p "$R/work/repo"
git -C "$TOP" ls-files -z --cached --others --exclude-standard |
	while IFS= read -r -d '' f; do
		[ -e "$TOP/$f" ] && printf '%s\0' "$f"
	done | (cd "$TOP" && xargs -0 cp -P --parents -t "$R/work/repo") ||
	die "cannot copy the tree"
rel=${BUNDLE#"$TOP"/}
mkdir -p "$R/work/repo/$(dirname "$rel")"
cp -a "$BUNDLE" "$R/work/repo/$rel" || die "cannot copy the bundle"

echo "bare root: $R: $(find "$R/usr" \( -type f -o -type l \) | wc -l) image files, $(du -sm "$R/usr" | cut -f1) MiB, and the tree"

# Inside a private mount namespace: the kernel's file systems, the device
# nodes an image has (and /dev/fuse), python's library read-only, then
# run.sh in the root with the image's environment alone.
inner='
set -e
R=$1 PYLIB=$2
shift 2
mount --make-rprivate /
mount -t proc proc "$R/proc"
mount --bind -o ro /sys "$R/sys" 2>/dev/null || mount --rbind /sys "$R/sys"
mount -t tmpfs -o mode=755,size=64m dev "$R/dev"
for n in null zero full random urandom tty fuse; do
	[ -e /dev/$n ] || continue
	: >"$R/dev/$n"
	mount --bind /dev/$n "$R/dev/$n"
done
mkdir "$R/dev/shm" "$R/dev/pts"
mount -t tmpfs -o mode=1777,size=4g shm "$R/dev/shm"
ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"
ln -s /proc/self/fd/1 "$R/dev/stdout"
ln -s /proc/self/fd/2 "$R/dev/stderr"
mount --bind -o ro "$PYLIB" "$R$PYLIB"
mount --bind "$OUT_DIR" "$R/out"
exec chroot "$R" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
	PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	TFS_GPU_DRYRUN=1 TFS_GPU_RELOCATED=1 TFS_GPU_BARE=1 \
	TFS_GPU_BUDGET="${TFS_GPU_BUDGET:-420}" \
	${TFS_GPU_STRESS_S:+TFS_GPU_STRESS_S="$TFS_GPU_STRESS_S"} "$@"
'
mkdir -p "$OUT" || die "cannot make $OUT"
OUT_DIR=$OUT unshare -m -- bash -c "$inner" bare "$R" "$pylib" \
	/usr/bin/bash -c 'cd /work/repo && exec bash tests/gpu/run.sh "$@"' run.sh \
	--bundle "$rel" --out /out "$@"
rc=$?

# Nothing may outlive the run: a process still rooted in R is ours.
for p in /proc/[0-9]*; do
	[ "$(readlink "$p/root" 2>/dev/null)" = "$R" ] || continue
	echo "bare root: ending ${p#/proc/}, left in the root: $(tr '\0' ' ' <"$p/cmdline")"
	kill -9 "${p#/proc/}" 2>/dev/null
done
rm -rf --one-file-system "$R"
exit $rc
