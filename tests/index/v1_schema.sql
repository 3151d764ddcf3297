-- The v1 index schema exactly as commit 9938488 created it, with a few rows: a frozen
-- fixture, independent of the current code, so that the v1 -> v3 migration keeps being tested
-- against the real thing (test_steps.c, suite migrate). Root, a directory, a 5-byte file of one
-- chunk, a symlink.
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta(key, value) VALUES('format', 'ckptfs-index');
CREATE TABLE inodes( ino INTEGER PRIMARY KEY AUTOINCREMENT, mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL, nlink INTEGER NOT NULL, size INTEGER NOT NULL, atime_ns INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, ctime_ns INTEGER NOT NULL, rdev INTEGER NOT NULL DEFAULT 0, hash BLOB, symlink BLOB);
CREATE TABLE dentries( cookie INTEGER PRIMARY KEY AUTOINCREMENT, parent INTEGER NOT NULL REFERENCES inodes(ino), name BLOB NOT NULL, ino INTEGER NOT NULL REFERENCES inodes(ino), UNIQUE(parent, name));
CREATE INDEX dentries_ino ON dentries(ino);
CREATE INDEX dentries_parent_cookie ON dentries(parent, cookie);
CREATE TABLE chunks( hash BLOB PRIMARY KEY, raw_size INTEGER NOT NULL, stored_size INTEGER NOT NULL, codec INTEGER NOT NULL, refs INTEGER NOT NULL, bad INTEGER NOT NULL DEFAULT 0, created_ns INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE extents( ino INTEGER NOT NULL REFERENCES inodes(ino), offset INTEGER NOT NULL, length INTEGER NOT NULL, hash BLOB NOT NULL REFERENCES chunks(hash), PRIMARY KEY(ino, offset)) WITHOUT ROWID;
CREATE INDEX extents_hash ON extents(hash);
INSERT INTO inodes(ino, mode, uid, gid, nlink, size, atime_ns, mtime_ns, ctime_ns, rdev)  VALUES(1, 16877, 1000, 1001, 3, 0, 11, 11, 11, 0);
INSERT INTO inodes(ino, mode, uid, gid, nlink, size, atime_ns, mtime_ns, ctime_ns, rdev)  VALUES(2, 16877, 1000, 1001, 2, 0, 12, 12, 12, 0);
INSERT INTO inodes(ino, mode, uid, gid, nlink, size, atime_ns, mtime_ns, ctime_ns, rdev, hash) VALUES(3, 33188, 1000, 1001, 1, 5, 13, 13, 13, 0, x'00112233445566778899aabbccddeeff');
INSERT INTO inodes(ino, mode, uid, gid, nlink, size, atime_ns, mtime_ns, ctime_ns, rdev, symlink) VALUES(4, 41471, 1000, 1001, 1, 3, 14, 14, 14, 0, x'616263');
INSERT INTO dentries(parent, name, ino) VALUES(1, x'697465725f30303030313030', 2);
INSERT INTO dentries(parent, name, ino) VALUES(2, x'6d6f64656c2e7074', 3);
INSERT INTO dentries(parent, name, ino) VALUES(1, x'6c6e', 4);
INSERT INTO chunks VALUES(x'ffeeddccbbaa99887766554433221100', 5, 4, 2, 1, 0, 13);
INSERT INTO extents VALUES(3, 0, 5, x'ffeeddccbbaa99887766554433221100');
PRAGMA user_version = 1;
