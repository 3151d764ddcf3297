#!/usr/bin/python3
"""What a read of /.ckptfs/status costs, and what it stalls, as the store grows (issue 22;
opt-in: scripts/bench.sh --meta).

status and metrics show whole-store figures (files, bytes, chunks by codec): a scan of the
index's inode and chunk tables. A Prometheus scrape of -o metrics, or a `watch cat
.ckptfs/status`, reads them while the job writes. This bench measures, for N in --sizes
(default 100 1000 10000) files of 1 KiB in one step on a fresh mount:
  status read: open + read + close of .ckptfs/status after one more file was written (so no
      figure kept from the read before can answer), median of 30 reads;
  steps read: the same for .ckptfs/steps (the list of steps: no store-wide figure);
  open alone: an open(2) + close(2) of one file of the step for reading (the kernel keeps a
      file's attributes 1 s, but every open is a request to the daemon), in a loop for
      --seconds s, while a second process writes 1 KiB files into another step directory:
      median, p99 and max;
  open beside status: the same while the second process also reads .ckptfs/status after each
      file it writes; the difference from "open alone" is what the status reads make every
      other request of the mount wait.
There is no ext4 figure: the baseline is the same mount without the status reads.

Usage: /usr/bin/python3 tests/bench/bench_meta.py [--sizes 100 1000 10000] [--seconds 3]
Environment: CKPTFS_BIN (default build/fs/ckptfs).
"""

import argparse
import multiprocessing
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402

KIB = b'x' * 1024


def write_file(path):
    with open(path, 'wb') as f:
        f.write(KIB)


def read_all(path):
    with open(path, 'rb') as f:
        return f.read()


def timed_reads(m, name, reps, d):
    """microseconds per read of .ckptfs/NAME, each after one more file is written into d"""
    ts = []
    for i in range(reps):
        write_file(os.path.join(d, 'r%s%05d' % (name, i)))
        t0 = time.perf_counter()
        body = read_all(m.path('.ckptfs', name))
        ts.append(time.perf_counter() - t0)
        assert body, name
    return statistics.median(ts) * 1e6


def writer(d, meta, stop):
    """write 1 KiB files into d until stop is set; after each, read meta if given"""
    i = 0
    while not stop.is_set():
        write_file(os.path.join(d, 'w%07d' % i))
        if meta:
            read_all(meta)
        i += 1


def open_latency(path, seconds):
    """open + close latencies of path in microseconds over seconds: (median, p99, max, count)"""
    ts = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        os.close(os.open(path, os.O_RDONLY))
        ts.append(time.perf_counter() - t0)
        time.sleep(0.0005)  # a client's pace, not a spin
    ts.sort()
    return (statistics.median(ts) * 1e6, ts[int(len(ts) * 0.99)] * 1e6, ts[-1] * 1e6, len(ts))


def open_beside(m, target, meta, seconds, n):
    d = m.path('iter_%07d' % (n + 1 + (1 if meta else 0)), 'mp_rank_00')
    os.makedirs(d)
    stop = multiprocessing.Event()
    p = multiprocessing.Process(target=writer, args=(d, meta, stop))
    p.start()
    try:
        time.sleep(0.3)
        return open_latency(target, seconds)
    finally:
        stop.set()
        p.join()


def measure(n, seconds):
    m = ckfs.Mount()
    m.start()
    try:
        d = m.path('iter_0000001', 'mp_rank_00')
        os.makedirs(d)
        for i in range(n):
            write_file(os.path.join(d, 'f%06d' % i))
        rd = m.path('iter_0000001', 'reads')
        os.makedirs(rd)
        r = {'status read': timed_reads(m, 'status', 30, rd),
             'steps read': timed_reads(m, 'steps', 30, rd)}
        target = os.path.join(d, 'f000000')
        r['open alone'] = open_beside(m, target, None, seconds, n)
        r['open beside status'] = open_beside(m, target, m.path('.ckptfs', 'status'), seconds, n)
        return r
    finally:
        m.unmount()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--sizes', type=int, nargs='+', default=[100, 1000, 10000])
    ap.add_argument('--seconds', type=float, default=3.0)
    a = ap.parse_args()
    print('binary: %s' % ckfs.ckptfs_bin())
    print('| files | status read us | steps read us | stat alone us (p50 / p99 / max) '
          '| stat beside status reads us (p50 / p99 / max) |')
    print('|---:|---:|---:|---|---|')
    for n in a.sizes:
        r = measure(n, a.seconds)
        fmt = '%.0f / %.0f / %.0f (%d opens)'
        print('| %d | %.0f | %.0f | %s | %s |' % (n, r['status read'], r['steps read'],
                                                 fmt % r['open alone'],
                                                 fmt % r['open beside status']), flush=True)


if __name__ == '__main__':
    main()
