#!/usr/bin/env bash
# test-systemd.sh DEB: the installed ckptfs@.service run by a real systemd (issue 23). This
# machine has no systemd as PID 1, so the clean Debian 12 root of scripts/test-package.sh (its
# cached tarball) is booted with systemd-nspawn (systemd-container), systemd as the container's
# PID 1 and /dev/fuse bound in; a oneshot unit runs the checks at boot and powers the container
# off. Checks, each printed PASS/FAIL:
#   - `systemctl start ckptfs@t` returns with the mount in place (Type=forking: ckptfs exits only
#     once mounted), the unit active;
#   - a step written through the mount (one perl process: directory, file, tracker) reads back;
#   - `systemctl stop ckptfs@t`: the unit inactive with Result=success and exit status 0 (a
#     SIGTERM stop is clean), nothing mounted, the store marked clean ("stopped cleanly" in the
#     journal, where the daemon logs under systemd);
#   - a second start serves the same step, the tracker still naming it; a second stop is clean.
# Environment: CKPTFS_PKG_CACHE (the root tarball test-package.sh made; default
# /var/tmp/ckptfs-pkg-root.tar), TMPDIR (default /var/tmp). Needs root and systemd-nspawn.
# Exit status: 0 all passed, 1 a check failed, 2 not runnable. Time: ~1 min (apt-get in the root).
set -euo pipefail
deb=${1:?usage: test-systemd.sh ckptfs_VERSION_ARCH.deb}
cache=${CKPTFS_PKG_CACHE:-/var/tmp/ckptfs-pkg-root.tar}
[ "$(id -u)" -eq 0 ] || { echo "test-systemd.sh: run as root" >&2; exit 2; }
command -v systemd-nspawn >/dev/null || { echo "test-systemd.sh: systemd-nspawn missing (apt-get install systemd-container)" >&2; exit 2; }
[ -f "$cache" ] || { echo "test-systemd.sh: no root tarball $cache (run scripts/test-package.sh first)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/ckptfs-systemd.XXXXXX")
root=$tmp/root
cleanup() {
	# nspawn tears its own mounts down when the container stops; a killed run may leave one
	awk -v r="$root" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
nspawn=(systemd-nspawn -q -D "$root" --register=no --keep-unit --resolv-conf=off)

mkdir -p "$root"
tar -xf "$cache" -C "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "$deb" "$root/root/"
echo "== install systemd and $(basename "$deb") in the root"
"${nspawn[@]}" /bin/sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	--no-install-recommends systemd systemd-sysv dbus ./root/$(basename "$deb") >/dev/null" \
	</dev/null 2>&1 | grep -v -e 'debconf: delaying' -e 'propagate' || true
[ -x "$root/usr/bin/ckptfs" ] || { echo "FAIL: ckptfs not installed in the root"; exit 1; }

mkdir -p "$root/etc/ckptfs"
cat > "$root/etc/ckptfs/t.conf" <<'CONF'
CKPTFS_STORE=/var/lib/ckptfs/t
CKPTFS_MOUNTPOINT=/srv/train/output/checkpoint
CKPTFS_ARGS=-o keep_checkpoint_max=3
CONF
cat > "$root/root/check.sh" <<'CHECK'
#!/bin/sh
# runs at boot inside the container (check.service); results in /root/check.out
out=/root/check.out
mnt=/srv/train/output/checkpoint
store=/var/lib/ckptfs/t
ok() { echo "PASS: $*" >> $out; }
no() { echo "FAIL: $*" >> $out; }
mounted() { grep -q " $mnt fuse.ckptfs " /proc/mounts; }
: > $out
if systemctl start ckptfs@t.service; then ok "systemctl start ckptfs@t"; else no "systemctl start ckptfs@t"; fi
if mounted; then ok "mounted when start returned: $(grep " $mnt " /proc/mounts)"; else no "not mounted when start returned"; fi
[ "$(systemctl is-active ckptfs@t.service)" = active ] && ok "unit active" || no "unit $(systemctl is-active ckptfs@t.service)"
mounted || { no "(not mounted: the checks that need the mount are skipped)"; systemctl stop ckptfs@t.service; echo DONE >> $out; exit 0; }
perl -e '
	my $m = shift; mkdir "$m/iter_0000001" or die "mkdir: $!"; mkdir "$m/iter_0000001/mp_rank_00" or die;
	open(my $f, ">", "$m/iter_0000001/mp_rank_00/model_optim_rng.pt") or die "open: $!";
	print $f "x" x 100000; close $f or die;
	open(my $t, ">", "$m/latest_checkpointed_iteration.txt") or die; print $t "1"; close $t or die;
' $mnt && ok "a step written" || no "writing a step"
[ "$(cat $mnt/latest_checkpointed_iteration.txt)" = 1 ] && ok "tracker names step 1" || no "tracker: $(cat $mnt/latest_checkpointed_iteration.txt)"
systemctl stop ckptfs@t.service && ok "systemctl stop ckptfs@t" || no "systemctl stop"
res=$(systemctl show -p Result --value ckptfs@t.service); st=$(systemctl show -p ExecMainStatus --value ckptfs@t.service)
[ "$res" = success ] && [ "$st" = 0 ] && ok "stopped: Result=$res, exit status $st" || no "stopped: Result=$res, exit status $st"
mounted && no "still mounted after stop" || ok "unmounted by stop"
# under systemd the daemon's lines go to the journal (JOURNAL_STREAM), not to STORE/ckptfs.log
[ -e $store/clean ] && journalctl -u ckptfs@t.service --no-pager -o cat | grep -q "stopped cleanly" \
	&& ok "store marked clean (stopped cleanly, in the journal)" || no "store not marked clean"
systemctl start ckptfs@t.service && mounted && ok "second start" || no "second start"
mounted && [ "$(cat $mnt/latest_checkpointed_iteration.txt)" = 1 ] && [ "$(wc -c < $mnt/iter_0000001/mp_rank_00/model_optim_rng.pt)" = 100000 ] \
	&& ok "the step is there after a restart" || no "the step after a restart"
systemctl stop ckptfs@t.service && ! mounted && ok "second stop" || no "second stop"
journalctl -u ckptfs@t.service --no-pager -o cat 2>/dev/null | sed 's/^/    journal: /' >> $out
echo DONE >> $out
CHECK
chmod +x "$root/root/check.sh"
cat > "$root/etc/systemd/system/check.service" <<'UNIT'
[Unit]
Description=ckptfs@.service checks
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/root/check.sh
ExecStopPost=/bin/systemctl poweroff --no-block
TimeoutStartSec=240
[Install]
WantedBy=multi-user.target
UNIT
mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/check.service "$root/etc/systemd/system/multi-user.target.wants/check.service"
echo "== boot the root under systemd-nspawn (systemd as PID 1, /dev/fuse bound)"
timeout 400 "${nspawn[@]}" --bind=/dev/fuse -b </dev/null >"$tmp/boot.log" 2>&1 || true
if ! grep -q '^DONE' "$root/root/check.out" 2>/dev/null; then
	echo "FAIL: the checks did not finish; the end of the boot log:"
	tail -30 "$tmp/boot.log"
	exit 1
fi
grep -v '^DONE' "$root/root/check.out"
p=$(grep -c '^PASS' "$root/root/check.out" || true)
f=$(grep -c '^FAIL' "$root/root/check.out" || true)
echo "systemd: $p passed, $f failed"
[ "$f" -eq 0 ] && [ "$p" -ge 12 ]
