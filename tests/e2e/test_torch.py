#!/usr/bin/python3
"""Real PyTorch and numpy through a ckptfs mount: torch.save of a ~300 MB state dict (bf16 and
fp32) and torch.load back, bit-identical, also after a remount; np.save and np.load(mmap_mode='r').
Prints the stored/logical ratio.

Environment: CKPTFS_TORCH_MB (default 300).
Run: /usr/bin/python3 tests/e2e/test_torch.py
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

TORCH_MB = int(os.environ.get('CKPTFS_TORCH_MB', '300'))
MiB = 1 << 20


def make_state_dict(total_mb):
    """Deterministic state dict: 2/3 of the bytes bf16 weights, 1/3 fp32 optimizer state."""
    g = torch.Generator().manual_seed(1234)
    sd = {}
    bf16_bytes = total_mb * MiB * 2 // 3
    fp32_bytes = total_mb * MiB - bf16_bytes
    width = 4096
    i = 0
    while bf16_bytes > 0:
        rows = min(1024, max(1, bf16_bytes // (2 * width)))
        sd['layers.%d.weight' % i] = (torch.randn(rows, width, generator=g) * 0.02).to(
            torch.bfloat16)
        sd['layers.%d.bias' % i] = torch.zeros(width, dtype=torch.bfloat16)
        bf16_bytes -= rows * width * 2
        i += 1
    j = 0
    while fp32_bytes > 0:
        n = min(16 * MiB, max(1, fp32_bytes // 4))
        sd['optim.exp_avg.%d' % j] = torch.randn(n, generator=g) * 1e-3
        fp32_bytes -= n * 4
        j += 1
    sd['step'] = torch.tensor(1000)
    return sd


def logical_bytes(sd):
    return sum(t.numel() * t.element_size() for t in sd.values())


class TorchTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.m = ckfs.Mount()
        try:
            cls.m.start()
        except BaseException:
            cls.m.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.m.close()

    def assertSameState(self, a, b):
        self.assertEqual(list(a), list(b))
        for k in a:
            self.assertEqual(a[k].dtype, b[k].dtype, k)
            self.assertEqual(a[k].shape, b[k].shape, k)
            self.assertTrue(torch.equal(a[k], b[k]), '%s differs' % k)

    def test_torch_save_load(self):
        m = self.m
        sd = make_state_dict(TORCH_MB)
        n = logical_bytes(sd)
        d = m.path('iter_0000100', 'mp_rank_00')
        os.makedirs(d)
        p = os.path.join(d, 'model_optim_rng.pt')
        base = m.chunk_bytes()
        t0 = time.monotonic()
        torch.save(sd, p)
        t1 = time.monotonic()
        with open(m.path('latest_checkpointed_iteration.txt'), 'w') as f:
            f.write('100')
        back = torch.load(p, map_location='cpu')
        t2 = time.monotonic()
        self.assertSameState(sd, back)
        del back
        size = os.stat(p).st_size
        self.assertGreaterEqual(size, n)
        # same bytes as torch.save to a plain file (same basename: it names the zip's folder)
        os.mkdir(os.path.join(m.tmp, 'plain'))
        plain = os.path.join(m.tmp, 'plain', 'model_optim_rng.pt')
        torch.save(sd, plain)
        self.assertEqual(ckfs.file_hash(plain), ckfs.file_hash(p),
                         'the file read back differs from the same torch.save on a plain disk')
        os.unlink(plain)
        stored = m.chunk_bytes() - base
        m.remount()
        self.assertSameState(sd, torch.load(p, map_location='cpu'))
        st = m.status_json()
        sys.stderr.write('\n  [torch.save %.0f MB: write %.0f MB/s, load %.0f MB/s; chunk files '
                         '%.1f MB, stored/logical %.3f%s] ' %
                         (size / MiB, size / MiB / (t1 - t0), size / MiB / (t2 - t1),
                          stored / MiB, stored / size,
                          '; ckptctl status: %s' % (st,) if st is not None else
                          '; ckptctl --json status unavailable'))

    def test_numpy_save_and_mmap_load(self):
        m = self.m
        rng = np.random.default_rng(42)
        arr = rng.standard_normal((2048, 4096), dtype=np.float32)      # 32 MiB
        ints = np.arange(3_000_001, dtype=np.int64)
        p = m.path('arrays')
        os.mkdir(p)
        np.save(os.path.join(p, 'a.npy'), arr)
        np.save(os.path.join(p, 'i.npy'), ints)
        for name, want in (('a.npy', arr), ('i.npy', ints)):
            got = np.load(os.path.join(p, name), mmap_mode='r')
            self.assertIsInstance(got, np.memmap)
            self.assertEqual(got.dtype, want.dtype)
            self.assertEqual(got.shape, want.shape)
            self.assertTrue(np.array_equal(got, want), name)
            del got
        # np.load(mmap_mode='r+') writes through a shared mapping
        w = np.load(os.path.join(p, 'i.npy'), mmap_mode='r+')
        w[:10] = -1
        w.flush()
        del w
        got = np.load(os.path.join(p, 'i.npy'))
        self.assertTrue(np.array_equal(got[:10], np.full(10, -1)))
        self.assertTrue(np.array_equal(got[10:], ints[10:]))


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
