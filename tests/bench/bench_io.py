#!/usr/bin/python3
"""Benchmark (not a test): ckptfs against the backing disk written directly, same run, same disk.

Prints, for REPS repetitions each, medians and ckptfs/direct ratios of:
  - torch.save of a ~1 GiB bf16 state dict (trainer-visible time, i.e. until close returns;
    ckptfs's close returns only when the file is durable), and the time until durable for the
    direct write (save + fsync of the file);
  - cold torch.load (page cache dropped) of that file;
  - fio sequential 1 MiB write (with end_fsync) and cold read of a 1 GiB file;
  - stored/logical bytes of the bf16 checkpoint in the store (ckptctl status --json).
Usage: scripts/bench.sh [--size-mib N] [--reps N]
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'mount'))
import ckfs  # noqa: E402


def drop_caches():
    os.sync()
    with open('/proc/sys/vm/drop_caches', 'w') as f:
        f.write('3\n')


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def make_state(size_mib):
    import torch
    g = torch.Generator().manual_seed(0)
    n = size_mib * (1 << 20) // 2          # bf16: 2 bytes per element
    per = 16 << 20                          # 32 MiB tensors, like transformer layers
    sd, left, i = {}, n, 0
    while left > 0:
        k = min(per, left)
        sd[f'layers.{i}.weight'] = (torch.randn(k, generator=g) * 0.02).to(torch.bfloat16)
        left -= k
        i += 1
    return sd


def torch_save(sd, path, fsync):
    import torch
    with open(path, 'wb') as f:
        torch.save(sd, f)
        f.flush()
        if fsync:
            os.fsync(f.fileno())


def torch_load(path):
    import torch
    torch.load(path)


def fio(path, rw, size_mib):
    out = subprocess.run(['fio', '--name=seq', f'--filename={path}', f'--rw={rw}', '--bs=1M',
                          f'--size={size_mib}M', '--ioengine=psync', '--end_fsync=1',
                          '--output-format=json'], check=True, capture_output=True, text=True)
    job = json.loads(out.stdout)['jobs'][0]
    side = job['write'] if rw == 'write' else job['read']
    return side['bw_bytes'] / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--size-mib', type=int, default=1024)
    ap.add_argument('--reps', type=int, default=3)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit('bench: run as root (it drops the page cache between runs)')
    base = os.environ.get('CKPTFS_BENCH_DIR', os.path.join(os.getcwd(), 'output', 'bench'))
    os.makedirs(base, exist_ok=True)
    direct = tempfile.mkdtemp(prefix='direct-', dir=base)
    sd = make_state(a.size_mib)
    rows = {}

    def add(name, v):
        rows.setdefault(name, []).append(v)

    os.environ['CKPTFS_TEST_TMP'] = base
    with ckfs.Mount() as m:
        for r in range(a.reps):
            pd, pm = os.path.join(direct, 'model.pt'), os.path.join(m.mnt, f'model{r}.pt')
            drop_caches()
            add('torch.save s (direct, to page cache)', timed(lambda: torch_save(sd, pd, False)))
            os.unlink(pd)
            drop_caches()
            add('torch.save s (direct, +fsync: durable)', timed(lambda: torch_save(sd, pd, True)))
            drop_caches()
            add('torch.save s (ckptfs, durable at close)', timed(lambda: torch_save(sd, pm, False)))
            drop_caches()
            add('torch.load s (direct, cold)', timed(lambda: torch_load(pd)))
            drop_caches()
            add('torch.load s (ckptfs, cold)', timed(lambda: torch_load(pm)))
            os.unlink(pd)
            if r == 0:
                st = json.loads(subprocess.run([ckfs.ckptctl_bin(), '--json', m.store, 'status'],
                                               check=True, capture_output=True, text=True).stdout)
                add('bf16 stored/logical', st['stored_bytes'] / max(1, st['logical_bytes']))
            os.unlink(pm)
            fd_, fm_ = os.path.join(direct, 'fio.dat'), os.path.join(m.mnt, 'fio.dat')
            drop_caches()
            add('fio write MB/s (direct)', fio(fd_, 'write', a.size_mib))
            drop_caches()
            add('fio write MB/s (ckptfs)', fio(fm_, 'write', a.size_mib))
            drop_caches()
            add('fio read MB/s (direct, cold)', fio(fd_, 'read', a.size_mib))
            drop_caches()
            add('fio read MB/s (ckptfs, cold)', fio(fm_, 'read', a.size_mib))
            os.unlink(fd_)
            os.unlink(fm_)
    shutil.rmtree(direct, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f'\nckptfs benchmark: {a.size_mib} MiB, {a.reps} reps, medians, store and direct '
          f'dir on the same disk ({base})')
    for k, v in med.items():
        print(f'  {k:45s} {v:10.3f}')
    print('ratios (ckptfs / direct):')
    r = lambda x, y: med[x] / med[y]
    print(f'  save, trainer-visible vs direct page cache  {r("torch.save s (ckptfs, durable at close)", "torch.save s (direct, to page cache)"):6.2f}x')
    print(f'  save-to-durable vs direct save+fsync        {r("torch.save s (ckptfs, durable at close)", "torch.save s (direct, +fsync: durable)"):6.2f}x')
    print(f'  cold torch.load                             {r("torch.load s (ckptfs, cold)", "torch.load s (direct, cold)"):6.2f}x')
    print(f'  fio write throughput                        {r("fio write MB/s (ckptfs)", "fio write MB/s (direct)"):6.2f}x')
    print(f'  fio cold read throughput                    {r("fio read MB/s (ckptfs, cold)", "fio read MB/s (direct, cold)"):6.2f}x')


if __name__ == '__main__':
    main()
