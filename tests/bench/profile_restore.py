#!/usr/bin/python3
"""Where a cold restore's daemon CPU goes (issue 45: "daemon CPU per GiB restored printed, with
where it goes"); a benchmark, not a test.

One mount on a fresh STORE; a Megatron step (iter_0000001/mp_rank_00/model_optim_rng.pt) of
16 bf16 tensors of randn * 0.02 (like trained weights), SIZE MiB in all, saved by torch.save
through ckptfs, claimed by the tracker, then 15 s for the deferred compression. Each rep drops
the page cache and times a fresh /usr/bin/python3 doing torch.load of the file, and prints the
daemon's CPU (/proc/PID/stat) per GiB loaded. With --perf FILE the first rep runs under
`perf record -F 1000 --call-graph dwarf,16384 -p PID` into FILE (read it with perf report).

Usage: /usr/bin/python3 tests/bench/profile_restore.py [--size-mib 1024] [--reps 4] [--perf F]
Environment: CKPTFS_BIN (a debugoptimized build gives the profile symbols). Root (drops caches).
Figures: tests/bench/RESULTS.md, "Daemon CPU per GiB restored".
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))
sys.path.insert(0, HERE)

import ckfs  # noqa: E402
from bench_io import proc_cpu_s  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--size-mib', type=int, default=1024)
    ap.add_argument('--reps', type=int, default=4)
    ap.add_argument('--perf', help='record the first rep with perf into this file')
    a = ap.parse_args()
    import torch
    ckfs.check_fuse_usable()
    base = tempfile.mkdtemp(prefix='ckptfs-profrest-')
    m = ckfs.Mount(store=os.path.join(base, 'store'), mnt=os.path.join(base, 'mnt')).start()
    try:
        d = os.path.join(m.mnt, 'iter_0000001', 'mp_rank_00')
        os.makedirs(d)
        path = os.path.join(d, 'model_optim_rng.pt')
        g = torch.Generator().manual_seed(1)
        rows = (a.size_mib << 20) // 16 // 2 // 64
        sd = {'w%d' % i: (torch.randn(rows, 64, generator=g) * 0.02).to(torch.bfloat16)
              for i in range(16)}
        torch.save(sd, path)
        del sd
        tracker = os.path.join(m.mnt, 'latest_checkpointed_iteration.txt')
        with open(tracker, 'w') as f:
            f.write('1')
        with open(tracker) as f:
            if f.read() != '1':
                sys.exit('profile_restore: the step did not complete')
        time.sleep(15)
        gib = os.path.getsize(path) / 2**30
        for rep in range(a.reps):
            subprocess.run(['sync'], check=True)
            with open('/proc/sys/vm/drop_caches', 'w') as f:
                f.write('3\n')
            perf = None
            if a.perf and rep == 0:
                perf = subprocess.Popen(['perf', 'record', '-F', '1000', '--call-graph',
                                         'dwarf,16384', '-o', a.perf, '-p', str(m.pid)],
                                        stderr=subprocess.DEVNULL)
                time.sleep(1)
            c0, t0 = proc_cpu_s(m.pid), time.monotonic()
            subprocess.run(['/usr/bin/python3', '-c', 'import sys, torch; torch.load(sys.argv[1])',
                            path], check=True)
            t, c = time.monotonic() - t0, proc_cpu_s(m.pid) - c0
            if perf:
                perf.send_signal(2)
                perf.wait()
            print('rep %d%s: cold torch.load of %.0f MiB in %.2f s, the daemon %.2f CPU-s, '
                  '%.2f per GiB' % (rep, ' (under perf)' if perf else '', gib * 1024, t, c,
                                    c / gib))
    finally:
        m.close()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == '__main__':
    main()
