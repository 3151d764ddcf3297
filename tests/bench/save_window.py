#!/usr/bin/python3
"""How long after a save returns can a crash still lose it? For each layout, a real 2-rank
trainer (tests/e2e/trainer.py) saves N times on a ckptfs mount; for every save, the time the
step became complete in the index (ckptctl steps: completed_ns) minus the time the trainer
printed SAVED (after its tracker or marker, every rank done). Negative: complete before the
save returned, so no crash after it can lose it. A benchmark, not a test: it prints figures.

Run: /usr/bin/python3 tests/bench/save_window.py [--saves 10] [--layouts deepspeed,hf]
     (CKPTFS_BIN, CKPTCTL_BIN as for the tests)
"""

import sys

sys.dont_write_bytecode = True

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402
from trainers import LAYOUTS, Trainer  # noqa: E402


def run(layout, saves):
    with ckfs.Mount() as m:
        log = os.path.join(m.tmp, 'trainer.log')
        tr = Trainer(layout, m.mnt, log, steps=2 * saves, every=2)
        saved = {}
        try:
            deadline = time.monotonic() + 600
            while True:
                _, ln = tr.next_line(deadline)
                if ln is None:
                    break
                if ln.startswith('SAVED '):
                    saved[int(ln.split()[1])] = time.time()
            if tr.p.wait() != 0:
                raise SystemExit('trainer failed%s' % tr.tail())
        finally:
            tr.close()
        time.sleep(2.5)     # a first step completes once quiet
        r = ckfs.ckptctl(m.store, 'steps', json_out=True)
        rows = json.loads(r.stdout)['steps']
    done = {}
    for s in rows:
        if s['state'] in ('complete', 'pruned') and s['completed_ns']:
            done[s['step']] = s['completed_ns'] / 1e9
    return [(st, done[st] - t) if st in done else (st, None) for st, t in sorted(saved.items())]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--saves', type=int, default=10)
    ap.add_argument('--layouts', default=','.join(LAYOUTS))
    a = ap.parse_args()
    for layout in a.layouts.split(','):
        res = run(layout, a.saves)
        lag = [d for _, d in res if d is not None]
        never = [st for st, d in res if d is None]
        later = [d for d in lag[1:] if d > 0]
        print('%-15s completed minus SAVED, s: first save %s; later saves median %+.3f, '
              'max %+.3f; %d of %d later saves complete after SAVED%s' % (
                  layout, '%+.3f' % lag[0] if lag else 'n/a',
                  statistics.median(lag[1:]) if len(lag) > 1 else float('nan'),
                  max(lag[1:]) if len(lag) > 1 else float('nan'), len(later),
                  max(0, len(lag) - 1), '; never complete: %s' % never if never else ''),
              flush=True)


if __name__ == '__main__':
    main()
