#!/usr/bin/python3
"""Logs that tell the story (issue 44):
- every line of STORE/ckptfs.log starts with an ISO 8601 UTC timestamp with milliseconds;
- the log is capped and rotated (ckptfs.log -> ckptfs.log.1 -> ...; CKPTFS_LOG_MAX, a hidden
  knob for the tests, sets a small cap), the rotated files kept 0600, never more than the number
  kept;
- run by systemd (JOURNAL_STREAM names the daemon's stderr), the daemon logs to stderr, without
  its own timestamp (journald stamps every line), and not to the store;
- a mount after a kill -9 says in one line that the previous daemon (its pid) did not stop
  cleanly, and what recovery did;
- a newest step set aside at mount (left unfinished by the crash, or failing its checksum) is
  said by the `ckptfs` command itself on its stderr, naming the step, why, and the step the
  tracker now names; `ckptctl STORE status` (text and --json) shows it afterwards;
- the index's schema version is in .ckptfs/status and `ckptctl status`; an index of an older
  version is copied to index.db.v<N>.bak before it is upgraded, and the upgrade is logged.

Run: /usr/bin/python3 tests/mount/test_logs.py
"""

import sys

sys.dont_write_bytecode = True

import faulthandler  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import sqlite3  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import content  # noqa: E402

MiB = 1 << 20
TRACKER = 'latest_checkpointed_iteration.txt'
HEADER = 32  # chunk file header; the payload starts here
STAMP = re.compile(r'^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z ')


def log_lines(store, name='ckptfs.log'):
    with open(os.path.join(store, name), errors='replace') as f:
        return f.read().splitlines()


def stamp_seconds(line):
    """Seconds since the epoch of a line's timestamp (UTC)."""
    m = STAMP.match(line)
    t = time.strptime('-'.join(m.group(i) for i in range(1, 7)), '%Y-%m-%d-%H-%M-%S')
    return time.mktime(t) - time.timezone + int(m.group(7)) / 1000  # mktime reads local time


def save(m, it, n=MiB):
    d = m.path('iter_%07d' % it, 'mp_rank_00')
    os.makedirs(d)
    with open(os.path.join(d, 'model_optim_rng.pt'), 'wb') as f:
        f.write(content('logs-%d' % it, n + it))
    with open(m.path(TRACKER), 'w') as f:
        f.write(str(it))


def flip_newest_chunk(store, before):
    """Flip one payload byte of the largest chunk file not in before (a set of names)."""
    sizes = ckfs.chunk_files(store)
    mine = sorted(c for c in sizes if c not in before)
    target = max(mine, key=lambda c: sizes[c])
    off = HEADER + (sizes[target] - HEADER) // 2
    with open(os.path.join(store, 'chunks', target), 'r+b') as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x01]))


def close_quietly(f):
    """Close a file of a mount whose daemon is gone (its flush fails: ENOTCONN)."""
    try:
        f.close()
    except OSError:
        pass


class TimestampTest(unittest.TestCase):

    def test_every_line_starts_with_a_utc_timestamp_in_milliseconds(self):
        t0 = time.time()
        m = ckfs.Mount()
        try:
            m.start()
            save(m, 2)
            m.remount()
            m.unmount()
            t1 = time.time()
            lines = log_lines(m.store)
            self.assertGreater(len(lines), 3, lines)
            for ln in lines:
                self.assertRegex(ln, STAMP, 'a log line without its timestamp')
                self.assertTrue(t0 - 1 <= stamp_seconds(ln) <= t1 + 1, (ln, t0, t1))
            self.assertTrue(any('stopped cleanly' in ln for ln in lines), lines)
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(m.store,
                                                               'ckptfs.log')).st_mode), 0o600)
        finally:
            m.close()


class RotationTest(unittest.TestCase):

    CAP = 2048

    def test_the_log_is_capped_and_rotated(self):
        m = ckfs.Mount()
        m.env['CKPTFS_LOG_MAX'] = str(self.CAP)
        try:
            m.start()
            for it in range(1, 61):  # a few state changes each, about 100 bytes a line
                save(m, it, n=4096)
            m.unmount()
            names = sorted(n for n in os.listdir(m.store) if n.startswith('ckptfs.log'))
            self.assertIn('ckptfs.log.1', names, names)
            self.assertIn('ckptfs.log.3', names, 'too few lines to rotate thrice? %s' % names)
            self.assertNotIn('ckptfs.log.4', names, 'more rotated logs kept than 3')
            every = []
            for n in ('ckptfs.log.3', 'ckptfs.log.2', 'ckptfs.log.1', 'ckptfs.log'):
                p = os.path.join(m.store, n)
                self.assertEqual(stat.S_IMODE(os.stat(p).st_mode), 0o600, n)
                # a file is rotated before the line that would take it past the cap
                self.assertLessEqual(os.path.getsize(p), self.CAP, n)
                every += log_lines(m.store, n)
            for ln in every:
                self.assertRegex(ln, STAMP)
            stamps = [stamp_seconds(ln) for ln in every]
            self.assertEqual(stamps, sorted(stamps), 'rotated files out of order')
            self.assertIn('stopped cleanly', every[-1])
            self.assertTrue(any("'iter_0000060'" in ln for ln in every))
        finally:
            m.close()


class JournalTest(unittest.TestCase):

    def test_under_systemd_the_log_goes_to_stderr_without_a_timestamp(self):
        m = ckfs.Mount()  # for its directories and cleanup; started by hand below
        try:
            errp = os.path.join(m.tmp, 'journal')
            with open(errp, 'w') as err:
                st = os.fstat(err.fileno())
                env = dict(os.environ, JOURNAL_STREAM='%d:%d' % (st.st_dev, st.st_ino))
                p = subprocess.run([ckfs.ckptfs_bin(), m.store, m.mnt], stdout=subprocess.PIPE,
                                   stderr=err, env=env, timeout=60, text=True)
            self.assertEqual(p.returncode, 0)
            m.mounted = True
            m.pid = ckfs.store_daemon_pid(m.store)
            save(m, 2)
            m.unmount()
            with open(errp) as f:
                got = f.read().splitlines()
            self.assertTrue(any("step 'iter_0000002'" in ln for ln in got), got)
            self.assertTrue(any('stopped cleanly' in ln for ln in got), got)
            for ln in got:
                self.assertNotRegex(ln, STAMP, 'journald stamps the lines itself')
                self.assertTrue(ln.startswith('ckptfs: '), ln)
            log = os.path.join(m.store, 'ckptfs.log')
            self.assertFalse(os.path.exists(log) and os.path.getsize(log),
                             'the store log was written too: %s' % m.log_tail())
        finally:
            m.close()


class UncleanStopTest(unittest.TestCase):

    def test_a_mount_after_a_kill_says_so_and_what_recovery_did(self):
        m = ckfs.Mount()
        try:
            m.start()
            save(m, 2)
            d = m.path('iter_0000004', 'mp_rank_00')
            os.makedirs(d)
            f = open(os.path.join(d, 'model_optim_rng.pt'), 'wb')
            f.write(content('half', 3 * MiB))
            f.flush()
            dead = m.pid
            m.kill_daemon(then=lambda: close_quietly(f))
            m.start()
            lines = log_lines(m.store)
            said = [ln for ln in lines if 'did not stop cleanly' in ln]
            self.assertEqual(len(said), 1, m.log_tail(40))
            self.assertIn('(pid %d)' % dead, said[0])
            self.assertIn('recovery', said[0])
            self.assertRegex(said[0], r'1 steps? quarantined', said[0])
            # the command itself said what it set aside and where the tracker goes now
            out = m.start_stderr
            self.assertIn("'iter_0000004'", out)
            self.assertIn('quarantined', out)
            self.assertIn("'iter_0000002'", out)
            self.assertEqual(ckfs.read_bytes(m.path(TRACKER)).strip(), b'2')
            r = ckfs.ckptctl(m.store, 'status')
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn('did not stop cleanly', r.stdout)
            self.assertIn("'iter_0000004'", r.stdout)
            j = json.loads(ckfs.ckptctl(m.store, 'status', json_out=True).stdout)
            last = j['last_recovery']
            self.assertEqual(last['previous_pid'], dead)
            self.assertEqual([s['name'] for s in last['quarantined']], ['iter_0000004'])
            self.assertEqual(last['quarantined'][0]['tracker_step'], 'iter_0000002')
            m.remount()  # a clean stop and mount: nothing new to say, the record stays
            self.assertNotIn('did not stop cleanly', m.start_stderr)
            self.assertEqual(len([ln for ln in log_lines(m.store)
                                  if 'did not stop cleanly' in ln]), 1)
            j = json.loads(ckfs.ckptctl(m.store, 'status', json_out=True).stdout)
            self.assertEqual(j['last_recovery']['previous_pid'], dead)
        finally:
            m.close()


class DamagedAtMountTest(unittest.TestCase):

    def damaged(self, steps):
        m = ckfs.Mount()
        m.start()
        for it in steps[:-1]:
            save(m, it, n=3 * MiB)
        m.unmount()
        before = set(ckfs.chunk_files(m.store))
        m.start()
        save(m, steps[-1], n=3 * MiB)
        m.unmount()
        flip_newest_chunk(m.store, before)
        return m

    def test_the_command_says_the_newest_step_was_set_aside(self):
        m = self.damaged([2, 4])
        try:
            m.start()
            out = m.start_stderr
            self.assertIn("'iter_0000004'", out, out + m.log_tail())
            self.assertIn('checksum', out)
            self.assertIn("'iter_0000002'", out)
            self.assertEqual(ckfs.read_bytes(m.path(TRACKER)).strip(), b'2')
            r = ckfs.ckptctl(m.store, 'status')
            self.assertIn("'iter_0000004'", r.stdout)
            self.assertIn('checksum', r.stdout)
            j = json.loads(ckfs.ckptctl(m.store, 'status', json_out=True).stdout)
            last = j['last_recovery']
            self.assertIsNone(last['previous_pid'])  # a clean stop before: only the check
            self.assertEqual([(s['name'], s['state'], s['tracker_step'])
                              for s in last['quarantined']],
                             [('iter_0000004', 'corrupt', 'iter_0000002')])
        finally:
            m.close()

    def test_the_only_step_set_aside_leaves_no_tracker_and_says_so(self):
        m = self.damaged([4])
        try:
            m.start()
            out = m.start_stderr
            self.assertIn("'iter_0000004'", out, out + m.log_tail())
            self.assertIn('no complete step', out)
            self.assertFalse(os.path.exists(m.path(TRACKER)))
        finally:
            m.close()


class SchemaTest(unittest.TestCase):

    def test_the_schema_version_is_shown_and_an_upgrade_keeps_the_old_index(self):
        m = ckfs.Mount()
        try:
            m.start()
            save(m, 2)
            with open(m.path('.ckptfs', 'status')) as f:
                status = f.read()
            m.unmount()
            self.assertRegex(status, r'index schema: +3\b')
            r = ckfs.ckptctl(m.store, 'status')
            self.assertRegex(r.stdout, r'index schema: +3\b')
            j = json.loads(ckfs.ckptctl(m.store, 'status', json_out=True).stdout)
            self.assertEqual(j['index_schema'], 3)
            # take the index back to version 2 (v2 -> v3 only adds the xattrs table)
            db = sqlite3.connect(os.path.join(m.store, 'index.db'))
            db.execute('DROP TABLE xattrs')
            db.execute('PRAGMA user_version = 2')
            db.commit()
            db.close()
            m.start()
            self.assertEqual(ckfs.read_bytes(m.path(TRACKER)).strip(), b'2')
            bak = os.path.join(m.store, 'index.db.v2.bak')
            self.assertTrue(os.path.exists(bak), os.listdir(m.store))
            self.assertEqual(stat.S_IMODE(os.stat(bak).st_mode), 0o600)
            old = sqlite3.connect('file:%s?mode=ro' % bak, uri=True)
            self.assertEqual(old.execute('PRAGMA user_version').fetchone()[0], 2)
            self.assertEqual(old.execute("SELECT count(*) FROM sqlite_master WHERE "
                                         "name = 'xattrs'").fetchone()[0], 0)
            self.assertGreater(old.execute('SELECT count(*) FROM steps').fetchone()[0], 0)
            old.close()
            said = [ln for ln in log_lines(m.store) if 'schema version 2 to 3' in ln]
            self.assertEqual(len(said), 1, m.log_tail())
            self.assertIn('index.db.v2.bak', said[0])
            self.assertIn('schema version 2 to 3', m.start_stderr)
        finally:
            m.close()


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '580')),
                                      exit=True)
    unittest.main(verbosity=2)
