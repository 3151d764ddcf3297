/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of fs/node/lease.c, the gc protocol's leases: the text round-trips, the judgement
 * at and around the expiry (doubt counts as live: lease.c invariant 2), what does not parse,
 * and reads and writes over a directory remote on a temporary directory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "fs/node/lease.h"
#include "tests/lib/ctest.h"

#define S 1000000000LL

Test(lease, format_parse_round_trip)
{
	struct lease a, b;
	char text[LEASE_TEXT_MAX];
	int len;

	lease_init(&a, "ckptctl remote gc", LEASE_GC_EXPIRY_S, 1700000000 * S + 5);
	a.renewed_ns += 60 * S;
	len = lease_format(&a, text, sizeof(text));
	cr_assert_gt(len, 0);
	cr_assert_eq((size_t)len, strlen(text));
	cr_assert_not_null(strstr(text, "\"format\":\"" LEASE_FORMAT "\""), "%s", text);
	cr_assert_eq(lease_parse(text, (size_t)len, &b), 0, "%s", text);
	cr_assert_str_eq(b.holder, "ckptctl remote gc");
	cr_assert_str_eq(b.host, a.host);
	cr_assert_eq(b.pid, (int64_t)getpid());
	cr_assert_eq(b.created_ns, a.created_ns);
	cr_assert_eq(b.renewed_ns, a.renewed_ns);
	cr_assert_eq(b.expiry_s, LEASE_GC_EXPIRY_S);
	cr_assert(lease_same(&a, &b));
	b.renewed_ns += S; /* a renewal: the same holder's lease */
	cr_assert(lease_same(&a, &b));
	b.created_ns += 1; /* taken again: another lease */
	cr_assert_not(lease_same(&a, &b));
	cr_assert_eq(lease_format(&a, text, 16), -ENAMETOOLONG);
}

Test(lease, judge_at_the_expiry)
{
	struct lease l;
	int64_t t = 1700000000 * S;

	lease_init(&l, "x", 900, t);
	cr_assert_eq(lease_judge(&l, t), LEASE_LIVE);
	cr_assert_eq(lease_judge(&l, t + 900 * S), LEASE_LIVE, "at the expiry: still live");
	cr_assert_eq(lease_judge(&l, t + 900 * S + 1), LEASE_STALE);
	cr_assert_eq(lease_judge(&l, t - 3600 * S), LEASE_LIVE, "renewed in the future: live");
	cr_assert_eq(lease_judge(&l, INT64_MAX), LEASE_STALE);
	l.renewed_ns = t + 600 * S; /* renewed: judged from the renewal, not the creation */
	cr_assert_eq(lease_judge(&l, t + 1000 * S), LEASE_LIVE);
	l.renewed_ns = INT64_MIN + 1;
	l.created_ns = INT64_MIN + 1;
	cr_assert_eq(lease_judge(&l, INT64_MAX), LEASE_STALE, "no overflow");
}

Test(lease, what_does_not_parse)
{
	static const char *const bad[] = {
		"",   /* the empty markers of ckptfs before this format */
		"ckptctl pid 12 on h\n", /* the text leases of ckptctl before this format */
		"{}",
		"{\"format\":\"ckptfs-lease/2\",\"created_ns\":1,\"expiry_s\":9}",
		"{\"format\":\"ckptfs-lease/1\",\"expiry_s\":9}",
		"{\"format\":\"ckptfs-lease/1\",\"created_ns\":1}",
		"{\"format\":\"ckptfs-lease/1\",\"created_ns\":1,\"expiry_s\":0}",
		"{\"format\":\"ckptfs-lease/1\",\"created_ns\":1,\"expiry_s\":\"9\"}",
		"{\"format\":\"ckptfs-lease/1\",\"created_ns\":5,\"renewed_ns\":4,\"expiry_s\":9}",
		"{\"format\":\"ckptfs-lease/1\",\"created_ns\":1,\"expiry_s\":9000000000000}",
	};
	struct lease l = { .pid = 77 };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(lease_parse(bad[i], strlen(bad[i]), &l), -EBADMSG, "%s", bad[i]);
		cr_assert_eq(l.pid, 77, "untouched on failure");
	}
	/* the fields a reader needs only: the others default */
	const char *min = "{\"format\":\"ckptfs-lease/1\",\"created_ns\":5,\"expiry_s\":9}";

	cr_assert_eq(lease_parse(min, strlen(min), &l), 0);
	cr_assert_eq(l.renewed_ns, 5);
	cr_assert_str_eq(l.holder, "?");
}

Test(lease, describe)
{
	struct lease l;
	char buf[256];

	lease_init(&l, "ckptfs node 'a'", 60, 1700000000 * S);
	snprintf(l.host, sizeof(l.host), "n1");
	l.pid = 42;
	cr_assert_str_eq(lease_describe(&l, buf, sizeof(buf)),
			 "'ckptfs node 'a'' pid 42 on 'n1' since 2023-11-14T22:13:20Z");
}

Test(lease, read_and_put_on_a_directory_remote)
{
	char root[64], err[256];
	struct remote *r;
	struct lease mine, got, other;
	int64_t now = lease_now_ns();

	ct_tmpdir(root, sizeof(root), "ckptfs-lease");
	cr_assert_eq(remote_open(root, NULL, &r, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(lease_read(r, LEASE_GC_KEY, now, &got), LEASE_ABSENT);
	lease_init(&mine, "ckptctl remote gc", LEASE_GC_EXPIRY_S, now);
	cr_assert_eq(lease_put(r, LEASE_GC_KEY, &mine, true), 0);
	cr_assert_eq(lease_put(r, LEASE_GC_KEY, &mine, true), -EEXIST, "one holder at a time");
	cr_assert_eq(lease_read(r, LEASE_GC_KEY, now, &got), LEASE_LIVE);
	cr_assert(lease_same(&got, &mine));
	cr_assert_eq(lease_read(r, LEASE_GC_KEY, now + (LEASE_GC_EXPIRY_S + 1) * S, &got),
		     LEASE_STALE);
	/* a takeover replaces it */
	lease_init(&other, "ckptctl remote gc", LEASE_GC_EXPIRY_S, now + 1);
	cr_assert_eq(lease_put(r, LEASE_GC_KEY, &other, false), 0);
	cr_assert_eq(lease_read(r, LEASE_GC_KEY, now, &got), LEASE_LIVE);
	cr_assert_not(lease_same(&got, &mine));
	/* an empty marker of an older ckptfs: no age to judge */
	cr_assert_eq(remote_put(r, "uploads/a/0-1", "", 0), 0);
	cr_assert_eq(lease_read(r, "uploads/a/0-1", now, &got), -EBADMSG);
	remote_close(r);
	ct_rmtree(root);
}
