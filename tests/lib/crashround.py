"""crashround.py - the driver of the crash tests' rounds.

A crash test runs `rounds` independent rounds of one layout (start a trainer, kill it, and the
daemon too in some tests, at a random moment; resume; check where it resumed). A failed round
does not stop the others: every round runs, each prints its outcome, one summary line counts
them, and the test fails at the end listing every failed round.
"""

import time


def run_rounds(test, layout, rounds, round_fn, rng, summary, kind='', catch=(AssertionError,)):
    """Run round_fn(layout, rnd, rng) for rnd = 1..rounds; it returns the round's description
    or raises one of `catch` when the round failed. Prints each outcome and the summary line
    'layout L: N/R <kind>rounds resumed to a complete step (Ts)', which it also appends to the
    list summary; then test.fail()s with every failed round, if any. kind names the rounds in
    the messages ('daemon-kill ', with its space, or '')."""
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
