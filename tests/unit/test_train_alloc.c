/* tests/unit/test_train_alloc.c: the device allocator's accounting and
 * budget, and that the engine allocates everything up front: its peak is
 * reached before step 1, a budget of exactly that peak is enough, one byte
 * less is a clean oom naming what did not fit. */
#include "test_train_common.h"

#include "../../tools/poros-train/alloc.h"
#include "ops.h" /* attention_scratch_floats_cuda */

static void check_allocator(void)
{
	struct dev_alloc a;
	char buf[64], big[256];
	void *p, *q;

	dev_alloc_init(&a, backend_cpu(), 1000);
	CHECKF(dev_alloc(&a, &p, 600, "the first %d bytes", 600) == 0 && p != NULL && a.current == 600 && a.peak == 600,
	       "600 of 1000: p %p current %zu", p, a.current);
	CHECKF(dev_alloc(&a, &q, 500, "2 slabs of %s", "250 B") < 0 && q == NULL && a.oom,
	       "500 more must not fit a 1000-byte budget");
	CHECKF(strcmp(a.err, "allocating 2 slabs of 250 B: budget 1000 B exceeded (600 B in use)") == 0,
	         "message: \"%s\"", a.err);
	CHECKF(a.current == 600 && a.peak == 600, "a refused request counts nothing: current %zu", a.current);
	CHECKF(dev_alloc(&a, &q, 400, "the rest") == 0 && q != NULL && a.current == 1000 && a.peak == 1000, "exactly the budget fits: current %zu", a.current);
	dev_alloc_release_all(&a);
	CHECKF(a.current == 0 && a.peak == 1000, "release: current %zu peak %zu", a.current, a.peak);

	/* a dry allocator counts the same, with no memory and no budget */
	dev_alloc_init_dry(&a);
	dev_alloc_set_purpose(&a, "small");
	CHECKF(dev_alloc(&a, &p, 1000, "a") == 0 && p == NULL, "dry: no pointer");
	dev_alloc_set_purpose(&a, "big");
	CHECKF(dev_alloc(&a, &p, 3u << 20, "b") == 0 && dev_alloc_count_held(&a, 2048, "c") == 0, "dry: all fit");
	dev_alloc_set_purpose(&a, "mid");
	CHECKF(dev_alloc(&a, &p, 2048, "d") == 0 && a.peak == 1000 + (3u << 20) + 4096, "dry peak %zu", a.peak);
	CHECKF(strcmp(dev_alloc_largest(&a, 3, big, sizeof big), "big 3.0 MiB, mid 2.0 KiB, small 1000 B") == 0,
	       "largest: \"%s\"", big);
	CHECKF(strcmp(dev_alloc_largest(&a, 1, big, sizeof big), "big 3.0 MiB") == 0, "largest 1: \"%s\"", big);
	CHECKF(dev_alloc_breakdown_json(&a, big, sizeof big) > 0 &&
	       strcmp(big, "{\"small\":0.001,\"big\":3.002,\"mid\":0.002}") == 0, "dry breakdown: %s", big);
	CHECKF(dev_alloc_breakdown_json(&a, big, 10) == -1, "a short buffer is -1");
	dev_alloc_release_all(&a);

	CHECKF(strcmp(format_bytes(buf, sizeof buf, 100), "100 B") == 0, "format 100: %s", buf);
	CHECKF(strcmp(format_bytes(buf, sizeof buf, 1536), "1.5 KiB") == 0, "format 1536: %s", buf);
	CHECKF(strcmp(format_bytes(buf, sizeof buf, 1.2 * 1024 * 1024 * 1024), "1.2 GiB") == 0, "format 1.2G: %s", buf);
}

/* Peak device bytes of an engine for this mode, or 0 when it failed. */
static size_t engine_peak_on(const struct backend *be, int mode, int nf4, long long budget, int *oom, char *err,
                             size_t errsz, char *breakdown, size_t bsz)
{
	struct train_config cfg;
	struct tt_run r;
	struct step_stats st;
	struct dev_alloc plan;
	char planned[1024], made[1024];
	size_t peak = 0;

	tt_config(&cfg, "poros/tiny-qwen2");
	cfg.mode = mode;
	cfg.cell.precision = nf4 ? PRECISION_NF4 : PRECISION_BF16;
	cfg.cell.training.gradient_accumulation_steps = 2;
	/* one compute lane, so that a backend's library memory is all that
	 * differs between backends (two would add their own buffers: plan.bats) */
	cfg.lanes = 1;
	cfg.vram_budget = budget;
	memset(&r, 0, sizeof r);
	r.cfg = cfg;
	*oom = 0;
	if (model_config_resolve(&r.mc, cfg.cell.model.model_id, cfg.configs_dir, err, errsz) < 0 ||
	    token_source_open(&r.data, cfg.cell.training.dataset, &r.mc, cfg.cell.training.seq_len, cfg.cell.training.seed,
	                      TRAIN_ON_DEFAULT, NULL, NULL, err, errsz) < 0 ||
	    host_weights_load(&r.hw, be, &r.mc, nf4, engine_host_ext_cols(&cfg), cfg.cell.training.seed, NULL, err, errsz) < 0)
		return 0;
	/* the plan, from the layouts alone, before the engine */
	CHECKF(engine_plan(&plan, NULL, &r.cfg, &r.mc, &r.hw, be->library_device_bytes, err, errsz) == 0 && plan.dry,
	       "mode %d: the plan: %s", mode, err);
	dev_alloc_breakdown_json(&plan, planned, sizeof planned);
	if (engine_create(&r.e, &r.cfg, &r.mc, &r.hw, &r.data, be, err, errsz) < 0) {
		*oom = engine_oom(r.e);
		CHECKF(budget > 0 && plan.peak > (size_t)budget, "mode %d: an oom (%s) with a plan of %zu in %lld bytes",
		       mode, err, plan.peak, budget);
		dev_alloc_release_all(&plan);
		tt_close(&r);
		return 0;
	}
	peak = engine_vram_peak(r.e);
	engine_vram_breakdown_json(r.e, made, sizeof made);
	CHECKF(plan.peak == peak && strcmp(planned, made) == 0, "mode %d: planned %zu %s, allocated %zu %s", mode,
	       plan.peak, planned, peak, made);
	dev_alloc_release_all(&plan);
	if (breakdown)
		engine_vram_breakdown_json(r.e, breakdown, bsz);
	/* nothing more is allocated while training */
	for (int s = 1; s <= 2; s++)
		engine_step(r.e, s, &st);
	CHECKF(engine_vram_peak(r.e) == peak && engine_vram_current(r.e) == peak,
	         "mode %d: peak %zu before training, %zu after", mode, peak, engine_vram_peak(r.e));
	tt_close(&r);
	return peak;
}

static size_t engine_peak(int mode, int nf4, long long budget, int *oom, char *err, size_t errsz)
{
	return engine_peak_on(backend_cpu(), mode, nf4, budget, oom, err, errsz, NULL, 0);
}

static void check_engine_budget(int mode, int nf4)
{
	char err[1024];
	int oom;
	size_t peak = engine_peak(mode, nf4, 0, &oom, err, sizeof err);

	CHECKF(peak > 0, "mode %d: no budget must work: %s", mode, err);
	if (peak == 0)
		return;
	CHECKF(engine_peak(mode, nf4, (long long)peak, &oom, err, sizeof err) == peak,
	         "mode %d: a budget of exactly the peak (%zu) must fit: %s", mode, peak, err);
	CHECKF(engine_peak(mode, nf4, (long long)peak - 1, &oom, err, sizeof err) == 0 && oom,
	         "mode %d: one byte less than the peak must be an oom", mode);
	CHECKF(strstr(err, "allocating ") == err && strstr(err, "budget") != NULL, "oom message: \"%s\"", err);
	CHECKF(engine_peak(mode, nf4, 4096, &oom, err, sizeof err) == 0 && oom, "mode %d: 4 KiB must be an oom", mode);
	CHECKF(strstr(err, "the final norm and lm_head") != NULL, "4 KiB: the first allocation fails: \"%s\"", err);
}

/* Memory a library holds outside the allocator (CUDA: the cuBLAS
 * workspace) is counted like an allocation: in the peak, under its own
 * purpose, against the budget, and never freed by the allocator. */
static int null_frees;

static void counting_free(void *p)
{
	if (p == NULL)
		null_frees++;
	free(p);
}

static void check_library_bytes(void)
{
	struct backend lib = *backend_cpu();
	struct dev_alloc a;
	char err[1024], breakdown[1024];
	int oom;
	size_t plain, with;
	void *p;

	lib.library_device_bytes = 3u << 20;
	lib.device_free = counting_free;
	dev_alloc_init(&a, &lib, 1000);
	dev_alloc_set_purpose(&a, "lib");
	CHECKF(dev_alloc_count_held(&a, 700, "a workspace") == 0 && a.current == 700 && a.peak == 700,
	       "700 held of 1000: current %zu", a.current);
	CHECKF(dev_alloc(&a, &p, 400, "the rest") < 0 && a.oom, "held bytes count against the budget");
	CHECKF(dev_alloc_count_held(&a, 400, "another") < 0, "so do further held bytes");
	dev_alloc_release_all(&a);
	CHECKF(null_frees == 0, "held bytes are not the allocator's to free (%d NULL frees)", null_frees);

	plain = engine_peak(MODE_BLOCKWISE, 1, 0, &oom, err, sizeof err);
	with = engine_peak_on(&lib, MODE_BLOCKWISE, 1, 0, &oom, err, sizeof err, breakdown, sizeof breakdown);
	CHECKF(plain > 0 && with == plain + (3u << 20), "peak %zu with 3 MiB of library memory, %zu without", with,
	       plain);
	CHECKF(strstr(breakdown, "\"blas_workspace\":3.000") != NULL, "breakdown: %s", breakdown);
	CHECKF(engine_peak_on(&lib, MODE_BLOCKWISE, 1, (long long)plain, &oom, err, sizeof err, NULL, 0) == 0 && oom,
	       "a budget that fits only the engine's own memory must be an oom");
}

/* The attention scratch fits every call layer.c makes: a group's one call
 * over its B sequences, or (cuDNN's route, not batch-invariant) one a
 * micro-batch.  At 72B's heads (64, 8 kv, D 128) a group of 8 one-row
 * micro-batches of 4096 tokens (POROS_GROUP=8) is over the route's
 * backward pack bound, so the group's size had no cuDNN parts, while each
 * micro-batch's call takes the backward with its 1 GiB workspace: sized
 * for the group, that call wrote 297 MiB past the scratch. */
static void check_attention_scratch_calls(void)
{
	static const int heads[][3] = { { 64, 8, 128 }, { 40, 8, 128 }, { 28, 4, 128 }, { 32, 8, 64 }, { 16, 2, 64 } };
	static const int rows[][2] = { { 1, 4096 }, { 2, 2048 }, { 1, 2048 }, { 4, 1024 }, { 1, 1024 }, { 2, 8192 } };
	struct layer_ctx c;
	int bad = 0;

	unsetenv("POROS_ATTENTION");
	unsetenv("POROS_CUDNN_WORKSPACE");
	memset(&c, 0, sizeof c);
	c.H = 64, c.G = 8, c.D = 128, c.S = 4096, c.B = 8, c.mbs = 8;
	CHECKF(attention_scratch_floats_cuda(1, 4096, 64, 8, 128) > attention_scratch_floats_cuda(8, 4096, 64, 8, 128),
	       "the case must need more scratch for a micro-batch's call than for the group's");
	CHECKF(layer_attn_scratch_floats(&c, attention_scratch_floats_cuda) ==
	               attention_scratch_floats_cuda(1, 4096, 64, 8, 128),
	       "a group of 8 at 72B heads: %zu floats, a micro-batch's call needs %zu",
	       layer_attn_scratch_floats(&c, attention_scratch_floats_cuda),
	       attention_scratch_floats_cuda(1, 4096, 64, 8, 128));
	for (size_t h = 0; h < sizeof heads / sizeof heads[0]; h++)
		for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
			for (int n = 1; n <= GROUP_MAX; n++) {
				c.H = heads[h][0], c.G = heads[h][1], c.D = heads[h][2];
				c.B = n * rows[r][0], c.S = rows[r][1], c.mbs = n;
				size_t got = layer_attn_scratch_floats(&c, attention_scratch_floats_cuda);
				size_t whole = attention_scratch_floats_cuda(c.B, c.S, c.H, c.G, c.D);
				size_t one = attention_scratch_floats_cuda(rows[r][0], c.S, c.H, c.G, c.D);
				if ((got < whole || got < one) && bad++ < 5)
					fprintf(stderr, "  H=%d G=%d D=%d S=%d B=%d x %d: %zu floats, calls need %zu, %zu\n",
					        c.H, c.G, c.D, c.S, rows[r][0], n, got, whole, one);
			}
	CHECKF(bad == 0, "%d group shapes whose attention calls overrun the scratch", bad);
}

int main(void)
{
	set_progname("test_train_alloc");
	check_allocator();
	check_attention_scratch_calls();
	check_library_bytes();
	check_engine_budget(MODE_RESIDENT, 0);
	check_engine_budget(MODE_BLOCKWISE, 1);
	fprintf(stderr, "test_train_alloc: %s\n", failures ? "FAILED" : "ok");
	return failures != 0;
}
