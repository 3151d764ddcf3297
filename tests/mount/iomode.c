/*
 * iomode.c — one write through an I/O interface Python's standard library does not have, for
 * tests/mount/test_differential.py's I/O modes (issue 19): Linux AIO (libaio io_submit, buffered)
 * and io_uring (liburing, IORING_OP_WRITE).
 *
 * Usage: iomode {aio|uring} FILE OFFSET < DATA
 * Opens FILE O_WRONLY (it must exist), writes all of stdin at OFFSET with one request (repeated
 * for a short write), closes. Prints "ok SIZE" (the file's size after the write, from fstat) or
 * "err ERRNO" (the first errno a call returned), exit 0 either way; 2 on a usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <libaio.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Read all of stdin into an owned buffer. Returns its length, or -errno. */
static ssize_t read_stdin(char **ret)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);

	if (!buf)
		return -ENOMEM;
	for (;;) {
		if (len == cap) {
			char *p = realloc(buf, cap * 2);

			if (!p) {
				free(buf);
				return -ENOMEM;
			}
			buf = p;
			cap *= 2;
		}
		ssize_t n = read(0, buf + len, cap - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			free(buf);
			return -errno;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	*ret = buf;
	return (ssize_t)len;
}

/* One pwrite of buf[0, len) at off through Linux AIO. Returns bytes written or -errno. */
static ssize_t aio_write(int fd, const char *buf, size_t len, long long off)
{
	io_context_t ctx = 0;
	struct iocb cb, *cbs[1] = { &cb };
	struct io_event ev;
	int rc = io_setup(1, &ctx);

	if (rc < 0)
		return rc;
	io_prep_pwrite(&cb, fd, (void *)buf, len, off);
	rc = io_submit(ctx, 1, cbs);
	if (rc == 1)
		rc = io_getevents(ctx, 1, 1, &ev, NULL);
	io_destroy(ctx);
	if (rc < 0)
		return rc;
	if (rc != 1)
		return -EIO;
	return (ssize_t)(long)ev.res; /* res is the result of the write: bytes or -errno */
}

/* One write of buf[0, len) at off through io_uring. Returns bytes written or -errno. */
static ssize_t uring_write(int fd, const char *buf, size_t len, long long off)
{
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	ssize_t res;
	int rc = io_uring_queue_init(2, &ring, 0);

	if (rc < 0)
		return rc;
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

	io_uring_prep_write(sqe, fd, buf, (unsigned)len, (__u64)off);
	rc = io_uring_submit(&ring);
	if (rc >= 0)
		rc = io_uring_wait_cqe(&ring, &cqe);
	if (rc < 0) {
		io_uring_queue_exit(&ring);
		return rc;
	}
	res = cqe->res;
	io_uring_cqe_seen(&ring, cqe);
	io_uring_queue_exit(&ring);
	return res;
}

int main(int argc, char **argv)
{
	char *buf = NULL, *end;
	struct stat st;
	ssize_t len;
	long long off;
	int fd, err = 0;

	if (argc != 4 || (strcmp(argv[1], "aio") && strcmp(argv[1], "uring"))) {
		fprintf(stderr, "usage: iomode {aio|uring} FILE OFFSET < DATA\n");
		return 2;
	}
	off = strtoll(argv[3], &end, 10);
	if (*end || off < 0) {
		fprintf(stderr, "iomode: bad offset '%s'\n", argv[3]);
		return 2;
	}
	if ((len = read_stdin(&buf)) < 0) {
		fprintf(stderr, "iomode: cannot read stdin: %s\n", strerror((int)-len));
		return 2;
	}
	if ((fd = open(argv[2], O_WRONLY | O_CLOEXEC)) < 0) {
		printf("err %d\n", errno);
		free(buf);
		return 0;
	}
	for (size_t done = 0; done < (size_t)len || len == 0;) {
		ssize_t n = argv[1][0] == 'a' ? aio_write(fd, buf + done, (size_t)len - done, off + (long long)done)
					      : uring_write(fd, buf + done, (size_t)len - done, off + (long long)done);

		if (n < 0) {
			err = (int)-n;
			break;
		}
		if (n == 0 || len == 0)
			break;
		done += (size_t)n;
	}
	if (!err && fstat(fd, &st) < 0)
		err = errno;
	if (close(fd) < 0 && !err)
		err = errno;
	if (err)
		printf("err %d\n", err);
	else
		printf("ok %lld\n", (long long)st.st_size);
	free(buf);
	return 0;
}
