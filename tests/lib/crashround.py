"""crashround.py - the driver of the crash tests' rounds.

A crash test runs `rounds` independent rounds of one layout (start a trainer, kill it, and the
daemon too in some tests, at a random moment; resume; check where it resumed). A failed round
does not stop the others: every round runs, each prints its outcome, one summary line counts
them, and the test fails at the end listing every failed round.

CKPTFS_CRASH_LOOP_AFTER=1 (set by scripts/test.sh for its meson pass, which the crash loop over
every layout follows) skips these rounds: the loop's 5 chained rounds of each layout start, like
a round here, from a fresh mount, kill the job inside a save, kill the daemon in the 5th and
remount, and check the resume the same way (trainers.check_resumed), so the single rounds here
would repeat its first rounds (about 4 minutes of CI's 50).
"""

import os
import time


def run_rounds(test, layout, rounds, round_fn, rng, summary, kind='', catch=(AssertionError,)):
    """Run round_fn(layout, rnd, rng) for rnd = 1..rounds; it returns the round's description
    or raises one of `catch` when the round failed. Prints each outcome and the summary line
    'layout L: N/R <kind>rounds resumed to a complete step (Ts)', which it also appends to the
    list summary; then test.fail()s with every failed round, if any. kind names the rounds in
    the messages ('daemon-kill ', with its space, or '')."""
    if os.environ.get('CKPTFS_CRASH_LOOP_AFTER') == '1':
        test.skipTest('the crash loop over every layout runs after this pass '
                      '(CKPTFS_CRASH_LOOP_AFTER=1): its rounds include these')
    t0 = time.monotonic()
    ok, fails = 0, []
    for rnd in range(1, rounds + 1):
        try:
            msg = round_fn(layout, rnd, rng)
            ok += 1
            print('layout %s: %s' % (layout, msg), flush=True)
        except catch as e:
            fails.append('round %d: %s' % (rnd, e))
            print('layout %s: %sround %d FAILED: %s' % (layout, kind, rnd, e), flush=True)
    line = 'layout %s: %d/%d %srounds resumed to a complete step (%.1fs)' % (
        layout, ok, rounds, kind, time.monotonic() - t0)
    summary.append(line)
    print(line, flush=True)
    if fails:
        test.fail('\n'.join(fails))


def kill_in_save(tr, kill_save, frac, kill, deadline):
    """Read trainer tr's lines until its kill_save-th save begins ('SAVING <step>'), wait frac of
    the first save's duration (SAVING to SAVED, so a kill lands inside a save that takes about
    as long), then call kill(). Returns (killed_step, delay_s, first_save_s, saved_t), saved_t
    mapping each step SAVED so far to its line's time.monotonic(). Raises AssertionError when the
    trainer exits first."""
    saved_t = {}
    nsave, t_saving, dur = 0, None, None
    while True:
        t, ln = tr.next_line(deadline)
        if ln is None:
            raise AssertionError('trainer exited (%s) before the kill%s' % (tr.p.wait(), tr.tail()))
        if ln.startswith('SAVED '):
            saved_t[int(ln.split()[1])] = t
            if dur is None:
                dur = t - t_saving
        elif ln.startswith('SAVING '):
            nsave += 1
            t_saving = t
            if nsave == kill_save:
                delay = frac * dur
                time.sleep(max(0.0, t_saving + delay - time.monotonic()))
                kill()
                return int(ln.split()[1]), delay, dur, saved_t


def await_resume(tr, deadline, until, describe):
    """Read a resumed trainer's lines: its first 'RESUMED ...' or 'FRESH' line, then (after
    RESUMED) up to its first line starting with `until` ('SAVED ' or 'SAVING '). Returns
    (t, resumed_line, last_line). Raises AssertionError naming the exit status, describe() and
    the trainer's tail when the trainer exits first."""
    resumed = None
    while True:
        t, ln = tr.next_line(deadline)
        if ln is None:
            raise AssertionError('resumed trainer exited with status %s: %s%s' %
                                 (tr.p.wait(), describe(), tr.tail()))
        if ln.startswith(('RESUMED', 'FRESH')) and resumed is None:
            resumed = ln
            if ln == 'FRESH':
                return t, resumed, ln
        if resumed and ln.startswith(until):
            return t, resumed, ln
