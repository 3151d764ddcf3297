#!/usr/bin/env bash
# Installs from Debian's archive what ckptfs needs to build and run its demonstration, and with
# --tests what the whole test suite needs too. Idempotent: packages already present are skipped.
# Usage: scripts/install-deps.sh [--tests]
set -euo pipefail
# Building ckptfs and ckptctl (meson -Dtests=false) and running the demonstration
# (scripts/demo.sh: a real multi-rank PyTorch job over gloo):
pkgs=(build-essential meson ninja-build pkg-config
      fuse3 libfuse3-dev libsqlite3-dev sqlite3 libxxhash-dev libzstd-dev libjansson-dev
      libcurl4-openssl-dev libxml2-dev libssl-dev libinih-dev   # store/remote/: S3 over HTTP, XML, SHA-256, the AWS files
      libmicrohttpd-dev   # -o metrics=ADDR:PORT
      scdoc   # the man pages (doc/)
      python3-torch python3-numpy)   # the demo's trainer (Debian's torch runs under /usr/bin/python3)
# --tests: what scripts/test.sh needs besides (scripts/build.sh passes it)
if [ "${1:-}" = "--tests" ]; then
	pkgs+=(libcriterion-dev fio
	       acl attr   # setfacl/getfacl, setfattr/getfattr: tests/mount/test_xattr.py
	       strace   # syscall counts: tests/mount/test_writeback.py SmallFilesTest
	       liburing-dev libaio-dev   # tests/mount/iomode.c: io_uring and Linux AIO writes
	       clang libclang-rt-14-dev   # libFuzzer and the sanitizers' runtimes: scripts/fuzz.sh
	       python3-jsonschema   # tests/tools/test_json_schemas.py
	       ceph-mon ceph-osd radosgw ceph-common ceph-mds ceph-fuse curl   # scripts/ceph.sh
	       prometheus   # tests/mount/test_prometheus.py (a real Prometheus, promtool)
	       man-db bash-completion systemd   # man pages, ckptctl completion, the unit (dist/)
	       debhelper dpkg-dev fakeroot lintian debootstrap systemd-container)   # scripts/test-package.sh
fi
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "installing: ${missing[*]}"
	sudo_cmd=""
	[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
	export DEBIAN_FRONTEND=noninteractive
	$sudo_cmd apt-get update -qq
	$sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
