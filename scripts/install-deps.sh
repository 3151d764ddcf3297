#!/usr/bin/env bash
# Installs everything ckptfs needs to build, test and run its demonstration, from Debian's
# archive. Idempotent: packages already present are skipped by apt-get.
set -euo pipefail
pkgs=(build-essential meson ninja-build pkg-config
      fuse3 libfuse3-dev libsqlite3-dev sqlite3 libxxhash-dev libzstd-dev libjansson-dev
      libcriterion-dev python3-torch python3-numpy fio
      acl attr   # setfacl/getfacl, setfattr/getfattr: tests/mount/test_xattr.py
      strace   # syscall counts: tests/mount/test_writeback.py SmallFilesTest
      liburing-dev libaio-dev   # tests/mount/iomode.c: io_uring and Linux AIO writes
      clang libclang-rt-14-dev   # libFuzzer and the sanitizers' runtimes: scripts/fuzz.sh
      libcurl4-openssl-dev libxml2-dev libssl-dev libinih-dev   # store/remote/: S3 over HTTP, XML, SHA-256, the AWS files
      ceph-mon ceph-osd radosgw ceph-common ceph-mds ceph-fuse curl   # scripts/ceph.sh
      libmicrohttpd-dev prometheus   # -o metrics=ADDR:PORT; tests/mount/test_prometheus.py
      scdoc man-db bash-completion systemd   # man pages, ckptctl completion, the unit (dist/)
      debhelper dpkg-dev fakeroot lintian debootstrap systemd-container)   # scripts/test-package.sh
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
