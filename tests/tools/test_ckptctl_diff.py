#!/usr/bin/python3
"""ckptctl diff STEP STEP and export --include PATTERN (issue 44) on two real steps written
through a mount in Megatron-LM's layout (plain .bin files: no structure check applies).

Step 100 holds a.bin, b.bin, d.bin and sub/c.bin; step 200 keeps a.bin, changes the middle of
b.bin (its other chunks stay shared), rewrites d.bin, drops sub/c.bin and adds e.bin. diff must
say exactly that, on the store and on the mount point, mounted and not, with the bytes shared
being those of the chunks both steps name (from `ls --json` extents). export --include must
restore exactly the files its patterns name, byte for byte.

Run: /usr/bin/python3 tests/tools/test_ckptctl_diff.py   (CKPTFS_BIN / CKPTCTL_BIN name the
binaries)
"""

import sys
import os

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import faulthandler  # noqa: E402
import json  # noqa: E402
import unittest  # noqa: E402

import ckfs  # noqa: E402
from ckfs import TRACKER, content, wait_for  # noqa: E402

MiB = 1 << 20

A = content('a', 3 * MiB)
B1 = content('b', 4 * MiB)
# the middle MiB of b.bin rewritten: content-defined chunks before and after it stay the same
B2 = B1[:int(1.5 * MiB)] + content('b middle', MiB) + B1[int(2.5 * MiB):]
C = content('c', 600000)
D1 = content('d1', 2 * MiB)
D2 = content('d2', 2 * MiB)
E = content('e', MiB + 12345)

STEP100 = {'a.bin': A, 'b.bin': B1, 'd.bin': D1, 'sub/c.bin': C}
STEP200 = {'a.bin': A, 'b.bin': B2, 'd.bin': D2, 'e.bin': E}


def save(m, step, files):
    """Megatron-LM's save through mount m: the step directory, its files, then the tracker."""
    d = m.path('iter_%07d' % step)
    for rel, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
        with open(os.path.join(d, rel), 'wb') as f:
            f.write(data)
    with open(m.path(TRACKER), 'w') as f:
        f.write(str(step))


class DiffTest(ckfs.CkptctlCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = m = ckfs.Mount().start()
        try:
            for step, files in ((100, STEP100), (200, STEP200)):
                save(m, step, files)
                m.settle()

                def complete():
                    r = m.ckptctl('show', str(step), json_out=True)
                    return r.returncode == 0 and json.loads(r.stdout)['versions'][0]['state'] == 'complete'
                wait_for('step %d complete' % step, complete, 30,
                         lambda: m.ckptctl('steps').stdout)
        except BaseException:
            m.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.m.close()

    def chunks(self, step, files):
        """{chunk digest: length} of the files of step, from ls --json."""
        out = {}
        for rel in files:
            f = self.ctl('ls', '/iter_%07d/%s' % (step, rel), json_out=True)
            for x in f['extents']:
                out[x['chunk']] = x['logical_bytes']
        return out

    def expected_shared(self):
        c1, c2 = self.chunks(100, STEP100), self.chunks(200, STEP200)
        common = set(c1) & set(c2)
        return len(common), sum(c2[k] for k in common)

    def check_json(self, d):
        self.assertEqual((d['from']['step'], d['from']['name']), (100, 'iter_0000100'))
        self.assertEqual((d['to']['step'], d['to']['name']), (200, 'iter_0000200'))
        self.assertEqual(d['from']['files'], 4)
        self.assertEqual(d['from']['logical_bytes'], sum(map(len, STEP100.values())))
        self.assertEqual(d['to']['logical_bytes'], sum(map(len, STEP200.values())))
        self.assertEqual([(x['path'], x['size']) for x in d['added']], [('e.bin', len(E))])
        self.assertEqual([(x['path'], x['size']) for x in d['removed']], [('sub/c.bin', len(C))])
        self.assertEqual([x['path'] for x in d['changed']], ['b.bin', 'd.bin'])
        b, dd = d['changed']
        self.assertEqual((b['old_bytes'], b['new_bytes']), (len(B1), len(B2)))
        self.assertEqual(dd['shared_bytes'], 0)      # rewritten: no chunk in common
        # b.bin kept its chunks before and after the rewritten MiB
        self.assertGreater(b['shared_bytes'], MiB)
        self.assertLess(b['shared_bytes'], len(B2))
        self.assertEqual(d['unchanged'], 1)
        n, nbytes = self.expected_shared()
        self.assertEqual((d['shared_chunks'], d['shared_bytes']), (n, nbytes))
        self.assertGreaterEqual(nbytes, len(A) + b['shared_bytes'])

    def test_1_diff_store_and_mount_point(self):
        m = self.m
        d = self.ctl('diff', '100', '200', json_out=True)
        self.check_json(d)
        r = ckfs.run([ckfs.ckptctl_bin(), '--json', m.mnt, 'diff', 'iter_0000100', '200'])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout), d)
        text = self.ctl('diff', '100', '200').stdout
        lines = text.splitlines()
        self.assertIn('added:     e.bin', text)
        self.assertIn('removed:   sub/c.bin', text)
        self.assertEqual([ln.split()[1] for ln in lines if ln.startswith('changed:')],
                         ['b.bin', 'd.bin'])
        self.assertIn('unchanged: 1 file', text)
        self.assertIn('(%d bytes) in %d chunks' % (d['shared_bytes'], d['shared_chunks']),
                      text)
        # the other way round: added and removed swap
        rev = self.ctl('diff', '200', '100', json_out=True)
        self.assertEqual([x['path'] for x in rev['added']], ['sub/c.bin'])
        self.assertEqual([x['path'] for x in rev['removed']], ['e.bin'])
        self.assertEqual(rev['shared_bytes'], d['shared_bytes'])
        same = self.ctl('diff', '100', '100', json_out=True)
        self.assertEqual((same['added'], same['removed'], same['changed'], same['unchanged']),
                         ([], [], [], 4))
        r = self.ctl('diff', '100', '12345', rc=2)
        self.assertIn("no step '12345'", r.stderr)
        self.ctl('diff', '100', rc=2)

    def test_2_export_include(self):
        dest = os.path.join(self.m.tmp, 'some')
        e = self.ctl('--include', 'b.bin', '--include', 'sub', 'export', '100', dest,
                     json_out=True)
        self.assertTrue(e['verified'])
        self.assertEqual(e['files'], 2)
        top = os.path.join(dest, 'iter_0000100')
        got = {os.path.relpath(os.path.join(dp, n), top): ckfs.read_bytes(os.path.join(dp, n))
               for dp, _, fs in os.walk(top) for n in fs}
        self.assertEqual(got, {'b.bin': B1, 'sub/c.bin': C})
        self.assertIsNone(e['tracker'])     # a part of a step is not a step to resume from
        self.assertFalse(os.path.exists(os.path.join(dest, TRACKER)))
        # a glob: * crosses '/', as in git's pathspecs
        dest2 = os.path.join(self.m.tmp, 'glob')
        self.ctl('export', '200', dest2, '--include', '*.bin', '--include', '[de].bin')
        top = os.path.join(dest2, 'iter_0000200')
        got = {os.path.relpath(os.path.join(dp, n), top): ckfs.read_bytes(os.path.join(dp, n))
               for dp, _, fs in os.walk(top) for n in fs}
        self.assertEqual(got, STEP200)
        dest3 = os.path.join(self.m.tmp, 'two')
        self.ctl('export', '200', dest3, '--include', '[de].bin')
        self.assertEqual(sorted(os.listdir(os.path.join(dest3, 'iter_0000200'))),
                         ['d.bin', 'e.bin'])
        self.assertEqual(ckfs.read_bytes(os.path.join(dest3, 'iter_0000200', 'd.bin')), D2)
        # a pattern that names nothing: refused before anything is made
        dest4 = os.path.join(self.m.tmp, 'none')
        r = self.ctl('export', '100', dest4, '--include', 'b.bin', '--include', 'nope*', rc=2)
        self.assertIn("'nope*' matches no file of step 100", r.stderr)
        self.assertFalse(os.path.exists(dest4))

    def test_3_diff_unmounted(self):
        m = self.m
        m.unmount()
        self.check_json(self.ctl('diff', '100', '200', json_out=True))


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
