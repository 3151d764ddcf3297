#!/usr/bin/env bash
# The whole test suite: installs what is missing (apt-get), builds with warnings as errors, and
# runs every meson test (unit, mount, e2e). Idempotent; leaves no mount or process behind.
# Usage: scripts/test.sh [extra meson test args, e.g. --suite unit]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash scripts/install-deps.sh

build=${CKPTFS_BUILD:-build-test}
if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" -Dwerror=true >/dev/null
fi
meson compile -C "$build"

cleanup() {
	# A test that died mid-way may leave a mount under the test temp dir: clear it.
	awk '$3 ~ /^fuse/ && $2 ~ /ckptfs-test/ {print $2}' /proc/mounts | while read -r m; do
		fusermount3 -uz "$m" 2>/dev/null || true
	done
}
trap cleanup EXIT

rc=0
meson test -C "$build" --print-errorlogs --num-processes 1 "$@" || rc=$?

# One closing line any CI reader understands.
/usr/bin/python3 - "$build/meson-logs/testlog.json" <<'PY'
import json, sys
ok = bad = skip = 0
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    if r in ("OK", "EXPECTEDFAIL"): ok += 1
    elif r == "SKIP": skip += 1
    else: bad += 1
print(f"tests: {ok} passed, {bad} failed" + (f", {skip} skipped" if skip else ""))
PY
exit $rc
