#!/usr/bin/env bash
# The torture suite at full length, by hand (issue 6). Builds like scripts/test.sh, then runs
# every script of tests/torture/ with long settings, one after the other, and prints each
# script's summary lines. Defaults (override in the environment):
#   CKPTFS_TORTURE_ROUNDS=200   crash-loop rounds per layout (every 5th also kills the daemon)
#   CKPTFS_CORRUPT_ROUNDS=20    rounds per kind of chunk corruption
#   CKPTFS_TORTURE_SECONDS=600  length of the concurrency test
#   CKPTFS_DISKFULL_MIB=20,25,33,40,64   store sizes for the disk-full test
# Usage: scripts/torture.sh [test_X.py ...]   (default: every tests/torture/test_*.py)
# Takes hours with the defaults (200 rounds x 8 layouts x ~6 s for the crash loop alone).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/scripts/build.sh"
export CKPTFS_BIN="$top/$build/fs/ckptfs" CKPTCTL_BIN="$top/$build/tools/ckptctl"
export CKPTFS_TORTURE_ROUNDS=${CKPTFS_TORTURE_ROUNDS:-200}
export CKPTFS_CORRUPT_ROUNDS=${CKPTFS_CORRUPT_ROUNDS:-20}
export CKPTFS_TORTURE_SECONDS=${CKPTFS_TORTURE_SECONDS:-600}
export CKPTFS_DISKFULL_MIB=${CKPTFS_DISKFULL_MIB:-20,25,33,40,64}
scripts=("$@")
if [ ${#scripts[@]} -eq 0 ]; then
	mapfile -t scripts < <(ls tests/torture/test_*.py)
fi
rc=0
mkdir -p "$build/torture"
for t in "${scripts[@]}"; do
	[ -f "$t" ] || t=tests/torture/$t
	name=$(basename "$t" .py)
	echo "== $name"
	if ! /usr/bin/python3 "$t" -v >"$build/torture/$name.log" 2>&1; then
		rc=1
		echo "FAILED: see $build/torture/$name.log"
	fi
	grep -E '^(layout |fault |faults:|corrupt |diskfull:|concurrency:|posix)' \
		"$build/torture/$name.log" | tail -40 || true
done
exit $rc
