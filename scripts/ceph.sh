#!/usr/bin/env bash
# A one-machine Ceph for the remote-store tests, on 127.0.0.1 only, all state under DIR, no
# systemd: 1 monitor, 1 memstore OSD, a RADOS Gateway (S3, beast frontend) on a free port, an S3
# user with fixed test keys and one bucket; with --cephfs also an MDS, a CephFS and N ceph-fuse
# mounts DIR/cephfs-1 .. DIR/cephfs-N of it (shared POSIX directories, as on N nodes).
#
# Usage: scripts/ceph.sh start DIR [--cephfs [N]] [--timeout SECONDS]
#        scripts/ceph.sh stop DIR
# start writes DIR/env (shell-sourceable): AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID,
# AWS_SECRET_ACCESS_KEY, CKPTFS_TEST_BUCKET, and with --cephfs CKPTFS_CEPHFS_MOUNTS (the mount
# paths, space-separated) and CKPTFS_CEPHFS_1 .. CKPTFS_CEPHFS_N.
# Each daemon runs in the foreground of a background shell job; its pid is in DIR/run/NAME.pid,
# and stop kills exactly those pids (after unmounting the ceph-fuse mounts). stop is idempotent.
# Single-node settings: /work/shared/research/distributed.md (no cephx needs the "ms ... mode =
# crc secure" keys too, else radosgw hangs; pid files only in daemon sections).
set -euo pipefail

die() {
	echo "ceph.sh: $*" >&2
	exit 1
}

usage() {
	echo "usage: $0 start DIR [--cephfs [N]] [--timeout SECONDS] | stop DIR | rgw-stop DIR | rgw-start DIR" >&2
	exit 2
}

# Fixed test credentials: this cluster listens on 127.0.0.1 only and lives for one test run.
ACCESS_KEY=CKPTFSTESTACCESSKEY0
SECRET_KEY=ckptfsTestSecretKey0000000000000000000000
BUCKET=ckptfs-test
REGION=us-east-1

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# show_fail MESSAGE LOG... - print MESSAGE and the last lines of each log, stop what was started,
# exit 1.
show_fail() {
	local msg=$1
	shift
	echo "ceph.sh: $msg" >&2
	for f in "$@"; do
		[ -f "$f" ] || continue
		echo "---- last lines of $f" >&2
		tail -n 25 "$f" >&2
	done
	do_stop >/dev/null 2>&1 || true
	exit 1
}

# wait_for SECONDS DESCRIPTION COMMAND... - poll COMMAND every 0.2 s until it succeeds; 1 on timeout.
wait_for() {
	local limit=$1 what=$2
	shift 2
	local end=$((SECONDS + limit))
	while ! "$@" >/dev/null 2>&1; do
		[ $SECONDS -lt $end ] || {
			echo "ceph.sh: timed out after ${limit}s waiting for $what" >&2
			return 1
		}
		sleep 0.2
	done
}

# launch NAME COMMAND... - run COMMAND in the background, stdout/stderr to DIR/log/NAME.out,
# its pid in DIR/run/NAME.pid. The daemons stay in the caller's process group (no setsid), so a
# test harness that kills its test's group (meson on a timeout) takes them down too; nohup keeps
# them alive when the terminal that started them closes.
launch() {
	local name=$1
	shift
	nohup "$@" >"$DIR/log/$name.out" 2>&1 </dev/null &
	echo $! >"$DIR/run/$name.pid"
}

cephc() {
	timeout 30 ceph -c "$DIR/ceph.conf" --connect-timeout 10 "$@"
}

write_conf() {
	local fsid=$1 mon_v2=$2 mon_v1=$3 rgw_port=$4
	cat >"$DIR/ceph.conf" <<EOF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$mon_v2,v1:127.0.0.1:$mon_v1]
public addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc secure
ms mon cluster mode = crc secure
ms mon service mode = crc secure
ms cluster mode = crc secure
ms service mode = crc secure
ms client mode = crc secure
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon warn on pool no redundancy = false
mon allow pool delete = true
osd crush chooseleaf type = 0
mon data avail warn = 2
mon data avail crit = 1
run dir = $DIR/run
admin socket = $DIR/run/\$name.\$pid.asok
log file = $DIR/log/\$name.log
keyring = $DIR/keyring
[mon.a]
mon data = $DIR/mon
pid file = $DIR/run/mon.a.daemon.pid
[osd.0]
osd data = $DIR/osd
osd objectstore = memstore
memstore device bytes = 2147483648
pid file = $DIR/run/osd.0.daemon.pid
[mds.a]
mds data = $DIR/mds
pid file = $DIR/run/mds.a.daemon.pid
[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$rgw_port
rgw data = $DIR/rgw
rgw enable usage log = false
rgw dns name = 127.0.0.1
log file = $DIR/log/rgw.a.log
pid file = $DIR/run/rgw.a.daemon.pid
[client]
log file = $DIR/log/client.\$pid.log
EOF
}

start_mon_osd() {
	local fsid=$1 mon_v2=$2 mon_v1=$3
	ceph-authtool --create-keyring "$DIR/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
	monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_v2,v1:127.0.0.1:$mon_v1]" \
		"$DIR/monmap" >/dev/null
	mkdir -p "$DIR/mon" "$DIR/osd" "$DIR/mds" "$DIR/rgw"
	ceph-mon -c "$DIR/ceph.conf" --mkfs -i a --monmap "$DIR/monmap" >"$DIR/log/mon-mkfs.out" 2>&1 ||
		show_fail "ceph-mon --mkfs failed" "$DIR/log/mon-mkfs.out" "$DIR/log/mon.a.log"
	launch mon.a ceph-mon -c "$DIR/ceph.conf" -i a -f
	wait_for "$TIMEOUT" "the monitor (ceph -s)" cephc -s ||
		show_fail "the monitor did not answer" "$DIR/log/mon.a.out" "$DIR/log/mon.a.log"

	local uuid
	uuid=$(cat /proc/sys/kernel/random/uuid)
	cephc osd new "$uuid" 0 >/dev/null || show_fail "ceph osd new failed" "$DIR/log/mon.a.log"
	ceph-osd -c "$DIR/ceph.conf" -i 0 --mkfs --osd-uuid "$uuid" >"$DIR/log/osd-mkfs.out" 2>&1 ||
		show_fail "ceph-osd --mkfs failed" "$DIR/log/osd-mkfs.out" "$DIR/log/osd.0.log"
	launch osd.0 ceph-osd -c "$DIR/ceph.conf" -i 0 -f
	osd_up() { cephc osd stat | grep -q '1 up'; }
	wait_for "$TIMEOUT" "the OSD to be up" osd_up ||
		show_fail "the OSD did not come up" "$DIR/log/osd.0.out" "$DIR/log/osd.0.log"
}

start_rgw() {
	local rgw_port=$1 url=http://127.0.0.1:$1
	launch rgw.a radosgw -c "$DIR/ceph.conf" -n client.rgw.a -f
	wait_for "$TIMEOUT" "the RADOS Gateway on $url" curl -sf -o /dev/null "$url/" ||
		show_fail "the RADOS Gateway did not answer on $url" "$DIR/log/rgw.a.out" \
			"$DIR/log/rgw.a.log"
	radosgw-admin -c "$DIR/ceph.conf" user create --uid=ckptfs-test --display-name=ckptfs-test \
		--access-key="$ACCESS_KEY" --secret="$SECRET_KEY" >"$DIR/log/user-create.out" 2>&1 ||
		show_fail "radosgw-admin user create failed" "$DIR/log/user-create.out"
	# SHA-256 of the empty payload: RGW requires x-amz-content-sha256.
	local code
	code=$(curl -s -o "$DIR/log/bucket-create.out" -w '%{http_code}' -X PUT \
		--aws-sigv4 "aws:amz:$REGION:s3" --user "$ACCESS_KEY:$SECRET_KEY" \
		-H 'x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855' \
		"$url/$BUCKET")
	[ "$code" = 200 ] || show_fail "creating bucket '$BUCKET' answered HTTP $code" \
		"$DIR/log/bucket-create.out" "$DIR/log/rgw.a.log"
}

start_cephfs() {
	local n=$1 k
	cephc osd pool create cephfs_meta 8 >/dev/null 2>&1 ||
		show_fail "cannot create pool cephfs_meta" "$DIR/log/mon.a.log"
	cephc osd pool create cephfs_data 8 >/dev/null 2>&1 ||
		show_fail "cannot create pool cephfs_data" "$DIR/log/mon.a.log"
	cephc fs new cephfs cephfs_meta cephfs_data >/dev/null 2>&1 ||
		show_fail "ceph fs new failed" "$DIR/log/mon.a.log"
	launch mds.a ceph-mds -c "$DIR/ceph.conf" -i a -f
	mds_active() { cephc mds stat | grep -q 'up:active'; }
	wait_for "$TIMEOUT" "the MDS to be up:active" mds_active ||
		show_fail "the MDS did not become active" "$DIR/log/mds.a.out" "$DIR/log/mds.a.log"
	for k in $(seq 1 "$n"); do
		mkdir -p "$DIR/cephfs-$k"
		launch "fuse.$k" ceph-fuse -c "$DIR/ceph.conf" -f "$DIR/cephfs-$k"
	done
	for k in $(seq 1 "$n"); do
		wait_for "$TIMEOUT" "ceph-fuse on $DIR/cephfs-$k" mountpoint -q "$DIR/cephfs-$k" ||
			show_fail "ceph-fuse did not mount $DIR/cephfs-$k" "$DIR/log/fuse.$k.out"
	done
}

do_start() {
	local cephfs=$1
	[ ! -f "$DIR/env" ] || die "$DIR/env exists: a cluster may be running there; run '$0 stop $DIR' first"
	do_stop >/dev/null 2>&1 || true
	rm -rf "$DIR/mon" "$DIR/osd" "$DIR/mds" "$DIR/rgw" "$DIR/log" "$DIR/run" "$DIR/monmap" \
		"$DIR/keyring" "$DIR/ceph.conf"
	mkdir -p "$DIR/log" "$DIR/run"
	local t0=$EPOCHREALTIME fsid mon_v2 mon_v1 rgw_port
	fsid=$(cat /proc/sys/kernel/random/uuid)
	mon_v2=$(free_port)
	mon_v1=$(free_port)
	rgw_port=$(free_port)
	[ "$mon_v2" != "$mon_v1" ] && [ "$rgw_port" != "$mon_v1" ] && [ "$rgw_port" != "$mon_v2" ] ||
		die "could not find three distinct free ports"
	write_conf "$fsid" "$mon_v2" "$mon_v1" "$rgw_port"
	start_mon_osd "$fsid" "$mon_v2" "$mon_v1"
	local t_osd=$EPOCHREALTIME
	start_rgw "$rgw_port"
	local t_rgw=$EPOCHREALTIME t_fs=$EPOCHREALTIME
	if [ "$cephfs" -gt 0 ]; then
		start_cephfs "$cephfs"
		t_fs=$EPOCHREALTIME
	fi

	{
		echo "export AWS_ENDPOINT_URL=http://127.0.0.1:$rgw_port"
		echo "export AWS_REGION=$REGION"
		echo "export AWS_ACCESS_KEY_ID=$ACCESS_KEY"
		echo "export AWS_SECRET_ACCESS_KEY=$SECRET_KEY"
		echo "export CKPTFS_TEST_BUCKET=$BUCKET"
		echo "export CEPH_CONF=$DIR/ceph.conf"
		if [ "$cephfs" -gt 0 ]; then
			local mounts="" k
			for k in $(seq 1 "$cephfs"); do
				echo "export CKPTFS_CEPHFS_$k=$DIR/cephfs-$k"
				mounts="$mounts${mounts:+ }$DIR/cephfs-$k"
			done
			echo "export CKPTFS_CEPHFS_MOUNTS='$mounts'"
		fi
	} >"$DIR/env.tmp"
	mv "$DIR/env.tmp" "$DIR/env"
	local t1=$EPOCHREALTIME
	awk -v a="$t0" -v o="$t_osd" -v r="$t_rgw" -v f="$t_fs" -v b="$t1" 'BEGIN {
		printf "ceph.sh: start took %.1f s (mon+osd %.1f s, rgw+user+bucket %.1f s, cephfs %.1f s)\n",
			b - a, o - a, r - o, f - r }'
	printf 'ceph.sh: S3 on http://127.0.0.1:%s, bucket %s%s; env in %s\n' "$rgw_port" "$BUCKET" \
		"$([ "$cephfs" -gt 0 ] && echo ", $cephfs CephFS mount(s) $DIR/cephfs-*")" "$DIR/env"
}

# ours PID - whether PID is a live daemon of this cluster: its command line names DIR/ceph.conf
# (so a pid file outliving its daemon never gets a reused pid killed, and a zombie is not alive).
ours() {
	tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline" | grep -qF -- "$DIR/ceph.conf"
}

# kill_pidfiles TENTHS FILE... - SIGTERM the live pids in the FILEs, SIGKILL those still alive
# after TENTHS tenths of a second; remove the FILEs. Only pids this script started are there.
kill_pidfiles() {
	local f pid pids=() i grace=$1
	shift
	for f in "$@"; do
		[ -f "$f" ] || continue
		pid=$(cat "$f" 2>/dev/null || true)
		if [ -n "$pid" ] && ours "$pid"; then
			kill -TERM "$pid" 2>/dev/null || true
			pids+=("$pid")
		fi
	done
	for i in $(seq 1 "$grace"); do
		[ ${#pids[@]} -gt 0 ] || break
		local alive=()
		for pid in "${pids[@]}"; do
			ours "$pid" && alive+=("$pid")
		done
		pids=("${alive[@]}")
		[ ${#pids[@]} -gt 0 ] && sleep 0.1
	done
	for pid in "${pids[@]}"; do
		echo "ceph.sh: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) still running: SIGKILL" >&2
		kill -KILL "$pid" 2>/dev/null || true
	done
	rm -f "$@"
	[ -z "${CEPH_SH_DEBUG:-}" ] || echo "ceph.sh: stopped ${*##*/} at $EPOCHREALTIME" >&2
}

# The ceph-fuse mount points under DIR, from /proc/mounts: never stat(2) a mount point here, a
# ceph-fuse whose MDS is gone blocks every call on it.
our_mounts() {
	awk -v p="$DIR/cephfs-" '$3 == "fuse.ceph-fuse" && index($2, p) == 1 { print $2 }' /proc/mounts
}

do_stop() {
	local m
	[ -d "$DIR" ] || return 0
	# Lazy unmounts first: they need no answer from ceph-fuse or the MDS.
	our_mounts | while read -r m; do
		fusermount3 -uz "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	done
	# The clients first (ceph-fuse, RGW), then the MDS, the OSD, the monitor. The state is in
	# memory and thrown away: an MDS that takes its time to shut down cleanly is not waited for.
	local t0=$EPOCHREALTIME
	kill_pidfiles 50 "$DIR"/run/fuse.*.pid "$DIR/run/rgw.a.pid"
	kill_pidfiles 10 "$DIR/run/mds.a.pid"
	kill_pidfiles 50 "$DIR/run/osd.0.pid" "$DIR/run/mon.a.pid"
	[ -z "${CEPH_SH_DEBUG:-}" ] || echo "ceph.sh: daemons stopped in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }') s" >&2
	for m in "$DIR"/cephfs-*; do
		[ -e "$m" ] && rmdir "$m" 2>/dev/null || true
	done
	rm -f "$DIR/env"
	echo "ceph.sh: stopped the cluster under $DIR"
}

# The RADOS Gateway alone, for the tests of a remote that goes away during a save and comes back
# (tests/e2e/test_multinode.py): stopped as do_stop stops it, started again on its port.
do_rgw_stop() {
	kill_pidfiles 50 "$DIR/run/rgw.a.pid"
	echo "ceph.sh: stopped the RADOS Gateway under $DIR"
}

do_rgw_start() {
	local port url
	port=$(sed -n 's/^rgw frontends = beast endpoint=127\.0\.0\.1:\([0-9]*\)$/\1/p' "$DIR/ceph.conf")
	[ -n "$port" ] || die "no RADOS Gateway port in $DIR/ceph.conf: was the cluster started here?"
	url=http://127.0.0.1:$port
	launch rgw.a radosgw -c "$DIR/ceph.conf" -n client.rgw.a -f
	wait_for "$TIMEOUT" "the RADOS Gateway on $url" curl -sf -o /dev/null "$url/" ||
		show_fail "the RADOS Gateway did not answer on $url" "$DIR/log/rgw.a.out" \
			"$DIR/log/rgw.a.log"
	echo "ceph.sh: the RADOS Gateway answers on $url again"
}

[ $# -ge 2 ] || usage
cmd=$1
DIR=$2
shift 2
case "$DIR" in
/*) ;;
*) DIR=$(pwd)/$DIR ;;
esac
TIMEOUT=60
CEPHFS=0
while [ $# -gt 0 ]; do
	case "$1" in
	--cephfs)
		CEPHFS=2
		if [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]]; then
			CEPHFS=$2
			shift
		fi
		;;
	--timeout)
		[ $# -ge 2 ] || usage
		TIMEOUT=$2
		shift
		;;
	*) usage ;;
	esac
	shift
done

case "$cmd" in
start)
	for p in ceph-mon ceph-osd radosgw radosgw-admin ceph curl python3; do
		command -v "$p" >/dev/null || die "'$p' not found: run scripts/install-deps.sh"
	done
	if [ "$CEPHFS" -gt 0 ]; then
		for p in ceph-mds ceph-fuse fusermount3; do
			command -v "$p" >/dev/null || die "'$p' not found: run scripts/install-deps.sh"
		done
	fi
	mkdir -p "$DIR"
	# Any command failing unexpectedly: say where, show the logs, stop what was started.
	trap 'show_fail "start failed (line $LINENO)" "$DIR"/log/*.out' ERR
	do_start "$CEPHFS"
	trap - ERR
	;;
stop) do_stop ;;
rgw-stop) do_rgw_stop ;;
rgw-start) do_rgw_start ;;
*) usage ;;
esac
