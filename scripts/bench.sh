#!/usr/bin/env bash
# Benchmark (opt-in, not part of the test suite): ckptfs vs. the backing disk, same run.
# Usage: scripts/bench.sh [--size-mib N] [--reps N]   (root: drops the page cache)
#        scripts/bench.sh --multinode [--mib-per-rank N]   two nodes over Ceph S3 (issue 21)
#        scripts/bench.sh --scaling [--sizes 100 1000 10000]   per-entry costs vs passthrough_ll and ext4 (issue 22)
#        scripts/bench.sh --restore [--size-mib N] [--reps N] [--same-node]   crash, remount, resume (issue 22)
#        scripts/bench.sh --small-files [--files N] [--reps N]   one writer, 1 KiB files, vs ext4
#                                                 and libfuse's passthrough_ll (issue 22)
#        scripts/bench.sh --meta [--sizes 100 1000 10000]   a .ckptfs/status read: its cost and
#                                                 what it makes other requests wait (issue 22)
#        scripts/bench.sh --writers [--total-mib 1024] [--procs 1 2 4 8] [--reps N]
#                                                 W ranks saving and loading at once vs the
#                                                 disk, daemon CPU per GiB (issue 45)
#        scripts/bench.sh --nodes-scaling [--nodes 64 256] [--steps 100 1000] [--cap 300]
#                                                 one node over a synthetic remote of N nodes x
#                                                 S steps: mount, tracker, CPU per tick (issue 41)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash scripts/install-deps.sh --tests
[ -f build/build.ninja ] || meson setup build >/dev/null
meson compile -C build >/dev/null
if [ "${1:-}" = --scaling ]; then
	shift
	CKPTFS_BIN="$top/build/fs/ckptfs" exec /usr/bin/python3 tests/bench/bench_scaling.py "$@"
fi
if [ "${1:-}" = --restore ]; then
	shift
	CKPTFS_BIN="$top/build/fs/ckptfs" CKPTCTL_BIN="$top/build/tools/ckptctl" \
		exec /usr/bin/python3 tests/bench/bench_restore.py "$@"
fi
if [ "${1:-}" = --small-files ]; then
	shift
	CKPTFS_BIN="$top/build/fs/ckptfs" exec /usr/bin/python3 tests/bench/bench_small.py "$@"
fi
if [ "${1:-}" = --meta ]; then
	shift
	CKPTFS_BIN="$top/build/fs/ckptfs" exec /usr/bin/python3 tests/bench/bench_meta.py "$@"
fi
if [ "${1:-}" = --nodes-scaling ]; then
	shift
	CKPTFS_BIN="$top/build/fs/ckptfs" exec /usr/bin/python3 tests/bench/bench_nodes_scaling.py "$@"
fi
if [ "${1:-}" = --writers ]; then
	shift
	CKPTFS_BIN="$top/build/fs/ckptfs" CKPTCTL_BIN="$top/build/tools/ckptctl" \
		exec /usr/bin/python3 tests/bench/bench_writers.py "$@"
fi
if [ "${1:-}" = --multinode ]; then
	shift
	exec /usr/bin/python3 tests/bench/bench_multinode.py "$@"
fi
exec /usr/bin/python3 tests/bench/bench_io.py "$@"
