/* SPDX-License-Identifier: MIT */
/*
 * array.c — growing the caller's arrays (one helper for the daemon, the policy and ckptctl).
 */
#include "fs/ckptfs.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

int ckpt_grow(void *vp, size_t *cap, size_t n, size_t elem)
{
	void **v = vp;
	size_t nc;
	void *p;

	if (n < *cap)
		return 0;
	nc = *cap ? 2 * *cap : 16;
	if (nc > SIZE_MAX / elem)
		return -ENOMEM;
	p = realloc(*v, nc * elem);
	if (!p)
		return -ENOMEM;
	*v = p;
	*cap = nc;
	return 0;
}
