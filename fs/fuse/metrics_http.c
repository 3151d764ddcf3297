/* SPDX-License-Identifier: MIT */
/*
 * metrics_http.c — -o metrics=ADDR:PORT: the content of MOUNTPOINT/.ckptfs/metrics served over
 * HTTP at http://ADDR:PORT/metrics for Prometheus to scrape, by libmicrohttpd (one internal
 * polling thread; a scrape renders under fs->mu like a read of the file).
 * Why a server and not node_exporter's textfile collector: the figures come from the daemon's
 * own memory (the write buffer, the latency histograms), which a textfile would only copy on a
 * timer, and a scrape target per mount is how Prometheus tells a stopped daemon (up == 0) from
 * an idle one.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "fs/core/lockrank.h"
#include "fs/fuse/fuse_int.h"

/*
 * Connections: at most METRICS_CONNS at once, of them at most METRICS_CONNS_PER_IP from one
 * address, so that slow clients of one host (a byte every few seconds keeps a connection alive,
 * slowloris) cannot take every slot from a scraper; a connection idle METRICS_IDLE_S seconds is
 * closed (a scrape sends its request at once and reads a reply of a few KiB).
 */
#define METRICS_CONNS 16u
#define METRICS_CONNS_PER_IP 4u
#define METRICS_IDLE_S 3u

struct fs_metrics {
	struct ckfs *fs;
	struct MHD_Daemon *d;
};

/* Prometheus text exposition format 0.0.4 */
#define METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Queue len bytes of body as the answer (MUST_FREE: the response frees body, also on failure). */
static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *type,
			     void *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
	enum MHD_Result ret;

	if (!r) {
		if (mode == MHD_RESPMEM_MUST_FREE)
			free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ret = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return ret;
}

/* A fixed plain-text answer (an error). */
static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned code, const char *text)
{
	return reply(c, code, "text/plain; charset=utf-8", (void *)text, strlen(text),
		     MHD_RESPMEM_PERSISTENT);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_len, void **req)
{
	struct fs_metrics *m = cls;
	struct idx_stats st;
	char *buf = NULL;
	size_t len = 0;
	int rc;

	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics\n");
	if (strcmp(url, "/metrics") != 0)
		return reply_text(c, MHD_HTTP_NOT_FOUND, "not found: the metrics are at /metrics\n");
	bool have = fs_meta_stats(m->fs, META_METRICS, true, &st) > 0; /* before the lock */

	ckpt_lock(&m->fs->mu, CKPT_RANK_FS);
	rc = fs_meta_render(m->fs, META_METRICS, have ? &st : NULL, &buf, &len);
	ckpt_unlock(&m->fs->mu, CKPT_RANK_FS);
	if (rc < 0) {
		ckpt_log("metrics: cannot render for a scrape: %s\n", strerror(-rc));
		return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot read the index\n");
	}
	return reply(c, MHD_HTTP_OK, METRICS_TYPE, buf, len, MHD_RESPMEM_MUST_FREE);
}

/* Parse "ADDR:PORT" ("[v6]:PORT" for IPv6; ADDR a numeric address or a host name) into ss. */
static int parse_addr(const char *spec, struct sockaddr_storage *ss, char *err, size_t cap)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	size_t hl;

	if (!colon || colon == spec || !colon[1]) {
		snprintf(err, cap, "'%s' is not ADDR:PORT (e.g. 127.0.0.1:9464)", spec);
		return -EINVAL;
	}
	hl = (size_t)(colon - spec);
	if (spec[0] == '[' && hl >= 2 && spec[hl - 1] == ']') {
		spec++;
		hl -= 2;
	}
	if (hl >= sizeof(host)) {
		snprintf(err, cap, "address '%.*s' is too long", (int)hl, spec);
		return -ENAMETOOLONG;
	}
	memcpy(host, spec, hl);
	host[hl] = 0;

	char *end;
	long port = strtol(colon + 1, &end, 10);

	if (*end || port < 1 || port > 65535) {
		snprintf(err, cap, "port '%s' is not 1..65535", colon + 1);
		return -EINVAL;
	}
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	int g = getaddrinfo(host, colon + 1, &hints, &ai);

	if (g != 0) {
		snprintf(err, cap, "address '%s': %s", host, gai_strerror(g));
		return -EINVAL;
	}
	memcpy(ss, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	return 0;
}

/* Whether ss is a loopback address: 127.0.0.0/8, ::1, or ::ffff:127.0.0.0/104. */
static bool is_loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
	if (ss->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;

		return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

/*
 * libmicrohttpd's own messages (a connection aborted, a malformed request) are the peers' doing:
 * at most 10 a minute reach the log, the others are counted (ckpt_logv_limited).
 */
static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	static struct ckpt_ratelimit rl = CKPT_RATELIMIT_INIT(60, 10);

	(void)cls;
	ckpt_logv_limited(&rl, fmt, ap);
}

struct fs_metrics *fs_metrics_start(struct ckfs *fs, const char *spec, char *err, size_t cap)
{
	struct sockaddr_storage ss = { 0 };
	struct fs_metrics *m;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;

	if (parse_addr(spec, &ss, err, cap) < 0)
		return NULL;
	if (!is_loopback(&ss)) /* the figures name steps and paths: say who may read them */
		ckpt_log("warning: metrics on %s are served to every host that reaches it, not only "
			 "this one (loopback); use -o metrics=127.0.0.1:PORT unless a firewall "
			 "guards the port\n", spec);
	if (!(m = calloc(1, sizeof(*m)))) {
		snprintf(err, cap, "out of memory");
		return NULL;
	}
	m->fs = fs;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	errno = 0;
	m->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, m, MHD_OPTION_SOCK_ADDR,
				(struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT, METRICS_CONNS,
				MHD_OPTION_PER_IP_CONNECTION_LIMIT, METRICS_CONNS_PER_IP,
				MHD_OPTION_CONNECTION_TIMEOUT, METRICS_IDLE_S,
				MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
	if (!m->d) {
		snprintf(err, cap, "cannot listen on %s: %s (is the port in use? choose another "
			 "with -o metrics=ADDR:PORT)", spec, errno ? strerror(errno) : "refused");
		free(m);
		return NULL;
	}
	return m;
}

void fs_metrics_stop(struct fs_metrics *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->d);
	free(m);
}
