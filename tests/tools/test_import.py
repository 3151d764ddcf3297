#!/usr/bin/python3
"""ckptctl STORE import DIR on real stores and real mounts: a plain Megatron-LM directory saved
with torch.save (Debian's python3-torch), with a tracker naming step 20 and a torn step 30, is
imported into a fresh store and mounted: the virtual tracker says 20, the tensors of step 20 are
bit-exact, step 30 is set aside in /.ckptfs/quarantine, steps 10 and 20 are complete. Also: a
second import of the same names refuses (exit 2), a Hugging Face checkpoint-N with
trainer_state.json imports complete, and an unreadable file gives exit 1 with the rest imported.
Into a mounted store (issue 40) the import goes through the mount point and the daemon judges
the steps: one step complete and a second import refused (exit 2); several steps under one
tracker all sealed; a step with an unreadable file left without the tracker naming it.

Run: /usr/bin/python3 tests/tools/test_import.py   (CKPTFS_BIN / CKPTCTL_BIN name the binaries)
"""

import sys
import os

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import faulthandler  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

import ckfs  # noqa: E402

PY = '/usr/bin/python3'
TRACKER = 'latest_checkpointed_iteration.txt'
RANK_FILE = 'mp_rank_00/model_optim_rng.pt'

# Megatron's layout as a plain directory: iter_XXXXXXX/mp_rank_00/model_optim_rng.pt for steps
# 10 and 20, the tracker naming 20, and step 30 whose torch.save was cut half-way (a rank killed
# mid-save, no tracker written)
MAKE_MEGATRON = r'''
import os, sys, torch
root = sys.argv[1]
for step in (10, 20, 30):
    torch.manual_seed(step)
    sd = {"model": {"w": torch.randn(384, 384), "b": torch.randn(384)},
          "optimizer": {"m": torch.randn(384, 384)}, "iteration": step}
    path = os.path.join(root, "iter_%07d" % step, "mp_rank_00", "model_optim_rng.pt")
    os.makedirs(os.path.dirname(path))
    torch.save(sd, path)
    if step == 30:
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(size // 2)
with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
    f.write("20")
'''

# Hugging Face Trainer's checkpoint-N: weights, rng state, and trainer_state.json (the marker)
MAKE_HF = r'''
import json, os, sys, torch
d = os.path.join(sys.argv[1], "checkpoint-5")
os.makedirs(d)
torch.manual_seed(5)
torch.save({"w": torch.randn(64, 64)}, os.path.join(d, "pytorch_model.bin"))
torch.save({"python": 1}, os.path.join(d, "rng_state.pth"))
with open(os.path.join(d, "trainer_state.json"), "w") as f:
    json.dump({"global_step": 5, "log_history": []}, f)
'''

# Megatron's layout with one step, 10, and the tracker naming it
MAKE_STEP_10 = r'''
import os, sys, torch
root = sys.argv[1]
torch.manual_seed(10)
sd = {"model": {"w": torch.randn(512, 512), "b": torch.randn(512)}, "iteration": 10}
path = os.path.join(root, "iter_0000010", "mp_rank_00", "model_optim_rng.pt")
os.makedirs(os.path.dirname(path))
torch.save(sd, path)
with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
    f.write("10")
'''

# Megatron's layout with steps 10 and 20, the tracker naming 20
MAKE_TWO_STEPS = r'''
import os, sys, torch
root = sys.argv[1]
for step in (10, 20):
    torch.manual_seed(step)
    path = os.path.join(root, "iter_%07d" % step, "mp_rank_00", "model_optim_rng.pt")
    os.makedirs(os.path.dirname(path))
    torch.save({"model": {"w": torch.randn(256, 256)}, "iteration": step}, path)
with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
    f.write("20")
'''

NOBODY = 65534


def py(code, *args):
    subprocess.run([PY, '-c', code] + list(args), check=True, timeout=300)


class ImportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        ckfs.check_fuse_usable()
        cls.tmp = tempfile.mkdtemp(prefix='ckptfs-import-', dir=ckfs.test_tmp_root())
        cls.src = os.path.join(cls.tmp, 'megatron')
        os.mkdir(cls.src)
        py(MAKE_MEGATRON, cls.src)

    @classmethod
    def tearDownClass(cls):
        if not ckfs.keep_tmp():
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def ctl(self, store, *args, json_out=False, rc=0):
        r = ckfs.ckptctl(store, *args, json_out=json_out)
        self.assertEqual(r.returncode, rc, 'ckptctl %s %s exited %d, wanted %d: %s%s' %
                         (store, ' '.join(args), r.returncode, rc, r.stdout, r.stderr))
        return json.loads(r.stdout) if json_out and rc != 2 else r

    def store(self, name):
        return os.path.join(self.tmp, name)

    def test_megatron_import_then_mount(self):
        store = self.store('megatron-store')
        out = self.ctl(store, 'import', self.src, json_out=True)
        self.assertEqual(os.stat(store).st_mode & 0o777, 0o700)
        self.assertEqual(out['files'], 3)  # the tracker is a claim, not a file
        self.assertEqual(out['failed'], [])
        states = {s['name']: s['state'] for s in out['steps']}
        self.assertEqual(states, {'iter_0000010': 'complete', 'iter_0000020': 'complete',
                                  'iter_0000030': 'writing'}, out)
        self.assertEqual([(c['tracker'], c['step']) for c in out['claims']], [(TRACKER, 20)])
        self.assertGreater(out['stored_bytes_added'], 0)
        self.assertGreater(out['logical_bytes_per_second'], 0)
        # text form of the same facts, in another store
        text = self.ctl(self.store('megatron-text'), 'import', self.src).stdout
        self.assertIn('iter_0000020  megatron', text)
        self.assertIn('complete', text)
        self.assertIn('MB/s', text)

        m = ckfs.Mount(store=store)
        try:
            m.start()
            r = subprocess.run(['cat', m.path(TRACKER)], stdout=subprocess.PIPE, text=True,
                               timeout=30)
            self.assertEqual((r.returncode, r.stdout), (0, '20'))
            subprocess.run([PY, '-c', ckfs.TORCH_COMPARE, m.path('iter_0000020', RANK_FILE),
                            os.path.join(self.src, 'iter_0000020', RANK_FILE)],
                           check=True, timeout=120)
            self.assertEqual(ckfs.file_hash(m.path('iter_0000010', RANK_FILE)),
                             ckfs.file_hash(os.path.join(self.src, 'iter_0000010', RANK_FILE)))
            root = os.listdir(m.mnt)
            self.assertIn('iter_0000010', root)
            self.assertIn('iter_0000020', root)
            self.assertNotIn('iter_0000030', root)  # set aside at mount: torn, never sealed
            q = [n for n in os.listdir(m.path('.ckptfs', 'quarantine'))
                 if n.startswith('iter_0000030.')]
            self.assertEqual(len(q), 1, os.listdir(m.path('.ckptfs', 'quarantine')))
            torn = os.path.join(self.src, 'iter_0000030', RANK_FILE)
            self.assertEqual(ckfs.read_bytes(m.path('.ckptfs', 'quarantine', q[0], RANK_FILE)),
                             ckfs.read_bytes(torn))
            st_src = os.stat(os.path.join(self.src, 'iter_0000020', RANK_FILE))
            st_mnt = os.stat(m.path('iter_0000020', RANK_FILE))
            self.assertEqual((st_mnt.st_mode, st_mnt.st_size, st_mnt.st_mtime_ns),
                             (st_src.st_mode, st_src.st_size, st_src.st_mtime_ns))
            steps = {s['step']: s['state'] for s in self.ctl(store, 'steps', json_out=True)['steps']}
            self.assertEqual(steps, {10: 'complete', 20: 'complete', 30: 'incomplete'})
            m.unmount()
        finally:
            m.close()
        self.ctl(store, 'verify')

    def test_second_import_refuses(self):
        store = self.store('twice')
        self.ctl(store, 'import', self.src)
        before = self.ctl(store, 'status', json_out=True)
        r = self.ctl(store, 'import', self.src, rc=2)
        self.assertIn('already exist', r.stderr)
        self.assertEqual(self.ctl(store, 'status', json_out=True)['files'], before['files'])
        # elsewhere in the namespace it goes in, as plain files (steps count at the root only),
        # and its chunks are all known already
        out = self.ctl(store, 'import', '--dest', 'copy/of', self.src, json_out=True)
        self.assertEqual(out['files'], 4)
        self.assertEqual(out['steps'], [])
        self.assertEqual(out['chunks_written'], 1)  # only the tracker, a plain file here
        self.assertGreater(out['dedup_hits'], 0)
        self.ctl(store, 'ls', '/copy/of/iter_0000020/mp_rank_00')

    def test_import_into_mounted_store(self):
        """Issue 40: import into a running mount copies through the mount point (the daemon
        chunks, judges and seals the step as a trainer's save, the tracker written last);
        importing the same step again is refused and changes nothing."""
        src = self.store('mounted-src')
        os.mkdir(src)
        py(MAKE_STEP_10, src)
        rank = os.path.join(src, 'iter_0000010', RANK_FILE)
        with ckfs.Mount(store=self.store('mounted')) as m:
            out = self.ctl(m.store, 'import', src, json_out=True)
            self.assertEqual(out['files'], 1, out)  # the tracker is a claim, not a file
            self.assertEqual(out['failed'], [])
            self.assertEqual(out['mount'], m.mnt)
            self.assertEqual([(s['name'], s['layout'], s['files']) for s in out['steps']],
                             [('iter_0000010', 'megatron', 1)])
            self.assertEqual([(c['tracker'], c['step']) for c in out['claims']], [(TRACKER, 10)])
            self.assertEqual(ckfs.file_hash(m.path('iter_0000010', RANK_FILE)),
                             ckfs.file_hash(rank))
            st_src, st_mnt = os.stat(rank), os.stat(m.path('iter_0000010', RANK_FILE))
            self.assertEqual((st_mnt.st_mode, st_mnt.st_size, st_mnt.st_mtime_ns),
                             (st_src.st_mode, st_src.st_size, st_src.st_mtime_ns))

            def steps():
                return {s['step']: s['state'] for s in self.ctl(m.store, 'steps', json_out=True)['steps']}
            ckfs.wait_for('step 10 to be complete', lambda: steps() == {10: 'complete'},
                          extra=lambda: ': %r%s' % (steps(), m.log_tail()))
            self.assertEqual(m.read_text(TRACKER), '10')
            claims = self.ctl(m.store, 'claims', json_out=True)['claims']
            self.assertEqual([(c['tracker'], c['step']) for c in claims], [(TRACKER, 10)])
            # again, naming the store by its mount point: refused, nothing written
            before = (sorted(os.listdir(m.mnt)), self.ctl(m.store, 'status', json_out=True))
            r = self.ctl(m.mnt, 'import', src, rc=2)
            self.assertIn('already exist', r.stderr)
            self.assertIn('iter_0000010', r.stderr)
            self.assertEqual((sorted(os.listdir(m.mnt)),
                              self.ctl(m.store, 'status', json_out=True)), before)
            self.assertEqual(self.ctl(m.store, 'claims', json_out=True)['claims'], claims)
            self.assertEqual(steps(), {10: 'complete'})
            self.assertEqual(ckfs.file_hash(m.path('iter_0000010', RANK_FILE)),
                             ckfs.file_hash(rank))
        self.ctl(m.store, 'verify')

    def test_import_into_mounted_store_several_steps(self):
        """Through a mount, a tracker naming step 20 seals only step 20 (the daemon knows every
        claim): the import writes the tracker the trainer wrote after step 10 first, so both
        are complete, as an import into a store not mounted makes them; torn step 30, which no
        tracker names, is set aside."""
        with ckfs.Mount(store=self.store('mounted-many')) as m:
            out = self.ctl(m.store, 'import', self.src, json_out=True)
            self.assertEqual([(c['tracker'], c['step'], c['replayed']) for c in out['claims']],
                             [(TRACKER, 10, True), (TRACKER, 20, False)])

            def steps():
                return {s['step']: s['state'] for s in self.ctl(m.store, 'steps', json_out=True)['steps']}
            want = {10: 'complete', 20: 'complete', 30: 'incomplete'}
            ckfs.wait_for('steps 10 and 20 to be complete, 30 set aside',
                          lambda: steps() == want, extra=lambda: ': %r%s' % (steps(), m.log_tail()))
            self.assertEqual(m.read_text(TRACKER), '20')
            for step in ('iter_0000010', 'iter_0000020'):
                self.assertEqual(ckfs.file_hash(m.path(step, RANK_FILE)),
                                 ckfs.file_hash(os.path.join(self.src, step, RANK_FILE)))

    def test_import_into_mounted_store_unreadable_file(self):
        """Through a mount, a step one file of which DIR cannot give is left unsealed: the file's
        partial copy is removed and the tracker naming the step is not written (exit 1), so no
        tracker ever names a half-copied step; the older step it stood for is still sealed.
        DIR is another ckptfs mount whose chunk of step 20's file is damaged (reads give EIO)."""
        with ckfs.Mount(opts=('layout=none',)) as a, \
                ckfs.Mount(store=self.store('mounted-torn')) as b:
            py(MAKE_TWO_STEPS, a.mnt)
            a.settle()
            bad = 'iter_0000020/' + RANK_FILE
            chunk = self.ctl(a.store, 'ls', '/' + bad, json_out=True)['extents'][-1]['chunk']
            path = os.path.join(a.store, 'chunks', chunk[:2], chunk)
            with open(path, 'r+b') as f:
                f.seek(40)
                byte = f.read(1)
                f.seek(40)
                f.write(bytes([byte[0] ^ 1]))
            a.unmount()
            a.start()
            r = ckfs.ckptctl(b.store, 'import', a.mnt, json_out=True)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            out = json.loads(r.stdout)
            self.assertEqual([f['path'] for f in out['failed']], [bad, TRACKER], out)
            self.assertEqual([(c['tracker'], c['step'], c['replayed']) for c in out['claims']],
                             [(TRACKER, 10, True)])
            self.assertFalse(os.path.exists(b.path(bad)), 'a partial copy was left')
            self.assertEqual(ckfs.file_hash(b.path('iter_0000010', RANK_FILE)),
                             ckfs.file_hash(a.path('iter_0000010', RANK_FILE)))

            def steps():
                return {s['step']: s['state'] for s in self.ctl(b.store, 'steps', json_out=True)['steps']}
            ckfs.wait_for('step 10 to be complete', lambda: steps().get(10) == 'complete',
                          extra=lambda: ': %r%s' % (steps(), b.log_tail()))
            self.assertNotEqual(steps().get(20), 'complete')
            self.assertEqual(b.read_text(TRACKER), '10')
            claims = self.ctl(b.store, 'claims', json_out=True)['claims']
            self.assertEqual([c['step'] for c in claims], [10])

    def test_hf_checkpoint_is_complete(self):
        src = self.store('hf-src')
        os.mkdir(src)
        py(MAKE_HF, src)
        store = self.store('hf')
        out = self.ctl(store, 'import', src, json_out=True)
        self.assertEqual([(s['name'], s['layout'], s['state'], s['files'])
                          for s in out['steps']], [('checkpoint-5', 'hf', 'complete', 3)])
        show = self.ctl(store, 'show', '5', json_out=True)['versions']
        self.assertEqual(show[0]['state'], 'complete')
        with ckfs.Mount(store=store) as m:
            self.assertEqual(sorted(os.listdir(m.path('checkpoint-5'))),
                             ['pytorch_model.bin', 'rng_state.pth', 'trainer_state.json'])

    def test_unreadable_file_exit_1(self):
        # a file ckptctl cannot read (mode 0, not its owner); as root, ckptctl runs as nobody
        # for this (root reads anything, and a FIFO is now imported as a FIFO)
        base = self.store('unreadable')
        os.mkdir(base)
        src = os.path.join(base, 'src')
        os.makedirs(os.path.join(src, 'iter_0000007', 'mp_rank_00'))
        py(MAKE_HF, src)
        p = os.path.join(src, 'iter_0000007', 'mp_rank_00', 'pipe')
        with open(p, 'w') as f:
            f.write('x')
        with open(os.path.join(src, TRACKER), 'w') as f:
            f.write('7')
        store = os.path.join(base, 'partial')
        if os.geteuid() == 0:
            os.chmod(self.tmp, 0o711)
            for d, dirs, files in os.walk(base):
                for n in [d] + [os.path.join(d, x) for x in files]:
                    os.chown(n, NOBODY, NOBODY)
            os.chown(p, 0, 0)
            os.chmod(p, 0)
            r = ckfs.run(['setpriv', '--reuid=%d' % NOBODY, '--regid=%d' % NOBODY,
                          '--clear-groups', ckfs.ckptctl_bin(), '--json', store, 'import', src],
                         timeout=300)
        else:
            os.chmod(p, 0)
            r = ckfs.ckptctl(store, 'import', src, json_out=True)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual([f['path'] for f in out['failed']], ['iter_0000007/mp_rank_00/pipe'])
        states = {s['name']: s['state'] for s in out['steps']}
        # sealed by the tracker, but a file is missing: never complete
        self.assertEqual(states, {'checkpoint-5': 'complete', 'iter_0000007': 'writing'})

    def test_special_files_are_imported(self):
        """FIFOs and device nodes are kept as such (the daemon keeps them too: mknod)."""
        src = self.store('special-src')
        os.makedirs(src)
        py(MAKE_HF, src)
        os.mkfifo(os.path.join(src, 'checkpoint-5', 'pipe'))
        os.mknod(os.path.join(src, 'checkpoint-5', 'null'), stat.S_IFCHR | 0o644,
                 os.makedev(1, 3))
        store = self.store('special')
        out = self.ctl(store, 'import', src, json_out=True, rc=0)
        self.assertEqual({s['name']: s['state'] for s in out['steps']},
                         {'checkpoint-5': 'complete'})
        with ckfs.Mount(store=store) as m:
            self.assertTrue(stat.S_ISFIFO(os.lstat(m.path('checkpoint-5', 'pipe')).st_mode))
            st = os.lstat(m.path('checkpoint-5', 'null'))
            self.assertTrue(stat.S_ISCHR(st.st_mode))
            self.assertEqual(st.st_rdev, os.makedev(1, 3))

    def test_sparse_file_keeps_its_holes(self):
        """A sparse file imports in O(data): 100 GiB with 2 MiB of data (issue 19), reads back
        through a mount, and exports as a sparse file."""
        src = self.store('sparse-src')
        os.makedirs(src)
        py(MAKE_HF, src)
        a, b = os.urandom(1 << 20), os.urandom(1 << 20)
        fd = os.open(os.path.join(src, 'checkpoint-5', 'sparse.bin'), os.O_WRONLY | os.O_CREAT,
                     0o644)
        os.pwrite(fd, a, 0)
        os.pwrite(fd, b, 50 << 30)
        os.ftruncate(fd, 100 << 30)
        os.close(fd)
        store = self.store('sparse')
        t = time.monotonic()
        out = self.ctl(store, 'import', src, json_out=True)
        self.assertLess(time.monotonic() - t, 30, 'import read the holes')
        self.assertEqual({s['name']: s['state'] for s in out['steps']},
                         {'checkpoint-5': 'complete'})
        self.ctl(store, 'verify')
        with ckfs.Mount(store=store) as m:
            p = m.path('checkpoint-5', 'sparse.bin')
            self.assertEqual(os.stat(p).st_size, 100 << 30)
            self.assertLess(os.stat(p).st_blocks * 512, 8 << 20)
            fd = os.open(p, os.O_RDONLY)
            try:
                self.assertEqual(os.pread(fd, 1 << 20, 0), a)
                self.assertEqual(os.pread(fd, 1 << 20, 50 << 30), b)
                self.assertEqual(os.pread(fd, 4096, 20 << 30), bytes(4096))
                self.assertEqual(os.lseek(fd, 1 << 20, os.SEEK_DATA), 50 << 30)
            finally:
                os.close(fd)
        dest = self.store('sparse-export')
        t = time.monotonic()
        self.ctl(store, 'export', 'checkpoint-5', dest)
        self.assertLess(time.monotonic() - t, 30, 'export wrote the holes')
        p = os.path.join(dest, 'checkpoint-5', 'sparse.bin')
        self.assertEqual(os.stat(p).st_size, 100 << 30)
        self.assertLess(os.stat(p).st_blocks * 512, 8 << 20)
        with open(p, 'rb') as f:
            f.seek(50 << 30)
            self.assertEqual(f.read(1 << 20), b)

    def test_usage(self):
        r = self.ctl(self.store('u'), 'import', rc=2)
        self.assertIn("'import' takes one DIR", r.stderr)
        r = self.ctl(self.store('u'), 'import', '/nonexistent-dir-for-ckptfs', rc=2)
        self.assertFalse(os.path.exists(self.store('u')))
        r = self.ctl(self.store('u'), 'steps', '--dest', 'x', rc=2)
        self.assertIn('--dest', r.stderr)


if __name__ == '__main__':
    faulthandler.enable()
    unittest.main(verbosity=2)
