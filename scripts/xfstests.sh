#!/usr/bin/env bash
# xfstests against ckptfs and, in the same run, against libfuse's own passthrough_ll example as
# the baseline (issue 42). Opt-in: neither scripts/test.sh nor CI runs it (-g quick runs for
# tens of minutes).
#
# Usage: scripts/xfstests.sh [check arguments]      (default: -g quick)
#        scripts/xfstests.sh generic/001 generic/005
#
# What it does, as root: installs xfstests' build dependencies with apt-get (only those
# missing); unpacks ../shared/peers/xfstests-63a29724.tar.gz (relative to the repository root)
# into $CKPTFS_XFSTESTS_CACHE (default /var/tmp/ckptfs-xfstests), applies xfstests-fuse.patch
# beside it, wraps each test in timeout(1) and builds it, once (reused while the tarball and the
# patch are unchanged); adds the users fsgqa, fsgqa2 and 123456-fsgqa if missing; builds ckptfs
# (scripts/build.sh, build-test) and passthrough_ll (tests/bench/bench_small.py's
# build_passthrough); then runs ./check with FSTYP=fuse twice, FUSE_SUBTYP=.ckptfs (the daemon's
# defaults) and FUSE_SUBTYP=.passthrough_ll, each on its own stores and mount points under one
# temporary directory, and prints both tallies and the tests that fail on ckptfs but pass on
# passthrough_ll.
#
# Mounting: xfstests runs `mount -t fuse.SUBTYPE STORE MNT`; mount(8) hands fuse3's mount.fuse3
# helper a fixed PATH (/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin) and the
# helper runs `SUBTYPE STORE MNT -o OPTIONS` from it. The build's binary is on none of those, so
# both runs happen in a private mount namespace (unshare) where a read-only overlay adds
# `ckptfs` (a link to the build's binary) and `passthrough_ll` (a wrapper turning STORE into
# -o source=) to /usr/local/sbin; nothing outside the namespace sees them or the test mounts.
#
# Environment: CKPTFS_XFSTESTS_CACHE (build and results, default /var/tmp/ckptfs-xfstests),
# CKPTFS_XFSTESTS_TIMEOUT (seconds a test may run before SIGTERM, SIGKILL 10 s later; default
# 290), CKPTFS_BUILD (default build-test).
# Results: $CKPTFS_XFSTESTS_CACHE/results/DATE/{ckptfs,passthrough_ll}/ (check's logs, each
# failed test's .out.bad and .full). Exit status: 0 when both runs finished and no test fails on
# ckptfs that passes on passthrough_ll, 1 otherwise.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
self="$top/scripts/xfstests.sh"

die() {
	echo "xfstests.sh: $*" >&2
	exit 1
}

# One run of ./check, inside the private mount namespace: $1 = subtype (ckptfs,
# passthrough_ll), $2 = its directory for stores and mount points, $3 = its results directory,
# $4 = the xfstests tree, the rest = check's arguments. $3 receives the config (local.config),
# check's output (check.log) and check's results (RESULT_BASE). A ckptfs store is 0700 (the
# daemon refuses one writable by others); passthrough_ll shows its source directory's mode as
# the mount's root, so its stores are 0755, as a fresh filesystem's root.
run_check() {
	local name=$1 dir=$2 res=$3 src=$4 mode=0700
	shift 4
	[ "$name" = ckptfs ] || mode=0755
	mkdir -p "$dir/test" "$dir/scratch" "$res"
	mkdir -m "$mode" "$dir/test-store" "$dir/scratch-store"
	cat >"$res/local.config" <<-EOF
	export FSTYP=fuse
	export FUSE_SUBTYP=.$name
	export TEST_DEV=$dir/test-store
	export TEST_DIR=$dir/test
	export SCRATCH_DEV=$dir/scratch-store
	export SCRATCH_MNT=$dir/scratch
	export FUSE_SCRATCH_STORE=$dir/scratch-store
	export FUSE_SCRATCH_STORE_MODE=$mode
	export FUSE_MOUNT_WAIT=1
	export MOUNT_OPTIONS="-o allow_other,default_permissions"
	export TEST_FS_MOUNT_OPTS="-o allow_other,default_permissions"
	export RESULT_BASE=$res
	EOF
	echo "== xfstests on $name: ./check $*"
	(cd "$src" && HOST_OPTIONS="$res/local.config" ./check "$@") 2>&1 | tee "$res/check.log" ||
		true
}

# Every mount under $1 unmounted (lazily if busy), then up to 60 s for its daemons to exit.
unmount_all() {
	local run=$1 m i
	findmnt -rn -o TARGET | { grep "^$run/" || true; } | sort -r | while read -r m; do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	done
	for ((i = 0; i < 600; i++)); do
		pgrep -f "^[^ ]*(ckptfs|passthrough_ll) .*$run/" >/dev/null || return 0
		sleep 0.1
	done
	echo "xfstests.sh: daemons under $run still running 60 s after unmount" >&2
}

# The inner part: $1 = run directory (holds bin/), $2 = xfstests tree, $3 = results directory,
# the rest = check's arguments.
if [ "${1:-}" = --in-namespace ]; then
	run=$2 src=$3 results=$4
	shift 4
	trap 'unmount_all "$run"' EXIT
	mount -t overlay overlay -o "lowerdir=$run/bin:/usr/local/sbin" /usr/local/sbin
	ulimit -n 20000
	export CKPTFS_XFSTESTS_TIMEOUT=${CKPTFS_XFSTESTS_TIMEOUT:-290}
	for name in ckptfs passthrough_ll; do
		run_check "$name" "$run/$name" "$results/$name" "$src" "$@"
		unmount_all "$run/$name"
	done
	exit 0
fi

[ "$(id -u)" -eq 0 ] || die "run as root: xfstests mounts, unmounts and adds users"
peers=$(cd "$top/.." && pwd)/shared/peers
tarball=$peers/xfstests-63a29724.tar.gz
patchf=$peers/xfstests-fuse.patch
[ -f "$tarball" ] || die "no xfstests tarball at $tarball (../shared/peers from the repository)"
[ -f "$patchf" ] || die "no xfstests patch at $patchf"
cache=${CKPTFS_XFSTESTS_CACHE:-/var/tmp/ckptfs-xfstests}
[ $# -gt 0 ] || set -- -g quick
start=$(date +%s)
mkdir -p "$cache"

# xfstests' build and run dependencies (its README), installed only when missing
pkgs=(autoconf automake libtool make gcc pkg-config libaio-dev liburing-dev xfslibs-dev
      libacl1-dev libattr1-dev uuid-dev libgdbm-dev gawk bc psmisc xfsprogs attr acl quota
      libcap2-bin util-linux fuse3 libfuse3-dev)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "installing: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# xfstests, unpacked, patched and built once per tarball and patch. Each test runs under
# timeout(1) (its own process group, so the test's children are killed with it); check records
# a test killed that way as failed, exit status 124 or 137.
src=$cache/xfstests-63a29724
want=$(cat "$tarball" "$patchf" | sha256sum | cut -d' ' -f1)-timeout1
if [ "$(cat "$src/.ckptfs-built" 2>/dev/null)" != "$want" ]; then
	echo "== building xfstests in $src (log: $cache/build.log)"
	rm -rf "$src"
	mkdir -p "$src"
	tar -xzf "$tarball" -C "$src" --strip-components=1
	(cd "$src" && patch -p1 --quiet <"$patchf") || die "$patchf does not apply to $tarball"
	wrap='timeout -k 10 "${CKPTFS_XFSTESTS_TIMEOUT:-290}"'
	sed -i "s/^\tlocal cmd=(bash -c /\tlocal cmd=($wrap bash -c /" "$src/check"
	grep -q 'timeout -k 10 "${CKPTFS_XFSTESTS_TIMEOUT' "$src/check" ||
		die "cannot add the per-test timeout: check's _run_seq has changed"
	(cd "$src" && make configure && ./configure && make -j"$(nproc)") >"$cache/build.log" 2>&1 ||
		die "xfstests does not build: see $cache/build.log"
	echo "$want" >"$src/.ckptfs-built"
fi

# the users xfstests' permission tests run as (its README)
for u in fsgqa fsgqa2 123456-fsgqa; do
	id -u "$u" >/dev/null 2>&1 || useradd -m "$u"
done
getent group fsgqa >/dev/null || groupadd fsgqa

# ckptfs (the tests' build: warnings as errors, build-test) and passthrough_ll
. "$top/scripts/build.sh"
ckptfs_bin=$top/$build/fs/ckptfs
[ -x "$ckptfs_bin" ] || die "no ckptfs binary at $ckptfs_bin"
# passthrough_ll with fallocate and copy_file_range, as libfuse's own build compiles it (its
# config.h); without them it answers EOPNOTSUPP and xfstests skips those tests on the baseline
ptdir=$cache/passthrough
pt=$ptdir/passthrough_ll
ptflags="-DHAVE_FALLOCATE -DHAVE_COPY_FILE_RANGE"
if [ ! -x "$pt" ] || [ "$(cat "$ptdir/flags" 2>/dev/null)" != "$ptflags" ] ||
   [ /usr/share/doc/libfuse3-dev/examples/passthrough_ll.c -nt "$pt" ]; then
	mkdir -p "$ptdir"
	/usr/bin/python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import bench_small
sys.exit(0 if bench_small.build_passthrough(sys.argv[2], sys.argv[3].split()) else 1)' \
		"$top/tests/bench" "$ptdir" "$ptflags" || die "cannot build passthrough_ll"
	echo "$ptflags" >"$ptdir/flags"
fi

run=$(mktemp -d /tmp/ckptfs-xfstests.XXXXXX)
chmod 0755 "$run"
results=$cache/results/$(date +%Y%m%d-%H%M%S)
mkdir -p "$results/ckptfs" "$results/passthrough_ll"
ns=
# the processes this run started, children first (the daemons are not among them: they detach)
descendants() {
	local c
	for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do
		descendants "$c"
		echo "$c"
	done
}
# Interrupted: stop check and its tests. Exiting: the namespace's daemons, if its shell could
# not unmount them, get SIGTERM (each unmounts its mount and exits, and the namespace ends).
stop() {
	[ -z "$ns" ] || kill -TERM $(descendants "$ns") "$ns" 2>/dev/null || true
	exit 130
}
cleanup() {
	local pids i
	for ((i = 0; i < 100; i++)); do
		pids=$(pgrep -f "^[^ ]*(ckptfs|passthrough_ll) .*$run/" || true)
		[ -n "$pids" ] || break
		[ "$i" -gt 0 ] || kill -TERM $pids 2>/dev/null || true
		sleep 0.1
	done
	rm -rf "$run"
}
trap cleanup EXIT
trap stop INT TERM

mkdir -m 0755 "$run/bin"
ln -s "$ckptfs_bin" "$run/bin/ckptfs"
cat >"$run/bin/passthrough_ll" <<EOF
#!/bin/sh
# mount.fuse3 runs "passthrough_ll STORE MNT -o OPTIONS"; passthrough_ll takes STORE as -o source=
store=\$1
shift
exec "$pt" -o "source=\$store,fsname=\$store" "\$@"
EOF
chmod 0755 "$run/bin/passthrough_ll"

unshare --mount --propagation private -- "$self" --in-namespace "$run" "$src" "$results" "$@" &
ns=$!
wait "$ns" || echo "xfstests.sh: the run in the mount namespace failed" >&2
ns=

# The tallies, from each check's summary lines (Ran: includes the tests not run).
list() {
	[ -f "$results/$1/check.log" ] || return 0
	sed -n "s/^$2: //p" "$results/$1/check.log" | tail -1 | tr ' ' '\n' | sed '/^$/d'
}
count() { sed '/^$/d' | wc -l; }
rc=0
declare -A pass
for name in ckptfs passthrough_ll; do
	ran=$(list "$name" Ran)
	notrun=$(list "$name" 'Not run')
	failed=$(list "$name" Failures)
	if [ -z "$ran" ]; then
		echo "$name: check did not finish (see $results/$name/check.log)"
		rc=1
		continue
	fi
	pass[$name]=$(comm -23 <(echo "$ran" | sort) <(printf '%s\n%s\n' "$notrun" "$failed" | sort))
	printf '%-15s %d passed, %d failed, %d not run (of %d)\n' "$name:" \
		"$(count <<<"${pass[$name]}")" "$(count <<<"$failed")" "$(count <<<"$notrun")" \
		"$(count <<<"$ran")"
	[ -z "$failed" ] || echo "  failed: $(echo $failed)"
done
only=$(comm -12 <(list ckptfs Failures | sort) <(echo "${pass[passthrough_ll]:-}" | sort) |
	sed '/^$/d')
echo "failing on ckptfs, passing on passthrough_ll: $(echo ${only:-none})"
for t in $only; do
	echo "  $results/ckptfs/$t.out.bad"
done
[ -z "$only" ] || rc=1
echo "results: $results (check.log; each failed test's .out.bad and .full)"
echo "time: $(( ($(date +%s) - start) / 60 )) min $(( ($(date +%s) - start) % 60 )) s"
exit $rc
