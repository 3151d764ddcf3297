#!/usr/bin/python3
"""The systemd template unit, dist/ckptfs@.service (issue 23), held to what it promises:
- `systemd-analyze verify` accepts it (syntax, directives, the ExecStart binary exists);
- run the way systemd runs a Type=forking service (EnvironmentFile read, `$VAR` split into
  words and `${VAR}` kept whole, ExecStartPre then ExecStart), ExecStart returns only once the
  mount is ready: a checkpoint can be written the moment it exits;
- stopped the way systemd stops it (KillSignal=SIGTERM to the main process), the daemon exits
  with status 0, unmounts, marks the store clean (no recovery sweep at the next start), and
  every file written before the stop is there, whole, at the next start.
No systemd runs as PID 1 on this machine: scripts/test-package.sh runs the unit under a real
systemd where one can be booted, and says so where it cannot.

Environment: CKPTFS_BIN, CKPTCTL_BIN (../lib/ckfs.py), CKPTFS_UNIT (default: the build's
dist/ckptfs@.service beside CKPTFS_BIN's fs/).
Run: /usr/bin/python3 tests/mount/test_service.py
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import hashlib  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402


def unit_path():
    u = os.environ.get('CKPTFS_UNIT')
    if u:
        return u
    build = os.path.dirname(os.path.dirname(os.path.abspath(ckfs.ckptfs_bin())))
    return os.path.join(build, 'dist', 'ckptfs@.service')


def parse_unit(text):
    """{section: {key: [values]}}"""
    out, sec = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in '#;':
            continue
        if line.startswith('['):
            sec = out.setdefault(line.strip('[]'), {})
            continue
        k, v = line.split('=', 1)
        sec.setdefault(k, []).append(v)
    return out


def expand(cmd, env):
    """systemd.service(5) "Command lines": ${VAR} is one word, $VAR is split on whitespace"""
    words = []
    for w in shlex.split(cmd):
        m = re.fullmatch(r'\$([A-Za-z_][A-Za-z0-9_]*)', w)
        if m:
            words += env.get(m.group(1), '').split()
        else:
            words.append(re.sub(r'\$\{([A-Za-z_][A-Za-z0-9_]*)\}',
                                lambda x: env.get(x.group(1), ''), w))
    return words


class TestService(unittest.TestCase):
    def setUp(self):
        ckfs.check_fuse_usable()
        self.unit = unit_path()
        self.assertTrue(os.path.exists(self.unit), '%s not built' % self.unit)
        with open(self.unit) as f:
            self.text = f.read()
        self.tmp = tempfile.mkdtemp(prefix='ckptfs-test-', dir=ckfs.test_tmp_root())
        self.store = os.path.join(self.tmp, 'store')
        self.mnt = os.path.join(self.tmp, 'srv', 'output', 'checkpoint')
        self.bin = os.path.abspath(ckfs.ckptfs_bin())
        # the unit as installed, its binary the build's
        self.local = os.path.join(self.tmp, 'ckptfs@.service')
        bindir = re.search(r'ExecStart=(\S+)/ckptfs ', self.text).group(1)
        with open(self.local, 'w') as f:
            f.write(self.text.replace(bindir + '/ckptfs', self.bin))

    def tearDown(self):
        if ckfs.is_fuse_mounted(self.mnt):
            subprocess.run(['fusermount3', '-uz', self.mnt])
        ckfs.wait_store_released(self.store)
        if not ckfs.keep_tmp():
            shutil.rmtree(self.tmp, ignore_errors=True)

    def test_verify(self):
        if not shutil.which('systemd-analyze'):
            self.fail('systemd-analyze not found: install Debian\'s systemd '
                      '(scripts/install-deps.sh)')
        inst = os.path.join(self.tmp, 'ckptfs@train.service')
        shutil.copy(self.local, inst)
        p = subprocess.run(['systemd-analyze', 'verify', '--man=no', inst],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertNotIn('Unknown', p.stderr)

    def test_start_stop(self):
        u = parse_unit(ckfs.read_bytes(self.local).decode())
        svc = u['Service']
        self.assertEqual(svc['Type'], ['forking'])
        self.assertEqual(svc['KillSignal'], ['SIGTERM'])
        env = {'CKPTFS_STORE': self.store, 'CKPTFS_MOUNTPOINT': self.mnt,
               'CKPTFS_ARGS': '-o keep_checkpoint_max=2'}
        for cmd in svc.get('ExecStartPre', []) + svc['ExecStart']:
            p = subprocess.run(expand(cmd, env), capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, '%s: %s' % (cmd, p.stderr))
        # Type=forking: ready when ExecStart returned, not a moment later
        self.assertTrue(ckfs.is_fuse_mounted(self.mnt), 'ExecStart returned before the mount')
        p = subprocess.run([sys.executable, '-c', r'''
import os, sys
mnt = sys.argv[1]
for it in (1, 2, 3):
    d = os.path.join(mnt, 'iter_%07d' % it, 'mp_rank_00')
    os.makedirs(d)
    with open(os.path.join(d, 'model_optim_rng.pt'), 'wb') as f:
        f.write(bytes([it]) * (3 << 20))
    with open(os.path.join(mnt, 'latest_checkpointed_iteration.txt'), 'w') as f:
        f.write(str(it))
''', self.mnt], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        pid = int(subprocess.run(['pgrep', '-f', '-o', '%s .*%s' % (self.bin, self.mnt)],
                                 capture_output=True, text=True).stdout.split()[0])
        os.kill(pid, signal.SIGTERM)
        self.assertTrue(ckfs.wait_pid_exit(pid, 120), 'the daemon ignored SIGTERM')
        self.assertFalse(ckfs.is_fuse_mounted(self.mnt), 'still mounted after SIGTERM')
        self.assertTrue(os.path.exists(os.path.join(self.store, 'clean')),
                        'SIGTERM did not leave the store marked clean')
        with open(os.path.join(self.store, 'ckptfs.log')) as f:
            self.assertIn('stopped cleanly', f.read())
        # the next start finds every step whole; retention kept the newest 2
        m = ckfs.Mount(store=self.store).start()
        try:
            self.assertEqual(sorted(n for n in os.listdir(m.mnt) if n.startswith('iter_')),
                             ['iter_0000002', 'iter_0000003'])
            with open(m.path('latest_checkpointed_iteration.txt')) as f:
                self.assertEqual(f.read().strip(), '3')
            got = hashlib.sha256(ckfs.read_bytes(
                m.path('iter_0000003', 'mp_rank_00', 'model_optim_rng.pt'))).hexdigest()
            self.assertEqual(got, hashlib.sha256(bytes([3]) * (3 << 20)).hexdigest())
            self.assertNotIn('recovered store', m.log_tail(50))
        finally:
            m.stop()
            m.remove_tmp()


if __name__ == '__main__':
    faulthandler.dump_traceback_later(600, exit=True)
    unittest.main(verbosity=2)
