#!/usr/bin/python3
"""ckptctl's step commands on a real mount driven like Megatron-LM: steps, show, claims, export,
pin and unpin, text and --json, and their exit codes (0 ok, 1 export found damage, 2 error).

One mount for the whole class (a save and a torn save take a few seconds each to settle); the
tests run in name order and the last ones unmount.

Run: /usr/bin/python3 tests/tools/test_ckptctl_steps.py   (CKPTFS_BIN / CKPTCTL_BIN name the
binaries)
"""

import sys
import os

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import faulthandler  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import unittest  # noqa: E402

import ckfs  # noqa: E402
from ckfs import TRACKER, wait_for  # noqa: E402

PY = '/usr/bin/python3'
RANK_FILE = 'mp_rank_00/model_optim_rng.pt'

# Megatron's save: mkdir and torch.save of the state dict into iter_XXXXXXX/mp_rank_XX/ (the
# reference copy goes outside the mount, for the tensor comparison after export; its bytes differ
# only in the archive's name, which torch.save takes from the file name)
SAVE = r'''
import os, sys, torch
os.makedirs(os.path.dirname(sys.argv[1]))
torch.manual_seed(100)
sd = {"model": {"w": torch.randn(256, 256), "b": torch.randn(256)},
      "optimizer": {"m": torch.randn(256, 256)}, "iteration": 100}
torch.save(sd, sys.argv[1])
torch.save(sd, sys.argv[2])
'''

# a rank that dies in the middle of torch.save: bytes written, file still open. The step is
# abandoned only once every process that wrote into it (its mkdir too) is gone.
TORN = r'''
import os, signal, sys
os.makedirs(os.path.dirname(sys.argv[1]))
f = open(sys.argv[1], "wb")
f.write(b"PK\x03\x04" + os.urandom(200000))
f.flush()
os.kill(os.getpid(), signal.SIGKILL)
'''


class CkptctlStepsTest(ckfs.CkptctlCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = m = ckfs.Mount().start()
        try:
            cls.ref = os.path.join(m.tmp, 'reference.pt')
            subprocess.run([PY, '-c', SAVE, m.path('iter_0000100', RANK_FILE), cls.ref],
                           check=True, timeout=120)
            with open(m.path(TRACKER), 'w') as f:
                f.write('100')

            def tracker():
                r = subprocess.run(['cat', m.path(TRACKER)], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True, timeout=10)
                return r.returncode == 0 and r.stdout == '100'
            wait_for('the tracker to name step 100', tracker)
            # step 200: the rank dies half-way through its torch.save
            p = subprocess.run([PY, '-c', TORN, m.path('iter_0000200', RANK_FILE)],
                               timeout=60)
            assert p.returncode == -9, 'the torn writer exited %d' % p.returncode
            try:
                wait_for('step 200 to be judged incomplete',
                         lambda: cls.show_json(cls, '200')[0]['state'] == 'incomplete')
            except AssertionError as e:
                raise AssertionError('%s: %s%s' % (e, m.ckptctl('show', '200').stdout,
                                                   m.log_tail()))
        except BaseException:
            m.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.m.close()

    def show_json(self, step):
        r = self.m.ckptctl('show', step, json_out=True)
        return json.loads(r.stdout)['versions'] if r.returncode == 0 else [{'state': None}]

    def test_1_steps(self):
        steps = self.ctl('steps', json_out=True)['steps']
        self.assertEqual([s['step'] for s in steps], [100, 200])
        s = steps[0]
        self.assertEqual((s['name'], s['layout'], s['state']),
                         ('iter_0000100', 'megatron', 'complete'))
        self.assertEqual(s['files'], 1)
        self.assertEqual(s['logical_bytes'], os.path.getsize(self.m.path('iter_0000100', RANK_FILE)))
        self.assertGreater(s['stored_bytes'], 0)
        self.assertEqual(len(s['xxh3_128']), 32)
        self.assertGreater(s['completed_ns'], s['sealed_ns'])
        self.assertFalse(s['pinned'])
        for k in ('id', 'dir_ino', 'created_ns', 'state_changed_ns'):
            self.assertIn(k, s)
        self.assertEqual(steps[1]['state'], 'incomplete')
        out = self.ctl('steps').stdout.splitlines()
        self.assertEqual(out[0].split(), ['STEP', 'NAME', 'LAYOUT', 'STATE', 'FILES', 'LOGICAL',
                                          'STORED', 'COMPLETED', 'PIN', 'LINEAGE'])
        row = out[1].split()
        self.assertEqual(row[:5], ['100', 'iter_0000100', 'megatron', 'complete', '1'])
        self.assertRegex(out[1], r'\d\d\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ')
        self.assertIn('incomplete', out[2])

    def test_2_show(self):
        by_number = self.ctl('show', '100', json_out=True)['versions']
        by_name = self.ctl('show', 'iter_0000100', json_out=True)['versions']
        self.assertEqual(by_number, by_name)
        self.assertEqual(len(by_number), 1)
        s = by_number[0]
        self.assertEqual(s['path'], '/iter_0000100')
        self.assertEqual([f['path'] for f in s['files_list']], [RANK_FILE])
        f = s['files_list'][0]
        self.assertEqual(f['size'], os.path.getsize(self.m.path('iter_0000100', RANK_FILE)))
        self.assertEqual(f['flags'], ['valid'])
        self.assertEqual(len(f['xxh3_128']), 32)
        # the writer (one separate process) exited before the tracker was opened: the
        # tracker's lookup judged the step at once (issue 18: a reader never waits for a timer),
        # every file whole and one writer gone: copied, left at its name (policy rule 3); the
        # tracker's claim sealed it
        self.assertEqual([(h['from'], h['to']) for h in s['history']],
                         [('writing', 'copied'), ('copied', 'sealed'), ('sealed', 'complete')])
        out = self.ctl('show', '100').stdout
        self.assertIn('directory:   /iter_0000100', out)
        self.assertIn(RANK_FILE, out)
        self.assertIn('copied -> sealed', out)
        self.assertIn('sealed -> complete', out)
        r = self.ctl('show', '12345', rc=2)
        self.assertIn("no step '12345'", r.stderr)
        self.ctl('show', 'iter_9999999', rc=2)

    def test_3_claims(self):
        c = self.ctl('claims', json_out=True)['claims']
        self.assertEqual(len(c), 1)
        self.assertEqual((c[0]['tracker'], c[0]['step'], c[0]['content'], c[0]['content_bytes']),
                         (TRACKER, 100, '100', 3))
        out = self.ctl('claims').stdout.splitlines()
        self.assertEqual(out[0].split(), ['TIME', 'TRACKER', 'STEP', 'CONTENT'])
        self.assertIn('%s  100' % TRACKER, out[1])
        self.assertIn('"100"', out[1])

    def test_4_export(self):
        dest = os.path.join(self.m.tmp, 'export', 'here')   # created with its parent
        e = self.ctl('export', '100', dest, json_out=True)
        self.assertTrue(e['verified'])
        self.assertEqual(e['files'], 1)
        exported = os.path.join(dest, 'iter_0000100', RANK_FILE)
        self.assertEqual(ckfs.read_bytes(exported),
                         ckfs.read_bytes(self.m.path('iter_0000100', RANK_FILE)))
        with open(os.path.join(dest, TRACKER), 'rb') as f:
            self.assertEqual(f.read(), b'100')
        st, orig = os.stat(exported), os.stat(self.m.path('iter_0000100', RANK_FILE))
        self.assertEqual(st.st_mode, orig.st_mode)
        self.assertEqual(st.st_mtime_ns, orig.st_mtime_ns)
        self.assertEqual(subprocess.run([PY, '-c', ckfs.TORCH_COMPARE, exported, self.ref],
                                        timeout=120).returncode, 0)
        self.assertFalse([n for _, _, fs in os.walk(dest) for n in fs if n.endswith('.partial')])
        r = self.ctl('export', '100', dest, rc=2)      # never overwrites
        self.assertIn('already exists', r.stderr)

    def test_5_torn(self):
        s = self.ctl('show', '200', json_out=True)['versions'][0]
        self.assertEqual(s['state'], 'incomplete')
        self.assertEqual(s['path'], '/.ckptfs/quarantine/iter_0000200.%d' % s['id'])
        self.assertEqual([f['path'] for f in s['files_list']], [RANK_FILE])
        self.assertIn('torn', s['files_list'][0]['flags'])
        self.assertNotIn('iter_0000200', os.listdir(self.m.mnt))
        self.assertEqual(s, self.ctl('show', 'iter_0000200.%d' % s['id'], json_out=True)['versions'][0])
        out = self.ctl('show', 'iter_0000200').stdout
        self.assertIn('state:       incomplete', out)
        self.assertIn('/.ckptfs/quarantine/iter_0000200.', out)
        self.assertRegex(out, r'\btorn\b')
        dest = os.path.join(self.m.tmp, 'torn')
        r = self.ctl('export', '200', dest, rc=2)
        self.assertIn('incomplete', r.stderr)
        self.assertFalse(os.path.exists(os.path.join(dest, 'iter_0000200')))
        e = self.ctl('--force', 'export', '200', dest, json_out=True)
        self.assertEqual(e['flagged'], [RANK_FILE + ' (torn)'])
        self.assertIsNone(e['tracker'])     # never name an incomplete step
        self.assertFalse(os.path.exists(os.path.join(dest, TRACKER)))
        self.ctl('pin', '200', rc=2)

    def test_6_pin_mounted(self):
        # a mounted store: the daemon pins (issue 40.5; cb3ae28 asked for an unmount)
        r = self.ctl('pin', '100')
        self.assertIn("step 'iter_0000100' pinned", r.stdout)
        self.assertTrue(self.ctl('steps', json_out=True)['steps'][0]['pinned'])
        r = self.ctl('pin', '200', rc=2)
        self.assertIn('only complete steps can be pinned', r.stderr)
        j = self.ctl('unpin', '100', json_out=True)
        self.assertEqual((j['request'], j['step']), ('unpin', '100'))
        self.assertFalse(self.ctl('steps', json_out=True)['steps'][0]['pinned'])

    def test_7_pin_unmounted(self):
        self.m.unmount()
        p = self.ctl('pin', '100', json_out=True)
        self.assertEqual((p['pinned'], p['changed']), (True, True))
        self.assertTrue(self.ctl('steps', json_out=True)['steps'][0]['pinned'])
        self.assertIn('*', self.ctl('steps').stdout.splitlines()[1])
        self.assertIn('already pinned', self.ctl('pin', 'iter_0000100').stdout)
        r = self.ctl('pin', '200', rc=2)
        self.assertIn('is incomplete; only complete steps can be pinned', r.stderr)
        self.ctl('pin', '777', rc=2)
        self.assertIn('unpinned step 100', self.ctl('unpin', '100').stdout)
        self.assertFalse(self.ctl('steps', json_out=True)['steps'][0]['pinned'])
        # a remount sees the pins the daemon itself uses
        self.ctl('pin', '100')
        self.m.start()
        self.assertTrue(self.ctl('steps', json_out=True)['steps'][0]['pinned'])
        self.m.unmount()

    def test_8_export_damaged(self):
        self.m.unmount()
        ext = self.ctl('ls', 'iter_0000100/' + RANK_FILE, json_out=True)['extents']
        chunk = ext[0]['chunk']
        cpath = os.path.join(self.m.store, 'chunks', chunk[:2], chunk)
        good = ckfs.read_bytes(cpath)
        bad = bytearray(good)
        bad[32 + (len(bad) - 32) // 2] ^= 1
        with open(cpath, 'wb') as f:
            f.write(bad)
        try:
            dest = os.path.join(self.m.tmp, 'damaged')
            r = self.ctl('export', '100', dest, rc=1)
            self.assertIn('.partial', r.stderr)
            self.assertIn('damaged: ', r.stdout)
            self.assertTrue(os.path.exists(os.path.join(dest, 'iter_0000100',
                                                        RANK_FILE + '.partial')))
            self.assertFalse(os.path.exists(os.path.join(dest, 'iter_0000100', RANK_FILE)))
            self.assertFalse(os.path.exists(os.path.join(dest, TRACKER)))
        finally:
            with open(cpath, 'wb') as f:
                f.write(good)
        self.ctl('export', '100', os.path.join(self.m.tmp, 'repaired'))


# file names a trainer may write, shown by ckptctl text output escaped (tools/ckptctl ctl_escape)
ODD_NAMES = {
    'evil\nname\x1b[31m.bin': 'evil\\nname\\x1b[31m.bin',     # a fake line, a colour escape
    'tab\there\rback\\slash': 'tab\\there\\rback\\\\slash',
    'del\x7f\x07bell': 'del\\x7f\\abell',
    'caf\u00e9-\u4e2d.pt': 'caf\u00e9-\u4e2d.pt',              # well-formed UTF-8: kept
    'c1\u009b31m': 'c1\\xc2\\x9b31m',                          # a C1 CSI: escaped
}
ODD_LINK = ('link', '\x1b]0;title\x07', '\\x1b]0;title\\a')  # name, target, as shown
LONG_NAME = 'L' * 252 + '.pt'      # NAME_MAX bytes: no room for a suffix beside it


class CkptctlNamesTest(ckfs.CkptctlCase, unittest.TestCase):
    """Names with control characters: text output escapes them (as GNU ls -b, git's quoted
    paths), --json keeps them exact. One step, iter_0000300, written without torch."""

    @classmethod
    def setUpClass(cls):
        cls.m = m = ckfs.Mount().start()
        try:
            d = m.path('iter_0000300')
            os.mkdir(d)
            for i, n in enumerate(ODD_NAMES):
                with open(os.path.join(d, n), 'wb') as f:
                    f.write(b'%d' % i * 1000)
            os.symlink(ODD_LINK[1], os.path.join(d, ODD_LINK[0]))
            with open(os.path.join(d, LONG_NAME), 'wb') as f:
                f.write(ckfs.content('long', 300000))
            m.settle()
        except BaseException:
            m.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.m.close()

    def assert_escaped(self, out, what):
        self.assertNotIn('\x1b', out, what)
        self.assertNotIn('\x07', out, what)
        self.assertNotIn('\x7f', out, what)
        self.assertNotIn('\r', out, what)
        self.assertNotIn('\u009b', out, what)
        for shown in ODD_NAMES.values():
            self.assertIn(shown, out, what)

    def test_export_long_name(self):
        """export writes each file under a short temporary name in its directory, so a name of
        NAME_MAX (255) bytes exports; nothing temporary is left."""
        self.assertEqual(len(LONG_NAME.encode()), 255)
        dest = os.path.join(self.m.tmp, 'export-long')
        e = self.ctl('--force', 'export', '300', dest, json_out=True)
        self.assertTrue(e['verified'], e)
        top = os.path.join(dest, 'iter_0000300')
        self.assertEqual(ckfs.read_bytes(os.path.join(top, LONG_NAME)),
                         ckfs.read_bytes(self.m.path('iter_0000300', LONG_NAME)))
        for n in ODD_NAMES:
            self.assertEqual(ckfs.read_bytes(os.path.join(top, n)),
                             ckfs.read_bytes(self.m.path('iter_0000300', n)))
        self.assertEqual(sorted(os.listdir(top)), sorted(list(ODD_NAMES) + [ODD_LINK[0],
                                                                           LONG_NAME]))

    def test_show(self):
        out = self.ctl('show', '300').stdout
        self.assert_escaped(out, out)
        self.assertNotIn('evil\n', out)
        js = self.ctl('show', '300', json_out=True)['versions'][0]
        self.assertEqual(sorted(f['path'] for f in js['files_list']
                                if f['path'] not in ('link', LONG_NAME)), sorted(ODD_NAMES))

    def test_ls(self):
        out = self.ctl('ls', '/iter_0000300').stdout
        self.assert_escaped(out, out)
        self.assertIn('%s -> %s\n' % (ODD_LINK[0], ODD_LINK[2]), out)
        self.assertEqual(len(out.splitlines()), 1 + len(ODD_NAMES) + 2, out)
        for name, shown in ODD_NAMES.items():
            one = self.ctl('ls', '/iter_0000300/' + name).stdout
            self.assertIn(' /iter_0000300/' + shown + '\n', one)
        strings = set()

        def walk(v):
            if isinstance(v, dict):
                for x in v.values():
                    walk(x)
            elif isinstance(v, list):
                for x in v:
                    walk(x)
            elif isinstance(v, str):
                strings.add(v)
        walk(self.ctl('ls', '/iter_0000300', json_out=True))
        for name in list(ODD_NAMES) + [ODD_LINK[1]]:
            self.assertIn(name, strings)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
