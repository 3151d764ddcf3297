#!/usr/bin/python3
"""POSIX corner cases of a real ckptfs mount that tests/mount/test_posix.py does not cover.

Each assertion is what a local filesystem (ext4, tmpfs) does; CKPTFS_POSIX_PLAIN=1 runs the
same tests on a plain temporary directory to check the expectations themselves (the tests about
the mount itself, .ckptfs and STORE are ckptfs only and say so). Users: root, OWNER (uid 1001)
and MATE (uid 1002) in group 1500, OTHER (uid 1003, group 1600); the mount has allow_other
(default_permissions is always on: the kernel checks modes).

  PermissionTest
    file_mode_classes     read/write for owner, group member, other and root under 11 modes:
                          only the first matching class counts (0o077: the owner is refused)
    exec_bits             a script runs iff its class has r and x; a binary with 0711 runs for
                          others; root needs one x bit anywhere
    dir_mode_classes      list (r), search (x), create/unlink (w+x), w without x refused, r
                          without x lists names but cannot stat them
    sticky_directory      1777: others cannot unlink, rename or replace a file they do not own,
                          nor remove its directory; its owner, the directory's owner and root can
    setgid_directory      files and directories made in a 2777 directory get its group, new
                          directories keep the bit
    suid_cleared          a write or truncate by a user without CAP_FSETID (the owner too) clears
                          set-user-ID, and set-group-ID with group x; root's write keeps them;
                          chown clears both, even by root; a directory keeps them
    chown_rules           only root gives files away; the owner may chgrp only to its own group
    move_dir_needs_write  moving a directory to another parent needs write on it (its ".." entry)
                          for non-root; renaming it within its parent does not
    private_mount         (ckptfs) without allow_other another uid gets EACCES on everything,
                          even a 0777 file; root, the mounter, gets through
  RenameTest
    onto_itself           a directory, a symlink, and two hard links of one file: rename is a
                          no-op that keeps both names
    over_hard_link        replacing one name of a 2-link file leaves the other intact, nlink 1
    over_open_mmapped     an open fd and a mapping of the replaced file still see the old bytes,
                          fstat nlink 0; the fd can still be written and read
    across_dirs_same_name d1/x -> d2/x with and without an existing d2/x; parents' nlink
    dir_over_empty_dir_nlink   nlink of both parents, ".." of the moved tree, mtimes
    exchange              RENAME_EXCHANGE of two files, of a file and a directory across parents
                          (".." and nlink follow), ENOENT without a target, EINVAL into itself,
                          EINVAL with NOREPLACE, and RENAME_WHITEOUT refused with EINVAL/EPERM
  NameTest
    name_max              255-byte names (ASCII and 3-byte UTF-8) for files, dirs, symlinks, hard
                          links, rename targets; 256 bytes: ENAMETOOLONG everywhere
    symlink_target_max    a 4095-byte target reads back exactly; 4096: ENAMETOOLONG
    path_max              a path of ~4000 bytes: create, stat, read, rename, unlink, rmdir; 4096+
                          bytes: ENAMETOOLONG; deeper than PATH_MAX through directory fds works
                          (and `ckptctl ls` of that 6000-byte path)
    odd_names             newline, tab, CR, spaces, leading dash, control bytes, invalid UTF-8,
                          "..." : create, readdir (bytes) round trip, rename, symlink targets,
                          and the same after a remount
  RaceTest
    o_excl_race           16 processes race O_CREAT|O_EXCL on one name, 50 times: exactly one
                          wins (its bytes are in the file), 15 get EEXIST; the same for mkdir,
                          link and rename with RENAME_NOREPLACE (20 rounds each)
  LinkTest
    counts_across_dirs    links in 3 directories, nlink and st_ino agree, a write through one is
                          seen by all, unlink down to 1, all of it after a remount
    errors                a directory: EPERM; missing source, missing target dir: ENOENT; an
                          existing name: EEXIST; 256-byte name: ENAMETOOLONG; a symlink is
                          linked itself (not followed); an open unlinked file cannot come back
                          (ENOENT); another uid without write on the target dir: EACCES
  MetaTest (ckptfs only)
    readonly              in /.ckptfs: create, open for write, truncate, unlink, rename in/out/
                          within, mkdir, rmdir, symlink, link, chmod, chown, utime: EROFS for
                          root (the daemon), for others the kernel's EACCES (modes 0555/0444),
                          EPERM for chmod, chown and utime to a given time (not the owner)
    not_movable           /.ckptfs itself cannot be renamed, removed, replaced by a rename or
                          exchanged (EROFS), a new ".ckptfs" is EEXIST; it is still not listed
                          and still works after a remount
  StoreTest (ckptfs only)
    modes                 STORE 0700, index.db 0600, chunks/ 0700
    refuses_writable      STORE mode 0770, 0707, 0777, 0720, 0702: the daemon refuses with one
                          line naming the mode and the fix, no mount is left; ckptctl refuses
                          too; 0750 and 0755 (readable, not writable) are accepted

Environment: CKPTFS_BIN, CKPTCTL_BIN (see ../lib/ckfs.py), CKPTFS_POSIX_PLAIN (0).
Run: /usr/bin/python3 tests/torture/test_posix_extra.py [-v] [PermissionTest.test_sticky_directory]
"""

import sys

sys.dont_write_bytecode = True

import ctypes  # noqa: E402
import errno  # noqa: E402
import faulthandler  # noqa: E402
import json  # noqa: E402
import mmap  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import unittest  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'lib'))

import ckfs  # noqa: E402
from ckfs import content  # noqa: E402
from posixbase import (AT_FDCWD, PLAIN, RENAME_EXCHANGE, RENAME_NOREPLACE,  # noqa: E402
                       RENAME_WHITEOUT, MountedTestCase, close_mount, ename, new_mount,
                       renameat2, rfile, wfile)

OWNER, MATE, OTHER = 1001, 1002, 1003
GRP, OGRP = 1500, 1600
GID = {OWNER: GRP, MATE: GRP, OTHER: OGRP}
NAMES = {0: 'root', OWNER: 'owner', MATE: 'group member', OTHER: 'other'}

libc = ctypes.CDLL(None, use_errno=True)
libc.linkat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                        ctypes.c_int]
AT_SYMLINK_FOLLOW = 0x400


def linkat_follow(src, dst):
    if libc.linkat(AT_FDCWD, os.fsencode(src), AT_FDCWD, os.fsencode(dst),
                   AT_SYMLINK_FOLLOW) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), src)


def outcome(fn, *a):
    """'ok' or the errno name of fn(*a), in this process."""
    try:
        fn(*a)
        return 'ok'
    except OSError as e:
        return ename(e.errno)


def as_user(uid, fn, *a):
    """'ok' or the errno name of fn(*a) run as uid (with its group, no supplementary ones)."""
    if uid == 0:
        return outcome(fn, *a)
    res = ckfs.run_as(uid, GID[uid], fn, *a)
    return 'ok' if res[0] == 'ok' else ename(res[1])


def value_as(uid, fn, *a):
    res = ckfs.run_as(uid, GID[uid], fn, *a)
    if res[0] != 'ok':
        raise AssertionError('%s as uid %d failed: %s' % (fn.__name__, uid, ename(res[1])))
    return res[1]


def try_read(p):
    with open(p, 'rb') as f:
        f.read(1)


def try_write(p):
    fd = os.open(p, os.O_WRONLY)
    os.close(fd)


class Base(MountedTestCase):
    def assertTable(self, rows, what):
        """rows: [(label, got, want)]; fails listing every row where got != want."""
        bad = ['%s: got %s, want %s' % (lab, got, want) for lab, got, want in rows if got != want]
        self.assertEqual(bad, [], '%s (%d of %d cases wrong):\n  %s' %
                         (what, len(bad), len(rows), '\n  '.join(bad)))

    def remount(self):
        self.m.remount()


def class_bits(mode, uid, fuid, fgid):
    """The rwx bits (0-7) that apply to uid: owner, else group, else other."""
    if uid == fuid:
        return (mode >> 6) & 7
    if GID[uid] == fgid:
        return (mode >> 3) & 7
    return mode & 7


class PermissionTest(Base):

    def test_file_mode_classes(self):
        rows = []
        for mode in (0o640, 0o604, 0o460, 0o406, 0o077, 0o707, 0o070, 0o000, 0o222, 0o444, 0o666):
            p = self.p('f%04o' % mode)
            wfile(p, b'data')
            os.chown(p, OWNER, GRP)
            os.chmod(p, mode)
            for uid in (OWNER, MATE, OTHER, 0):
                if uid == 0:
                    want_r = want_w = 'ok'
                else:
                    bits = class_bits(mode, uid, OWNER, GRP)
                    want_r = 'ok' if bits & 4 else 'EACCES'
                    want_w = 'ok' if bits & 2 else 'EACCES'
                rows.append(('%04o read as %s' % (mode, NAMES[uid]), as_user(uid, try_read, p),
                             want_r))
                rows.append(('%04o write as %s' % (mode, NAMES[uid]),
                             as_user(uid, try_write, p), want_w))
        self.assertTable(rows, 'open() permission checks')

    def test_exec_bits(self):
        def run(p):
            return subprocess.run([p], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL).returncode

        rows = []
        for mode in (0o750, 0o705, 0o570, 0o075, 0o710, 0o010):
            p = self.p('s%04o.sh' % mode)
            wfile(p, b'#!/bin/sh\nexit 7\n')
            os.chown(p, OWNER, GRP)
            os.chmod(p, mode)
            for uid in (OWNER, MATE, OTHER, 0):
                if uid == 0:
                    want = 'ran' if mode & 0o111 else 'EACCES'
                else:
                    bits = class_bits(mode, uid, OWNER, GRP)
                    # the kernel needs x; /bin/sh then reads the script: r
                    want = 'ran' if bits & 1 and bits & 4 else 'EACCES' if not bits & 1 \
                        else 'exit 126/127'
                if uid == 0:
                    try:
                        got = 'ran' if run(p) == 7 else 'exit'
                    except PermissionError:
                        got = 'EACCES'
                else:
                    res = ckfs.run_as(uid, GID[uid], run, p)
                    got = ename(res[1]) if res[0] == 'err' else 'ran' if res[1] == 7 else \
                        'exit 126/127' if res[1] in (2, 126, 127) else 'exit %d' % res[1]
                rows.append(('script %04o as %s' % (mode, NAMES[uid]), got, want))
        # a binary needs only x: the kernel reads it, not the user
        b = self.p('true')
        shutil.copyfile('/bin/true', b)
        os.chmod(b, 0o711)
        res = ckfs.run_as(OTHER, OGRP, run, b)
        rows.append(('binary 0711 as other', res, ('ok', 0)))
        self.assertTable(rows, 'execve() permission checks')

    def test_dir_mode_classes(self):
        def listing(d):
            return sorted(os.listdir(d))

        rows = []
        for mode in (0o750, 0o705, 0o730, 0o370, 0o703, 0o741, 0o714, 0o000, 0o777):
            d = self.p('d%04o' % mode)
            os.mkdir(d)
            wfile(os.path.join(d, 'f'), b'f')
            os.chown(d, OWNER, GRP)
            os.chmod(d, mode)
            for uid in (OWNER, MATE, OTHER):
                bits = class_bits(mode, uid, OWNER, GRP)
                who = '%04o as %s' % (mode, NAMES[uid])
                rows.append(('list ' + who, as_user(uid, listing, d),
                             'ok' if bits & 4 else 'EACCES'))
                rows.append(('stat entry ' + who, as_user(uid, os.stat, os.path.join(d, 'f')),
                             'ok' if bits & 1 else 'EACCES'))
                n = os.path.join(d, 'new%d' % uid)
                can_w = bits & 3 == 3
                rows.append(('create ' + who, as_user(uid, wfile, n, b'n'),
                             'ok' if can_w else 'EACCES'))
                if can_w:
                    rows.append(('unlink own ' + who, as_user(uid, os.unlink, n), 'ok'))
                rows.append(('mkdir ' + who, as_user(uid, os.mkdir, n + 'd'),
                             'ok' if can_w else 'EACCES'))
                if can_w:
                    rows.append(('rmdir own ' + who, as_user(uid, os.rmdir, n + 'd'), 'ok'))
            # r without x: the names, but no attributes
            if mode == 0o741:
                res = ckfs.run_as(MATE, GRP, listing, d)
                rows.append(('names with r only', res, ('ok', ['f'])))
        self.assertTable(rows, 'directory permission checks')

    def test_sticky_directory(self):
        os.chmod(self.d, 0o777)
        t = self.p('tmp')
        os.mkdir(t)
        os.chown(t, MATE, GRP)            # the directory belongs to MATE
        os.chmod(t, 0o1777)
        self.assertEqual(stat.S_IMODE(os.stat(t).st_mode), 0o1777)
        fa, fo = os.path.join(t, 'by_owner'), os.path.join(t, 'by_other')
        self.assertEqual(as_user(OWNER, wfile, fa, b'a'), 'ok')
        self.assertEqual(as_user(OTHER, wfile, fo, b'o'), 'ok')
        self.assertEqual(as_user(OWNER, os.mkdir, os.path.join(t, 'dir_by_owner')), 'ok')
        os.chmod(fa, 0o666)
        rows = [
            ('other unlinks owner\'s file', as_user(OTHER, os.unlink, fa), 'EPERM'),
            ('other renames owner\'s file', as_user(OTHER, os.rename, fa,
                                                    os.path.join(t, 'stolen')), 'EPERM'),
            ('other renames its file over owner\'s', as_user(OTHER, os.rename, fo, fa), 'EPERM'),
            ('other removes owner\'s dir', as_user(OTHER, os.rmdir,
                                                  os.path.join(t, 'dir_by_owner')), 'EPERM'),
            ('other writes owner\'s 0666 file', as_user(OTHER, try_write, fa), 'ok'),
            ('owner renames its file', as_user(OWNER, os.rename, fa, fa + '2'), 'ok'),
            ('owner unlinks its file', as_user(OWNER, os.unlink, fa + '2'), 'ok'),
            ('directory owner unlinks other\'s file', as_user(MATE, os.unlink, fo), 'ok'),
        ]
        self.assertEqual(as_user(OTHER, wfile, fo, b'o'), 'ok')
        rows.append(('root unlinks other\'s file', outcome(os.unlink, fo), 'ok'))
        rows.append(('root removes owner\'s dir', outcome(os.rmdir, os.path.join(t,
                                                                               'dir_by_owner')),
                     'ok'))
        # without the sticky bit anyone with write on the directory may
        self.assertEqual(as_user(OWNER, wfile, fa, b'a'), 'ok')
        os.chmod(t, 0o777)
        rows.append(('other unlinks owner\'s file, no sticky bit', as_user(OTHER, os.unlink, fa),
                     'ok'))
        self.assertTable(rows, 'sticky directory')
        self.assertEqual(sorted(os.listdir(t)), [])

    def test_setgid_directory(self):
        s = self.p('shared')
        os.mkdir(s)
        os.chown(s, 0, GRP)
        os.chmod(s, 0o2777)
        self.assertEqual(as_user(OTHER, wfile, os.path.join(s, 'f'), b'f'), 'ok')
        self.assertEqual(as_user(OTHER, os.mkdir, os.path.join(s, 'sub')), 'ok')
        st_f = os.stat(os.path.join(s, 'f'))
        st_d = os.stat(os.path.join(s, 'sub'))
        self.assertEqual((st_f.st_uid, st_f.st_gid), (OTHER, GRP), 'file: group of the dir')
        self.assertEqual((st_d.st_uid, st_d.st_gid), (OTHER, GRP), 'dir: group of the dir')
        self.assertTrue(st_d.st_mode & stat.S_ISGID, 'a new directory keeps set-group-ID')
        self.assertFalse(st_f.st_mode & stat.S_ISGID)
        # and one level further down (sub is OTHER's, 2755)
        self.assertEqual(as_user(OTHER, wfile, os.path.join(s, 'sub', 'g'), b'g'), 'ok')
        self.assertEqual(os.stat(os.path.join(s, 'sub', 'g')).st_gid, GRP)
        self.assertEqual(as_user(OTHER, os.mkdir, os.path.join(s, 'sub', 'deeper')), 'ok')
        st_dd = os.stat(os.path.join(s, 'sub', 'deeper'))
        self.assertEqual((st_dd.st_gid, bool(st_dd.st_mode & stat.S_ISGID)), (GRP, True))

    def test_suid_cleared(self):
        os.chmod(self.d, 0o777)
        p = self.p('prog')
        wfile(p, b'#!/bin/sh\n')
        os.chown(p, OWNER, GRP)

        def append(q):
            with open(q, 'ab') as f:
                f.write(b'x')

        rows = []
        for what, fn, args in (('write', append, (p,)), ('truncate', os.truncate, (p, 1))):
            for mode, want in ((0o6777, 0o0777), (0o6767, 0o2767), (0o4775, 0o0775)):
                os.chmod(p, mode)
                # MATE: in the file's group (a writer outside it also loses 2767's
                # set-group-ID on kernels >= 6.2, but not through FUSE: not asserted)
                res = as_user(MATE, fn, *args)
                rows.append(('%s by another user, mode %04o' % (what, mode),
                             '%s %04o' % (res, stat.S_IMODE(os.stat(p).st_mode)),
                             'ok %04o' % want))
        # the owner writing its own file: cleared as well (no CAP_FSETID)
        os.chmod(p, 0o4755)
        rows.append(('write by the owner, mode 4755',
                     '%s %04o' % (as_user(OWNER, append, p), stat.S_IMODE(os.stat(p).st_mode)),
                     'ok 0755'))
        # root writing keeps them (CAP_FSETID)
        os.chmod(p, 0o6755)
        append(p)
        rows.append(('write by root, mode 6755', '%04o' % stat.S_IMODE(os.stat(p).st_mode),
                     '6755'))
        # chown clears both (with group x), even by root
        os.chmod(p, 0o6755)
        os.chown(p, OTHER, GRP)
        rows.append(('chown by root, mode 6755', '%04o' % stat.S_IMODE(os.stat(p).st_mode),
                     '0755'))
        d = self.p('sgdir')
        os.mkdir(d)
        os.chmod(d, 0o2775)
        os.chown(d, OWNER, GRP)
        rows.append(('chown of a directory keeps set-group-ID',
                     '%04o' % stat.S_IMODE(os.stat(d).st_mode), '2775'))
        self.assertTable(rows, 'set-user-ID/set-group-ID clearing')

    def test_chown_rules(self):
        os.chmod(self.d, 0o777)
        p = self.p('f')
        self.assertEqual(as_user(OWNER, wfile, p, b'f'), 'ok')
        rows = [
            ('owner gives the file away', as_user(OWNER, os.chown, p, OTHER, -1), 'EPERM'),
            ('owner chgrp to a group it is not in', as_user(OWNER, os.chown, p, -1, OGRP),
             'EPERM'),
            ('owner chgrp to its own group', as_user(OWNER, os.chown, p, -1, GRP), 'ok'),
            ('owner chown to itself (no change)', as_user(OWNER, os.chown, p, OWNER, -1), 'ok'),
            ('group member chgrp', as_user(MATE, os.chown, p, -1, GRP), 'EPERM'),
            ('other chmod', as_user(OTHER, os.chmod, p, 0o777), 'EPERM'),
            ('other utime to a given time', as_user(OTHER, os.utime, p, (1, 1)), 'EPERM'),
        ]
        os.chmod(p, 0o666)
        rows.append(('other utime to now on a 0666 file', as_user(OTHER, os.utime, p), 'ok'))
        rows.append(('root gives it away', outcome(os.chown, p, OTHER, OGRP), 'ok'))
        self.assertTable(rows, 'chown/chgrp/chmod/utime rules')
        st = os.stat(p)
        self.assertEqual((st.st_uid, st.st_gid), (OTHER, OGRP))

    def test_move_dir_needs_write(self):
        os.chmod(self.d, 0o777)
        for n in ('a', 'b'):
            os.mkdir(self.p(n))
            os.chmod(self.p(n), 0o777)
        os.mkdir(self.p('a', 'rootdir'))        # root's, 0755: OTHER cannot write into it
        os.mkdir(self.p('a', 'hisdir'))
        os.chown(self.p('a', 'hisdir'), OTHER, OGRP)
        wfile(self.p('a', 'rootfile'), b'r')
        rows = [
            ('other moves root\'s dir to another parent',
             as_user(OTHER, os.rename, self.p('a', 'rootdir'), self.p('b', 'rootdir')), 'EACCES'),
            ('other renames root\'s dir in its parent',
             as_user(OTHER, os.rename, self.p('a', 'rootdir'), self.p('a', 'renamed')), 'ok'),
            ('other moves root\'s file to another parent',
             as_user(OTHER, os.rename, self.p('a', 'rootfile'), self.p('b', 'rootfile')), 'ok'),
            ('other moves its own dir to another parent',
             as_user(OTHER, os.rename, self.p('a', 'hisdir'), self.p('b', 'hisdir')), 'ok'),
        ]
        self.assertTable(rows, 'rename of directories by another user')
        self.assertEqual(sorted(os.listdir(self.p('a'))), ['renamed'])
        self.assertEqual(sorted(os.listdir(self.p('b'))), ['hisdir', 'rootfile'])

    def test_private_mount(self):
        if PLAIN:
            return
        m = new_mount(opts=())
        try:
            os.chmod(m.mnt, 0o777)
            wfile(m.path('open'), b'x', 0o777)
            os.chmod(m.path('open'), 0o777)
            os.mkdir(m.path('d'), 0o777)
            rows = []
            for uid in (OWNER, OTHER):
                for what, fn, args in (('stat the mount', os.stat, (m.mnt,)),
                                       ('list the mount', os.listdir, (m.mnt,)),
                                       ('read a 0777 file', try_read, (m.path('open'),)),
                                       ('create in a 0777 dir', wfile, (m.path('d', 'x'), b'')),
                                       ('read .ckptfs/status', try_read,
                                        (m.path('.ckptfs', 'status'),))):
                    rows.append(('%s as %s' % (what, NAMES[uid]), as_user(uid, fn, *args),
                                 'EACCES'))
            rows.append(('root lists the mount', outcome(os.listdir, m.mnt), 'ok'))
            rows.append(('root reads the file', outcome(try_read, m.path('open')), 'ok'))
            self.assertTable(rows, 'a mount without allow_other')
        finally:
            close_mount(m)


class RenameTest(Base):

    def test_onto_itself(self):
        os.makedirs(self.p('d', 'sub'))
        os.symlink('d', self.p('l'))
        wfile(self.p('a'), b'a')
        os.link(self.p('a'), self.p('b'))
        ino_d = os.stat(self.p('d')).st_ino
        os.rename(self.p('d'), self.p('d'))
        os.rename(self.p('l'), self.p('l'))
        self.assertEqual(os.stat(self.p('d')).st_ino, ino_d)
        self.assertEqual(os.readlink(self.p('l')), 'd')
        # two names of one inode: POSIX says rename does nothing, both names stay
        os.rename(self.p('a'), self.p('b'))
        self.assertEqual(sorted(os.listdir(self.d)), ['a', 'b', 'd', 'l'])
        self.assertEqual(os.stat(self.p('a')).st_nlink, 2)
        self.assertEqual(rfile(self.p('b')), b'a')
        self.assertErrno(errno.EEXIST, renameat2, self.p('a'), self.p('b'), RENAME_NOREPLACE)
        # a directory onto itself through a different path spelling
        os.rename(self.p('d', 'sub'), self.p('d', '..', 'd', 'sub'))
        self.assertTrue(os.path.isdir(self.p('d', 'sub')))

    def test_over_hard_link(self):
        wfile(self.p('new'), b'new bytes')
        wfile(self.p('old'), b'old bytes')
        os.link(self.p('old'), self.p('keep'))
        ino_old, ino_new = os.stat(self.p('old')).st_ino, os.stat(self.p('new')).st_ino
        os.rename(self.p('new'), self.p('old'))
        self.assertEqual(rfile(self.p('old')), b'new bytes')
        self.assertEqual(rfile(self.p('keep')), b'old bytes')
        st_keep, st_old = os.stat(self.p('keep')), os.stat(self.p('old'))
        self.assertEqual((st_keep.st_ino, st_keep.st_nlink), (ino_old, 1))
        self.assertEqual((st_old.st_ino, st_old.st_nlink), (ino_new, 1))
        self.remount()
        self.assertEqual(rfile(self.p('keep')), b'old bytes')
        self.assertEqual(os.stat(self.p('keep')).st_nlink, 1)

    def test_over_open_mmapped(self):
        old = content('old', 3 * (1 << 20) + 5)
        wfile(self.p('target'), old)
        fd = os.open(self.p('target'), os.O_RDWR)
        mm = mmap.mmap(fd, len(old), prot=mmap.PROT_READ)
        try:
            wfile(self.p('target.tmp'), b'replacement')
            os.rename(self.p('target.tmp'), self.p('target'))
            self.assertEqual(rfile(self.p('target')), b'replacement')
            self.assertEqual(mm[:], old, 'a mapping of the replaced file changed')
            self.assertEqual(os.pread(fd, len(old) + 10, 0), old)
            self.assertEqual(os.fstat(fd).st_nlink, 0)
            os.pwrite(fd, b'PATCH', 100)           # the orphan can still be written
            self.assertEqual(os.pread(fd, 5, 100), b'PATCH')
            self.assertEqual(rfile(self.p('target')), b'replacement')
        finally:
            mm.close()
            os.close(fd)
        self.assertEqual(sorted(os.listdir(self.d)), ['target'])
        self.assertEqual(rfile(self.p('target')), b'replacement')

    def test_across_dirs_same_name(self):
        for n in ('d1', 'd2'):
            os.mkdir(self.p(n))
        wfile(self.p('d1', 'x'), b'one')
        wfile(self.p('d2', 'x'), b'two')
        ino = os.stat(self.p('d1', 'x')).st_ino
        os.rename(self.p('d1', 'x'), self.p('d2', 'x'))
        self.assertEqual(os.listdir(self.p('d1')), [])
        self.assertEqual(os.listdir(self.p('d2')), ['x'])
        self.assertEqual(rfile(self.p('d2', 'x')), b'one')
        self.assertEqual(os.stat(self.p('d2', 'x')).st_ino, ino)
        os.rename(self.p('d2', 'x'), self.p('d1', 'x'))        # back, no target this time
        self.assertEqual(os.listdir(self.p('d2')), [])
        self.assertEqual(rfile(self.p('d1', 'x')), b'one')
        # a directory of the same name as its new parent's child file: EISDIR/ENOTDIR stay
        os.mkdir(self.p('d2', 'x'))
        self.assertErrno(errno.EISDIR, os.rename, self.p('d1', 'x'), self.p('d2', 'x'))

    def test_dir_over_empty_dir_nlink(self):
        for n in ('p1', 'p2'):
            os.mkdir(self.p(n))
        os.makedirs(self.p('p1', 'moving', 'child'))
        wfile(self.p('p1', 'moving', 'f'), b'f')
        os.mkdir(self.p('p2', 'empty'))
        nl = lambda *q: os.stat(self.p(*q)).st_nlink  # noqa: E731
        self.assertEqual((nl('p1'), nl('p2'), nl('p1', 'moving')), (3, 3, 3))
        m1 = os.stat(self.p('p1')).st_mtime_ns
        time.sleep(0.02)
        os.rename(self.p('p1', 'moving'), self.p('p2', 'empty'))
        self.assertEqual((nl('p1'), nl('p2'), nl('p2', 'empty')), (2, 3, 3))
        self.assertGreater(os.stat(self.p('p1')).st_mtime_ns, m1)
        self.assertEqual(os.stat(self.p('p2', 'empty', 'child', '..', '..')).st_ino,
                         os.stat(self.p('p2')).st_ino)
        self.assertEqual(rfile(self.p('p2', 'empty', 'f')), b'f')
        # and into a parent without a target: the new parent gains a link
        os.rename(self.p('p2', 'empty'), self.p('p1', 'back'))
        self.assertEqual((nl('p1'), nl('p2')), (3, 2))
        self.remount()
        self.assertEqual((nl('p1'), nl('p2'), nl('p1', 'back')), (3, 2, 3))

    def test_exchange(self):
        wfile(self.p('a'), b'A')
        wfile(self.p('b'), b'B')
        ia, ib = os.stat(self.p('a')).st_ino, os.stat(self.p('b')).st_ino
        try:
            renameat2(self.p('a'), self.p('b'), RENAME_EXCHANGE)
        except OSError as e:
            # a filesystem may not support it: then the answer must be clear and change nothing
            self.assertIn(e.errno, (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP), e)
            self.assertEqual((rfile(self.p('a')), rfile(self.p('b'))), (b'A', b'B'))
            return
        self.assertEqual((rfile(self.p('a')), rfile(self.p('b'))), (b'B', b'A'))
        self.assertEqual((os.stat(self.p('a')).st_ino, os.stat(self.p('b')).st_ino), (ib, ia))
        # a file and a directory in different parents
        os.makedirs(self.p('p1', 'dir', 'inner'))
        os.mkdir(self.p('p2'))
        wfile(self.p('p2', 'file'), b'F')
        renameat2(self.p('p1', 'dir'), self.p('p2', 'file'), RENAME_EXCHANGE)
        self.assertEqual(rfile(self.p('p1', 'dir')), b'F')
        self.assertTrue(os.path.isdir(self.p('p2', 'file', 'inner')))
        self.assertEqual(os.stat(self.p('p2', 'file', '..')).st_ino, os.stat(self.p('p2')).st_ino)
        self.assertEqual((os.stat(self.p('p1')).st_nlink, os.stat(self.p('p2')).st_nlink), (2, 3))
        self.assertEqual(sorted(os.listdir(self.p('p1'))), ['dir'])
        self.assertErrno(errno.ENOENT, renameat2, self.p('a'), self.p('missing'),
                         RENAME_EXCHANGE)
        self.assertErrno(errno.EINVAL, renameat2, self.p('p2'), self.p('p2', 'file', 'inner'),
                         RENAME_EXCHANGE)
        self.assertErrno(errno.EINVAL, renameat2, self.p('a'), self.p('b'),
                         RENAME_EXCHANGE | RENAME_NOREPLACE)
        if not PLAIN:           # ext4 and tmpfs make the whiteout (a 0:0 device) for root
            self.assertErrno((errno.EINVAL, errno.EPERM), renameat2, self.p('a'), self.p('c'),
                             RENAME_WHITEOUT)
            self.assertFalse(os.path.lexists(self.p('c')))
        self.remount()
        self.assertEqual((rfile(self.p('a')), rfile(self.p('b'))), (b'B', b'A'))
        self.assertEqual(rfile(self.p('p1', 'dir')), b'F')
        self.assertEqual(os.stat(self.p('p2', 'file', '..')).st_ino, os.stat(self.p('p2')).st_ino)


class NameTest(Base):

    def test_name_max(self):
        self.assertEqual(len(('\u65e5' * 85).encode()), 255)
        f255, u255, d255 = 'a' * 255, '\u65e5' * 85, 'd' * 255
        wfile(self.p(f255), b'255')
        wfile(self.p(u255), b'utf8')
        os.mkdir(self.p(d255))
        wfile(self.p(d255, f255), b'inner')
        os.symlink(f255, self.p('s' * 255))
        os.link(self.p(f255), self.p('h' * 255))
        os.rename(self.p(u255), self.p('r' * 255))
        self.assertEqual(sorted(os.listdir(self.d)),
                         sorted([f255, d255, 's' * 255, 'h' * 255, 'r' * 255]))
        self.assertEqual(rfile(self.p('s' * 255)), b'255')
        self.assertEqual(rfile(self.p('r' * 255)), b'utf8')
        self.assertEqual(rfile(self.p(d255, f255)), b'inner')
        x256 = 'x' * 256
        wfile(self.p('src'), b's')
        for what, fn, args in (('create', wfile, (self.p(x256), b'')),
                               ('open', os.open, (self.p(x256), os.O_RDONLY)),
                               ('stat', os.stat, (self.p(x256),)),
                               ('mkdir', os.mkdir, (self.p(x256),)),
                               ('symlink name', os.symlink, ('t', self.p(x256))),
                               ('link', os.link, (self.p('src'), self.p(x256))),
                               ('rename to', os.rename, (self.p('src'), self.p(x256))),
                               ('utf-8 256', wfile, (self.p('\u65e5' * 85 + 'x'), b'')),
                               ('inside a dir', wfile, (self.p(d255, x256), b''))):
            with self.subTest(what):
                self.assertErrno(errno.ENAMETOOLONG, fn, *args)
        self.assertEqual(rfile(self.p('src')), b's')
        self.remount()
        self.assertEqual(rfile(self.p('h' * 255)), b'255')
        self.assertEqual(rfile(self.p(d255, f255)), b'inner')

    def test_symlink_target_max(self):
        t = ('seg/' * 1024)[:4095]
        os.symlink(t, self.p('long'))
        self.assertEqual(os.readlink(self.p('long')), t)
        self.assertEqual(os.lstat(self.p('long')).st_size, 4095)
        self.assertErrno(errno.ENAMETOOLONG, os.symlink, t + 'x', self.p('toolong'))
        self.assertFalse(os.path.lexists(self.p('toolong')))
        self.remount()
        self.assertEqual(os.readlink(self.p('long')), t)

    def test_path_max(self):
        base = self.d
        comp = 'n' * 200
        p = base
        while len(os.path.join(p, comp, 'f' * 40)) < 4000:
            p = os.path.join(p, comp)
            os.mkdir(p)
        leaf = os.path.join(p, 'f' * 40)
        self.assertGreater(len(leaf), 3800)
        wfile(leaf, b'deep')
        self.assertEqual(os.stat(leaf).st_size, 4)
        self.assertEqual(rfile(leaf), b'deep')
        os.rename(leaf, leaf[:-1] + 'g')
        self.assertEqual(rfile(leaf[:-1] + 'g'), b'deep')
        # 4096 bytes and more: the kernel refuses the path itself
        too = os.path.join(p, 'z' * 150, 'z' * 150)
        self.assertGreaterEqual(len(too.encode()), 4096)
        self.assertErrno(errno.ENAMETOOLONG, wfile, too, b'')
        self.assertErrno(errno.ENAMETOOLONG, os.stat, os.path.join(p, 'y' * 200, 'y' * 200))
        os.unlink(leaf[:-1] + 'g')
        while p != base:
            os.rmdir(p)
            p = os.path.dirname(p)
        self.assertEqual(os.listdir(base), [])
        # deeper than PATH_MAX, one directory fd at a time
        names = ['x%02d' % i + 'y' * 247 for i in range(24)]
        fds = [os.open(base, os.O_RDONLY | os.O_DIRECTORY)]
        try:
            for n in names:
                os.mkdir(n, dir_fd=fds[-1])
                fds.append(os.open(n, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
            fd = os.open('leaf', os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fds[-1])
            os.write(fd, b'beyond PATH_MAX')
            os.close(fd)
        finally:
            for fd in fds:
                os.close(fd)
        rel = '/'.join(names) + '/leaf'
        self.assertGreater(len(rel), 6000)
        if not PLAIN:
            self.remount()
            p = self.m.ckptctl('ls', '/' + os.path.relpath(self.d, self.m.mnt) + '/' + rel)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn('xxh3-128', p.stdout)
        fds = [os.open(base, os.O_RDONLY | os.O_DIRECTORY)]
        try:
            for n in names:
                fds.append(os.open(n, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
            fd = os.open('leaf', os.O_RDONLY, dir_fd=fds[-1])
            self.assertEqual(os.read(fd, 100), b'beyond PATH_MAX')
            os.close(fd)
            os.unlink('leaf', dir_fd=fds[-1])
            for i in range(len(names) - 1, -1, -1):
                os.rmdir(names[i], dir_fd=fds[i])
        finally:
            for fd in fds:
                os.close(fd)
        self.assertEqual(os.listdir(base), [])

    def test_odd_names(self):
        d = os.fsencode(self.d)
        names = [b'new\nline', b'\n', b'tab\there', b'cr\r', b' ', b' lead and trail ',
                 b'-', b'-dash', b'--help', b'\x01\x1f\x7f ctl', b'\xff\xfe invalid',
                 b'\xc0\x80 overlong', b'\xed\xa0\x80 surrogate', b'...', b'..x', b'.hidden',
                 b'back\\slash', b'q"u\'o`te', b'*?[glob]', b'$HOME', b'\xe6\x97\xa5 utf-8',
                 b'\xf0\x9f\x98\x80 emoji']
        for n in names:
            wfile(os.path.join(d, n), n)
            os.mkdir(os.path.join(d, n + b'.d'))
            os.symlink(n, os.path.join(d, n + b'.l'))
        want = sorted(names + [n + b'.d' for n in names] + [n + b'.l' for n in names])

        def check():
            self.assertEqual(sorted(os.listdir(d)), want)
            for n in names:
                self.assertEqual(rfile(os.path.join(d, n)), n, n)
                self.assertEqual(os.readlink(os.path.join(d, n + b'.l')), n, n)
                self.assertEqual(rfile(os.path.join(d, n + b'.l')), n, n)
                self.assertTrue(os.path.isdir(os.path.join(d, n + b'.d')), n)
            # os.scandir gives the same bytes and d_type
            kinds = {e.name: ('d' if e.is_dir(follow_symlinks=False) else
                              'l' if e.is_symlink() else 'f') for e in os.scandir(d)}
            self.assertEqual(sorted(kinds), want)
            for n in names:
                self.assertEqual((kinds[n], kinds[n + b'.d'], kinds[n + b'.l']), ('f', 'd', 'l'))

        check()
        # rename each odd name to another odd name and back
        for n in names:
            os.rename(os.path.join(d, n), os.path.join(d, n + b'\n\xff'))
        self.assertNotIn(names[0], os.listdir(d))
        for n in names:
            os.rename(os.path.join(d, n + b'\n\xff'), os.path.join(d, n))
        if not PLAIN:
            self.remount()
        check()
        if PLAIN:
            return
        # ckptctl ls prints each name escaped as ls -b does (a newline in a name cannot fake a
        # line); --json gives every entry a name (valid UTF-8 as is, other bytes as U+FFFD)
        argv = [ckfs.ckptctl_bin(), self.m.store, 'ls', '/' + self._testMethodName]
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(p.stdout.splitlines()), 1 + len(want), 'one line per entry')
        for n in names:
            self.assertIn(ckfs.ctl_escaped(n), p.stdout)
        p = subprocess.run(argv[:1] + ['--json'] + argv[1:], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        ents = json.loads(p.stdout)['entries']
        self.assertEqual(len(ents), len(want))
        got = sorted(e.get('name') or '(no name)' for e in ents)
        self.assertEqual(got, sorted(n.decode(errors='replace') for n in want))


# -- races --------------------------------------------------------------------------------------

RACERS = 16
REC = 48                   # bytes per record on the shared result pipe (atomic: < PIPE_BUF)


def racer(k, go_r, res_w, schedule, d):
    """Child k: for each round, prepare, say ready, wait for its start byte, race, report."""
    def say(txt):
        os.write(res_w, txt.encode().ljust(REC))

    for r, kind in enumerate(schedule):
        target = os.path.join(d, '%s%03d' % (kind, r))
        src = os.path.join(d, 'src-%s%03d-%02d' % (kind, r, k))
        if kind in ('link', 'noreplace'):
            wfile(src, b'%d %d' % (k, os.getpid()))
        say('R %d %d' % (r, k))
        if os.read(go_r, 1) != b'G':
            os._exit(3)
        try:
            if kind == 'creat':
                fd = os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.write(fd, b'%d %d' % (k, os.getpid()))
                os.close(fd)
            elif kind == 'mkdir':
                os.mkdir(target)
            elif kind == 'link':
                os.link(src, target)
            else:
                renameat2(src, target, RENAME_NOREPLACE)
            out = 'ok'
        except OSError as e:
            out = ename(e.errno)
        say('X %d %d %s' % (r, k, out))
    os._exit(0)


class RaceTest(Base):

    def test_o_excl_race(self):
        schedule = ['creat'] * 50 + ['mkdir'] * 20 + ['link'] * 20 + ['noreplace'] * 20
        res_r, res_w = os.pipe()
        gos = []
        pids = []
        try:
            for k in range(RACERS):
                gos.append(os.pipe())
                pid = os.fork()
                if pid == 0:
                    try:
                        os.close(res_r)
                        racer(k, gos[k][0], res_w, schedule, self.d)
                    finally:
                        os._exit(2)
                pids.append(pid)
                os.close(gos[k][0])
            os.close(res_w)
            res_w = None
            ready = {}
            results = {}

            def pump():
                b = b''
                while len(b) < REC:
                    x = os.read(res_r, REC - len(b))
                    if not x:
                        raise AssertionError('a racer died (after %r)' % b)
                    b += x
                f = b.decode().split()
                r, k = int(f[1]), int(f[2])
                if f[0] == 'R':
                    ready[r] = ready.get(r, 0) + 1
                else:
                    results.setdefault(r, {})[k] = f[3]

            bad = []
            for r, kind in enumerate(schedule):
                while ready.get(r, 0) < RACERS:
                    pump()
                for _, w in gos:
                    os.write(w, b'G')
                while len(results.get(r, {})) < RACERS:
                    pump()
                outs = results[r]
                winners = [k for k, o in outs.items() if o == 'ok']
                others = sorted(set(o for o in outs.values() if o != 'ok'))
                target = self.p('%s%03d' % (kind, r))
                if len(winners) != 1 or others != ['EEXIST']:
                    bad.append('%s round %d: %d winners %r, others %r' % (kind, r, len(winners),
                                                                          winners, others))
                    continue
                w = winners[0]
                if kind == 'mkdir':
                    if not os.path.isdir(target):
                        bad.append('mkdir round %d: no directory' % r)
                    continue
                got = rfile(target).split()[0]
                if got != b'%d' % w:
                    bad.append('%s round %d: winner %d, the file says %r' % (kind, r, w, got))
                if kind == 'creat':
                    continue
                left = [k for k in range(RACERS)
                        if os.path.exists(self.p('src-%s%03d-%02d' % (kind, r, k)))]
                want_left = [k for k in range(RACERS) if kind == 'link' or k != w]
                if left != want_left:
                    bad.append('%s round %d: sources left %r' % (kind, r, left))
                if kind == 'link' and os.stat(target).st_nlink != 2:
                    bad.append('link round %d: nlink %d' % (r, os.stat(target).st_nlink))
            self.assertEqual(bad, [], '\n'.join(bad))
        finally:
            for fd in [res_r, res_w] + [w for _, w in gos]:
                if fd is not None:
                    os.close(fd)
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
                os.waitpid(pid, 0)
        print('\nrace: %d rounds of %d racers (%s): exactly one winner each' %
              (len(schedule), RACERS, ', '.join('%d %s' % (schedule.count(k), k) for k in
                                                ('creat', 'mkdir', 'link', 'noreplace'))))


class LinkTest(Base):

    def test_counts_across_dirs(self):
        for n in ('d1', 'd2', 'd3'):
            os.mkdir(self.p(n))
        wfile(self.p('d1', 'f'), b'shared')
        ctime0 = os.stat(self.p('d1', 'f')).st_ctime_ns
        time.sleep(0.02)
        names = [self.p('d1', 'f')]
        for i in range(12):
            q = self.p('d%d' % (i % 3 + 1), 'link%02d' % i)
            os.link(names[0], q)
            names.append(q)
        sts = [os.stat(q) for q in names]
        self.assertEqual(set(s.st_ino for s in sts), {sts[0].st_ino})
        self.assertEqual(set(s.st_nlink for s in sts), {13})
        self.assertGreater(sts[0].st_ctime_ns, ctime0, 'link() must update ctime')
        with open(names[5], 'r+b') as f:
            f.seek(0, 2)
            f.write(b'+more')
        for q in names:
            self.assertEqual(rfile(q), b'shared+more', q)
        self.remount()
        self.assertEqual(set(os.stat(q).st_nlink for q in names), {13})
        self.assertEqual(set(os.stat(q).st_ino for q in names), {sts[0].st_ino})
        for q in names[:-1]:
            os.unlink(q)
        st = os.stat(names[-1])
        self.assertEqual((st.st_nlink, st.st_ino), (1, sts[0].st_ino))
        self.assertEqual(rfile(names[-1]), b'shared+more')
        self.remount()
        self.assertEqual(os.stat(names[-1]).st_nlink, 1)
        self.assertEqual(rfile(names[-1]), b'shared+more')
        for n in ('d1', 'd2'):
            self.assertEqual(os.listdir(self.p(n)), [], n)

    def test_errors(self):
        os.mkdir(self.p('dir'))
        wfile(self.p('f'), b'f')
        rows = [
            ('link a directory', outcome(os.link, self.p('dir'), self.p('dirlink')), 'EPERM'),
            ('missing source', outcome(os.link, self.p('nope'), self.p('x')), 'ENOENT'),
            ('missing target dir', outcome(os.link, self.p('f'), self.p('nodir', 'x')),
             'ENOENT'),
            ('target exists', outcome(os.link, self.p('f'), self.p('dir')), 'EEXIST'),
            ('file as target dir', outcome(os.link, self.p('f'), self.p('f', 'x')), 'ENOTDIR'),
            ('256-byte name', outcome(os.link, self.p('f'), self.p('n' * 256)), 'ENAMETOOLONG'),
        ]
        # a symlink is linked itself, not its target
        os.symlink('f', self.p('sym'))
        os.link(self.p('sym'), self.p('sym2'), follow_symlinks=False)
        self.assertTrue(os.path.islink(self.p('sym2')))
        self.assertEqual(os.readlink(self.p('sym2')), 'f')
        self.assertEqual(os.lstat(self.p('sym')).st_nlink, 2)
        self.assertEqual(os.lstat(self.p('sym')).st_ino, os.lstat(self.p('sym2')).st_ino)
        self.assertEqual(os.stat(self.p('f')).st_nlink, 1)
        # an open file whose last name is gone cannot be linked back
        fd = os.open(self.p('f'), os.O_RDONLY)
        try:
            os.unlink(self.p('f'))
            rows.append(('link an unlinked open file',
                         outcome(linkat_follow, '/proc/self/fd/%d' % fd, self.p('back')),
                         'ENOENT'))
        finally:
            os.close(fd)
        # another uid: needs write and search on the target directory
        wfile(self.p('g'), b'g', 0o644)
        os.chown(self.p('g'), OTHER, OGRP)    # its own file: protected_hardlinks allows it
        os.chmod(self.d, 0o755)
        rows.append(('other links into a 0755 root dir',
                     as_user(OTHER, os.link, self.p('g'), self.p('g2')), 'EACCES'))
        if not PLAIN:
            rows.append(('link a .ckptfs file out',
                         'ok' if outcome(os.link, self.m.path('.ckptfs', 'status'),
                                         self.p('st')) == 'ok' else 'refused', 'refused'))
        self.assertTable(rows, 'link() errors')
        self.assertEqual(sorted(os.listdir(self.d)), ['dir', 'g', 'sym', 'sym2'])


# -- ckptfs only -------------------------------------------------------------------------------

@unittest.skipIf(PLAIN, 'ckptfs only')
class MetaTest(Base):

    def test_readonly(self):
        meta = self.m.path('.ckptfs')
        st = self.m.path('.ckptfs', 'status')
        q = self.m.path('.ckptfs', 'quarantine')
        wfile(self.p('f'), b'f')
        os.chmod(self.p('f'), 0o666)
        os.mkdir(self.p('e'))
        os.chmod(self.d, 0o777)
        ops = [
            ('create a file', wfile, (os.path.join(meta, 'new'), b'x')),
            ('open status O_WRONLY', try_write, (st,)),
            ('open status O_RDWR|O_TRUNC', os.open, (st, os.O_RDWR | os.O_TRUNC)),
            ('truncate status', os.truncate, (st, 0)),
            ('unlink status', os.unlink, (st,)),
            ('rename status within', os.rename, (st, os.path.join(meta, 's2'))),
            ('rename status out', os.rename, (st, self.p('s2'))),
            ('rename a file in', os.rename, (self.p('f'), os.path.join(meta, 'f'))),
            ('rename a file over status', os.rename, (self.p('f'), st)),
            ('mkdir', os.mkdir, (os.path.join(meta, 'd'),)),
            ('mkdir in quarantine', os.mkdir, (os.path.join(q, 'd'),)),
            ('rmdir quarantine', os.rmdir, (q,)),
            ('rename quarantine out', os.rename, (q, self.p('q'))),
            ('symlink', os.symlink, ('x', os.path.join(meta, 'l'))),
            ('link in', os.link, (self.p('f'), os.path.join(meta, 'f'))),
            ('utime status to now', os.utime, (st,)),
            # the kernel refuses others these by ownership (EPERM), the rest by mode (EACCES)
            ('chmod .ckptfs', os.chmod, (meta, 0o777)),
            ('chmod status', os.chmod, (st, 0o666)),
            ('chown quarantine', os.chown, (q, 1, 1)),
            ('utime status to a given time', os.utime, (st, (1, 1))),
        ]
        rows = []
        for what, fn, args in ops:
            rows.append((what + ' as root', outcome(fn, *args), 'EROFS'))
            rows.append((what + ' as other', as_user(OTHER, fn, *args),
                         'EPERM' if what.startswith(('chmod', 'chown', 'utime status to a'))
                         else 'EACCES'))
        self.assertTable(rows, 'writes into /.ckptfs')
        self.assertTrue(os.path.exists(self.p('f')))
        self.assertIn('store:', rfile(st).decode())
        self.assertEqual(as_user(OTHER, try_read, st), 'ok', 'others may read .ckptfs/status')

    def test_not_movable(self):
        meta = self.m.path('.ckptfs')
        ino = os.stat(meta).st_ino
        os.mkdir(self.p('e'))
        wfile(self.p('f'), b'f')
        rows = [
            ('rename .ckptfs away', outcome(os.rename, meta, self.p('moved')), 'EROFS'),
            ('rename .ckptfs within the root', outcome(os.rename, meta,
                                                       self.m.path('.ckptfs2')), 'EROFS'),
            ('rmdir .ckptfs', outcome(os.rmdir, meta), 'EROFS'),
            ('unlink .ckptfs', outcome(os.unlink, meta), ('EISDIR', 'EROFS')),
            ('rename an empty dir over .ckptfs', outcome(os.rename, self.p('e'), meta), 'EROFS'),
            ('rename a file over .ckptfs', outcome(os.rename, self.p('f'), meta),
             ('EISDIR', 'EROFS')),
            ('exchange a dir with .ckptfs', outcome(renameat2, self.p('e'), meta,
                                                    RENAME_EXCHANGE), 'EROFS'),
            ('exchange .ckptfs with a dir', outcome(renameat2, meta, self.p('e'),
                                                    RENAME_EXCHANGE), 'EROFS'),
            ('mkdir .ckptfs', outcome(os.mkdir, meta), 'EEXIST'),
            ('create .ckptfs', outcome(os.open, meta, os.O_CREAT | os.O_EXCL | os.O_WRONLY),
             'EEXIST'),
            ('symlink named .ckptfs', outcome(os.symlink, 'x', meta), 'EEXIST'),
        ]
        rows = [(w, got, got if isinstance(want, tuple) and got in want else want)
                for w, got, want in rows]
        self.assertTable(rows, '/.ckptfs itself')
        self.assertEqual(os.stat(meta).st_ino, ino)
        self.assertNotIn('.ckptfs', os.listdir(self.m.mnt))
        self.assertEqual(sorted(os.listdir(self.d)), ['e', 'f'])
        self.remount()
        self.assertIn('store:', rfile(self.m.path('.ckptfs', 'status')).decode())
        self.assertNotIn('.ckptfs', os.listdir(self.m.mnt))
        self.assertEqual(sorted(os.listdir(self.m.path('.ckptfs'))),
                         sorted(['quarantine', 'retained', 'snapshots', 'status', 'steps',
                                 'steps.json', 'metrics']))


@unittest.skipIf(PLAIN, 'ckptfs only')
class StoreTest(unittest.TestCase):

    def test_modes(self):
        with ckfs.Mount() as m:
            wfile(m.path('f'), content('f', 100000))
            self.assertEqual(stat.S_IMODE(os.stat(m.store).st_mode), 0o700)
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(m.store, 'index.db')).st_mode),
                             0o600)
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(m.store, 'chunks')).st_mode),
                             0o700)

    def test_refuses_writable(self):
        b = ckfs.ckptfs_bin()
        with ckfs.Mount() as m:
            wfile(m.path('f'), b'kept')
            m.unmount()
            for mode in (0o770, 0o707, 0o777, 0o720, 0o702):
                os.chmod(m.store, mode)
                r = ckfs.run([b, m.store, m.mnt], timeout=60)
                msg = (r.stderr + r.stdout).strip()
                with self.subTest(mode='%04o' % mode):
                    self.assertNotEqual(r.returncode, 0, 'mounted a %04o store' % mode)
                    self.assertFalse(ckfs.is_fuse_mounted(m.mnt))
                    if ckfs.is_fuse_mounted(m.mnt):
                        ckfs.run(['fusermount3', '-u', m.mnt], timeout=60)
                    self.assertEqual(len(msg.splitlines()), 1, 'want one line: %r' % msg)
                    self.assertIn('writable by group or others', msg)
                    self.assertIn('%04o' % mode, msg)
                    self.assertIn('chmod 0700', msg)
                    c = m.ckptctl('status')
                    self.assertEqual(c.returncode, 2, c.stdout)
                    self.assertIn('writable by group or others', c.stderr)
            self.assertEqual(stat.S_IMODE(os.stat(m.store).st_mode), 0o702, 'mode changed')
            for mode in (0o750, 0o755):
                os.chmod(m.store, mode)
                m.start()
                self.assertEqual(rfile(m.path('f')), b'kept')
                m.unmount()
            os.chmod(m.store, 0o700)
            m.start()


if __name__ == '__main__':
    faulthandler.dump_traceback_later(int(os.environ.get('CKPTFS_TEST_TIMEOUT', '1100')),
                                      exit=True)
    res = unittest.main(verbosity=2, exit=False).result
    print('posix-extra: %d tests, %d failures, %d errors, %d skipped' %
          (res.testsRun, len(res.failures), len(res.errors), len(res.skipped)))
    sys.exit(0 if res.wasSuccessful() else 1)
