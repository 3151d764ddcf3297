/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of fs/node/rgc.c, the remote's gc that ckptctl and the node thread share: the rule
 * choosing the steps whose manifests go (rgc.h: the newest keep global steps stay, and every
 * step newer than the newest global one), and rule 5 on the parts the manifests name.
 */
#include <stdio.h>
#include <string.h>

#include <criterion/criterion.h>

#include "fs/node/rgc.h"

static void no_say(void *arg, enum rgc_say kind, const char *line)
{
	(void)arg;
	(void)kind;
	(void)line;
}

/* Step (kind 0) with its parts "a* b ..." in c->steps. */
static void add_step(struct rgc *c, struct rgc_step *v, int64_t step, const char *nodes)
{
	v[c->nsteps] = (struct rgc_step){ .kind = 0, .step = step };
	snprintf(v[c->nsteps].nodes, sizeof(v[c->nsteps].nodes), "%s", nodes);
	c->nsteps++;
}

static bool doomed(const struct rgc *c, int64_t step)
{
	for (size_t i = 0; i < c->ndoomed; i++)
		if (c->doomed[i].step == step)
			return true;
	return false;
}

Test(rgc, rule)
{
	cr_assert(!rgc_rule_dooms(true, 7, 0, 2, 0));
	cr_assert(!rgc_rule_dooms(true, 7, 1, 2, 0));
	cr_assert(rgc_rule_dooms(true, 7, 2, 2, 0));
	cr_assert(!rgc_rule_dooms(true, 7, 9, 0, 0), "keep 0 keeps every global step");
	cr_assert(!rgc_rule_dooms(true, 20, 9, 2, 10), "a multiple of keep_every stays");
	cr_assert(rgc_rule_dooms(true, 21, 9, 2, 10));
	cr_assert(!rgc_rule_dooms(false, 7, 0, 2, 0), "a save still arriving stays");
	cr_assert(rgc_rule_dooms(false, 7, 1, 0, 0), "a step never global below a global one goes");
	cr_assert(!rgc_rule_counts(40, 20) && rgc_rule_counts(30, 20) && rgc_rule_counts(40, 0));
}

Test(rgc, global_is_rule_5)
{
	struct rgc_step s = { 0 };

	snprintf(s.nodes, sizeof(s.nodes), "a* b c");
	cr_assert(rgc_global(&s, 3));
	cr_assert(!rgc_global(&s, 4));
	snprintf(s.nodes, sizeof(s.nodes), "a b c");
	cr_assert(!rgc_global(&s, 3), "no part sealed");
	snprintf(s.nodes, sizeof(s.nodes), "a* a b");
	cr_assert(!rgc_global(&s, 3), "two versions of a's part count once");
}

Test(rgc, choose_keeps_the_newest_global_and_what_is_newer)
{
	struct rgc_opts o = { .nodes = 2, .keep = 2, .say = no_say };
	struct rgc_step v[8];
	struct rgc c = { .o = &o, .steps = v };

	add_step(&c, v, 10, "a* b");
	add_step(&c, v, 20, "a");    /* a node died in its save */
	add_step(&c, v, 30, "a* b");
	add_step(&c, v, 40, "b* a");
	add_step(&c, v, 50, "a*");   /* still arriving */
	cr_assert_eq(rgc_choose_doomed(&c), 0);
	cr_assert_eq(c.ndoomed, 2);
	cr_assert(doomed(&c, 10) && doomed(&c, 20));
	cr_assert(!doomed(&c, 30) && !doomed(&c, 40) && !doomed(&c, 50));
	c.steps = NULL; /* v is on the stack */
	rgc_release(&c);
}

Test(rgc, choose_keeps_keep_every_steps_uncounted)
{
	struct rgc_opts o = { .nodes = 2, .keep = 1, .keep_every = 20, .say = no_say };
	struct rgc_step v[8];
	struct rgc c = { .o = &o, .steps = v };

	add_step(&c, v, 10, "a* b");
	add_step(&c, v, 20, "a* b");
	add_step(&c, v, 30, "a* b");
	add_step(&c, v, 50, "a* b");
	cr_assert_eq(rgc_choose_doomed(&c), 0);
	cr_assert_eq(c.ndoomed, 2);
	cr_assert(doomed(&c, 10) && doomed(&c, 30));
	cr_assert(!doomed(&c, 20) && !doomed(&c, 50));
	c.steps = NULL;
	rgc_release(&c);
}
