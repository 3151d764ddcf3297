#!/usr/bin/python3
"""Benchmark (opt-in, not a test): two ckptfs nodes over one Ceph S3 bucket, one run, printing

  upload      the bytes the two nodes sent to the bucket per second, from the step's last close
              to both trackers naming it, against `curl --aws-sigv4 -T` putting the same files
              into the same bucket one after the other (the plain S3 upload of these bytes)
  global      the time from the step complete on both nodes (their last close, then the
              tracker claim) to its being globally complete (both trackers name it)
  cold resume a node on an empty STORE reading every file of the step (chunks fetched from the
              bucket, verified, cached) against reading the same bytes from the local disk
              (files in a plain directory, page cache dropped before the read), against the
              same node reading them again from its own STORE, against libfuse's
              passthrough_ll reading the local files (the FUSE floor; with the kernel's
              read-ahead and with ckptfs's 4 MiB), and against `curl` GETs of the same files
              from the bucket (the remote's own rate here)
  cpu         the CPU time the two daemons (per GiB written) and radosgw (per GiB sent) used
              from the first write to global (on a machine of few cores, it bounds the upload),
              and the cold node's daemon and radosgw during the cold resume
  bucket      bytes in the bucket under the job's prefix against the bytes written: the
              data-parallel replicas' identical model shards are stored once

The step: a Megatron-layout save of 4 ranks, ranks 0-1 through node A and 2-3 through node B;
each rank's model_optim_rng.pt is torch.save of {model: the same bf16 tensor on every rank
(data-parallel replicas), optim: a float32 tensor of its own}, then rank 0's tracker.
Usage: scripts/bench.sh --multinode [--mib-per-rank N] [--opt NAME=VALUE ...]
       (root: drops the page cache)
"""
import sys

sys.dont_write_bytecode = True

import argparse  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import json  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402
from ceph import Ceph  # noqa: E402
from bench_io import page_reporting_off  # noqa: E402
from bench_small import build_passthrough, passthrough_mount  # noqa: E402

TRACKER = 'latest_checkpointed_iteration.txt'
RANKS = 4


def read_all(paths, parallel):
    """Bytes read from every file of paths: one after another, or each in a thread of its own
    (file reads release the GIL) started together."""
    def one(p, out):
        with open(p, 'rb') as f:
            out.append(len(f.read()))
    got = []
    if not parallel:
        for p in paths:
            one(p, got)
        return sum(got)
    threads = [threading.Thread(target=one, args=(p, got)) for p in paths]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(got)


def drop_caches():
    os.sync()
    with open('/proc/sys/vm/drop_caches', 'w') as f:
        f.write('3\n')


def rank_files(mib):
    """{relative path: bytes} of one step (4 ranks): a shared model half, an own optim half."""
    import io
    import torch
    g = torch.Generator().manual_seed(7)
    n = mib * 1024 * 1024 // 2
    model = torch.randn(n // 2, generator=g).to(torch.bfloat16)        # mib/2 MiB, replicated
    out = {}
    for r in range(RANKS):
        optim = torch.randn(n // 8, generator=g)                        # mib/2 MiB, this rank's
        buf = io.BytesIO()
        torch.save({'iteration': 2, 'model': model, 'optimizer': optim}, buf)
        out['iter_0000002/mp_rank_%02d/model_optim_rng.pt' % r] = buf.getvalue()
    return out


def write_step(mounts, files):
    """Ranks 0-1's files through mounts[0], 2-3's through mounts[1], then the tracker on A."""
    for path, data in files.items():
        r = int(path.split('mp_rank_')[1][:2])
        m = mounts[r * len(mounts) // RANKS]
        os.makedirs(os.path.dirname(m.path(path)), exist_ok=True)
        with open(m.path(path), 'wb') as f:
            f.write(data)
    with open(mounts[0].path(TRACKER), 'w') as f:
        f.write('2')


def sent_bytes(m):
    with open(m.path('.ckptfs', 'status')) as f:
        for ln in f:
            if ln.startswith('published:'):
                return int(ln.split('(')[1].split()[0])
    return 0


def s3_curl(v, method, key, src=None, out=None):
    url = '%s/%s/%s' % (v['AWS_ENDPOINT_URL'], v['CKPTFS_TEST_BUCKET'], key)
    argv = ['curl', '-s', '-w', '\n%{http_code}', '--aws-sigv4', 'aws:amz:%s:s3' % v['AWS_REGION'],
            '--user', '%s:%s' % (v['AWS_ACCESS_KEY_ID'], v['AWS_SECRET_ACCESS_KEY']),
            '-H', 'x-amz-content-sha256: UNSIGNED-PAYLOAD', '-X', method, url]
    if src:
        argv[-3:-3] = ['-T', src]
    if out:
        argv[-3:-3] = ['-o', out]
    r = subprocess.run(argv, capture_output=True, timeout=600)
    body, _, code = r.stdout.rpartition(b'\n')
    if r.returncode != 0 or not code.startswith(b'2'):
        raise SystemExit('curl %s %s failed (exit %d, HTTP %s): %s%s' % (
            method, key, r.returncode, code.decode(), body[:500], r.stderr))
    return body


def bucket_bytes(m):
    """The chunk objects' bytes in the bucket, as `ckptctl STORE remote` lists them (manifests,
    a few KiB, not counted)."""
    r = m.ckptctl('remote', json_out=True)
    if r.returncode != 0:
        raise SystemExit('ckptctl remote failed: %s' % r.stderr)
    return json.loads(r.stdout)['chunk_bytes']


def cpu_s(pid):
    """CPU seconds (user + system) process pid has used so far, from /proc/PID/stat."""
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--mib-per-rank', type=int, default=64)
    ap.add_argument('--parallel', action='store_true',
                    help='the cold resume and its disk baseline read every file at once, one '
                    'thread each (as the ranks of a resumed job do), not one after another')
    ap.add_argument('--opt', action='append', default=[],
                    help='a mount option for both nodes, e.g. readahead_mb=64 (repeatable)')
    a = ap.parse_args()
    ckfs.check_fuse_usable()
    print(page_reporting_off())
    files = rank_files(a.mib_per_rank)
    logical = sum(len(d) for d in files.values())
    ceph = Ceph()
    os.environ.update({k: val for k, val in ceph.vars.items() if k.startswith('AWS_')})
    v = ceph.vars
    job = 'bench-%d' % int(time.time())
    url = 's3://%s/%s' % (v['CKPTFS_TEST_BUCKET'], job)
    # the step's files written to the local disk: passthrough_ll serves them from there later
    pt_base = tempfile.mkdtemp(prefix='ckptfs-bench-plain-')
    plain = os.path.join(pt_base, 'src')
    pt = build_passthrough(pt_base)
    mounts = []
    try:
        for node in ('a', 'b'):
            m = ckfs.Mount(opts=['remote=' + url, 'node=' + node, 'nodes=2'] + a.opt)
            m.start()
            mounts.append(m)
        a_, b_ = mounts
        with open(os.path.join(ceph.dir, 'run', 'rgw.a.pid')) as f:
            rgw_pid = int(f.read())
        pids = (a_.pid, b_.pid, rgw_pid)
        cpu0 = [cpu_s(p) for p in pids]
        t0 = time.monotonic()
        write_step(mounts, files)
        t_local = time.monotonic()
        while a_.read_text(TRACKER) != '2' or b_.read_text(TRACKER) != '2':
            if time.monotonic() - t_local > 600:
                raise SystemExit('step 2 not global after 600 s')
            time.sleep(0.01)
        t_global = time.monotonic()
        cpu = [cpu_s(p) - c for p, c in zip(pids, cpu0)]
        sent = sent_bytes(a_) + sent_bytes(b_)
        stored = bucket_bytes(a_)

        # the plain S3 upload of the same files, one after the other
        for path, data in files.items():
            p = os.path.join(plain, path)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, 'wb') as f:
                f.write(data)
        drop_caches()
        t = time.monotonic()
        for path in files:
            s3_curl(v, 'PUT', 'curl-%s/%s' % (job, path), src=os.path.join(plain, path))
        t_curl = time.monotonic() - t

        # cold resume: node A on an empty STORE reads the whole step
        a_.unmount()
        shutil.rmtree(a_.store)
        os.makedirs(a_.store)
        a_.start()
        while a_.read_text(TRACKER) != '2':
            time.sleep(0.01)
        drop_caches()
        cold_cpu0 = (cpu_s(a_.pid), cpu_s(rgw_pid))
        t = time.monotonic()
        got = read_all([a_.path(path) for path in files], a.parallel)
        t_cold = time.monotonic() - t
        cold_cpu = (cpu_s(a_.pid) - cold_cpu0[0], cpu_s(rgw_pid) - cold_cpu0[1])
        st = a_.read_text('.ckptfs/status')
        cold_loads = [ln.strip() for ln in st.splitlines() if ln.startswith('chunk reads:')]
        # the same node reading the step again, its chunks now in its own STORE: what the
        # fetches add to a read through ckptfs
        drop_caches()
        t = time.monotonic()
        read_all([a_.path(path) for path in files], a.parallel)
        t_again = time.monotonic() - t
        drop_caches()
        t = time.monotonic()
        read_all([os.path.join(plain, path) for path in files], a.parallel)
        t_disk = time.monotonic() - t
        # the same files through libfuse's passthrough_ll over the local disk: what FUSE itself
        # costs a reader here, the floor of any FUSE file system's read (None: not built), with
        # the kernel's read-ahead as it leaves it (128 KiB) and as ckptfs sets its own (4 MiB,
        # FS_READ_AHEAD_KB in fs/fuse/fuse_int.h)
        t_pt = {}
        for ra_kb in ((None, 4096) if pt else ()):
            with passthrough_mount(pt_base, pt, read_ahead_kb=ra_kb) as pt_mnt:
                drop_caches()
                t = time.monotonic()
                n_pt = read_all([os.path.join(pt_mnt, path) for path in files], a.parallel)
                t_pt[ra_kb] = time.monotonic() - t
            if n_pt != logical:
                raise SystemExit('passthrough_ll read %d bytes, %d written' % (n_pt, logical))
        if got != logical:
            raise SystemExit('cold read returned %d bytes, %d written' % (got, logical))

        # the plain S3 download of the same files (curl into /dev/null): what the remote
        # serves on this machine, the ceiling of any cold resume from it
        def get(path):
            s3_curl(v, 'GET', 'curl-%s/%s' % (job, path), out='/dev/null')
        t = time.monotonic()
        if a.parallel:
            threads = [threading.Thread(target=get, args=(path,)) for path in files]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        else:
            for path in files:
                get(path)
        t_get = time.monotonic() - t

        # the chunk objects the cold node fetched, by one curl each way: one after another on
        # one connection, and 4 (as many as the node's read-ahead threads ask at once) and 8 at
        # a time: the remote's cost per object, apart from the node
        objs = sorted(n for d in os.listdir(os.path.join(a_.store, 'chunks'))
                      if len(d) == 2
                      for n in os.listdir(os.path.join(a_.store, 'chunks', d)) if len(n) == 32)
        t_objs = []
        for par in (0, 4, 8):
            argv = ['curl', '-s', '-f', '--aws-sigv4', 'aws:amz:%s:s3' % v['AWS_REGION'],
                    '--user', '%s:%s' % (v['AWS_ACCESS_KEY_ID'], v['AWS_SECRET_ACCESS_KEY']),
                    '-H', 'x-amz-content-sha256: UNSIGNED-PAYLOAD']
            if par:
                argv += ['-Z', '--parallel-max', str(par)]
            for o in objs:
                argv += ['-o', '/dev/null', '%s/%s/%s/chunks/%s' % (
                    v['AWS_ENDPOINT_URL'], v['CKPTFS_TEST_BUCKET'], job, o)]
            t = time.monotonic()
            r = subprocess.run(argv, capture_output=True, timeout=600)
            t_objs.append(time.monotonic() - t)
            if r.returncode != 0:
                raise SystemExit('curl GET of the chunk objects failed (exit %d): %s'
                                 % (r.returncode, r.stderr[-500:]))

        mib = 1024 * 1024
        print('bench_multinode: 4 ranks x %.1f MiB (%.1f MiB logical), 2 nodes, Ceph S3 on '
              '127.0.0.1 (memstore OSD)' % (logical / RANKS / mib, logical / mib))
        up = sent / (t_global - t_local) / mib
        print('upload:      ckptfs %.1f MiB/s (%.1f MiB sent in %.2f s after the last close)'
              '; curl PUT of the same files %.1f MiB/s (%.2f s): %.2fx'
              % (up, sent / mib, t_global - t_local, logical / t_curl / mib, t_curl,
                 up / (logical / t_curl / mib)))
        print('             the step made global at %.1f MiB/s of its logical bytes: %.2fx curl\'s '
              'time for the same files' % (logical / (t_global - t_local) / mib,
                                          t_curl / (t_global - t_local)))
        print('global:      %.2f s from the step complete on both nodes to both trackers '
              'naming it (the local save took %.2f s)' % (t_global - t_local, t_local - t0))
        print('cpu:         from the first write to global, in %.2f s of wall time: the two '
              'daemons %.2f s (%.2f per GiB written), radosgw %.2f s (%.2f per GiB sent)'
              % (t_global - t0, cpu[0] + cpu[1], (cpu[0] + cpu[1]) / (logical / mib / 1024),
                 cpu[2], cpu[2] / (sent / mib / 1024)))
        print('cold resume: %.2f s from the bucket (%.1f MiB/s) vs %.2f s from the local disk '
              '(%.1f MiB/s): %.2fx; files read %s' % (
                  t_cold, logical / t_cold / mib, t_disk, logical / t_disk / mib,
                  t_disk / t_cold, 'all at once' if a.parallel else 'one after another'))
        print('             the same node again, the chunks in its STORE now (page cache '
              'dropped): %.2f s (%.1f MiB/s)' % (t_again, logical / t_again / mib))
        for ra_kb, tp in t_pt.items():
            print('             passthrough_ll over the local disk (the FUSE floor, page cache '
                  'dropped, read-ahead %s): %.2f s (%.1f MiB/s), %.2fx the local disk\'s time; '
                  'the cold resume took %.2fx its time'
                  % ('%d KiB' % ra_kb if ra_kb else 'the kernel\'s', tp, logical / tp / mib,
                     tp / t_disk, t_cold / tp))
        print('             curl GET of the same files into /dev/null: %.2f s (%.1f MiB/s); '
              'the cold resume took %.2fx its time' % (t_get, logical / t_get / mib,
                                                       t_cold / t_get))
        print('             curl GET of the %d chunk objects it fetched: %.2f s one after '
              'another on one connection, %.2f s 4 at a time, %.2f s 8 at a time'
              % (len(objs), t_objs[0], t_objs[1], t_objs[2]))
        print('             CPU during it: the daemon %.2f s, radosgw %.2f s (of %.2f s on %d '
              'CPUs); the cold node\'s %s' % (cold_cpu[0], cold_cpu[1], t_cold * os.cpu_count(),
                                              os.cpu_count(), ''.join(cold_loads)))
        print('bucket:      %.1f MiB in the bucket for %.1f MiB written: %.3f (replicas\' '
              'identical model shards stored once)' % (stored / mib, logical / mib,
                                                       stored / logical))
    finally:
        for m in mounts:
            m.close()
        shutil.rmtree(pt_base, ignore_errors=True)
        ceph.stop()


if __name__ == '__main__':
    main()
