#!/usr/bin/env bash
# Fuzzing (issue 6): builds each target of tests/fuzz/ with clang's libFuzzer plus
# AddressSanitizer and UndefinedBehaviorSanitizer (any finding aborts), and fuzzes it for a
# bounded time starting from its committed corpus, tests/fuzz/corpus/<target>/. New interesting
# inputs go to build-fuzz/corpus/<target>/ (not committed); a crasher is copied into
# tests/fuzz/corpus/<target>/crash-<sha1>, where meson's fuzz-replay tests keep replaying it
# once committed (the regression test), and fails the run.
# Prints per target: executions, corpus size, crashers; then one summary line.
# Environment: CKPTFS_FUZZ_SECONDS (per target, default 60), CKPTFS_FUZZ_TARGETS (default all:
# layout validate chunk index), CKPTFS_FUZZ_BUILD (default build-fuzz).
# Exit status: 0 when no target crashed, 1 otherwise (or when a build fails).
# Usage: scripts/fuzz.sh            (scripts/test.sh runs it with 60 s per target)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
secs=${CKPTFS_FUZZ_SECONDS:-60}
targets=${CKPTFS_FUZZ_TARGETS:-layout validate chunk index}
out=$top/${CKPTFS_FUZZ_BUILD:-build-fuzz}
mkdir -p "$out"
# /dev/shm: the chunk and index targets write a file per input; fsync there costs nothing
export TMPDIR=/dev/shm
cflags=(-std=gnu11 -g -O1 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -I"$top"
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
	-fno-omit-frame-pointer)

sources() {
	case $1 in
	# the sources of tests/fuzz/meson.build's replay_layout
	layout) echo tests/fuzz/fuzz_layout.c fs/policy/layout.c fs/policy/layout_mf1.c "$(pkg-config --libs jansson)" ;;
	validate) echo tests/fuzz/fuzz_validate.c fs/policy/validate.c "$(pkg-config --libs jansson)" ;;
	# every source of the store library (store/meson.build lists the same files)
	chunk) echo tests/fuzz/fuzz_chunk.c store/*.c "$(pkg-config --libs libxxhash libzstd)" -lpthread ;;
	# every source of the index library (index/meson.build lists the same files)
	index) echo tests/fuzz/fuzz_index.c index/*.c "$(pkg-config --libs sqlite3)" ;;
	*) echo "fuzz.sh: unknown target '$1'" >&2; return 1 ;;
	esac
}

rc=0
total_runs=0
total_crash=0
summary=()
for t in $targets; do
	# shellcheck disable=SC2046 # word splitting of the source and library list is intended
	if ! clang "${cflags[@]}" $(sources "$t") -o "$out/fuzz_$t" 2>"$out/build-$t.log"; then
		echo "fuzz.sh: building fuzz_$t failed:" >&2
		cat "$out/build-$t.log" >&2
		rc=1
		continue
	fi
	mkdir -p "$out/corpus/$t" "$out/artifacts/$t"
	rm -f "$out/artifacts/$t"/*
	max_len=65536
	[ "$t" = index ] && max_len=262144
	# -fork would survive a crash and go on; one process is enough for a bounded CI run
	set +e
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	"$out/fuzz_$t" -max_total_time="$secs" -max_len="$max_len" -timeout=25 -rss_limit_mb=2048 \
		-print_final_stats=1 -artifact_prefix="$out/artifacts/$t/" \
		"$out/corpus/$t" "tests/fuzz/corpus/$t" >"$out/fuzz-$t.log" 2>&1
	frc=$?
	set -e
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/fuzz-$t.log" | tail -1)
	runs=${runs:-0}
	ncorp=$(find "$out/corpus/$t" "tests/fuzz/corpus/$t" -type f | wc -l)
	crashers=0
	for a in "$out/artifacts/$t"/*; do
		[ -f "$a" ] || continue
		crashers=$((crashers + 1))
		sum=$(sha1sum "$a" | cut -c1-16)
		cp "$a" "tests/fuzz/corpus/$t/crash-$sum"
		echo "fuzz.sh: $t: crasher $(basename "$a") kept as tests/fuzz/corpus/$t/crash-$sum" >&2
	done
	if [ "$frc" -ne 0 ] || [ "$crashers" -ne 0 ]; then
		rc=1
		echo "fuzz.sh: $t: libFuzzer exited $frc; the end of $out/fuzz-$t.log:" >&2
		tail -40 "$out/fuzz-$t.log" >&2
	fi
	printf 'fuzz %-9s %10d executions in %ds, corpus %d inputs, %d crashers\n' \
		"$t" "$runs" "$secs" "$ncorp" "$crashers"
	total_runs=$((total_runs + runs))
	total_crash=$((total_crash + crashers))
	summary+=("$t")
done
echo "fuzz: ${#summary[@]} targets, $total_runs executions, $total_crash crashers"
exit $rc
