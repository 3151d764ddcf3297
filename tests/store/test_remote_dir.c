/*
 * test_remote_dir.c — the directory backend of store/remote/remote.h on a temporary directory:
 * the shared contract (tests/lib/remote_contract.h), racing put_if_absent, the files it leaves,
 * and remote_open's checks and messages.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/lib/ctest.h"
#include "tests/lib/remote_contract.h"

static char root[64];
static struct remote *r;

static void setup(void)
{
	char err[256];
	int rc;

	ct_tmpdir(root, sizeof(root), "ckptfs-remote");
	rc = remote_open(root, NULL, &r, err, sizeof(err));
	cr_assert_eq(rc, 0, "remote_open '%s': %s", root, err);
}

static void teardown(void)
{
	remote_close(r);
	r = NULL;
	ct_rmtree(root);
}

TestSuite(remote_dir, .init = setup, .fini = teardown);

Test(remote_dir, basic)
{
	rc_basic(r, "k/");
}

Test(remote_dir, list)
{
	rc_list(r, "l/");
}

Test(remote_dir, list_after)
{
	rc_list_after(r, "la/");
}

Test(remote_dir, race_put_if_absent)
{
	struct remote *rs[2] = { r, NULL };
	char url[128], err[256], key[64];
	int round;

	snprintf(url, sizeof(url), "file://%s", root);
	cr_assert_eq(remote_open(url, NULL, &rs[1], err, sizeof(err)), 0, "%s", err);
	for (round = 0; round < 20; round++) {
		snprintf(key, sizeof(key), "race/%d/commit", round);
		rc_race(rs, 2, key, 8);
	}
	remote_close(rs[1]);
}

/* No temporary file is left behind, whatever put_if_absent answered. */
static int count_tmp(const char *dir)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int n = 0;

	cr_assert_not_null(d, "opendir %s", dir);
	while ((de = readdir(d)))
		n += strncmp(de->d_name, ".tmp-", 5) == 0;
	closedir(d);
	return n;
}

Test(remote_dir, files_on_disk)
{
	char path[256];
	struct stat st;

	cr_assert_eq(remote_put_if_absent(r, "x/y/z", "abc", 3), 0);
	cr_assert_eq(remote_put_if_absent(r, "x/y/z", "defg", 4), -EEXIST);
	cr_assert_eq(remote_put(r, "x/y/w", "defg", 4), 0);
	snprintf(path, sizeof(path), "%s/x/y/z", root);
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_size, 3);
	snprintf(path, sizeof(path), "%s/x/y", root);
	cr_assert_eq(count_tmp(path), 0);

	/* A stray temporary file (a crashed writer) is not an object. */
	snprintf(path, sizeof(path), "%s/x/y/.tmp-0123", root);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fclose(f);
	struct rk_seen s = { .base = "" };
	cr_assert_eq(remote_list(r, "", rk_collect, &s), 0);
	cr_assert_eq(s.n, 2);

	/* A key cannot also be a directory of keys here (remote.h). */
	cr_assert_eq(remote_put_if_absent(r, "x/y", "d", 1), -EEXIST);
	cr_assert_eq(remote_put(r, "x/y/z/deeper", "d", 1), -EEXIST);
}

/* remote_get refuses a file larger than the call accepts, by its size, before reading it. */
Test(remote_dir, get_bounded)
{
	char path[256], err[256];
	struct remote_call call = { .max_len = 3, .err = err, .errlen = sizeof(err) };
	void *buf = NULL;
	size_t len = 0;
	int fd;

	cr_assert_eq(remote_put(r, "big/three", "abc", 3), 0);
	cr_assert_eq(remote_get_with(r, "big/three", &call, &buf, &len), 0, "%s", err);
	cr_assert_eq(len, 3);
	free(buf);
	buf = NULL;
	cr_assert_eq(remote_put(r, "big/four", "abcd", 4), 0);
	cr_assert_eq(remote_get_with(r, "big/four", &call, &buf, &len), -EFBIG);
	cr_assert_not_null(strstr(err, "big/four"), "message: %s", err);
	cr_assert_null(buf);

	/* the default cap, with a sparse file one byte above it */
	snprintf(path, sizeof(path), "%s/big/sparse", root);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)REMOTE_GET_MAX + 1), 0);
	close(fd);
	cr_assert_eq(remote_get(r, "big/sparse", &buf, &len), -EFBIG);
	cr_assert_null(buf);

	/* a deadline changes nothing here (remote_dir.c invariant 4) */
	call = (struct remote_call){ .deadline_ms = 1 };
	cr_assert_eq(remote_get_with(r, "big/three", &call, &buf, &len), 0);
	free(buf);
}

Test(remote_dir, open_errors)
{
	struct remote *x = NULL;
	char err[512], path[128];

	cr_assert_eq(remote_open("/nonexistent/ckptfs-remote", NULL, &x, err, sizeof(err)),
		     -ENOENT);
	cr_assert_not_null(strstr(err, "/nonexistent/ckptfs-remote"), "%s", err);
	snprintf(path, sizeof(path), "%s/file", root);
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	fclose(f);
	cr_assert_eq(remote_open(path, NULL, &x, err, sizeof(err)), -ENOTDIR);
	cr_assert_eq(remote_open("relative/dir", NULL, &x, err, sizeof(err)), -EINVAL);
	cr_assert_eq(remote_open("file://relative", NULL, &x, err, sizeof(err)), -EINVAL);
	cr_assert_eq(remote_open("ftp://host/x", NULL, &x, err, sizeof(err)), -EINVAL);
	cr_assert_eq(remote_open("s3://ab", NULL, &x, err, sizeof(err)), -EINVAL);
	cr_assert_null(x);
	remote_close(NULL);
	if (geteuid() != 0) { /* root passes access(2) whatever the mode */
		snprintf(path, sizeof(path), "%s/ro", root);
		cr_assert_eq(mkdir(path, 0555), 0);
		cr_assert_eq(remote_open(path, NULL, &x, err, sizeof(err)), -EACCES);
	}
}
