"""ceph.py - a one-machine Ceph for tests and benchmarks: scripts/ceph.sh start/stop on a
temporary directory (monitor, memstore OSD, RADOS Gateway on 127.0.0.1, MDS and two ceph-fuse
mounts), its settings in Ceph().vars (AWS_* for S3, CKPTFS_TEST_BUCKET, CKPTFS_CEPHFS_1/2).
Raises AssertionError when Ceph cannot start: never skips."""
import os
import shutil
import subprocess
import tempfile

TOP = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))


class Ceph:
    """scripts/ceph.sh start/stop on a temporary directory; env() the S3 settings."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix='ckptfs-test-ceph-')
        r = subprocess.run(['bash', os.path.join(TOP, 'scripts', 'ceph.sh'), 'start', self.dir,
                            '--cephfs', '2'], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            self.stop()
            raise AssertionError('cannot start Ceph (scripts/ceph.sh): %s%s' % (r.stdout,
                                                                                 r.stderr))
        self.vars = {}
        with open(os.path.join(self.dir, 'env')) as f:
            for ln in f:
                ln = ln.strip()
                if ln.startswith('export '):
                    ln = ln[len('export '):]
                if '=' in ln and not ln.startswith('#'):
                    k, v = ln.split('=', 1)
                    self.vars[k] = v.strip('\'"')

    def rgw(self, what):
        """Stop ('rgw-stop') or start again ('rgw-start') the RADOS Gateway alone."""
        r = subprocess.run(['bash', os.path.join(TOP, 'scripts', 'ceph.sh'), what, self.dir],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise AssertionError('ceph.sh %s failed: %s%s' % (what, r.stdout, r.stderr))

    def stop(self):
        subprocess.run(['bash', os.path.join(TOP, 'scripts', 'ceph.sh'), 'stop', self.dir],
                       capture_output=True, timeout=120)
        shutil.rmtree(self.dir, ignore_errors=True)
