#!/usr/bin/python3
"""Two ckptfs binaries on the small-files loop, alternating (issue 22; opt-in, a tool for an A/B
of one change, not part of the test suite).

bench_small.py measures one binary against passthrough_ll and ext4; the disk's phase moves more
between its runs than a change of a few percent does (tests/bench/RESULTS.md "Small files").
This runs bench_small.py's writer (one fresh /usr/bin/python3 process: N files of 1 KiB of
random bytes in iter_0000001/mp_rank_00/, os.open(O_CREAT) + os.write + os.close) through
binary A and binary B in turn, --pairs times, ABBA order (A B, B A, ...), each on a fresh mount
and store, and deletes nothing until the end (ext4 without a journal scans past inodes freed
in the last 60-300 s: fs/ext4/ialloc.c recently_deleted). Prints, per binary, files/s and the
daemon's CPU per file (/proc/PID/stat, from before the writer to after every file is
committed), and the writer's open and close in microseconds per file, median (min-max).

Usage: /usr/bin/python3 tests/bench/ab_small.py A_BINARY B_BINARY [--files 3000] [--pairs 4]
                                                                [--dir DIR]
"""

import argparse
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))
sys.path.insert(0, HERE)

import ckfs  # noqa: E402
from bench_small import rep_ckptfs, summary  # noqa: E402


COLS = ('files/s', 'daemon cpu us/file', 'open us', 'close us')


def rep(binary, base, n):
    """COLS of one writer through a fresh mount of binary"""
    os.environ['CKPTFS_BIN'] = binary
    r = rep_ckptfs(tempfile.mkdtemp(prefix='ab-', dir=base), n)
    return tuple(r[c] for c in COLS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('a')
    ap.add_argument('b')
    ap.add_argument('--files', type=int, default=3000)
    ap.add_argument('--pairs', type=int, default=4)
    ap.add_argument('--dir', default=ckfs.test_tmp_root())
    a = ap.parse_args()
    bins = [os.path.abspath(a.a), os.path.abspath(a.b)]
    base = tempfile.mkdtemp(prefix='ckptfs-ab-small-', dir=a.dir)
    res = {b: [] for b in bins}
    try:
        for i in range(a.pairs):
            for b in (bins if i % 2 == 0 else bins[::-1]):
                r = rep(b, base, a.files)
                res[b].append(r)
                print('%s %s' % (b, ' '.join('%s %.0f' % (c, v) for c, v in zip(COLS, r))),
                      flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print('| binary | files/s | daemon CPU us/file | open us | close us |')
    print('|---|---:|---:|---:|---:|')
    for b in bins:
        print('| %s | %s |' % (b, ' | '.join(summary([x[i] for x in res[b]])
                                             for i in range(len(COLS)))))


if __name__ == '__main__':
    main()
