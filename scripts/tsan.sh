#!/usr/bin/env bash
# ThreadSanitizer pass over the daemon (issue 6): builds fs/ckptfs and tools/ckptctl with
# -Db_sanitize=thread in build-tsan, runs tests/torture/test_concurrency.py against them (8
# writers, 3 readers, a lister and ckptctl on one mount; CKPTFS_TORTURE_SECONDS, default 40), then
# prints each distinct report TSan wrote (kind and the top frames of both accesses) with its count.
# Exit status: 0 when the test passed and TSan reported nothing, 1 otherwise.
# The daemon runs with address-space randomisation off (setarch -R): GCC 12's TSan cannot place
# its shadow memory under the 28-bit mmap randomisation of recent kernels.
# Reports are kept in build-tsan/tsan/ (one file per process: tsan.PID).
# Usage: scripts/tsan.sh [extra arguments for test_concurrency.py, e.g. -v]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=${CKPTFS_TSAN_BUILD:-build-tsan}
if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debugoptimized \
		>/dev/null
fi
meson compile -C "$build" fs/ckptfs tools/ckptctl

out="$top/$build/tsan"
rm -rf "$out"
mkdir -p "$out"
# the daemon through setarch: the pid it writes into STORE/lock is still its own (setarch execs)
wrapper="$out/ckptfs"
printf '#!/bin/sh\nexec setarch "$(uname -m)" -R "%s" "$@"\n' "$top/$build/fs/ckptfs" >"$wrapper"
chmod +x "$wrapper"

rc=0
CKPTFS_BIN="$wrapper" CKPTCTL_BIN="$top/$build/tools/ckptctl" \
CKPTFS_TORTURE_HANG=${CKPTFS_TORTURE_HANG:-400} \
TSAN_OPTIONS="log_path=$out/tsan halt_on_error=0 second_deadlock_stack=1 history_size=4" \
	setarch "$(uname -m)" -R /usr/bin/python3 tests/torture/test_concurrency.py "$@" || rc=1

/usr/bin/python3 - "$out" <<'PY' || rc=1
import collections, glob, os, re, sys
reports = collections.Counter()
example = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], 'tsan.*'))):
    text = open(path, errors='replace').read()
    for block in text.split('==================')[1:]:
        m = re.search(r'WARNING: ThreadSanitizer: (.*?) \(', block)
        if not m:
            continue
        frames = re.findall(r'#[0-2] (\S+) (\S+)', block)
        key = (m.group(1),) + tuple('%s %s' % (f, os.path.relpath(loc.split(' ')[0])
                                               if loc.startswith('/') else loc)
                                    for f, loc in frames[:6])
        reports[key] += 1
        example.setdefault(key, path)
if not reports:
    print('tsan: no reports')
    sys.exit(0)
print('tsan: %d reports, %d distinct' % (sum(reports.values()), len(reports)))
for key, n in reports.most_common():
    print('\n%dx %s (first in %s)' % (n, key[0], example[key]))
    for f in key[1:]:
        print('    ' + f)
sys.exit(1)
PY
exit $rc
