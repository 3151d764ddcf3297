#!/usr/bin/python3
"""Every layout across three nodes (issue 41): a real 3-rank PyTorch job (gloo), rank r writing
through node r's mount, three ckptfs daemons with their own STOREs over one shared-directory
remote (-o remote=DIR,node=nR,nodes=3). The job saves steps 2 and 4 with the framework's exact
file operations (tests/e2e/trainer.py, whose comments cite each framework's source), then a new
launch resumes: it must land on step 4, every rank's files bit-exact (VERIFY), through any node.

Run: /usr/bin/python3 tests/e2e/test_three_nodes.py [-k LAYOUT]
CKPTFS_THREE_NODES_LAYOUTS=a,b limits the layouts (scripts/test.sh runs them all).
"""
import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402
from trainers import PYTHON, TRAINER, RUN_TIMEOUT  # noqa: E402

NODES = 3
LAYOUTS = ('megatron', 'mf2', 'mf1', 'deepspeed', 'hf', 'dcp', 'internevo', 'internevo-snap',
           'orbax')
# Not yet across nodes, run only when named in CKPTFS_THREE_NODES_LAYOUTS: none today.
NOT_YET = ()
ONLY = [x for x in os.environ.get('CKPTFS_THREE_NODES_LAYOUTS', '').split(',') if x]


class ThreeNodeJob(unittest.TestCase):
    def setUp(self):
        ckfs.check_fuse_usable()
        self.remote = tempfile.mkdtemp(prefix='ckptfs-test-remote-', dir=ckfs.test_tmp_root())
        self.addCleanup(shutil.rmtree, self.remote, True)
        self.m = []
        for k in range(NODES):
            m = ckfs.Mount(opts=['remote=' + self.remote, 'node=n%d' % k, 'nodes=%d' % NODES])
            m.start()
            self.addCleanup(m.close)
            self.m.append(m)
        self.log = os.path.join(self.m[0].tmp, 'trainer.log')

    def run_job(self, layout, steps, resume=False):
        argv = [PYTHON, TRAINER, '--layout', layout, '--save', ','.join(m.mnt for m in self.m),
                '--steps', str(steps), '--save-every', '2', '--ranks', str(NODES),
                '--log', self.log] + (['--resume'] if resume else [])
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=RUN_TIMEOUT)
        self.assertEqual(p.returncode, 0, 'job failed:\n%s\n%s' % (p.stdout[-3000:], self.status()))

    def status(self):
        return '\n'.join('--- node n%d ---\n%s' % (k, m.status_text())
                         for k, m in enumerate(self.m))

    def lines(self):
        with open(self.log) as f:
            return f.read().splitlines()

    def check(self, layout):
        self.run_job(layout, 4)
        # the resume may start only once step 4 is global: its claim is the last write of the
        # save, then every node publishes; a launcher restarting the job waits as long
        ckfs.wait_for('step 4 global on every node',
                      lambda: all('(4): globally complete;' in m.status_text() for m in self.m),
                      60, self.status)
        self.run_job(layout, 6, resume=True)
        lines = self.lines()
        start = max(i for i, ln in enumerate(lines) if ln.startswith('START'))
        got = [ln for ln in lines[start:] if ln.startswith(('RESUMED', 'FRESH'))]
        self.assertTrue(got and got[0].startswith('RESUMED step=4 '),
                        'resume: %s\n%s' % (got[:1], self.status()))
        bad = [ln for ln in lines[start:] if ln.startswith('VERIFY FAIL')]
        self.assertEqual(bad, [], 'the resumed files differ from what was written')


def _add(layout):
    def t(self):
        self.check(layout)
    t.__name__ = 'test_%s' % layout.replace('-', '_')
    setattr(ThreeNodeJob, t.__name__, t)


for _l in LAYOUTS + NOT_YET:
    if (not ONLY and _l in LAYOUTS) or _l in ONLY:
        _add(_l)


if __name__ == '__main__':
    faulthandler.dump_traceback_later(1700, exit=True)
    unittest.main(verbosity=2)
