#!/usr/bin/env bash
# The 'remote' test suite: starts a one-machine Ceph (scripts/ceph.sh: RGW + CephFS with two
# ceph-fuse mounts) under a temporary directory, runs the test binary given as $1 against it,
# and stops Ceph whatever happened. Fails loudly, with Ceph's log tail, when Ceph cannot start.
# Usage: tests/store/run_remote.sh TEST_BINARY [criterion args...]
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=$1
shift
# A ceph-fuse mount left by a run that was killed (SIGKILL gives no time to stop): its daemon is
# gone and the mount answers ENOTCONN. Only such dead mounts of this script's own are cleared.
awk '$3 == "fuse.ceph-fuse" && $2 ~ "^/tmp/ckptfs-test-ceph-" {print $2}' /proc/mounts |
	while read -r m; do
		timeout 5 stat "$m" >/dev/null 2>&1 || umount -l "$m" 2>/dev/null || true
	done
# "ckptfs-test" in the name: scripts/test.sh clears fuse mounts matching it on exit.
dir=$(mktemp -d /tmp/ckptfs-test-ceph-XXXXXX)
cleanup() {
	bash "$top/scripts/ceph.sh" stop "$dir" >/dev/null 2>&1 || true
	# Remove the state only once nothing is mounted under it any more.
	if ! awk -v d="$dir/" 'index($2, d) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
		rm -rf "$dir"
	fi
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
if ! bash "$top/scripts/ceph.sh" start "$dir" --cephfs 2; then
	echo "FAIL: cannot start Ceph for the remote tests (see above); packages: scripts/install-deps.sh" >&2
	exit 1
fi
# shellcheck disable=SC1091
. "$dir/env"
"$bin" "$@"
