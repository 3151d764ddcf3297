#!/usr/bin/env bash
# The main demonstration: a real 2-rank PyTorch training job (tests/e2e/trainer.py: a character
# transformer on /usr/share/common-licenses/GPL-3, gloo, CPU) saves checkpoints into a ckptfs
# mount, is killed with SIGKILL in the middle of a save, restarts with resume, lands on the last
# complete step and continues with the same loss curve.
#
# Usage: scripts/demo.sh [--layout mf2|megatron|mf1] [--steps N] [--out DIR]
#   --layout  checkpoint layout the trainer uses (default mf2: MindFormers 2.0)
#   --steps   training steps (default 40, at least 20); a checkpoint every 5 steps
#   --out     output directory (default output/): DIR/store, DIR/checkpoint (the mount),
#             DIR/demo (trainer logs)
# Environment: CKPTFS_BIN and CKPTCTL_BIN (both) use these binaries instead of building build/.
#
# Idempotent: installs what is missing, builds if needed, unmounts what a previous run left,
# and starts from an empty store every time. Leaves no mount or process behind, on success or
# failure. Exit status 0 only if the resumed run continued with the loss recorded before the
# crash and `ckptctl verify` is clean.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)

layout=mf2
steps=40
out=output
usage() { sed -n '7,12p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
	case "$1" in
	--layout) layout=${2:?--layout needs a value}; shift 2 ;;
	--layout=*) layout=${1#*=}; shift ;;
	--steps) steps=${2:?--steps needs a value}; shift 2 ;;
	--steps=*) steps=${1#*=}; shift ;;
	--out) out=${2:?--out needs a value}; shift 2 ;;
	--out=*) out=${1#*=}; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "demo: unknown argument: $1" >&2; usage >&2; exit 2 ;;
	esac
done
case "$layout" in mf2 | megatron | mf1) ;; *)
	echo "demo: --layout must be mf2, megatron or mf1" >&2; exit 2 ;;
esac
every=5
crash_at=$((3 * every))   # killed while saving this step (after two saves completed)
if ! [[ "$steps" =~ ^[0-9]+$ ]] || [ "$steps" -lt $((crash_at + every)) ]; then
	echo "demo: --steps must be a number >= $((crash_at + every))" >&2; exit 2
fi
slow=0.25                 # trainer --slow-save: seconds between the files of a save

# Paths: absolute for the work, shown relative to the repository when they are inside it.
out_abs=$(realpath -m -- "$out")
cd "$top"
rel() { case "$1" in "$top"/*) echo "${1#"$top"/}" ;; *) echo "$1" ;; esac; }
store=$(rel "$out_abs/store")
mnt=$(rel "$out_abs/checkpoint")
logdir=$(rel "$out_abs/demo")
log=$logdir/train.log
# CKPTFS_BIN / CKPTCTL_BIN (the test suite's binaries): use them instead of building build/
ckptfs=${CKPTFS_BIN:-build/fs/ckptfs}
ckptctl=${CKPTCTL_BIN:-build/tools/ckptctl}
python=/usr/bin/python3
trainer=tests/e2e/trainer.py

t0=$(date +%s.%N)
elapsed() { awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }'; }
say() { printf '== %s\n' "$*"; }
show() { printf '$ %s\n' "$*"; "$@"; }
fail() { printf '\nDEMO FAILED: %s\n' "$*" >&2; exit 1; }

is_mounted() {
	local p
	p=$(realpath -m -- "$1")
	awk -v p="$p" '$2 == p && $3 ~ /^fuse/ { f = 1 } END { exit !f }' /proc/mounts
}
daemon_pid() {
	local pid
	pid=$(awk 'NR == 1 { print $1 }' "$store/lock" 2>/dev/null || true)
	[[ "$pid" =~ ^[0-9]+$ ]] && [ -d "/proc/$pid" ] && echo "$pid" || true
}
# live (not zombie) members of process group $1
group_alive() { ps -eo pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'; }
wait_gone() { # pid timeout-seconds
	local i
	for ((i = 0; i < $2 * 20; i++)); do
		[ -d "/proc/$1" ] && [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ] ||
			return 0
		sleep 0.05
	done
	return 1
}
kill_group() { # pgid: SIGKILL the trainer's whole process group, wait until it is gone
	local i
	kill -KILL -- "-$1" 2>/dev/null || true
	for ((i = 0; i < 600; i++)); do group_alive "$1" || return 0; sleep 0.05; done
	echo "demo: process group $1 survived SIGKILL" >&2
}
unmount() { # unmount $mnt (retrying while busy), wait for the daemon to exit
	local pid i
	pid=$(daemon_pid)
	if is_mounted "$mnt"; then
		for ((i = 0; i < 100; i++)); do
			fusermount3 -u "$mnt" 2>/dev/null && break
			is_mounted "$mnt" || break
			sleep 0.1
		done
		if is_mounted "$mnt"; then
			echo "demo: $mnt is busy; lazy unmount" >&2
			fusermount3 -uz "$mnt" || true
		fi
	fi
	if [ -n "$pid" ] && ! wait_gone "$pid" 120; then
		echo "demo: ckptfs daemon $pid did not exit 120 s after unmount; killing it" >&2
		kill -KILL "$pid" 2>/dev/null || true
		wait_gone "$pid" 10 || true
	fi
}

tpgid=""   # the running trainer's process group (its own session)
tfd=""     # its stdout
cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP
	if [ -n "$tpgid" ]; then kill_group "$tpgid"; rm -f "$logdir/trainer.pgid"; fi
	if [ -n "$tfd" ]; then exec {tfd}<&- || true; fi
	unmount
	if [ $rc -ne 0 ]; then
		echo "demo: exit status $rc after $(elapsed) s; logs in $logdir/" \
			"(trainer: train.log, train.err; daemon: $store/ckptfs.log)" >&2
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# ---- 1. dependencies and build -------------------------------------------------------------
say "installing what is missing (scripts/install-deps.sh)"
bash scripts/install-deps.sh
if [ -n "${CKPTFS_BIN:-}" ] && [ -n "${CKPTCTL_BIN:-}" ]; then
	say "using $ckptfs and $ckptctl (CKPTFS_BIN, CKPTCTL_BIN)"
else
	buildlog=$(mktemp)
	say "building (meson, build/)"
	# -Dtests=false: the demo needs neither the test libraries nor their build
	if ! { { [ -f build/build.ninja ] || meson setup build -Dtests=false; } &&
		meson compile -C build; } \
		>"$buildlog" 2>&1; then
		cat "$buildlog" >&2; rm -f "$buildlog"; fail "the build failed"
	fi
	rm -f "$buildlog"
fi
[ -x "$ckptfs" ] && [ -x "$ckptctl" ] || fail "$ckptfs or $ckptctl is missing"

# ---- 2. a clean slate --------------------------------------------------------------------
# A previous run killed without its cleanup may have left a trainer or a mount behind.
if [ -f "$logdir/trainer.pgid" ]; then
	old=$(cat "$logdir/trainer.pgid")
	if [[ "$old" =~ ^[0-9]+$ ]] && group_alive "$old" &&
		grep -qs trainer.py "/proc/$old/cmdline"; then
		say "stopping the trainer a previous run left (process group $old)"
		kill_group "$old"
	fi
fi
if is_mounted "$mnt" || [ -n "$(daemon_pid)" ]; then
	say "unmounting what a previous run left at $mnt"
	unmount
fi
say "starting from an empty store so the run is reproducible: removing $store, $mnt, $logdir"
# (MindFormers 1.0's resume writes resume_record/ beside the checkpoint directory)
rm -rf -- "$store" "$logdir" "$out_abs/resume_record"
if [ -d "$mnt" ]; then rm -rf -- "$mnt"; fi
mkdir -p -- "$mnt" "$logdir"

# ---- 3. mount ----------------------------------------------------------------------------
say "mounting ckptfs: keep the 3 newest complete steps"
show "$ckptfs" -o keep_checkpoint_max=3 "$store" "$mnt"
is_mounted "$mnt" || fail "$ckptfs returned but $mnt is not mounted"

# ---- 4. the trainer ------------------------------------------------------------------------
# start_trainer ARGS...: run trainer.py in its own session (so the whole job, the launcher and
# every rank, is one process group we can SIGKILL); its stdout is readable on $tfd, and its
# last line is `EXIT status`.
start_trainer() {
	exec {tfd}< <(exec setsid /bin/sh -c \
		'"$0" "$@" 2>>"$DEMO_ERR" </dev/null; echo "EXIT $?"' \
		"$python" "$trainer" --layout "$layout" --save "$mnt" --steps "$steps" \
		--save-every "$every" --ranks 2 --log "$log" --slow-save "$slow" "$@")
	tpgid=$!
	echo "$tpgid" >"$logdir/trainer.pgid"
}
stop_reading() {
	exec {tfd}<&-
	tfd=""
	tpgid=""
	rm -f "$logdir/trainer.pgid"
}
export DEMO_ERR=$logdir/train.err

# loss_at FILE STEP: the loss of `STEP n loss=L` lines in FILE (the last one)
loss_at() { awk -v s="$2" '$1 == "STEP" && $2 == s { sub(/^loss=/, "", $3); l = $3 } END { print l }' "$1"; }
trk=latest_checkpointed_iteration.txt
[ "$layout" = mf1 ] && trk=rank_x/meta.json
tracker_show() {
	if [ "$layout" = mf1 ]; then
		show cat "$mnt/rank_0/meta.json"; echo
		show cat "$mnt/rank_1/meta.json"; echo
	else
		show cat "$mnt/latest_checkpointed_iteration.txt"; echo
	fi
}
# the step a resuming trainer picks now (empty if none); MindFormers 1.0 takes the smallest
# last_step of the ranks' meta.json
tracker_step() {
	if [ "$layout" = mf1 ]; then
		$python -c 'import json, sys
print(min(json.load(open(p))["last_step"] for p in sys.argv[1:]))' \
			"$mnt/rank_0/meta.json" "$mnt/rank_1/meta.json" 2>/dev/null || true
	else
		cat "$mnt/latest_checkpointed_iteration.txt" 2>/dev/null || true
	fi
}
# state of the newest index entry for step $1 (.ckptfs/steps.json)
step_state() {
	$python -c 'import json, sys
st = [s["state"] for s in json.load(open(sys.argv[1]))["steps"] if s["step"] == int(sys.argv[2])]
print(st[-1] if st else "")' "$mnt/.ckptfs/steps.json" "$1" 2>/dev/null || true
}
rank1_glob() { # the files rank 1 writes for step $1
	case "$layout" in
	mf2) printf '%s/iteration_%08d/*-0000001-*' "$mnt" "$1" ;;
	megatron) printf '%s/iter_%07d/mp_rank_01/*' "$mnt" "$1" ;;
	mf1) printf '%s/rank_1/*-1_%d.ckpt*' "$mnt" "$1" ;;
	esac
}
wrote_lines() { # the files of step $1 the ranks finished writing, from the log
	awk -v s="step=$1" '$1 == "WROTE" && $2 == s { sub(/^rank=/, "", $3); sub(/^path=/, "", $4);
		printf "     rank %s wrote %s\n", $3, $4 }' "$log"
}

# run_trainer PHASE [trainer args]: print the job's progress; PHASE crash kills it while it saves
# step $crash_at; PHASE resume checks the loss after the restart. Sets: saved, last_saved, status.
saved=0 last_saved="" status="" resumed_step="" resumed_loss="" first_step="" first_loss=""
run_trainer() {
	local phase=$1 line w n l t_save=0 deadline rc
	shift
	saved=0 status=""
	start_trainer "$@"
	deadline=$((SECONDS + 600))
	while :; do
		rc=0
		IFS= read -r -t 5 -u "$tfd" line || rc=$?
		if [ $rc -gt 128 ]; then       # timeout: nothing new yet
			[ $SECONDS -lt $deadline ] || fail "the trainer is still running after 10 minutes"
			continue
		fi
		[ $rc -eq 0 ] || [ -n "$line" ] || break   # EOF
		read -r w n l _ <<<"$line" || true
		case "$w" in
		STEP)
			printf '   step %3d  %s\n' "$n" "${l/=/ }"
			if [ "$phase" = resume ] && [ -z "$first_step" ]; then
				first_step=$n first_loss=${l#loss=}
			fi
			;;
		SAVING)
			t_save=$(date +%s.%N)
			printf '   saving step %d ...\n' "$n"
			if [ "$phase" = crash ] && [ "$saved" -ge 2 ]; then
				# wait until rank 1 (the slower one) is writing its first file of this step,
				# then kill it in the middle of that file
				local i
				for ((i = 0; i < 400; i++)); do
					compgen -G "$(rank1_glob "$n")" >/dev/null && break
					sleep 0.05
				done
				sleep 0.3
				wrote_lines "$n"
				for f in $(rank1_glob "$n"); do
					[ -e "$f" ] && printf '     rank 1 is writing %s (%s bytes so far)\n' \
						"${f#"$mnt"/}" "$(stat -c %s "$f" 2>/dev/null || echo ?)"
				done
				say "SIGKILL the whole training job (process group $tpgid) in the middle of saving step $n"
				kill_group "$tpgid"
				crashed_step=$n
			fi
			;;
		SAVED)
			saved=$((saved + 1)) last_saved=$n
			say "saved step $n ($(awk -v a="$t_save" -v b="$(date +%s.%N)" \
				'BEGIN { printf "%.1f", b - a }') s: every rank's files, then $trk)"
			;;
		RESUMED)
			resumed_step=${n#step=} resumed_loss=${l#loss=}
			say "resumed from step $resumed_step (loss stored in the checkpoint: $resumed_loss)"
			;;
		FRESH) say "the trainer found no checkpoint and starts from step 0" ;;
		VERIFY) printf '   trainer: every file it loaded hashes to what was written (%s)\n' \
			"${line#VERIFY }" ;;
		EXIT) status=$n ;;
		STATE | "") ;;
		*) printf '   %s\n' "$line" ;;
		esac
	done
	stop_reading
}

say "training (2 ranks, gloo, $layout layout, $steps steps, a checkpoint every $every steps," \
	"save slowed down to ${slow} s per file so a crash can land inside one)"
printf '$ %s \\\n    %s\n' "$python $trainer --layout $layout --save $mnt --steps $steps" \
	"--save-every $every --ranks 2 --log $log --slow-save $slow"
crashed_step=""
run_trainer crash
[ -n "$crashed_step" ] || fail "the trainer finished before the crash (status ${status:-?})"
[ "$saved" -ge 2 ] || fail "fewer than 2 saves completed before the crash"
cp "$log" "$logdir/before-crash.log"

say "after the crash: the job is gone; step $crashed_step was half-written"
# ckptfs judges a step whose writers are all dead ~1.5-2.5 s after the last write
for ((i = 0; i < 100; i++)); do
	case "$(step_state "$crashed_step")" in writing | sealed) sleep 0.1 ;; *) break ;; esac
done
show ls -l "$mnt"
if [ "$layout" = mf1 ]; then
	show ls -l "$mnt/rank_0" "$mnt/rank_1"
	say "ckptfs's view of the steps (step $crashed_step: $(step_state "$crashed_step")):"
	show cat "$mnt/.ckptfs/steps"
	say "MindFormers 1.0 resumes from the newest step every rank has, at or below the smallest" \
		"last_step of the ranks' meta.json (each written with tmp + rename):"
else
	newest=$(printf 'iteration_%08d' "$crashed_step")
	[ "$layout" = megatron ] && newest=$(printf 'iter_%07d' "$crashed_step")
	say "the torn step $newest was quarantined by ckptfs (kept for forensics, out of the" \
		"trainer's way):"
	show ls "$mnt/.ckptfs/quarantine"
	for q in "$mnt"/.ckptfs/quarantine/*; do [ -d "$q" ] && show ls -lR "$q"; done
	[ -e "$mnt/$newest" ] && fail "$mnt/$newest (torn) is still in the namespace"
	say "the tracker names the last complete step (the trainer's SAVED $last_saved):"
fi
tracker_show
ts=$(tracker_step)
[ "$ts" = "$last_saved" ] || fail "the tracker names step '${ts}', expected $last_saved"

saved_before=$last_saved
say "restarting the same job with --resume"
run_trainer resume --resume
[ "$status" = 0 ] || fail "the resumed trainer exited with status ${status:-?} (see $logdir/train.err)"
[ -n "$resumed_step" ] || fail "the trainer did not resume from a checkpoint"
[ "$resumed_step" = "$saved_before" ] ||
	fail "resumed from step $resumed_step, but step $saved_before was the last complete one"

before=$logdir/before-crash.log
logged=$(loss_at "$before" "$resumed_step")
logged_next=$(loss_at "$before" "$first_step")
say "loss check (the log recorded these before the crash):"
printf '   step %3d: resumed with loss %s, logged before the crash %s -> %s\n' \
	"$resumed_step" "$resumed_loss" "${logged:-none}" \
	"$([ "$resumed_loss" = "$logged" ] && echo match || echo MISMATCH)"
printf '   step %3d: first step after resume %s, logged before the crash %s -> %s\n' \
	"$first_step" "$first_loss" "${logged_next:-none}" \
	"$([ "$first_loss" = "$logged_next" ] && echo match || echo MISMATCH)"
loss_ok=0
if [ -n "$logged" ] && [ "$resumed_loss" = "$logged" ] && [ -n "$logged_next" ] &&
	[ "$first_loss" = "$logged_next" ]; then
	loss_ok=1
	say "resumed loss matches: step $resumed_step loss $resumed_loss, step $first_step loss" \
		"$first_loss, as before the crash"
fi

# ---- 5. what a person would look at -----------------------------------------------------------
# the last step is complete ~0-2.5 s after its tracker was written
for ((i = 0; i < 100; i++)); do [ "$(tracker_step)" = "$last_saved" ] && break; sleep 0.1; done
say "the checkpoint directory after the run (mounted with keep_checkpoint_max=3)"
show ls -l "$mnt"
if [ "$layout" = mf1 ]; then show ls -l "$mnt/rank_0" "$mnt/rank_1"; fi
tracker_show
show "$ckptctl" "$store" steps
say "logical size (what the trainer wrote) vs stored (deduplicated, compressed)"
show du -sh --apparent-size "$mnt"
show du -sh "$mnt"
show cat "$mnt/.ckptfs/status"
say "unmounting"
show fusermount3 -u "$mnt"
unmount
is_mounted "$mnt" && fail "$mnt is still mounted"
say "verifying every chunk and file of the store"
vrc=0
show "$ckptctl" "$store" verify || vrc=$?
[ $vrc -eq 0 ] || fail "ckptctl verify exited $vrc"
[ $loss_ok -eq 1 ] || fail "the resumed loss does not match the loss logged before the crash"
say "demo OK in $(elapsed) s: killed while saving step $crashed_step, resumed from step" \
	"$resumed_step with the loss it had before the crash, trained to step $steps, verify found every chunk intact," \
	"nothing left mounted"
