#!/usr/bin/env bash
# test-package.sh: build the Debian package of ckptfs from the working tree and prove that it
# installs, with its dependencies, into a clean Debian 12 root and mounts from there.
#
#   1. build: copies the working tree (tracked and untracked files, not the ignored ones such as
#      build*/ and output/: uncommitted changes count) to a temporary directory and runs
#      `dpkg-buildpackage -us -uc -b` there (debian/ in this repository).
#   2. lintian on the .deb: prints every hint; an E: line fails the run.
#   3. root: a minimal Debian 12 root (debootstrap --variant=minbase bookworm, from the mirror
#      this machine's apt uses), unpacked from a cached tarball when there is one; /dev and
#      /dev/pts bound, proc and sysfs mounted in it, /etc/resolv.conf copied.
#   4. install: `apt-get install ./ckptfs_*.deb` in the root (pulls fuse3 and the libraries).
#   5. checks in the root, through the installed binaries: ckptfs --version; a mount with
#      `mount -t fuse.ckptfs`, a file written into a step directory and read back, the tracker
#      resolving to that step, ckptctl status/steps/verify, umount; an /etc/fstab line mounted by
#      `mount -a`; the man pages (man-db installed in the root), the systemd unit, the bash
#      completion. Each check prints its command and a short result; a failed check does not stop
#      the later ones (those that cannot run without it are skipped).
#   6. systemd: scripts/test-systemd.sh boots a copy of the clean root under systemd-nspawn and
#      has its systemd start, use, stop and restart ckptfs@.service from the package.
#
# Whatever happens (failure, Ctrl-C), a trap unmounts everything mounted inside the root (fuse
# mounts with fusermount3 -uz; /dev, /dev/pts, /proc, /sys with umount -l), ends the daemons
# started in it (by pid) and removes the temporary directory; the last check is that nothing is
# left mounted.
#
# Run as root (debootstrap, chroot, mount) on Debian 12 with: dpkg-dev debhelper fakeroot lintian
# debootstrap, the build dependencies of debian/control (scripts/install-deps.sh), fuse3.
#
# Environment:
#   CKPTFS_PKG_CACHE   the tarball caching the clean root (default /var/tmp/ckptfs-pkg-root.tar);
#                      made on the first run, reused after (delete it to debootstrap again)
#   CKPTFS_PKG_MIRROR  Debian mirror for debootstrap and the root's apt (default: the bookworm
#                      URI of this machine's apt sources, else http://deb.debian.org/debian)
#   CKPTFS_PKG_OUT     if set, a directory the built .deb, .changes and .buildinfo are copied to
#   TMPDIR             where the temporary directory goes (default /var/tmp: the root takes ~300 MB)
#
# Exit status: 0 every check passed; 1 a check failed; 2 not runnable here (not root, a tool
# missing). The last line is `package: N passed, M failed`.
#
# Time: about 4 minutes the first time (build 0.5-2 min with the tests' executables, depending on
# the machine's load; debootstrap ~1.5 min; install and checks ~30 s), 1.5-2.5 minutes once the
# root is cached. A run stopped part-way spends up to 25 s more ending the daemons left in it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${CKPTFS_PKG_CACHE:-/var/tmp/ckptfs-pkg-root.tar}
suite=bookworm
chroot_path=/usr/sbin:/usr/bin:/sbin:/bin

passed=0
failed=0
failures=()
tmp=
root=

say() { printf '%s\n' "$*"; }
indent() { sed -e 's/^/    /'; }
pass() { passed=$((passed + 1)); say "  PASS: $*"; }
fail() { failed=$((failed + 1)); failures+=("$1"); say "  FAIL: $*"; }

phase_start=0
phase_name=
phase() {
	phase_end
	phase_name=$1
	phase_start=$(date +%s)
	say ""
	say "=== $phase_name"
}
phase_end() {
	if [[ -n $phase_name ]]; then
		say "--- $phase_name: $(($(date +%s) - phase_start)) s"
		phase_name=
	fi
}

# summary: the closing line (once).
summarized=0
summary() {
	summarized=1
	phase_end
	say ""
	if ((failed > 0)); then
		say "failed checks: ${failures[*]}"
	fi
	say "package: $passed passed, $failed failed"
}

# in_root CMD...: run CMD in the root with a clean environment.
in_root() {
	chroot "$root" /usr/bin/env -i PATH="$chroot_path" HOME=/root LANG=C.UTF-8 TERM=dumb \
		DEBIAN_FRONTEND=noninteractive "$@"
}

# check NAME CMD...: print the command, run it (output indented, at most 25 lines shown), count.
check() {
	local name=$1 out rc=0
	shift
	say "\$ $*"
	out=$("$@" 2>&1) || rc=$?
	if [[ -n $out ]]; then
		printf '%s\n' "$out" | head -n 25 | indent
		(($(printf '%s\n' "$out" | wc -l) <= 25)) || say "    ... ($(printf '%s\n' "$out" | wc -l) lines)"
	fi
	if ((rc == 0)); then
		pass "$name"
	else
		fail "$name" "(exit $rc)"
	fi
	return "$rc"
}

# The mounts under the temporary directory, deepest first (as /proc/mounts spells them).
mounts_under() {
	[[ -n $tmp ]] || return 0
	awk -v p="$tmp/" 'index($2, p) == 1 { print $3, $2 }' /proc/mounts | sort -r -k2
}

# Processes whose root directory is the chroot (the daemons started there): by pid.
root_pids() {
	local d
	[[ -n $root ]] || return 0
	for d in /proc/[0-9]*; do
		# -ef: /proc/PID/root is the process's root directory (no fork per process)
		[[ $d/root -ef $root ]] && echo "${d#/proc/}"
	done
	return 0
}

# wait_root_pids SECONDS: wait for the chroot's processes to exit; 0 if none is left.
wait_root_pids() {
	local deadline=$((SECONDS + $1))
	while [[ -n $(root_pids) ]]; do
		((SECONDS < deadline)) || return 1
		sleep 0.2
	done
	return 0
}

cleanup() {
	local rc=$? type mnt pid left
	trap - EXIT INT TERM HUP
	set +e
	if [[ -n $tmp && -d $tmp ]]; then
		# fuse mounts first, lazily (a daemon stuck in a request cannot hold this up)
		while read -r type mnt; do
			[[ $type == fuse* ]] || continue
			say "cleanup: fusermount3 -uz $mnt"
			fusermount3 -uz "$mnt" 2>/dev/null || umount -l "$mnt"
		done < <(mounts_under)
		# the daemons exit once unmounted; end the ones that do not, by pid
		if ! wait_root_pids 15; then
			for pid in $(root_pids); do
				say "cleanup: kill $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null))"
				kill "$pid" 2>/dev/null
			done
			wait_root_pids 5 || for pid in $(root_pids); do kill -9 "$pid" 2>/dev/null; done
			wait_root_pids 5
		fi
		while read -r type mnt; do
			say "cleanup: umount -l $mnt"
			umount -l "$mnt"
		done < <(mounts_under)
		left=$(mounts_under)
		if [[ -n $left ]]; then
			say "cleanup: still mounted, $tmp NOT removed:"
			printf '%s\n' "$left" | indent
			rc=1
		else
			rm -rf --one-file-system "$tmp"
		fi
	fi
	if ((!summarized && rc != 0)); then
		# stopped by an unexpected error or a signal
		failed=$((failed + 1))
		failures+=("aborted(exit $rc)")
		summary
	fi
	exit "$rc"
}

# ------------------------------------------------------------------------------------------------
if ((EUID != 0)); then
	say "test-package.sh: run as root (debootstrap, chroot and mount need it)" >&2
	exit 2
fi
missing=()
for tool in dpkg-buildpackage dh lintian debootstrap fakeroot chroot fusermount3 git tar; do
	command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
	say "test-package.sh: missing: ${missing[*]} (apt-get install dpkg-dev debhelper lintian" \
		"debootstrap fakeroot fuse3 git)" >&2
	exit 2
fi

# The mirror: this machine's apt source for bookworm main (and its -updates and -security).
mirror=${CKPTFS_PKG_MIRROR:-}
security=
updates=
# shellcheck disable=SC2016 # apt's $(FIELD), not the shell's
while read -r uri rel comp; do
	[[ $comp == main ]] || continue
	case $rel in
	"$suite") [[ -n $mirror ]] || mirror=${uri%/} ;;
	"$suite-updates") updates=${uri%/} ;;
	"$suite-security") security=${uri%/} ;;
	esac
done < <(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' \
	'Identifier: Packages' 2>/dev/null | sort -u)
mirror=${mirror:-http://deb.debian.org/debian}

tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/ckptfs-pkg.XXXXXX")
root=$tmp/root
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP
say "test-package.sh: tree $here, temp $tmp, mirror $mirror, cache $cache"

# ------------------------------------------------------------------------------------------------
phase "build"
mkdir -p "$tmp/src"
say "\$ git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C $tmp/src"
# build trees and dpkg-buildpackage's own output never go in; a file deleted but still in git's
# index (someone editing) is skipped rather than failing tar
git -C "$here" ls-files -co --exclude-standard -z |
	grep -zvE '^(build[^/]*|obj-[^/]*|output)/|^debian/(ckptfs|\.debhelper|tmp)/' |
	grep -zvE '^debian/(files|debhelper-build-stamp|.*\.substvars)$' |
	(cd "$here" && while IFS= read -r -d '' f; do
		[[ -e $f || -L $f ]] && printf '%s\0' "$f"
	done) |
	tar -C "$here" --null -T - -cf - | tar -xf - -C "$tmp/src"
say "    $(find "$tmp/src" -type f | wc -l) files"
build_ok=0
say "\$ (cd $tmp/src && dpkg-buildpackage -us -uc -b) > $tmp/build.log"
if (cd "$tmp/src" && dpkg-buildpackage -us -uc -b) >"$tmp/build.log" 2>&1; then
	grep -E "dpkg-deb: building|warning:" "$tmp/build.log" | head -n 20 | indent || true
	say "    compiler warnings: $(grep -c 'warning:' "$tmp/build.log" || true)"
	debs=("$tmp"/ckptfs_*.deb)
	if [[ -f ${debs[0]} ]]; then
		deb=${debs[0]}
		build_ok=1
		pass "dpkg-buildpackage ($(basename "$deb"), $(stat -c %s "$deb") bytes)"
	else
		fail "dpkg-buildpackage" "(no ckptfs_*.deb)"
	fi
else
	tail -n 40 "$tmp/build.log" | indent
	fail "dpkg-buildpackage"
fi
if ((build_ok)) && [[ -n ${CKPTFS_PKG_OUT:-} ]]; then
	mkdir -p "$CKPTFS_PKG_OUT"
	cp "$tmp"/ckptfs*.deb "$tmp"/ckptfs_*.changes "$tmp"/ckptfs_*.buildinfo "$CKPTFS_PKG_OUT"/
	say "    copied to $CKPTFS_PKG_OUT"
fi
if ((!build_ok)); then
	summary
	exit 1
fi
check "dpkg-deb --contents" dpkg-deb --contents "$deb" || true
say "\$ dpkg-deb --field $deb Depends"
dpkg-deb --field "$deb" Depends | indent

# ------------------------------------------------------------------------------------------------
phase "lintian"
say "\$ lintian --fail-on none $(basename "$deb")"
lint_rc=0
lint=$(cd "$tmp" && lintian --fail-on none "$(basename "$deb")" 2>&1) || lint_rc=$?
lint=$(printf '%s\n' "$lint" | grep -v '^running with root privileges' || true)
[[ -z $lint ]] || printf '%s\n' "$lint" | indent
nerr=$(printf '%s\n' "$lint" | grep -c '^E:' || true)
nwarn=$(printf '%s\n' "$lint" | grep -c '^W:' || true)
if ((lint_rc != 0)); then
	fail "lintian" "(lintian itself failed: exit $lint_rc)"
elif ((nerr > 0)); then
	fail "lintian" "($nerr E:, $nwarn W:)"
else
	pass "lintian (0 E:, $nwarn W:)"
fi

# ------------------------------------------------------------------------------------------------
phase "root"
mkdir -p "$root"
if [[ -s $cache ]]; then
	say "\$ tar -xf $cache -C $root"
	tar -xf "$cache" -C "$root"
	pass "clean root from the cache"
else
	say "\$ debootstrap --variant=minbase $suite $root $mirror"
	if debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$tmp/debootstrap.log" 2>&1; then
		tail -n 2 "$tmp/debootstrap.log" | indent
		{
			echo "deb $mirror $suite main"
			[[ -z $updates ]] || echo "deb $updates $suite-updates main"
			[[ -z $security ]] || echo "deb $security $suite-security main"
		} >"$root/etc/apt/sources.list"
		rm -rf "$root/var/cache/apt/archives/"*.deb
		say "\$ tar -cf $cache -C $root ."
		mkdir -p "$(dirname "$cache")"
		tar -cf "$cache.tmp.$$" -C "$root" . && mv "$cache.tmp.$$" "$cache"
		say "    $(du -h "$cache" | cut -f1) cached"
		pass "debootstrap --variant=minbase $suite"
	else
		tail -n 30 "$tmp/debootstrap.log" | indent
		fail "debootstrap"
		summary
		exit 1
	fi
fi
say "\$ mount --bind /dev $root/dev; mount --bind /dev/pts $root/dev/pts;" \
	"mount -t proc proc $root/proc; mount -t sysfs sysfs $root/sys"
mount --bind /dev "$root/dev"
# apt wants a pty for its log (without: "E: Can not write log (Is /dev/pts mounted?)")
mount --bind /dev/pts "$root/dev/pts"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
# nothing installed in the root may start a service
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
nexcl=$(cat "$root"/etc/dpkg/dpkg.cfg.d/* 2>/dev/null | grep -c '^path-exclude' || true)
say "    root: Debian $(cat "$root/etc/debian_version"), $nexcl dpkg path-exclude lines"

# ------------------------------------------------------------------------------------------------
phase "install"
installed=0
if check "apt-get update (root)" in_root apt-get -q update; then
	cp "$deb" "$root/tmp/"
	say "(--no-install-recommends: the Depends alone must be enough)"
	if check "apt-get install ./$(basename "$deb")" in_root sh -c \
		"cd /tmp && apt-get install -y -q --no-install-recommends ./$(basename "$deb")"; then
		installed=1
	fi
fi
if ((!installed)); then
	summary
	exit 1
fi
# shellcheck disable=SC2016 # dpkg-query's ${Field}
check "dpkg -s ckptfs" in_root dpkg-query -W -f '${Package} ${Version} ${Status}\n' \
	ckptfs fuse3 || true

# ------------------------------------------------------------------------------------------------
phase "mount"
check "ckptfs --version" in_root ckptfs --version || true
check "ckptctl --version" in_root ckptctl --version || true

# is_mounted PATH-IN-ROOT: the host's /proc/mounts has it as a fuse.ckptfs mount
is_mounted() {
	awk -v m="$root$1" '$2 == m && $3 == "fuse.ckptfs" { found = 1 } END { exit !found }' /proc/mounts
}
# show_mount PATH-IN-ROOT: the host's /proc/mounts line for it
show_mount() {
	grep " $root$1 " /proc/mounts || { echo "not in /proc/mounts"; return 1; }
}
# umount_wait PATH-IN-ROOT STORE-IN-ROOT: umount in the root, wait for the daemon to exit
umount_wait() {
	in_root umount "$1" || return 1
	if is_mounted "$1"; then
		echo "$1 still mounted"
		return 1
	fi
	# the daemon makes everything durable and exits after the unmount; wait for it
	if ! wait_root_pids 30; then
		echo "daemon still running after 30 s: $(root_pids)"
		return 1
	fi
	echo "unmounted, daemon exited"
}
# read_tracker PATH: cat it, retrying for 10 s (a step completes 0-1.75 s after its tracker)
read_tracker() {
	local i
	for ((i = 0; i < 100; i++)); do
		if in_root cat "$1" 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	in_root cat "$1"
}

in_root mkdir -p /var/lib/ck /mnt/ck /mnt/ck2
if check "mount -t fuse.ckptfs" in_root mount -t fuse.ckptfs /var/lib/ck/store /mnt/ck \
	-o keep_checkpoint_max=3; then
	check "fuse.ckptfs in /proc/mounts" show_mount /mnt/ck || true
	# One process makes the step directory, writes the file and then the tracker, as a trainer
	# does (perl: perl-base is in every Debian root). Not `mkdir DIR && echo > DIR/x` in a
	# shell: ckptfs judges a step whose writers have all exited without committing it as torn,
	# and mkdir(1) exits before the shell writes, so the step would go to .ckptfs/quarantine/.
	# shellcheck disable=SC2016 # perl's variables
	if ! check "write a step (mkdir, file, tracker)" in_root perl -e '
		my $d = "/mnt/ck/iter_0000001";
		mkdir($d) or die "mkdir $d: $!\n";
		open(my $f, ">", "$d/x") or die "open $d/x: $!\n";
		print $f "hi\n";
		close($f) or die "close $d/x: $!\n";
		open(my $t, ">", "/mnt/ck/latest_checkpointed_iteration.txt") or die "open tracker: $!\n";
		print $t "1\n";
		close($t) or die "close tracker: $!\n";
		print "wrote $d/x and the tracker\n";'; then
		say "    (the daemon's log, /var/lib/ck/store/ckptfs.log:)"
		tail -n 8 "$root/var/lib/ck/store/ckptfs.log" 2>&1 | indent || true
	fi
	say "\$ cat /mnt/ck/iter_0000001/x"
	got=$(in_root cat /mnt/ck/iter_0000001/x 2>&1 || true)
	say "    $got"
	if [[ $got == hi ]]; then pass "read back"; else fail "read back" "(got '$got')"; fi
	say "\$ cat /mnt/ck/latest_checkpointed_iteration.txt (the virtual tracker, once step 1 completes)"
	got=$(read_tracker /mnt/ck/latest_checkpointed_iteration.txt 2>&1 || true)
	say "    $got"
	if [[ $got == 1 ]]; then pass "tracker names step 1"; else fail "tracker" "(got '$got')"; fi
	check "cat .ckptfs/status" in_root cat /mnt/ck/.ckptfs/status || true
	check "ckptctl status (mounted)" in_root ckptctl /var/lib/ck/store status || true
	say "\$ ckptctl /var/lib/ck/store steps"
	got=$(in_root ckptctl /var/lib/ck/store steps 2>&1 || true)
	printf '%s\n' "$got" | indent
	if printf '%s\n' "$got" | grep -qE '^ *1 +iter_0000001 +megatron +complete '; then
		pass "ckptctl steps (mounted): step 1 complete"
	else
		fail "ckptctl steps" "(step 1 not listed as complete)"
	fi
	if check "umount /mnt/ck" umount_wait /mnt/ck /var/lib/ck/store; then
		check "ckptctl verify (unmounted)" in_root ckptctl /var/lib/ck/store verify || true
	fi
fi

line='/var/lib/ck/store2 /mnt/ck2 fuse.ckptfs keep_checkpoint_max=3,allow_other,nofail 0 0'
say "\$ echo '$line' >> $root/etc/fstab"
echo "$line" >>"$root/etc/fstab"
if check "mount -a (fstab)" in_root mount -a; then
	if check "/mnt/ck2 in /proc/mounts" show_mount /mnt/ck2; then
		check "write and read /mnt/ck2" in_root sh -c 'echo fstab > /mnt/ck2/f && cat /mnt/ck2/f' || true
		check "umount /mnt/ck2" umount_wait /mnt/ck2 /var/lib/ck/store2 || true
	fi
fi

# ------------------------------------------------------------------------------------------------
phase "docs"
say "\$ cat $root/etc/dpkg/dpkg.cfg.d/* | grep path-exclude"
excl=$(cat "$root"/etc/dpkg/dpkg.cfg.d/* 2>/dev/null | grep '^path-exclude' || true)
say "    ${excl:-(none: man pages are installed)}"
mkdir -p "$tmp/deb"
dpkg-deb -x "$deb" "$tmp/deb"
man_ok=0
check "apt-get install man-db (root)" in_root apt-get install -y -q --no-install-recommends man-db \
	&& man_ok=1
for prog in ckptfs ckptctl; do
	say "\$ dpkg -L ckptfs | grep '/man[1-8]/$prog\\.'"
	page=$(in_root dpkg -L ckptfs | grep -E "/man/man[1-8]/$prog\.[1-8]" | head -n 1 || true)
	if [[ -z $page ]]; then
		fail "man $prog" "(no man page for $prog in the package: meson install does not install it yet)"
		continue
	fi
	say "    $page"
	((man_ok)) || { fail "man $prog" "(man-db not installed)"; continue; }
	if [[ -e $root$page ]]; then
		check "man $prog" in_root sh -c "MANWIDTH=80 man -P cat $prog | head -n 12 &&
			test \"\$(MANWIDTH=80 man -P cat $prog | wc -l)\" -gt 5" || true
	else
		# filtered out by a dpkg path-exclude: read it from the .deb
		say "    $page listed but not on disk (dpkg path-exclude): reading it from the .deb"
		cp "$tmp/deb$page" "$root/tmp/"
		check "man -l $prog (from the .deb)" in_root sh -c \
			"MANWIDTH=80 man -P cat -l /tmp/$(basename "$page") | head -n 12" || true
	fi
done

say "\$ dpkg -L ckptfs | grep 'systemd/system/ckptfs@.service'"
unit=$(in_root dpkg -L ckptfs | grep -E '/systemd/system/ckptfs@\.service$' | head -n 1 || true)
if [[ -z $unit ]]; then
	fail "systemd unit" "(no ckptfs@.service in the package: meson install does not install it yet)"
else
	say "    $unit"
	# the unit's programs exist in the root, and installing did not enable or start anything
	check_unit() {
		local exe rc=0
		sed -n '/^\[Service\]/,/^\[/p' "$root$unit"
		# shellcheck disable=SC2013 # one word per Exec line
		for exe in $(sed -nE 's/^Exec[A-Za-z]*=[-@:+!]*([^ ]+).*/\1/p' "$root$unit"); do
			if [[ -x $root$exe ]]; then echo "ok: $exe"; else echo "missing in the root: $exe"; rc=1; fi
		done
		if ls "$root"/etc/systemd/system/*/ckptfs@* >/dev/null 2>&1; then
			echo "installing enabled it:"; ls "$root"/etc/systemd/system/*/ckptfs@*; rc=1
		fi
		return "$rc"
	}
	check "systemd unit" check_unit || true
fi

say "\$ dpkg -L ckptfs | grep bash-completion/completions/"
comp=$(in_root dpkg -L ckptfs | grep -E '/bash-completion/completions/ckptctl$' | head -n 1 || true)
if [[ -z $comp ]]; then
	fail "bash completion" \
		"(no completion for ckptctl in the package: meson install does not install it yet)"
else
	say "    $comp"
	check "bash completion" in_root bash -c "source $comp && complete -p ckptctl" || true
fi

# ------------------------------------------------------------------------------------------------
phase "systemd"
# the unit under a real systemd: the cached root booted with systemd-nspawn (scripts/test-systemd.sh)
if [[ -n ${deb:-} && -f $deb ]]; then
	say "\$ scripts/test-systemd.sh $(basename "$deb")"
	if CKPTFS_PKG_CACHE="$cache" bash "$here/scripts/test-systemd.sh" "$deb" 2>&1 | indent; then
		pass "ckptfs@.service started, used, stopped and restarted by systemd"
	else
		fail "ckptfs@.service under systemd" "(scripts/test-systemd.sh; its output above)"
	fi
else
	fail "ckptfs@.service under systemd" "(no package built)"
fi

# ------------------------------------------------------------------------------------------------
phase "cleanup"
say "\$ (trap) unmount the root's mounts, remove $tmp"
trap - EXIT
if (cleanup); then pass "cleanup"; else fail "cleanup"; fi
tmp_was=$tmp
tmp=
say "\$ grep $tmp_was /proc/mounts"
if grep -q "$tmp_was" /proc/mounts; then
	grep "$tmp_was" /proc/mounts | indent
	fail "nothing left mounted"
else
	say "    (none)"
	pass "nothing left mounted"
fi
if [[ -e $tmp_was ]]; then fail "temp dir removed" "($tmp_was)"; fi
summary
((failed == 0))
