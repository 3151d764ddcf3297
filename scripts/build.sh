#!/usr/bin/env bash
# Shared by scripts/test.sh and scripts/torture.sh (sourced, not run): installs what is missing
# (scripts/install-deps.sh --tests) and builds with warnings as errors into $build (CKPTFS_BUILD, default
# build-test), setting it up on first use. Expects $top, the repository root, and set -e.
cd "$top"
bash scripts/install-deps.sh --tests
build=${CKPTFS_BUILD:-build-test}
if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" -Dwerror=true >/dev/null
fi
meson compile -C "$build"
