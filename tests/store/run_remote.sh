#!/usr/bin/env bash
# The 'remote' test suite: starts a one-machine Ceph (scripts/ceph.sh: RGW + CephFS with two
# ceph-fuse mounts) under a temporary directory, runs the test binary given as $1 against it,
# and stops Ceph whatever happened. Fails loudly, with Ceph's log tail, when Ceph cannot start.
# Usage: tests/store/run_remote.sh TEST_BINARY [criterion args...]
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=$1
shift
dir=$(mktemp -d /tmp/ckptfs-ceph-XXXXXX)
cleanup() {
	bash "$top/scripts/ceph.sh" stop "$dir" >/dev/null 2>&1 || true
	# Remove the state only once nothing is mounted under it any more.
	if ! awk -v d="$dir/" 'index($2, d) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
		rm -rf "$dir"
	fi
}
trap cleanup EXIT
if ! bash "$top/scripts/ceph.sh" start "$dir" --cephfs 2; then
	echo "FAIL: cannot start Ceph for the remote tests (see above); packages: scripts/install-deps.sh" >&2
	exit 1
fi
# shellcheck disable=SC1091
. "$dir/env"
"$bin" "$@"
