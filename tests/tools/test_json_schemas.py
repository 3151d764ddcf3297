#!/usr/bin/python3
"""Every JSON document ckptfs and ckptctl print validates against its schema in docs/schemas/
(issue 44: one vocabulary, documented JSON with a `schema` version field).

One store is taken through what each document reports: Megatron-LM steps written through a
mount, a torn save and a SIGKILLed daemon (so the next mount writes STORE/recovery.json and
quarantines a step), a shared-directory remote (`ckptctl remote`), an import, an export, a diff,
pins mounted and not, gc mounted and not, verify, fsck. Each document is checked three ways:
  - against its JSON Schema (draft 2020-12, python3-jsonschema; every schema forbids members it
    does not name, so a field renamed or added without its schema fails here);
  - its first member is "schema": "ckptfs-NAME/1";
  - the naming rules of docs/glossary.md ("Names in outputs"): lower_snake_case keys, `_ns`
    members are integers, and none of the names the vocabulary retired (kind, time, ts_ns,
    digest, stored_size, clean, length, bytes, seconds, set_aside).
The test asserts real outputs of real commands on a real mount; it fails when FUSE is missing.

Run: /usr/bin/python3 tests/tools/test_json_schemas.py   (CKPTFS_BIN / CKPTCTL_BIN name the
binaries)
"""

import sys
import os

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import faulthandler  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import unittest  # noqa: E402

import jsonschema  # noqa: E402  (python3-jsonschema, scripts/test.sh installs it)

import ckfs  # noqa: E402
from ckfs import TRACKER, content, wait_for  # noqa: E402

SCHEMAS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'docs', 'schemas')
RETIRED = {'kind', 'time', 'ts_ns', 'digest', 'stored_size', 'clean', 'length', 'bytes',
           'seconds', 'set_aside', 'set_aside_more', 'state_ns', 'mb_per_s', 'bytes_freed'}
KEY = re.compile(r'^[a-z][a-z0-9_]*$')


def save(m, step, files, tracker=True):
    """Megatron-LM's save through mount m: the step directory, its files, then the tracker."""
    d = m.path('iter_%07d' % step)
    for rel, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
        with open(os.path.join(d, rel), 'wb') as f:
            f.write(data)
    if tracker:
        with open(m.path(TRACKER), 'w') as f:
            f.write(str(step))


def schema(name):
    with open(os.path.join(SCHEMAS, name + '.json')) as f:
        return json.load(f)


class JsonSchemaTest(unittest.TestCase):
    seen = set()

    @classmethod
    def setUpClass(cls):
        cls.remote = tempfile.mkdtemp(prefix='ckptfs-test-remote-')
        cls.m = m = ckfs.Mount(opts=['remote=' + cls.remote, 'node=a', 'nodes=1']).start()
        try:
            for step, tag in ((100, 'a'), (200, 'b')):
                save(m, step, {'mp_rank_00/model.bin': content(tag, 3 << 20),
                               'mp_rank_00/extra.bin': content(tag + 'x', 100000)})
                m.settle()
                wait_for('step %d complete' % step, lambda: step in cls.complete(), 30,
                         lambda: m.ckptctl('steps').stdout)
            # a torn save, then the daemon killed: the next mount recovers and quarantines it
            save(m, 300, {'mp_rank_00/model.bin': content('c', 1 << 20)}, tracker=False)
            m.settle()
            m.kill_daemon()
            m.start()
            wait_for('step 300 quarantined', lambda: 'incomplete' in cls.states(300), 30,
                     lambda: m.ckptctl('steps').stdout)
        except BaseException:
            m.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.m.close()
        shutil.rmtree(cls.remote, ignore_errors=True)

    @classmethod
    def steps(cls):
        r = cls.m.ckptctl('steps', json_out=True)
        return json.loads(r.stdout)['steps'] if r.returncode == 0 else []

    @classmethod
    def complete(cls):
        return {s['step'] for s in cls.steps() if s['state'] == 'complete'}

    @classmethod
    def states(cls, step):
        return [s['state'] for s in cls.steps() if s['step'] == step]

    def names(self, v, where):
        """The naming rules, recursively over every member of v."""
        if isinstance(v, dict):
            for k, x in v.items():
                self.assertRegex(k, KEY, '%s: key %r' % (where, k))
                self.assertNotIn(k, RETIRED, '%s: retired name %r' % (where, k))
                if k.endswith('_ns'):
                    self.assertIsInstance(x, int, '%s: %s is not an integer' % (where, k))
                self.names(x, where + '.' + k)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                self.names(x, '%s[%d]' % (where, i))

    def check(self, name, text, where):
        doc = json.loads(text)
        self.assertIsInstance(doc, dict, where)
        self.assertEqual(next(iter(doc)), 'schema', '%s: "schema" is not the first member' % where)
        self.assertEqual(doc['schema'], 'ckptfs-%s/1' % name, where)
        jsonschema.Draft202012Validator(schema(name)).validate(doc)
        self.names(doc, where)
        JsonSchemaTest.seen.add(name)
        return doc

    def ctl(self, name, *args, rc=(0,)):
        r = self.m.ckptctl(*args, json_out=True)
        self.assertIn(r.returncode, rc, 'ckptctl %s: %s%s' % (' '.join(args), r.stdout, r.stderr))
        return self.check(name, r.stdout, 'ckptctl --json %s' % ' '.join(args))

    def test_1_mounted(self):
        st = self.ctl('status', 'status')
        rec = st['last_recovery']
        self.assertIsNotNone(rec, 'the mount after SIGKILL wrote no recovery record')
        self.assertFalse(rec['previous_stopped_cleanly'])
        self.assertIn('iter_0000300', [q['name'] for q in rec['quarantined']])
        with open(os.path.join(self.m.store, 'recovery.json')) as f:
            self.check('recovery', f.read(), 'STORE/recovery.json')
        steps = self.ctl('steps', 'steps')['steps']
        self.assertEqual({s['step'] for s in steps if s['state'] == 'complete'}, {100, 200})
        with open(self.m.path('.ckptfs', 'steps.json')) as f:
            self.check('steps', f.read(), '.ckptfs/steps.json')
        show = self.ctl('show', 'show', '200')['versions']
        self.assertEqual(len(show[0]['files_list']), 2)
        self.assertTrue(show[0]['history'])
        self.assertEqual([c['step'] for c in self.ctl('claims', 'claims')['claims']], [100, 200])
        ents = self.ctl('ls', 'ls', '/')['entries']
        self.assertIn('iter_0000200', [e['name'] for e in ents])
        f = self.ctl('file', 'ls', '/iter_0000200/mp_rank_00/model.bin')
        self.assertEqual(sum(x['logical_bytes'] for x in f['extents']), 3 << 20)
        self.assertTrue(self.ctl('verify', 'verify')['intact'])
        self.ctl('gc', 'gc')
        d = self.ctl('diff', 'diff', '100', '200')
        self.assertEqual(len(d['changed']), 2)
        self.ctl('request', 'pin', '100')
        self.ctl('request', 'unpin', '100')
        dest = os.path.join(self.m.tmp, 'export')
        e = self.ctl('export', 'export', '200', dest)
        self.assertTrue(e['verified'])
        self.ctl('import', 'import', '--dest', 'copy', os.path.join(dest, 'iter_0000200'))
        wait_for('the remote to hold step 200',
                 lambda: [s for s in json.loads(self.m.ckptctl('remote', json_out=True).stdout)
                          .get('steps', []) if s['step'] == 200 and s['state'] == 'global'],
                 30, lambda: self.m.ckptctl('remote').stdout)
        r = self.ctl('remote', 'remote', 'verify')
        self.assertEqual(r['damaged_chunks'], 0)

    def test_2_unmounted(self):
        self.m.unmount()
        try:
            self.assertTrue(self.ctl('status', 'status')['stopped_cleanly'])
            self.assertTrue(self.ctl('pin', 'pin', '100')['changed'])
            self.ctl('gc', 'gc', '--dry-run')
            self.ctl('gc', 'gc')
            self.ctl('fsck', 'fsck')
        finally:
            self.m.start()

    def test_3_every_schema_used(self):
        """Every schema in docs/schemas/ is a document this test has seen (run after 1 and 2)."""
        have = {n[:-5] for n in os.listdir(SCHEMAS) if n.endswith('.json')}
        self.assertEqual(have - JsonSchemaTest.seen, set(), 'schemas no output was checked against')


if __name__ == '__main__':
    faulthandler.dump_traceback_later(900, exit=True)
    unittest.main(verbosity=2)
