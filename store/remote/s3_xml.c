/*
 * s3_xml.c — the S3 XML answers the backend reads, parsed with libxml2 (no network access, no
 * entity expansion): Error, ListBucketResult (ListObjectsV2), InitiateMultipartUploadResult.
 * Elements are matched by local name, whatever their namespace (AWS and RGW both use
 * http://s3.amazonaws.com/doc/2006-03-01/ but error documents have none).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "store/remote/s3_int.h"

static xmlDocPtr parse(const char *xml, size_t len)
{
	if (!xml || len == 0 || len > INT32_MAX)
		return NULL;
	return xmlReadMemory(xml, (int)len, "s3.xml", NULL,
			     XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
}

static bool is(const xmlNode *n, const char *name)
{
	return n->type == XML_ELEMENT_NODE && strcmp((const char *)n->name, name) == 0;
}

/* The first child element of n named name, or NULL. */
static xmlNode *child(const xmlNode *n, const char *name)
{
	xmlNode *c;

	for (c = n->children; c; c = c->next)
		if (is(c, name))
			return c;
	return NULL;
}

/* The text of n's child element name (malloc'd by libxml2: xmlFree), or NULL. */
static char *child_text(const xmlNode *n, const char *name)
{
	xmlNode *c = child(n, name);

	return c ? (char *)xmlNodeGetContent(c) : NULL;
}

void s3_xml_error_code(const char *xml, size_t len, char *code, size_t cap)
{
	xmlDocPtr doc = parse(xml, len);
	xmlNode *root = doc ? xmlDocGetRootElement(doc) : NULL;
	char *c = root && is(root, "Error") ? child_text(root, "Code") : NULL;

	snprintf(code, cap, "%s", c ? c : "");
	xmlFree(c);
	xmlFreeDoc(doc);
}

/* Report one <Contents> element to fn. */
static int list_one(const xmlNode *n, size_t strip, remote_list_fn fn, void *arg)
{
	char *key = child_text(n, "Key"), *size = child_text(n, "Size"), *end = NULL;
	unsigned long long sz = 0;
	int rc = -EPROTO;

	if (key && size) {
		errno = 0;
		sz = strtoull(size, &end, 10);
		if (errno == 0 && end != size && *end == '\0')
			rc = strlen(key) > strip ? fn(key + strip, (uint64_t)sz, arg) : 0;
	}
	xmlFree(key);
	xmlFree(size);
	return rc;
}

int s3_xml_list(const char *xml, size_t len, size_t strip, remote_list_fn fn, void *arg,
		char **ret_token)
{
	xmlDocPtr doc = parse(xml, len);
	xmlNode *root = doc ? xmlDocGetRootElement(doc) : NULL, *n;
	char *trunc = NULL, *token = NULL;
	int rc = 0;

	if (!root || !is(root, "ListBucketResult")) {
		xmlFreeDoc(doc);
		return -EPROTO;
	}
	for (n = root->children; n && rc == 0; n = n->next)
		if (is(n, "Contents"))
			rc = list_one(n, strip, fn, arg);
	if (rc == 0) {
		*ret_token = NULL;
		trunc = child_text(root, "IsTruncated");
		if (trunc && strcmp(trunc, "true") == 0) {
			token = child_text(root, "NextContinuationToken");
			if (!token || !token[0])
				rc = -EPROTO;
			else if (!(*ret_token = strdup(token)))
				rc = -ENOMEM;
		}
	}
	xmlFree(trunc);
	xmlFree(token);
	xmlFreeDoc(doc);
	return rc;
}

int s3_xml_upload_id(const char *xml, size_t len, char **ret_id)
{
	xmlDocPtr doc = parse(xml, len);
	xmlNode *root = doc ? xmlDocGetRootElement(doc) : NULL;
	char *id = root && is(root, "InitiateMultipartUploadResult") ? child_text(root, "UploadId")
								     : NULL;
	int rc = -EPROTO;

	if (id && id[0]) {
		*ret_id = strdup(id);
		rc = *ret_id ? 0 : -ENOMEM;
	}
	xmlFree(id);
	xmlFreeDoc(doc);
	return rc;
}
