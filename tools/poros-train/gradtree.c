/* tools/poros-train/gradtree.c: the order in which a step's micro-batch
 * LoRA gradients are summed.
 *
 * A step has n micro-batches, numbered over every rank (rank r holds the
 * contiguous range [r*k, (r+1)*k)).  Its gradient is the value of the root
 * of a fixed binary tree over 0..n-1: node [s, s+2^l) is its left child
 * plus its right one, a node whose right child lies past n is its left
 * child, and leaf j is micro-batch j's gradient computed into zeros.  The
 * order depends on n alone, so one process with accumulation n and any
 * number of ranks that split the same n micro-batches sum the same fp32
 * values the same way: the same bits.
 *
 * One rank walks its range as a binary counter: each leaf is pushed onto a
 * stack of partial sums and two aligned siblings of equal size are merged
 * at once, so the stack holds at most a few log2(k) buffers; what is left
 * at the end are the pieces (maximal whole nodes inside the range).  With
 * more than one rank the pieces of every rank are gathered and the same
 * tree is evaluated over them on every rank (comm.h).  In blockwise mode a
 * region is one layer's gradients, in resident mode the whole adapter.
 * The bottom of the stack is the region of e->grads itself: with k = 1 on
 * one rank nothing is added and nothing extra is held. */
#include "engine_impl.h"

#include <stdlib.h>

#include "comm.h"
#include "util/util.h"

/* Pushes leaf g onto the counter (start, size) and merges; returns the
 * new height.  merge (may be NULL) is told each merge of entry i+1 into i. */
static int counter_push(long *start, long *size, int top, long g, void (*merge)(struct engine *, int), struct engine *e)
{
	start[top] = g;
	size[top] = 1;
	top++;
	while (top >= 2 && size[top - 1] == size[top - 2] && start[top - 2] % (2 * size[top - 2]) == 0) {
		if (merge)
			merge(e, top - 2);
		size[top - 2] *= 2;
		top--;
	}
	return top;
}

/* The pieces a rank with range [first, first+count) ends with (at most
 * GRADTREE_MAX_PIECES, into start/size), and the deepest its stack got. */
static int counter_pieces(long first, long count, long *start, long *size, int *depth)
{
	int top = 0, deepest = 0;

	for (long g = first; g < first + count; g++) {
		if (top + 1 > deepest)
			deepest = top + 1;
		top = counter_push(start, size, top, g, NULL, NULL);
	}
	if (depth)
		*depth = deepest;
	return top;
}

void gradtree_init(struct engine *e, int rank, int world)
{
	struct gradtree *t = &e->gt;
	long start[GRADTREE_MAX_PIECES], size[GRADTREE_MAX_PIECES];

	t->rank = rank;
	t->world = world;
	t->n = (long)world * e->k;
	t->first = (long)rank * e->k;
	t->max_pieces = 0;
	for (int r = 0; r < world; r++) {
		int np = counter_pieces((long)r * e->k, e->k, start, size, NULL);

		if (np > t->max_pieces)
			t->max_pieces = np;
	}
	counter_pieces(t->first, e->k, start, size, &t->depth);
	/* the last rank's counter stacks up to its depth past its pieces */
	t->all_start = xcalloc((size_t)world * t->max_pieces + GRADTREE_MAX_PIECES, sizeof *t->all_start);
	t->all_size = xcalloc((size_t)world * t->max_pieces + GRADTREE_MAX_PIECES, sizeof *t->all_size);
	t->all_buf = xcalloc((size_t)world * t->max_pieces, sizeof *t->all_buf);
	/* a region: the whole adapter, or in blockwise mode its largest layer */
	t->cap = e->lora.total;
	if (e->blockwise) {
		t->cap = 0;
		for (int l = 0; l < e->L; l++) {
			long off, len;

			gradtree_layer_region(e, l, &off, &len);
			if (len > t->cap)
				t->cap = len;
		}
	}
}

void gradtree_free(struct engine *e)
{
	free(e->gt.all_start);
	free(e->gt.all_size);
	free(e->gt.all_buf);
}

void gradtree_layer_region(const struct engine *e, int layer, long *off, long *len)
{
	long lo = -1, hi = e->lora.total;

	for (int l = layer; l < e->L && lo < 0; l++)
		for (int m = 0; m < N_PROJ && lo < 0; m++)
			if (e->lora.slot[l * N_PROJ + m].a >= 0)
				lo = e->lora.slot[l * N_PROJ + m].a;
	if (lo < 0)
		lo = e->lora.total;
	for (int l = layer + 1; l < e->L && hi == e->lora.total; l++)
		for (int m = 0; m < N_PROJ; m++)
			if (e->lora.slot[l * N_PROJ + m].a >= 0) {
				hi = e->lora.slot[l * N_PROJ + m].a;
				break;
			}
	*off = lo;
	*len = hi - lo;
}

size_t gradtree_scratch_floats(const struct engine *e)
{
	const struct gradtree *t = &e->gt;
	size_t gathered = t->world > 1 ? (size_t)t->world * t->max_pieces * t->cap : 0;

	return (size_t)(t->depth - 1) * t->cap + gathered;
}

void gradtree_bind(struct engine *e, float *scratch)
{
	struct gradtree *t = &e->gt;

	t->scratch = scratch;
	t->gathered = scratch ? scratch + (size_t)(t->depth - 1) * t->cap : NULL;
}

static float *stack_buf(struct engine *e, int i)
{
	struct gradtree *t = &e->gt;

	return i == 0 ? e->grads + t->off : t->scratch + (size_t)(i - 1) * t->cap;
}

void gradtree_begin(struct engine *e, long off, long len)
{
	e->gt.off = off;
	e->gt.len = len;
	e->gt.top = 0;
}

void gradtree_leaf_ahead(struct engine *e, struct layer_ctx *c, int ahead)
{
	struct gradtree *t = &e->gt;
	float *buf = stack_buf(e, t->top + ahead);

	e->be->memset_zero(buf, (size_t)t->len * sizeof(float), STREAM_COMPUTE);
	/* the layer math indexes gradients by slot offset: the view puts this
	 * region's first float where the offset says */
	c->lora_grad = buf - t->off;
}

void gradtree_leaf(struct engine *e)
{
	gradtree_leaf_ahead(e, &e->lc, 0);
}

/* A leaf whose global index is even merges nothing when pushed (its
 * sibling comes after it), so the next leaf takes the slot above it, as
 * it would one at a time; the counter never holds more than it does then. */
int gradtree_pair_ok(const struct engine *e, int j)
{
	return (e->gt.first + j) % 2 == 0;
}

static void merge_up(struct engine *e, int i)
{
	struct gradtree *t = &e->gt;
	const float *right = t->leaf && i + 1 == t->leaf_slot ? t->leaf : stack_buf(e, i + 1);

	e->lc.op->add_inplace(stack_buf(e, i), right, t->len);
	if (right == t->leaf)
		t->leaf = NULL; /* added where it is: no copy */
}

void gradtree_push(struct engine *e, int j)
{
	struct gradtree *t = &e->gt;

	t->top = counter_push(t->start, t->size, t->top, t->first + j, merge_up, e);
	e->lc.lora_grad = e->grads;
}

/* At slot top the leaf is either merged into the slot below at once (the
 * add reads it where it is: merge_up) or stays there (copied in). */
void gradtree_push_leaf(struct engine *e, int j, const float *leaf)
{
	struct gradtree *t = &e->gt;
	int slot = t->top;

	t->leaf = leaf;
	t->leaf_slot = slot;
	t->top = counter_push(t->start, t->size, t->top, t->first + j, merge_up, e);
	if (t->leaf) /* not merged: it is the slot's value from now on */
		e->be->copy_d2d(stack_buf(e, slot), leaf, (size_t)t->len * sizeof(float), STREAM_COMPUTE);
	t->leaf = NULL;
}

size_t gradtree_group_floats(const struct engine *e)
{
	return e->group > 1 ? (size_t)e->lanes * (size_t)e->group * (size_t)e->gt.cap : 0;
}

void gradtree_bind_group(struct engine *e, float *leaves)
{
	for (int lane = 0; lane < BACKEND_MAX_LANES; lane++)
		for (int i = 0; i < GROUP_MAX; i++)
			e->group_leaf[lane][i] = leaves && lane < e->lanes && i < e->group
			                         ? leaves + ((size_t)lane * e->group + (size_t)i) * e->gt.cap : NULL;
}

/* The node [s, s+w) cut at n over the pieces (start, size, buf): the index
 * of the piece now holding its value (its leftmost one), or -1 when the node
 * lies past n. */
static int tree_eval(struct engine *e, const long *start, const long *size, float **buf, int np, long s, long w)
{
	long n = e->gt.n, end = s + w < n ? s + w : n;
	int left, right;

	if (s >= n)
		return -1;
	for (int p = 0; p < np; p++)
		if (start[p] == s && start[p] + size[p] == end)
			return p;
	if (w == 1)
		die(EXIT_RUNTIME, "gradient tree: no piece holds micro-batch %ld", s);
	left = tree_eval(e, start, size, buf, np, s, w / 2);
	right = tree_eval(e, start, size, buf, np, s + w / 2, w / 2);
	if (right >= 0)
		e->lc.op->add_inplace(buf[left], buf[right], e->gt.len);
	return left;
}

static long tree_width(long n)
{
	long w = 1;

	while (w < n)
		w *= 2;
	return w;
}

int gradtree_finish(struct engine *e)
{
	struct gradtree *t = &e->gt;
	long *start = t->all_start, *size = t->all_size;
	float **buf = t->all_buf;
	int np = 0, root;

	if (t->world == 1) {
		for (int p = 0; p < t->top; p++) {
			start[p] = t->start[p];
			size[p] = t->size[p];
			buf[p] = stack_buf(e, p);
		}
		tree_eval(e, start, size, buf, t->top, 0, tree_width(t->n));
		return 0;
	}
	/* every rank's pieces, rank-major, max_pieces regions apart */
	for (int p = 0; p < t->top; p++)
		e->be->copy_d2d(t->gathered + ((size_t)t->rank * t->max_pieces + p) * t->cap, stack_buf(e, p),
		                (size_t)t->len * sizeof(float), STREAM_COMPUTE);
	if (e->comm == NULL || comm_allgather_floats(e->comm, t->gathered, (size_t)t->max_pieces * t->cap) < 0)
		return -1;
	for (int r = 0; r < t->world; r++) {
		int n_r = counter_pieces((long)r * e->k, e->k, start + np, size + np, NULL);

		for (int p = 0; p < n_r; p++)
			buf[np + p] = t->gathered + ((size_t)r * t->max_pieces + p) * t->cap;
		np += n_r;
	}
	root = tree_eval(e, start, size, buf, np, 0, tree_width(t->n));
	e->be->copy_d2d(stack_buf(e, 0), buf[root], (size_t)t->len * sizeof(float), STREAM_COMPUTE);
	return 0;
}
