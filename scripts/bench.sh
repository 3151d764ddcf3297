#!/usr/bin/env bash
# Benchmark (opt-in, not part of the test suite): ckptfs vs. the backing disk, same run.
# Usage: scripts/bench.sh [--size-mib N] [--reps N]   (root: drops the page cache)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash scripts/install-deps.sh
[ -f build/build.ninja ] || meson setup build >/dev/null
meson compile -C build >/dev/null
exec /usr/bin/python3 tests/bench/bench_io.py "$@"
