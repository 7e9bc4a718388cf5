/* tools/poros-train/run.c: one training run from start to summary:
 * model, dataset, host weights, engine, the step loop with events.jsonl,
 * adapters, and the poros.summary/1 line. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model.h"
#include "records/records.h"
#include "checkpoint.h"
#include "comm.h"
#include "engine.h"
#include "events.h"
#include "host_plan.h"
#include "shared_base.h"
#include "util/util.h"
#include "numerics.h"
#include "model_hash.h"
#include "rope_tables.h"
#include "train.h"

/* What the summary reports; doubles are NaN when not measured. */
struct run_result {
	const char *status; /* "ok", "oom", "error" */
	char error[1024];
	const struct backend *be;
	int steps_done, weights_real, weights_known;
	double *step_s;     /* per step */
	double loss_first, loss_last;
	double vram_peak_mb;
	double vram_plan_mb;   /* engine_plan's total, NaN before it is made */
	double host_weights_mb; /* the base's host copy (host_weights_size), NaN before it is known */
	double host_checkpoints_mb; /* blockwise's pinned layer checkpoints (the plan's; 0 resident), NaN before it */
	/* --checkpoint-dir: the file's size (the plan's), the bytes the last
	 * step wrote to and read from it; NaN before the plan, the step */
	double disk_checkpoints_mb, disk_write_mb, disk_read_mb;
	double vram_sum_bytes; /* exact: whole numbers far below 2^53 */
	char vram_breakdown[1024]; /* engine_vram_breakdown_json, "" when no engine */
	struct host_plan host;     /* host_plan_make's; host.n 0 before it */
	double host_rss_at_plan_mb; /* VmRSS when the host plan was checked, NaN before */
	char *events_path, *adapter_path;
	int events_written, adapter_written;
	int resumed_at;     /* --resume: the checkpoint's step (this process ran the steps after it); else 0 */
	double eval_loss;   /* the last evaluation's; NaN: none yet */
	long long eval_tokens;
	int lock_fd;        /* RUN_DIR/.lock, held to the end; -1 before */
	int interrupted;    /* the signal that stopped the run after a step (checkpoint saved); 0: none */
	int max_position;   /* the model's max_position_embeddings when --seq-len is beyond it; else 0 */
	int n_layers;       /* the model's layers, once its config is read; else 0 */
};

/* --eval-dataset: the set, where it starts, and its rows (one pass). */
struct eval_set {
	struct token_source src;
	struct token_cursor start;
	long rows;
	int open;
};

/* --- adapters ------------------------------------------------------------- */

/* An adapter view of the flat parameters (tensors point into params). */
static void adapter_from_params(struct adapter *a, const struct train_config *c, const struct lora_layout *lo,
                                float *params)
{
	int n = 0;

	memset(a, 0, sizeof *a);
	a->rank = lo->rank;
	a->alpha = c->cell.lora.alpha;
	a->dropout = c->cell.lora.dropout;
	a->target_mask = lo->mask;
	a->base_model = c->cell.model.model_id;
	a->t = xcalloc((size_t)lo->n_layers * N_PROJ * 2, sizeof *a->t);
	for (int l = 0; l < lo->n_layers; l++)
		for (int m = 0; m < N_PROJ; m++) {
			const struct lora_slot *s = &lo->slot[l * N_PROJ + m];

			if (s->a < 0)
				continue;
			a->t[n++] = (struct adapter_tensor){ adapter_key(l, m, 0), lo->rank, s->n_in, params + s->a };
			a->t[n++] = (struct adapter_tensor){ adapter_key(l, m, 1), s->n_out, lo->rank, params + s->b };
		}
	a->n = n;
}

static void adapter_view_free(struct adapter *a)
{
	for (int i = 0; i < a->n; i++)
		free(a->t[i].name);
	free(a->t);
	memset(a, 0, sizeof *a);
}

static int save_adapter(struct engine *e, const struct train_config *c, const char *dir, char *err, size_t errsz)
{
	const struct lora_layout *lo = engine_lora_layout(e);
	float *params = xmalloc((size_t)lo->total * sizeof *params);
	struct adapter a;
	int rc;

	engine_lora_read(e, params);
	adapter_from_params(&a, c, lo, params);
	rc = adapter_save(dir, &a, err, errsz);
	adapter_view_free(&a);
	free(params);
	return rc;
}

static void mask_names(char *buf, size_t n, unsigned mask)
{
	buf[0] = '\0';
	for (int m = 0; m < CELL_MAX_TARGETS; m++)
		if ((mask >> m) & 1u) {
			strncat(buf, *buf ? "," : "", n - strlen(buf) - 1);
			strncat(buf, lora_module_names[m], n - strlen(buf) - 1);
		}
}

/* --init-adapter: every tensor the run trains must be there with its
 * shape, and nothing else. */
static int load_init_adapter(struct engine *e, const struct train_config *c, char *err, size_t errsz)
{
	const struct lora_layout *lo = engine_lora_layout(e);
	float *params = xcalloc((size_t)lo->total, sizeof *params);
	char have[128], want[128], lerr[512];
	struct adapter a;
	int expected = 0, rc = -1;

	if (adapter_load(c->init_adapter, &a, lerr, sizeof lerr) < 0) {
		snprintf(err, errsz, "--init-adapter: %s", lerr);
		free(params);
		return -1;
	}
	if (a.rank != lo->rank) {
		snprintf(err, errsz, "--init-adapter %s: rank %d, but this run trains rank %d", c->init_adapter, a.rank,
		         lo->rank);
		goto out;
	}
	if (a.target_mask != lo->mask) {
		mask_names(have, sizeof have, a.target_mask);
		mask_names(want, sizeof want, lo->mask);
		snprintf(err, errsz, "--init-adapter %s: targets %s, but this run targets %s", c->init_adapter, have, want);
		goto out;
	}
	for (int l = 0; l < lo->n_layers; l++)
		for (int m = 0; m < N_PROJ; m++) {
			const struct lora_slot *s = &lo->slot[l * N_PROJ + m];

			if (s->a < 0)
				continue;
			for (int is_b = 0; is_b < 2; is_b++) {
				char *key = adapter_key(l, m, is_b);
				const struct adapter_tensor *t = adapter_find(&a, key);
				int rows = is_b ? s->n_out : lo->rank, cols = is_b ? lo->rank : s->n_in;

				if (t == NULL || t->rows != rows || t->cols != cols) {
					if (t == NULL)
						snprintf(err, errsz, "--init-adapter %s: tensor %s is missing", c->init_adapter, key);
					else
						snprintf(err, errsz, "--init-adapter %s: tensor %s has shape [%d,%d] (expected [%d,%d])",
						         c->init_adapter, key, t->rows, t->cols, rows, cols);
					free(key);
					goto out;
				}
				memcpy(params + (is_b ? s->b : s->a), t->data, (size_t)rows * cols * sizeof(float));
				free(key);
				expected++;
			}
		}
	if (a.n != expected) {
		snprintf(err, errsz, "--init-adapter %s: has %d tensors for layers this %d-layer model does not have",
		         c->init_adapter, a.n - expected, lo->n_layers);
		goto out;
	}
	engine_lora_write(e, params);
	rc = 0;
out:
	adapter_free(&a);
	free(params);
	return rc;
}

/* --- events and summary ------------------------------------------------------ */

/* A JSON number with a printf format, or null when not finite. */
static int put_num(char *buf, size_t n, const char *fmt, double v)
{
	if (!isfinite(v))
		return snprintf(buf, n, "null");
	return snprintf(buf, n, fmt, v);
}

static int append_event(const char *path, int step, const struct step_stats *st, long long tokens, double epoch,
                        double alloc_mb, double peak_mb, const char *profile, double eval_loss, long long eval_tokens)
{
	struct event_row row = { .profile = profile, .evaluated = eval_tokens >= 0 };
	char line[6144];

	row.v[EV_STEP] = step;
	row.v[EV_LOSS] = st->loss;
	row.v[EV_LR] = st->lr;
	row.v[EV_GRAD_NORM] = st->grad_norm;
	row.v[EV_STEP_S] = st->step_s;
	row.v[EV_TOKENS] = (double)tokens;
	row.v[EV_TOKENS_SUPERVISED] = (double)st->tokens_supervised;
	row.v[EV_EPOCH] = epoch;
	row.v[EV_VRAM_ALLOC_MB] = alloc_mb;
	row.v[EV_VRAM_PEAK_MB] = peak_mb;
	row.v[EV_H2D_BYTES] = (double)st->h2d_bytes;
	row.v[EV_H2D_S] = st->h2d_s;
	row.v[EV_COMPUTE_S] = st->compute_s;
	row.v[EV_COPY_HIDDEN_FRAC] = st->copy_hidden_frac;
	row.v[EV_EVAL_LOSS] = eval_loss;
	row.v[EV_EVAL_TOKENS] = (double)eval_tokens;
	event_line(line, sizeof line, &row);
	return append_line(path, line, strlen(line));
}

static cJSON *num_or_null(double v)
{
	return json_number_or_null(v);
}

/* A loss with the same 9 digits as events.jsonl. */
static cJSON *loss_json(double v)
{
	char buf[40];

	if (!isfinite(v))
		return cJSON_CreateNull();
	snprintf(buf, sizeof buf, "%.9g", (double)(float)v);
	return cJSON_CreateRaw(buf);
}

static cJSON *str_or_null(const char *s)
{
	return s ? cJSON_CreateString(s) : cJSON_CreateNull();
}

/* The timed steps (after warmup_steps), each with the 6 decimals of
 * events.jsonl: the list poros-arm computes every timing figure from, and
 * the median of that list is s_per_step here too (timing.h). */
static cJSON *timed_steps(const struct run_result *r, int first, int n, double *rounded)
{
	cJSON *arr = cJSON_CreateArray();
	char buf[40];

	for (int i = 0; i < n; i++) {
		snprintf(buf, sizeof buf, "%.6f", r->step_s[first + i]);
		rounded[i] = strtod(buf, NULL);
		cJSON_AddItemToArray(arr, cJSON_CreateRaw(buf));
	}
	return arr;
}

/* The host plan (null before it was made), the resident set when it was
 * checked, and the process's peak resident set (VmHWM) now. */
static void add_host_memory(cJSON *o, const struct run_result *r)
{
	if (r->host.n > 0) {
		host_plan_add_json(o, &r->host);
	} else {
		cJSON_AddNullToObject(o, "host_plan_mb");
		cJSON_AddNullToObject(o, "host_breakdown_mb");
	}
	cJSON_AddItemToObject(o, "host_rss_at_plan_mb", num_or_null(r->host_rss_at_plan_mb));
	cJSON_AddItemToObject(o, "host_peak_rss_mb", num_or_null(host_rss_peak() ? (double)host_rss_peak() / MIB : NAN));
}

/* The run's ranks (1: one process). */
static int ranks_of(const struct train_config *c)
{
	return c->ranks > 1 ? c->ranks : 1;
}

/* How the run was laid out, as the plan chose it (none of it changes a
 * bit): compute lanes, micro-batches a layer call, device sets of layer
 * checkpoints and attention checkpoints (the last two blockwise only);
 * null before the plan was made. */
static cJSON *schedule_json(const struct train_config *c, const struct run_result *r)
{
	int blockwise = c->mode == MODE_BLOCKWISE, cuda = r->be && r->be->library_device_bytes != 0;
	cJSON *o;

	if (isnan(r->vram_plan_mb) || r->n_layers <= 0)
		return cJSON_CreateNull();
	o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "lanes", engine_lanes(c, cuda));
	cJSON_AddNumberToObject(o, "group", engine_group(c));
	cJSON_AddItemToObject(o, "checkpoint_sets",
	                      blockwise ? cJSON_CreateNumber(engine_ckpt_sets(c, r->n_layers)) : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "attention_checkpoints", blockwise ? cJSON_CreateBool(c->attn_ckpt != 0) : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "attention_sublayer",
	                      blockwise ? cJSON_CreateBool(c->attn_ckpt == ATTN_CKPT_SUBLAYER) : cJSON_CreateNull());
	return o;
}

static int print_summary(FILE *out, const struct train_config *c, const struct run_result *r)
{
	cJSON *o = cJSON_CreateObject(), *env, *steps;
	int warmup = c->cell.training.warmup_steps;
	int skip = warmup > r->resumed_at ? warmup : r->resumed_at; /* not timed here */
	int measured = r->steps_done - skip;
	double med = NAN, lo = NAN, hi = NAN, tps = NAN, *t;
	long long tokens_per_step = cell_tokens_per_step(&c->cell) * ranks_of(c);
	int rc;

	if (measured < 0)
		measured = 0;
	t = xmalloc(((size_t)measured + 1) * sizeof *t);
	steps = timed_steps(r, skip, measured, t);
	if (measured > 0) {
		med = timing_median(t, measured);
		lo = hi = t[0];
		for (int i = 1; i < measured; i++) {
			lo = fmin(lo, t[i]);
			hi = fmax(hi, t[i]);
		}
		tps = med > 0 ? (double)tokens_per_step / med : NAN;
	}
	free(t);
	cJSON_AddStringToObject(o, "schema", SUMMARY_SCHEMA);
	cJSON_AddStringToObject(o, "status", r->status);
	cJSON_AddItemToObject(o, "error", str_or_null(r->error[0] ? r->error : NULL));
	cJSON_AddStringToObject(o, "method", method_names[c->cell.method]);
	cJSON_AddStringToObject(o, "mode", train_mode_names[c->mode]);
	cJSON_AddItemToObject(o, "backend", str_or_null(r->be ? r->be->name : NULL));
	cJSON_AddNumberToObject(o, "ranks", c->ranks > 1 ? c->ranks : 1);
	cJSON_AddItemToObject(o, "schedule", schedule_json(c, r));
	cJSON_AddNumberToObject(o, "steps", r->steps_done);
	cJSON_AddNumberToObject(o, "warmup_steps", c->cell.training.warmup_steps);
	cJSON_AddNumberToObject(o, "steps_measured", measured);
	cJSON_AddItemToObject(o, "step_s", steps);
	cJSON_AddItemToObject(o, "s_per_step", timing_json_number(med));
	cJSON_AddItemToObject(o, "s_per_step_min", timing_json_number(lo));
	cJSON_AddItemToObject(o, "s_per_step_max", timing_json_number(hi));
	cJSON_AddItemToObject(o, "tokens_per_s", timing_json_number(tps));
	cJSON_AddItemToObject(o, "vram_plan_mb", num_or_null(r->vram_plan_mb));
	cJSON_AddItemToObject(o, "vram_peak_mb", num_or_null(r->vram_peak_mb));
	cJSON_AddItemToObject(o, "vram_avg_mb", num_or_null(r->steps_done > r->resumed_at ? r->vram_sum_bytes /
	                                                    (r->steps_done - r->resumed_at) / MIB : NAN));
	cJSON_AddItemToObject(o, "vram_breakdown_mb",
	                      r->vram_breakdown[0] ? cJSON_Parse(r->vram_breakdown) : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "host_weights_mb", num_or_null(r->host_weights_mb));
	cJSON_AddItemToObject(o, "host_checkpoints_mb", num_or_null(r->host_checkpoints_mb));
	/* only with --checkpoint-dir: other summaries stay as they were */
	if (c->checkpoint_dir) {
		cJSON_AddItemToObject(o, "disk_checkpoints_mb", num_or_null(r->disk_checkpoints_mb));
		cJSON_AddItemToObject(o, "disk_write_mb_per_step", num_or_null(r->disk_write_mb));
		cJSON_AddItemToObject(o, "disk_read_mb_per_step", num_or_null(r->disk_read_mb));
	}
	add_host_memory(o, r);
	cJSON_AddItemToObject(o, "loss_first", loss_json(r->loss_first));
	cJSON_AddItemToObject(o, "loss_last", loss_json(r->loss_last));
	/* only with an evaluation set: other summaries stay as they were */
	if (c->cell.training.eval_dataset || c->cell.training.eval_fraction > 0) {
		cJSON_AddItemToObject(o, "eval_loss", loss_json(r->eval_loss));
		cJSON_AddNumberToObject(o, "eval_tokens", (double)r->eval_tokens);
	}
	/* only when --seq-len is beyond the model's range: other summaries stay as they were */
	if (r->max_position > 0) {
		cJSON *beyond = cJSON_AddObjectToObject(o, "seq_len_beyond_max_position");
		cJSON_AddNumberToObject(beyond, "seq_len", c->cell.training.seq_len);
		cJSON_AddNumberToObject(beyond, "max_position_embeddings", r->max_position);
	}
	cJSON_AddItemToObject(o, "weights", str_or_null(r->weights_known ? (r->weights_real ? "real" : "synthetic") : NULL));
	cJSON_AddStringToObject(o, "run_dir", c->out_dir);
	cJSON_AddItemToObject(o, "events", str_or_null(r->events_written ? r->events_path : NULL));
	cJSON_AddItemToObject(o, "adapter", str_or_null(r->adapter_written ? r->adapter_path : NULL));
	cJSON_AddItemToObject(o, "config", run_config_json(c));
	env = cJSON_AddObjectToObject(o, "env");
	cJSON_AddItemToObject(env, "gpu_name", str_or_null(r->be ? r->be->device_name : NULL));
	cJSON_AddItemToObject(env, "gpu_mem_mb",
	                      r->be && r->be->device_mem_mb > 0 ? cJSON_CreateNumber((double)r->be->device_mem_mb)
	                                                        : cJSON_CreateNull());
	cJSON_AddItemToObject(env, "driver", str_or_null(r->be ? r->be->driver_version : NULL));
	cJSON_AddItemToObject(env, "cuda_runtime", str_or_null(r->be ? r->be->runtime_version : NULL));
	cJSON_AddNullToObject(env, "python");
	cJSON_AddNullToObject(env, "torch");
	cJSON_AddNullToObject(env, "transformers");
	cJSON_AddNullToObject(env, "peft");
	rc = jsonl_write(out, o);
	fflush(out);
	cJSON_Delete(o);
	return rc;
}

/* --- the run ------------------------------------------------------------------- */

static const struct backend *select_backend(const struct train_config *c, char *err, size_t errsz)
{
	const char *name = c->backend;
	const struct backend *be;
	char why[256] = "";

	if (strcmp(name, "cpu") == 0)
		return backend_cpu();
	be = backend_cuda(why, sizeof why);
	if (be == NULL && strcmp(name, "auto") == 0) {
		if (!c->quiet)
			warnmsg("%s: CPU backend", why);
		return backend_cpu();
	}
	if (be == NULL)
		snprintf(err, errsz, "--backend cuda: %s", why);
	return be;
}

/* One trainer per run directory: an exclusive flock on RUN_DIR/.lock (as
 * the driver's on its output directory), the holder's PID in it.  -2 when
 * another process holds it. */
static int lock_run_dir(const struct train_config *c, struct run_result *r, char *err, size_t errsz)
{
	char *path = xasprintf("%s/.lock", c->out_dir), pid[32] = "";
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644), n;

	if (fd < 0) {
		snprintf(err, errsz, "%s: %s", path, errno == ELOOP ? "is a symbolic link; refusing to lock through it"
		         : strerror(errno));
		free(path);
		return errno == ELOOP ? -2 : -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		n = errno == EWOULDBLOCK ? (int)pread(fd, pid, sizeof pid - 1, 0) : -1;
		pid[n > 0 ? strcspn(pid, "\n") : 0] = '\0';
		snprintf(err, errsz, "%s: another trainer is using this run directory (PID %s holds %s): wait for it to end, "
		         "or stop it", c->out_dir, pid[0] ? pid : "unknown", path);
		close(fd);
		free(path);
		return -2;
	}
	n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
		snprintf(err, errsz, "%s: %s", path, strerror(errno));
		close(fd);
		free(path);
		return -1;
	}
	free(path);
	r->lock_fd = fd;
	return 0;
}

/* The run directory, locked, without a previous run's events (appending
 * to them would mix two runs in one file).  -2: another trainer has it. */
static int prepare_run_dir(const struct train_config *c, struct run_result *r, char *err, size_t errsz)
{
	int rc;

	if (c->rank > 0) /* the run directory is rank 0's */
		return 0;
	if (mkdir_p(c->out_dir, 0755) < 0)
		return snprintf(err, errsz, "%s: %s", c->out_dir, strerror(errno)), -1;
	if (r->lock_fd < 0 && (rc = lock_run_dir(c, r, err, errsz)) < 0)
		return rc;
	r->events_path = xasprintf("%s/events.jsonl", c->out_dir);
	r->adapter_path = xasprintf("%s/adapter", c->out_dir);
	adapter_remove_leftovers(c->out_dir);
	if (unlink(r->events_path) < 0 && errno != ENOENT)
		return snprintf(err, errsz, "%s: %s", r->events_path, strerror(errno)), -1;
	return 0;
}

/* eval_loss: NaN when the step had no evaluation */
static void progress(const struct train_config *c, int step, const struct step_stats *st, double eval_loss,
                     long long eval_tokens)
{
	char eval[64] = "";

	if (c->quiet)
		return;
	if (eval_tokens >= 0)
		snprintf(eval, sizeof eval, " eval_loss %.6f", eval_loss);
	fprintf(stderr, "%s: step %d/%d loss %.6f lr %.3g grad_norm %.4g%s %.3f s\n", progname, step,
	        c->cell.training.steps, st->loss, st->lr, st->grad_norm, eval, st->step_s);
}

/* the step's rows over every rank */
static long rows_per_step(const struct train_config *c)
{
	return (long)c->cell.training.batch_size * c->cell.training.gradient_accumulation_steps * ranks_of(c);
}

/* Every rank's adapter must be the same bits (one AdamW step on the same
 * gradient): a hash of each rank's compared, and a difference is an error
 * rather than an adapter that only rank 0's numbers stand behind. */
static int ranks_agree(struct engine *e, const struct train_config *c, char *err, size_t errsz)
{
	const struct lora_layout *lo = engine_lora_layout(e);
	uint64_t *hash, h = 0x9e3779b97f4a7c15ull;
	float *params;
	int rc = 0;

	if (ranks_of(c) == 1)
		return 0;
	params = xmalloc((size_t)lo->total * sizeof *params);
	engine_lora_read(e, params);
	for (long i = 0; i < lo->total; i++) {
		uint32_t bits;

		memcpy(&bits, &params[i], sizeof bits);
		h = poros_mix64(h ^ bits);
	}
	free(params);
	hash = xcalloc((size_t)c->ranks, sizeof *hash);
	hash[c->rank] = h;
	if (comm_allgather_bytes(c->comm, hash, sizeof *hash) < 0)
		rc = -1, snprintf(err, errsz, "the adapter check between ranks failed: %s", comm_error(c->comm));
	for (int q = 1; rc == 0 && q < c->ranks; q++)
		if (hash[q] != hash[0])
			rc = -1, snprintf(err, errsz, "internal error: rank %d's adapter differs from rank 0's", q);
	free(hash);
	return rc;
}

/* The passes over the data once step `step` is done (HF's state.epoch);
 * NaN for an endless stream. */
static double epoch_at(const struct train_config *c, const struct token_source *data, int step)
{
	double rows = token_source_epoch_rows(data);

	return rows > 0 ? (double)step * rows_per_step(c) / rows : NAN;
}

/* --save-every N: adapter-stepN and checkpoint-stepN every N steps, and a
 * checkpoint at the last step too, so a finished run can be extended
 * (its adapter is adapter/). */
static int save_checkpoint(struct engine *e, const struct train_config *c, const struct run_result *r, int step,
                           char *err, size_t errsz)
{
	int last = step == c->cell.training.steps;

	if (c->save_every == 0 || (step % c->save_every != 0 && !last))
		return 0;
	if (!last) {
		char *dir = xasprintf("%s/adapter-step%d", c->out_dir, step);
		int rc = save_adapter(e, c, dir, err, errsz);

		free(dir);
		if (rc < 0)
			return -1;
	}
	return checkpoint_save(e, c, step, r->loss_first, r->events_path, err, errsz);
}

/* SIGINT/SIGTERM: the step under way finishes, a checkpoint is saved and
 * the run stops; a second one ends the process at once. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
	if (stop_signal) {
		signal(sig, SIG_DFL);
		raise(sig);
	}
	stop_signal = sig;
}

static void catch_stop_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop_signal;
	sa.sa_flags = SA_RESTART; /* reads and writes go on; the loop looks at the flag */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

/* After step `step` of a run a signal stopped: its checkpoint (unless
 * --save-every has just written it) and the command that continues it. */
static int stop_after(struct engine *e, const struct train_config *c, struct run_result *r, int step, char *err,
                      size_t errsz)
{
	int sig = stop_signal;

	if ((c->save_every == 0 || step % c->save_every != 0) &&
	    checkpoint_save(e, c, step, r->loss_first, r->events_path, err, errsz) < 0)
		return -1;
	r->interrupted = sig;
	warnmsg("%s: stopped after step %d of %d; checkpoint %s/checkpoint-step%d; continue with: poros-train --resume "
	        "%s", sig == SIGINT ? "SIGINT" : "SIGTERM", step, c->cell.training.steps, c->out_dir, step, c->out_dir);
	return 0;
}

static int train_loop(struct engine *e, const struct train_config *c, const struct token_source *data,
                      struct run_result *r, struct eval_set *ev, char *err, size_t errsz)
{
	long long tokens = (long long)c->cell.training.batch_size * c->cell.training.seq_len *
	                   c->cell.training.gradient_accumulation_steps * ranks_of(c);

	for (int step = r->resumed_at + 1; step <= c->cell.training.steps; step++) {
		struct step_stats st;
		double alloc_mb = (double)engine_vram_current(e) / MIB, peak_mb = (double)engine_vram_peak(e) / MIB;
		char profile[4096];

		if (engine_step(e, step, &st) < 0) {
			if (engine_error(e))
				return snprintf(err, errsz, "step %d: %s", step, engine_error(e)), -1;
			return snprintf(err, errsz, "step %d: %s is not finite (loss %g, grad_norm %g)", step,
			                isfinite(st.loss) ? "the gradient norm" : "the loss", st.loss, st.grad_norm), -1;
		}
		double eval_loss = NAN;
		long long eval_tokens = -1;

		if (engine_profile_json(e, profile, sizeof profile) < 0)
			profile[0] = '\0';
		/* after the update: the adapter as step `step` left it */
		if (ev->open && (step == c->cell.training.steps ||
		                 (c->cell.training.eval_every > 0 && step % c->cell.training.eval_every == 0))) {
			char why[512];

			if (token_source_seek(&ev->src, &ev->start, why, sizeof why) < 0 ||
			    engine_eval(e, &ev->src, ev->rows, &eval_loss, &eval_tokens, why, sizeof why) < 0)
				return snprintf(err, errsz, "step %d: evaluation set %s: %s", step, ev->src.name, why), -1;
			r->eval_loss = eval_loss;
			r->eval_tokens = eval_tokens;
		}
		if (c->rank == 0 && append_event(r->events_path, step, &st, tokens, epoch_at(c, data, step), alloc_mb, peak_mb, profile,
		                 eval_loss, eval_tokens) < 0)
			return snprintf(err, errsz, "%s: %s", r->events_path, strerror(errno)), -1;
		r->events_written = 1;
		r->step_s[step - 1] = st.step_s;
		if (step == 1)
			r->loss_first = st.loss;
		r->loss_last = st.loss;
		r->vram_sum_bytes += (double)engine_vram_current(e);
		if (c->checkpoint_dir) {
			long long written, read;

			engine_disk_bytes(e, &written, &read);
			r->disk_write_mb = (double)written / MIB;
			r->disk_read_mb = (double)read / MIB;
		}
		r->steps_done = step;
		progress(c, step, &st, eval_loss, eval_tokens);
		if (c->rank == 0 && save_checkpoint(e, c, r, step, err, errsz) < 0)
			return -1;
		if (stop_signal && step < c->cell.training.steps)
			return stop_after(e, c, r, step, err, errsz);
	}
	if (ranks_agree(e, c, err, errsz) < 0)
		return -1;
	if (c->rank == 0 && save_adapter(e, c, r->adapter_path, err, errsz) < 0)
		return -1;
	r->adapter_written = 1;
	return 0;
}

/* Ends a run that got far enough to report: the summary line, exit 1 for
 * oom and errors. */
static int finish(const struct train_config *c, struct run_result *r, FILE *out)
{
	if (strcmp(r->status, "ok") != 0)
		warnmsg("%s", r->error);
	if (c->rank > 0) /* the summary is rank 0's */
		return strcmp(r->status, "ok") == 0 ? EXIT_OK : EXIT_RUNTIME;
	if (print_summary(out, c, r) < 0)
		return EXIT_RUNTIME;
	return strcmp(r->status, "ok") == 0 ? EXIT_OK : EXIT_RUNTIME;
}

/* Everything one run holds, released by run_close whatever got built. */
struct run {
	struct train_config cfg;   /* the caller's, shallow, with the run's own choices (POROS_ATTN_CKPT unset) */
	const struct train_config *c; /* &cfg */
	struct model_config mc;
	struct token_source data;
	struct host_weights hw;
	struct engine *e;
	int have_mc, have_data, have_hw;
	struct eval_set eval;
	struct run_result r;
	size_t plan_bytes;  /* the plan's total */
	struct comm *comm;  /* NULL before run_training opens it */
	struct base_share share; /* the host's ranks, when there are ranks */
	int sharing;        /* 1: the base is one copy for the host (share) */
	char model_hash[MODEL_HASH_LEN + 1];
	char dataset_hash[DATA_HASH_LEN + 1], eval_dataset_hash[DATA_HASH_LEN + 1], tokenizer_hash[DATA_HASH_LEN + 1];
};

static void run_close(struct run *x)
{
	engine_destroy(x->e);
	ckpt_file_close(x->cfg.ckpt_file); /* after the engine, whose I/O thread used it */
	if (x->have_hw)
		host_weights_free(&x->hw);
	if (x->have_data)
		token_source_free(&x->data);
	if (x->eval.open)
		token_source_free(&x->eval.src);
	if (x->have_mc)
		model_config_free(&x->mc);
	if (x->r.lock_fd >= 0)
		close(x->r.lock_fd);
	free(x->r.step_s);
	free(x->r.events_path);
	free(x->r.adapter_path);
	comm_close(x->comm);
}

/* A rank that cannot go on ends every rank (the others would wait in the
 * next collective for ever), after saying why. */
static void abort_ranks(struct run *x, int rc)
{
	if (x->cfg.ranks > 1) {
		warnmsg("rank %d of %d: stopping every rank", x->cfg.rank, x->cfg.ranks);
		fflush(stdout);
		comm_abort(x->comm, rc);
	}
}

/* The model's shape: what is wrong here is bad input. */
static int open_model(struct run *x, char *err, size_t errsz)
{
	const struct train_config *c = x->c;

	if (model_config_resolve(&x->mc, c->cell.model.model_id, c->configs_dir, err, errsz) < 0)
		return -1;
	x->have_mc = 1;
	x->mc.tokenizer_path = c->cell.training.tokenizer ? xstrdup(c->cell.training.tokenizer) : NULL;
	if (x->mc.head_dim % 2 != 0)
		return snprintf(err, errsz, "%s: head_dim %d is odd (rotary embedding needs pairs)", c->cell.model.model_id,
		                x->mc.head_dim), -1;
	/* an unsupported rope_scaling is refused before any work is done */
	if (rope_tables(NULL, NULL, &x->mc, 0, err, errsz) < 0)
		return -1;
	x->r.n_layers = x->mc.num_hidden_layers;
	/* positions past the trained range still compute (RoPE has no table end), but the model never saw them */
	if (x->mc.max_position_embeddings > 0 && c->cell.training.seq_len > x->mc.max_position_embeddings &&
	    x->r.max_position == 0) {
		x->r.max_position = x->mc.max_position_embeddings;
		if (c->rank == 0)
			warnmsg("warning: --seq-len %d is beyond the model's max_position_embeddings %d (%s): positions "
			        "past it were never trained",
			        c->cell.training.seq_len, x->mc.max_position_embeddings, x->mc.config_path);
	}
	return 0;
}

/* --epochs E without --steps: ceil(E x rows per epoch / rows per step)
 * steps (steps run on through epochs: the step after an epoch's last
 * row takes the next epoch's first). */
static int steps_from_epochs(struct run *x, char *err, size_t errsz)
{
	struct train_config *c = &x->cfg;
	double rows = token_source_epoch_rows(&x->data), steps;

	if (c->epochs == 0 || c->steps_given)
		return 0;
	if (rows == 0)
		return snprintf(err, errsz, "--epochs: dataset %s is an endless stream; give --steps",
		                c->cell.training.dataset), -1;
	steps = ceil(c->epochs * rows / (double)rows_per_step(c));
	if (steps > 1000000)
		return snprintf(err, errsz, "--epochs %g: %.0f steps, more than 1000000", c->epochs, steps), -1;
	c->cell.training.steps = (int)steps;
	if (c->cell.training.warmup_steps >= c->cell.training.steps && c->cell.training.warmup_steps > 0)
		return snprintf(err, errsz, "--epochs %g: %d steps, not more than --timing-warmup %d", c->epochs,
		                c->cell.training.steps, c->cell.training.warmup_steps), -1;
	return 0;
}

/* One line before step 1: what the data is and how far the steps go. */
static void say_accounting(const struct run *x)
{
	const struct train_config *c = x->c;
	char data[256], eval[320] = "", over[96] = "", span[64];
	double epochs = epoch_at(c, &x->data, c->cell.training.steps);

	if (c->quiet)
		return;
	token_source_describe(&x->data, data, sizeof data);
	if (x->eval.open) {
		char what[256];

		token_source_describe(&x->eval.src, what, sizeof what);
		snprintf(eval, sizeof eval, "; eval %s%s%s: %s", x->eval.src.name,
		         x->eval.src.kind == SOURCE_DATASET && dataset_split_read(x->eval.src.ds) ? ", split " : "",
		         x->eval.src.kind == SOURCE_DATASET && dataset_split_read(x->eval.src.ds)
		                 ? dataset_split_read(x->eval.src.ds) : "", what);
	}
	if (c->epochs > 0 && c->steps_given)
		snprintf(over, sizeof over, " (--steps wins over --epochs %g)", c->epochs);
	if (isfinite(epochs))
		snprintf(span, sizeof span, "%.4g epochs", epochs);
	else
		snprintf(span, sizeof span, "no epochs (no end)");
	warnmsg("dataset %s: %s; %d steps of %ld rows%s: %s%s", c->cell.training.dataset, data, c->cell.training.steps,
	        rows_per_step(c), over, span, eval);
}

/* --eval-dataset: a directory's validation split (else its test split)
 * unless --eval-split names one, never the training files themselves. */
static int open_eval_dataset(struct run *x, char *err, size_t errsz)
{
	const struct cell *cl = &x->c->cell;
	const char *spec = cl->training.eval_dataset, *split = cl->training.eval_split;
	char why[768];

	if (split && !token_source_has_splits(spec))
		return snprintf(err, errsz, "--eval-split %s: dataset %s has no splits (only a directory or a HF cache "
		                "dataset has)", split, spec), -1;
	if (split == NULL && token_source_has_splits(spec))
		split = "validation|test";
	if (token_source_open(&x->eval.src, spec, &x->mc, cl->training.seq_len, cl->training.seed,
	                      (enum train_on)cl->training.train_on, cl->training.chat_date, split, why, sizeof why) < 0)
		return snprintf(err, errsz, "--eval-dataset: %s", why), -1;
	x->eval.open = 1;
	if (token_source_rows(&x->eval.src) < 0)
		return snprintf(err, errsz, "--eval-dataset %s: a synthetic stream has no end to average over; give "
		                "a dataset or a token file", spec), -1;
	if (x->have_data && token_source_same_data(&x->data, &x->eval.src))
		return snprintf(err, errsz, "--eval-dataset %s: the same files as the training data (--dataset %s%s%s): "
		                "an evaluation on them measures nothing held out", spec, cl->training.dataset,
		                cl->training.split ? ", split " : "", cl->training.split ? cl->training.split : ""), -1;
	return 0;
}

/* The model's shape and the data: what is wrong here is bad input. */
static int open_inputs(struct run *x, char *err, size_t errsz)
{
	const struct train_config *c = x->c;
	const struct cell *cl = &c->cell;

	if (open_model(x, err, errsz) < 0)
		return -1;
	if (c->eval_only && cl->training.eval_dataset) { /* the set alone: no training data to read */
		if (open_eval_dataset(x, err, errsz) < 0)
			return -1;
		x->eval.rows = token_source_rows(&x->eval.src);
		token_source_tell(&x->eval.src, &x->eval.start);
		return 0;
	}
	/* random tokens through real weights are asked for by name, never a default */
	if (x->mc.checkpoint_dir && !c->dataset_named)
		return snprintf(err, errsz, "--model %s: a checkpoint with weights, and no --dataset: give the data to "
		                "train on, or --dataset synthetic (or synthetic:repeat) for random tokens",
		                cl->model.model_id), -1;
	if (cl->training.split && !token_source_has_splits(cl->training.dataset))
		return snprintf(err, errsz, "--split %s: dataset %s has no splits (only a directory or a HF cache "
		                "dataset has)", cl->training.split, cl->training.dataset), -1;
	if (token_source_open(&x->data, cl->training.dataset, &x->mc, cl->training.seq_len, cl->training.seed,
	                      (enum train_on)cl->training.train_on, cl->training.chat_date, cl->training.split, err,
	                      errsz) < 0)
		return -1;
	x->have_data = 1;
	if (cl->training.eval_dataset && open_eval_dataset(x, err, errsz) < 0)
		return -1;
	if (cl->training.eval_fraction > 0) {
		if (token_source_hold_out(&x->data, &x->eval.src, cl->training.eval_fraction, err, errsz) < 0)
			return -1;
		x->eval.open = 1;
	}
	if (x->eval.open) {
		x->eval.rows = token_source_rows(&x->eval.src);
		token_source_tell(&x->eval.src, &x->eval.start);
	}
	return 0;
}

enum { RUN_OK = 0, RUN_FAILED = -1, RUN_BAD_INPUT = -2 };

/* The host memory of the run's base (host_weights_size), with the bf16
 * extension's rows and columns where it has them. */
static int base_size(const struct run *x, size_t *bytes, char *err, size_t errsz)
{
	const struct train_config *c = x->c;

	return host_weights_size(bytes, &x->mc, c->cell.precision == PRECISION_NF4, engine_host_ext_cols(c), err, errsz);
}

/* The run's device memory from the engine's own plan, before any weight
 * exists: the host weights' layouts come from the model's shape alone.
 * 0, or -1 with err (bad input: NF4 cannot hold a projection). */
static int make_plan(struct run *x, size_t library_bytes, struct dev_alloc *plan, struct ckpt_tier *tier, char *err,
                     size_t errsz)
{
	struct host_weights shape;

	memset(&shape, 0, sizeof shape);
	shape.n_layers = x->mc.num_hidden_layers;
	if (layer_layout_init(&shape.lay, &x->mc, x->c->cell.precision == PRECISION_NF4, engine_host_ext_cols(x->c),
	                      err, errsz) < 0)
		return -1;
	global_layout_init(&shape.glob, &x->mc);
	if (engine_plan(plan, tier, x->c, &x->mc, &shape, library_bytes, err, errsz) < 0) {
		dev_alloc_release_all(plan);
		return -1;
	}
	return 0;
}

/* POROS_LANES unset: a blockwise run of several micro-batches a step on
 * CUDA takes two compute lanes (engine_lanes), which cost a second set of
 * one layer's activations and scratch and a second cuBLAS workspace.
 * Where the two do not fit and one does, the run takes one lane and says
 * so (POROS_LANES=2 insists): fit means within --vram-budget, or without
 * one within the device's memory (device_mb; 0: not known, as for --plan)
 * less LANES_DEVICE_MARGIN for what the CUDA context and libraries hold
 * outside the plan, so a run that fitted with one lane before lanes
 * existed still does.  They change no bit.  Decided once, before the
 * plan.  0, or -1 with err. */
#define LANES_DEVICE_MARGIN ((size_t)1 << 30)

/* The device memory a run must fit: --vram-budget, else the device's
 * less LANES_DEVICE_MARGIN; 0 where neither is known. */
static size_t fit_cap(const struct train_config *c, long device_mb)
{
	if (c->vram_budget)
		return (size_t)c->vram_budget;
	if (device_mb > 0 && (size_t)device_mb * MIB > LANES_DEVICE_MARGIN)
		return (size_t)device_mb * MIB - LANES_DEVICE_MARGIN;
	return 0;
}

/* fit_cap's name in a message: "--vram-budget" or "the device's". */
static const char *cap_name(const struct train_config *c)
{
	return c->vram_budget ? "--vram-budget" : "the device's";
}

/* The device peak of the plan the configuration now makes (-1 with err). */
static int plan_peak(struct run *x, size_t library_bytes, size_t *peak, char *err, size_t errsz)
{
	struct dev_alloc plan;

	if (make_plan(x, library_bytes, &plan, NULL, err, errsz) < 0)
		return -1;
	*peak = plan.peak;
	dev_alloc_release_all(&plan);
	return 0;
}

/* The shape of the automatic choices below: *setting = prefer is planned;
 * over cap, *setting = fallback is.  Where that fits, it stays, *over is
 * the preferred plan's peak and *under (unless NULL) the fallback's, for
 * the warning; where it does not fit either, the budget's refusal, or the
 * device's, says it all: *over is 0, and *setting goes back to prefer
 * when restore (else it stays cut).  0, or -1 with err. */
static int fit_or_fall_back(struct run *x, size_t library_bytes, size_t cap, int *setting, int prefer, int fallback,
                            int restore, size_t *over, size_t *under, char *err, size_t errsz)
{
	size_t with, without;

	*over = 0;
	*setting = prefer;
	if (plan_peak(x, library_bytes, &with, err, errsz) < 0)
		return -1;
	if (with <= cap)
		return 0;
	*setting = fallback;
	if (plan_peak(x, library_bytes, &without, err, errsz) < 0)
		return -1;
	if (without <= cap) {
		*over = with;
		if (under)
			*under = without;
	} else if (restore) {
		*setting = prefer;
	}
	return 0;
}

/* The lanes POROS_LANES unset takes under cap, into c->lanes; *two_over:
 * the peak of two lanes where it is over cap and one lane fits, else 0
 * (where neither fits, one lane). */
static int fit_lanes(struct run *x, size_t library_bytes, size_t cap, size_t *two_over, char *err, size_t errsz)
{
	struct train_config *c = &x->cfg;
	int lanes;

	*two_over = 0;
	if (c->lanes != 0 || !cap)
		return 0;
	lanes = engine_lanes(c, library_bytes != 0);
	if (lanes < 2) {
		c->lanes = lanes;
		return 0;
	}
	return fit_or_fall_back(x, library_bytes, cap, &c->lanes, lanes, 1, 0, two_over, NULL, err, errsz);
}

static int choose_lanes(struct run *x, size_t library_bytes, size_t cap, char *err, size_t errsz)
{
	size_t two_over;
	char a[32], b[32];

	if (fit_lanes(x, library_bytes, cap, &two_over, err, errsz) < 0)
		return -1;
	if (two_over)
		warnmsg("two compute lanes need %s of device memory, over %s %s: one lane (POROS_LANES=2 insists)",
		        format_bytes(a, sizeof a, (double)two_over), cap_name(x->c),
		        format_bytes(b, sizeof b, (double)cap));
	return 0;
}

/* The sets POROS_CKPT_SETS unset keeps under cap, into c->ckpt_sets;
 * *two_over: the peak of two sets where it is over cap and one set fits,
 * else 0. */
static int fit_ckpt_sets(struct run *x, size_t library_bytes, size_t cap, size_t *two_over, char *err,
                         size_t errsz)
{
	struct train_config *c = &x->cfg;

	*two_over = 0;
	if (c->mode != MODE_BLOCKWISE || c->ckpt_sets != 0 || !cap || c->attn_ckpt != 0 ||
	    engine_block_ckpt(c, x->mc.num_hidden_layers))
		return 0;
	return fit_or_fall_back(x, library_bytes, cap, &c->ckpt_sets, 2, 1, 1, two_over, NULL, err, errsz);
}

/* POROS_CKPT_SETS unset: blockwise layer checkpoints keep two device
 * sets of records, so that a record's copy overlaps the next layer's
 * compute.  Where two do not fit (as choose_lanes: --vram-budget, or the
 * device less its margin) and one does, the run keeps one and says so
 * (POROS_CKPT_SETS=2 insists): each layer's output over its input, each
 * backward fetch after the layer it follows (schedule.c).  Without
 * attention checkpoints only; never block checkpoints, which hold a set
 * a layer of a block.  Set to 1, the run keeps one or is refused.  They
 * change no bit.  Decided once, after the attention checkpoints and the
 * lanes (a lane less is tried first) and before the disk records (which
 * plan with the sets taken).  0, or -1 with err (bad input). */
static int choose_ckpt_sets(struct run *x, size_t library_bytes, size_t cap, char *err, size_t errsz)
{
	const struct train_config *c = x->c;
	size_t two_over;
	char a[32], b[32];

	if (c->mode != MODE_BLOCKWISE)
		return 0;
	if (c->ckpt_sets == 1 && engine_block_ckpt(c, x->mc.num_hidden_layers))
		return snprintf(err, errsz, "POROS_CKPT_SETS: 1 needs --checkpoints layer (block checkpoints keep a "
		                "set a layer of a block)"), -1;
	if (c->ckpt_sets == 1 && c->attn_ckpt != 0)
		return snprintf(err, errsz, "POROS_CKPT_SETS: 1 needs POROS_ATTN_CKPT=0 (one set holds no attention "
		                "checkpoints)"), -1;
	if (fit_ckpt_sets(x, library_bytes, cap, &two_over, err, errsz) < 0)
		return -1;
	if (two_over)
		warnmsg("two checkpoint sets need %s of device memory, over %s %s: one set, each layer's record "
		        "fetched after the layer above (POROS_CKPT_SETS=2 insists)",
		        format_bytes(a, sizeof a, (double)two_over), cap_name(c),
		        format_bytes(b, sizeof b, (double)cap));
	return 0;
}

/* The host's part: left out where MemAvailable holds the base and the
 * layer inputs but not the records with attention (said), or not even the
 * inputs (the host check refuses the run for those).  With
 * --checkpoint-dir the disk takes what the host cannot hold: kept. */
static int attn_ckpt_host(struct run *x, size_t library_bytes, char *err, size_t errsz)
{
	struct train_config *c = &x->cfg;
	struct dev_alloc plan;
	struct ckpt_tier t;
	size_t base, ckpt, inputs, avail;
	char a[32], b[32], h[32];

	if (!c->attn_ckpt || c->checkpoint_dir)
		return 0;
	if (base_size(x, &base, err, errsz) < 0 || make_plan(x, library_bytes, &plan, &t, err, errsz) < 0)
		return -1;
	dev_alloc_release_all(&plan);
	ckpt = t.host;
	avail = host_memory_available();
	if (avail == 0 || base + ckpt <= avail)
		return 0;
	if (c->attn_ckpt == ATTN_CKPT_SUBLAYER) { /* the attention output alone, first */
		size_t sub = ckpt;

		c->attn_ckpt = ATTN_CKPT_OUTPUT;
		if (make_plan(x, library_bytes, &plan, &t, err, errsz) < 0)
			return -1;
		dev_alloc_release_all(&plan);
		if (base + (ckpt = t.host) <= avail) {
			warnmsg("the base (%s) and the layer checkpoints with the attention sublayer (%s) need more host "
			        "memory than is available (%s): the attention output alone is kept (POROS_ATTN_CKPT=2 "
			        "insists)", format_bytes(a, sizeof a, (double)base), format_bytes(b, sizeof b, (double)sub),
			        format_bytes(h, sizeof h, (double)avail));
			return 0;
		}
	}
	c->attn_ckpt = 0;
	if (make_plan(x, library_bytes, &plan, &t, err, errsz) < 0)
		return -1;
	dev_alloc_release_all(&plan);
	inputs = t.host;
	if (base + inputs <= avail)
		warnmsg("the base (%s) and the layer checkpoints with attention (%s) need more host memory than is "
		        "available (%s): the backward recomputes attention (POROS_ATTN_CKPT=1 insists)",
		        format_bytes(a, sizeof a, (double)base), format_bytes(b, sizeof b, (double)ckpt),
		        format_bytes(h, sizeof h, (double)avail));
	return 0;
}

/* The peak of the plan with attn_ckpt as given and the lanes and sets
 * that fit_lanes and fit_ckpt_sets take under cap, silently; the
 * configuration is left as it was. */
static int auto_peak(struct run *x, size_t library_bytes, size_t cap, int attn_ckpt, size_t *peak, char *err,
                     size_t errsz)
{
	struct train_config was = x->cfg;
	size_t two_over;
	int rc;

	x->cfg.attn_ckpt = attn_ckpt;
	rc = fit_lanes(x, library_bytes, cap, &two_over, err, errsz) < 0 ||
	     fit_ckpt_sets(x, library_bytes, cap, &two_over, err, errsz) < 0 ||
	     plan_peak(x, library_bytes, peak, err, errsz) < 0 ? -1 : 0;
	x->cfg = was;
	return rc;
}

/* The device's part: left out where the plan with them is over cap and
 * the one without them (one checkpoint set included) is not, and said. */
static int attn_ckpt_device(struct run *x, size_t library_bytes, size_t cap, char *err, size_t errsz)
{
	struct train_config *c = &x->cfg;
	size_t with, without;
	char a[32], b[32], d[32];

	if (!c->attn_ckpt || !cap)
		return 0;
	if (auto_peak(x, library_bytes, cap, c->attn_ckpt, &with, err, errsz) < 0)
		return -1;
	if (with <= cap)
		return 0;
	if (c->attn_ckpt == ATTN_CKPT_SUBLAYER) { /* the attention output alone, first */
		if (auto_peak(x, library_bytes, cap, ATTN_CKPT_OUTPUT, &without, err, errsz) < 0)
			return -1;
		if (without <= cap) {
			c->attn_ckpt = ATTN_CKPT_OUTPUT;
			warnmsg("the run with the attention sublayer's checkpoints needs %s of device memory, over %s %s, "
			        "and %s with the attention output alone: that is kept (POROS_ATTN_CKPT=2 insists)",
			        format_bytes(a, sizeof a, (double)with), cap_name(c), format_bytes(b, sizeof b, (double)cap),
			        format_bytes(d, sizeof d, (double)without));
			return 0;
		}
	}
	if (auto_peak(x, library_bytes, cap, 0, &without, err, errsz) < 0)
		return -1;
	if (without > cap)
		return 0;
	c->attn_ckpt = 0;
	warnmsg("the run with attention checkpoints needs %s of device memory, over %s %s, and %s without: the "
	        "backward recomputes attention (POROS_ATTN_CKPT=1 insists)",
	        format_bytes(a, sizeof a, (double)with), cap_name(c), format_bytes(b, sizeof b, (double)cap),
	        format_bytes(d, sizeof d, (double)without));
	return 0;
}

/* POROS_ATTN_CKPT unset: blockwise layer checkpoints keep the attention
 * checkpoints where the host has room for them beside the base and the
 * layer inputs, and the device under cap (fit_cap; 0: not known) with
 * the lanes and sets fit_lanes and fit_ckpt_sets take; else the backward
 * runs the attention forward again, said where that is what lets the run
 * fit (where nothing does, the run is refused as it would be with them).
 * Block checkpoints keep them on the device only (a block's sets), so
 * only the device's rule applies there.  They change no bit, only memory
 * and time.  Decided once, before the lanes and sets and the plan, so the
 * plan and the run are the same.  0, or -1 with err. */
static int choose_attn_ckpt(struct run *x, size_t library_bytes, size_t cap, char *err, size_t errsz)
{
	struct train_config *c = &x->cfg;

	if (c->attn_ckpt != ATTN_CKPT_AUTO)
		return 0;
	/* one device set holds no attention (schedule.c, ckpt_save_in_place);
	 * the sublayer's where micro-batch groups run (unset: micro-batches of
	 * up to 1024 rows), where it was measured: Qwen2.5-32B nf4 seq 512 x 8 in groups of 4
	 * 1.550 -> 1.475 s a step, 72B with the routes 2.976 -> 2.837 (H200,
	 * docs/perf-notes.md); at longer rows it is not measured yet, nor with
	 * records on disk (--checkpoint-dir), whose bandwidth the sublayer's
	 * 3-4x larger records would load far more than PCIe */
	c->attn_ckpt = c->ckpt_sets == 1               ? 0
	               : engine_group(c) > 1 && !c->checkpoint_dir ? ATTN_CKPT_SUBLAYER
	                                                          : ATTN_CKPT_OUTPUT;
	if (c->mode != MODE_BLOCKWISE)
		return 0;
	if (!engine_block_ckpt(c, x->mc.num_hidden_layers) && attn_ckpt_host(x, library_bytes, err, errsz) < 0)
		return -1;
	return attn_ckpt_device(x, library_bytes, cap, err, errsz);
}

/* POROS_GROUP unset: GROUP_AUTO_ROWS' worth of micro-batches a layer call
 * where groups apply (engine_group); where that plan is over cap and one
 * micro-batch a call fits, one, said (POROS_GROUP=N insists).  The GEMMs keep the
 * group's algorithms (engine_gemm_choice_rows), so no bit changes. */
static int choose_group(struct run *x, size_t library_bytes, size_t cap, char *err, size_t errsz)
{
	struct train_config *c = &x->cfg;
	size_t with, without;
	char a[32], b[32], d[32];
	int g = engine_group(c);

	if (c->group != 0 || !cap || g < 2)
		return 0;
	if (fit_or_fall_back(x, library_bytes, cap, &c->group_cut, 0, 1, 1, &with, &without, err, errsz) < 0)
		return -1;
	if (!with)
		return 0;
	warnmsg("micro-batch groups of %d need %s of device memory, over %s %s, and %s without: one micro-batch a "
	        "layer call (POROS_GROUP=%d insists)", g, format_bytes(a, sizeof a, (double)with), cap_name(c),
	        format_bytes(b, sizeof b, (double)cap), format_bytes(d, sizeof d, (double)without), g);
	return 0;
}

/* The run's automatic choices where their settings are unset, each
 * planned with those before it: the micro-batch groups, the attention
 * checkpoints, the lanes, the checkpoint sets.  device_mb as fit_cap's (0 for --plan).  0, or -1
 * with err (bad input). */
static int choose_schedule(struct run *x, size_t library_bytes, long device_mb, char *err, size_t errsz)
{
	size_t cap = fit_cap(x->c, device_mb);

	if (choose_group(x, library_bytes, cap, err, errsz) < 0 ||
	    choose_attn_ckpt(x, library_bytes, cap, err, errsz) < 0 ||
	    choose_lanes(x, library_bytes, cap, err, errsz) < 0)
		return -1;
	return choose_ckpt_sets(x, library_bytes, cap, err, errsz);
}

/* --checkpoint-dir: how many checkpoint records go to disk.  As many as
 * fit stay on the host: those MemAvailable (or POROS_MEM_AVAILABLE) holds
 * beside the rest of the host plan and the bounce slots the disk's need;
 * the others, the first layers' or blocks', go to the file (none when all
 * fit; all but none when the rest alone is over the host, which the host
 * check then refuses).  POROS_DISK_CHECKPOINTS sets the count instead.
 * Decided once, before the plan, so the plan and the run agree.  0, or -1
 * with err. */
static int choose_disk_records(struct run *x, size_t library_bytes, const char *backend, char *err, size_t errsz)
{
	struct train_config *c = &x->cfg;
	struct dev_alloc plan;
	struct ckpt_tier t;
	struct host_plan hp;
	size_t avail = host_memory_available(), rest, ranks, bounce, n_host;

	c->disk_records = 0;
	if (c->checkpoint_dir == NULL || c->mode != MODE_BLOCKWISE)
		return 0;
	if (make_plan(x, library_bytes, &plan, &t, err, errsz) < 0)
		return -1;
	if (host_plan_for_run(&hp, c, &x->mc, &plan, backend, &t, err, errsz) < 0)
		return dev_alloc_release_all(&plan), -1;
	dev_alloc_release_all(&plan);
	if (c->disk_records_forced >= 0) {
		if (c->disk_records_forced > t.n)
			return snprintf(err, errsz, "POROS_DISK_CHECKPOINTS: %ld records on disk, but the run keeps %d",
			                c->disk_records_forced, t.n), -1;
		c->disk_records = (int)c->disk_records_forced;
		return 0;
	}
	if (avail == 0 || hp.train <= avail)
		return 0;
	ranks = (size_t)hp.local_ranks;
	rest = hp.train - hp.checkpoints;
	bounce = ranks * ckpt_tier_bounce_bytes(&t);
	n_host = avail > rest + bounce ? (avail - rest - bounce) / (ranks * t.bytes) : 0;
	c->disk_records = t.n - (int)(n_host < (size_t)t.n ? n_host : (size_t)t.n);
	return 0;
}

/* "the run needs 4.3 GiB of device memory, over --vram-budget 2.0 GiB; the
 * largest: lm_head 1.0 GiB, slabs 1000.3 MiB, lora_state 616.0 MiB" */
static void over_budget(char *err, size_t errsz, const struct train_config *c, const struct dev_alloc *plan,
                        int n_layers)
{
	char need[32], have[32], largest[256];
	int len;

	len = snprintf(err, errsz, "the run needs %s of device memory, over --vram-budget %s; the largest: %s",
	               format_bytes(need, sizeof need, (double)plan->peak),
	               format_bytes(have, sizeof have, (double)c->vram_budget),
	               dev_alloc_largest(plan, 3, largest, sizeof largest));

	/* what the user can trade for memory, said where it runs out */
	if (c->mode == MODE_RESIDENT && !c->cell.training.gradient_checkpointing && len > 0 && (size_t)len < errsz)
		snprintf(err + len, errsz - (size_t)len, " (resident keeps all %d layers' activations: "
		         "--gradient-checkpointing on keeps one layer's)", n_layers);
}

/* A run refused before its first weight for memory (err says why): status
 * oom and, as any failed run, no earlier run's events left beside its
 * summary.  RUN_FAILED, or RUN_BAD_INPUT when the run directory is not
 * ours. */
static int refuse_oom(const struct train_config *c, struct run_result *r, char *err, size_t errsz)
{
	char why[512];
	int rc;

	r->status = "oom";
	if ((rc = prepare_run_dir(c, r, why, sizeof why)) < 0) {
		snprintf(err, errsz, "%s", why);
		if (rc == -2)
			return RUN_BAD_INPUT;
		r->status = "error";
	}
	snprintf(r->error, sizeof r->error, "%s", err);
	return RUN_FAILED;
}

/* The ranks of a data-parallel run: POROS_COMM (auto, single, mpi, nccl;
 * auto: mpi or nccl by the backend when a launcher started the process).
 * Ranks above 0 are quiet and write nothing. */
static int open_ranks(struct run *x, char *err, size_t errsz)
{
	char why[768];
	int cuda = strcmp(x->r.be->name, "cuda") == 0;

	if (comm_open(&x->comm, (enum comm_kind)x->c->comm_kind, cuda, why, sizeof why) < 0) {
		comm_close(x->comm);
		x->comm = NULL;
		return snprintf(err, errsz, "%s", why), -1;
	}
	x->cfg.comm = x->comm;
	x->cfg.rank = comm_rank(x->comm);
	x->cfg.ranks = comm_world(x->comm);
	if (x->cfg.accum_from_checkpoint && x->cfg.ranks > 1) {
		int *k = &x->cfg.cell.training.gradient_accumulation_steps;

		if (*k % x->cfg.ranks != 0)
			return snprintf(err, errsz, "--resume %s: the checkpoint's accumulation of %d micro-batches a step "
			                "does not divide over %d ranks: give --accum", x->cfg.resume, *k, x->cfg.ranks), -1;
		*k /= x->cfg.ranks;
	}
	if (x->cfg.ranks > 1) {
		if (shared_base_plan(&x->share, x->comm, err, errsz) < 0)
			return -1;
		x->cfg.local_ranks = x->share.local_ranks;
		x->sharing = x->cfg.shared_base;
	}
	if (x->cfg.rank > 0)
		x->cfg.quiet = 1;
	if (x->cfg.ranks > 1 && x->cfg.rank == 0 && !x->cfg.quiet)
		warnmsg("%d ranks over %s: %d micro-batches of %d rows a step", x->cfg.ranks, comm_name(x->comm),
		        x->cfg.ranks * x->cfg.cell.training.gradient_accumulation_steps, x->cfg.cell.training.batch_size);
	return 0;
}

/* The base into host memory, for a training run and an evaluation alike:
 * 0; RUN_BAD_INPUT; RUN_FAILED, with status "oom" when the host is out of
 * memory. */
static int load_base(struct run *x, char *err, size_t errsz)
{
	const struct train_config *c = x->c;
	int rc = host_weights_load(&x->hw, x->r.be, &x->mc, c->cell.precision == PRECISION_NF4, engine_host_ext_cols(c),
	                           c->cell.training.seed, x->sharing ? &x->share : NULL, err, errsz);

	if (rc == -1)
		return RUN_BAD_INPUT;
	if (rc == -3)
		x->r.status = "oom";
	if (rc < 0)
		return RUN_FAILED;
	x->have_hw = 1;
	return 0;
}

/* The base by its content (model_hash.h), once per run: a resume checks
 * it, not the path.  The cost is said, since a 72B base is 140 GB. */
static int identify_model(struct run *x, char *err, size_t errsz)
{
	double t0 = now_seconds(), s;
	size_t bytes;
	char sz[32];

	if (model_hash(x->model_hash, &bytes, &x->mc, x->c->cell.training.seed, err, errsz) < 0)
		return -1;
	x->cfg.model_hash = x->model_hash;
	s = now_seconds() - t0;
	if (!x->c->quiet)
		warnmsg("base %s: %s hashed in %.2f s (%.2f GB/s): %s", x->c->cell.model.model_id,
		        format_bytes(sz, sizeof sz, (double)bytes), s, s > 0 ? (double)bytes / s / 1e9 : 0.0, x->model_hash);
	return 0;
}

/* One digest of the data (data.h) into out, and *key pointing at it, or
 * NULL when there is nothing to hash; the cost said as the base's is. */
static int identify_one(const struct run *x, const char *key_name, const struct token_source *src, int tokenizer,
                        char out[DATA_HASH_LEN + 1], const char **key, char *err, size_t errsz)
{
	double t0 = now_seconds(), s;
	size_t bytes;
	char sz[32];
	int rc = tokenizer ? token_source_tokenizer_hash(out, &bytes, src, err, errsz)
	                   : token_source_hash(out, &bytes, src, err, errsz);

	if (rc < 0)
		return -1;
	*key = rc ? out : NULL;
	s = now_seconds() - t0;
	if (rc && !x->c->quiet)
		warnmsg("%s of %s: %s hashed in %.2f s (%.2f GB/s): %s", key_name,
		        tokenizer ? tokenizer_path(src->tok) : src->name, format_bytes(sz, sizeof sz, (double)bytes), s,
		        s > 0 ? (double)bytes / s / 1e9 : 0.0, out);
	return 0;
}

/* The data by content, once per run: a dataset or tokenizer edited in
 * place under the same path is another input, which a resume refuses. */
static int identify_data(struct run *x, char *err, size_t errsz)
{
	/* the training data's tokenizer, else the eval set's (token ids to train on, text to evaluate) */
	const struct token_source *tok_src = x->data.tok || !x->eval.open ? &x->data : &x->eval.src;

	if (identify_one(x, "dataset_hash", &x->data, 0, x->dataset_hash, &x->cfg.dataset_hash, err, errsz) < 0)
		return -1;
	/* an --eval-fraction set is the dataset's own documents: dataset_hash covers it */
	if (x->c->cell.training.eval_dataset &&
	    identify_one(x, "eval_dataset_hash", &x->eval.src, 0, x->eval_dataset_hash, &x->cfg.eval_dataset_hash, err,
	                 errsz) < 0)
		return -1;
	return identify_one(x, "tokenizer_hash", tok_src, 1, x->tokenizer_hash, &x->cfg.tokenizer_hash, err, errsz);
}

/* RUN_DIR/train_config.json: the whole configuration, readable; and the
 * precision said where the run starts (nf4 is the default). */
static int write_run_config(const struct train_config *c, char *err, size_t errsz)
{
	cJSON *o = run_config_json(c);
	char *text = cJSON_Print(o), *path = xasprintf("%s/train_config.json", c->out_dir), *full;
	int rc;

	full = xasprintf("%s\n", text);
	rc = atomic_write(path, full, strlen(full));
	if (rc < 0)
		snprintf(err, errsz, "%s: %s", path, strerror(errno));
	else if (!c->quiet)
		warnmsg("%s, %s base %s, %d steps, lr %g %s, seq_len %d; configuration in %s",
		        train_mode_names[c->mode], precision_names[c->cell.precision], c->cell.model.model_id,
		        c->cell.training.steps, c->cell.training.learning_rate,
		        lr_schedule_names[c->cell.training.lr_schedule], c->cell.training.seq_len, path);
	cJSON_Delete(o);
	free(text);
	free(full);
	free(path);
	return rc;
}

/* --checkpoint-dir: the file of the records on disk (none on disk: an
 * empty one all the same, so that a directory the run cannot write to is
 * refused whatever the host has), reserved before the base loads, and
 * what the run put there said once.  0, or -1 with err (bad input). */
static int open_checkpoint_file(struct run *x, const struct ckpt_tier *t, char *err, size_t errsz)
{
	struct train_config *c = &x->cfg;
	char on_disk[32], on_host[32];

	if (c->checkpoint_dir == NULL)
		return 0;
	if (ckpt_file_open(&c->ckpt_file, c->checkpoint_dir, t->file, t->n_disk, c->disk_direct,
	                   (size_t)c->disk_available, c->quiet, err, errsz) < 0)
		return -1;
	if (!c->quiet)
		warnmsg("--checkpoint-dir %s: %d of %d checkpoint records on disk (%s), %d in host memory (%s)",
		        c->checkpoint_dir, t->n_disk, t->n, format_bytes(on_disk, sizeof on_disk, (double)t->file),
		        t->n - t->n_disk, format_bytes(on_host, sizeof on_host, (double)t->host));
	return 0;
}

/* Backend, host weights, run directory, engine, steps.  RUN_FAILED with
 * the reason in x->r.error (it goes into the summary), RUN_BAD_INPUT with
 * it in err (a checkpoint or an --init-adapter that does not fit). */
static int run_training(struct run *x, char *err, size_t errsz)
{
	const struct train_config *c = x->c;
	struct run_result *r = &x->r;
	struct dev_alloc plan;
	struct ckpt_tier tier;
	size_t host;
	int rc;

	r->step_s = xcalloc((size_t)c->cell.training.steps, sizeof *r->step_s);
	/* ranks of one host each take their own GPU, before CUDA starts */
	if (comm_env_launched() && strcmp(c->backend, "cpu") != 0 && c->comm_kind != COMM_SINGLE &&
	    comm_bind_local_device(err, errsz) < 0)
		return RUN_BAD_INPUT;
	if ((r->be = select_backend(c, err, errsz)) == NULL)
		goto failed;
	/* --epochs counts the global batch: the ranks first */
	if (open_ranks(x, err, errsz) < 0 || steps_from_epochs(x, err, errsz) < 0)
		return RUN_BAD_INPUT;
	free(r->step_s);
	r->step_s = xcalloc((size_t)c->cell.training.steps, sizeof *r->step_s);
	/* the plan first: a run that cannot fit its budget stops before a
	 * weight is loaded */
	if (choose_schedule(x, r->be->library_device_bytes, r->be->device_mem_mb, err, errsz) < 0 ||
	    choose_disk_records(x, r->be->library_device_bytes, r->be->name, err, errsz) < 0 ||
	    make_plan(x, r->be->library_device_bytes, &plan, &tier, err, errsz) < 0)
		return RUN_BAD_INPUT;
	r->vram_plan_mb = (double)plan.peak / MIB;
	x->plan_bytes = plan.peak;
	if (base_size(x, &host, err, errsz) < 0)
		return RUN_BAD_INPUT;
	r->host_weights_mb = (double)host / MIB;
	r->host_checkpoints_mb = (double)(tier.host + tier.bounce) / MIB;
	r->disk_checkpoints_mb = (double)tier.file / MIB;
	if (c->vram_budget && plan.peak > (size_t)c->vram_budget) {
		over_budget(err, errsz, c, &plan, x->mc.num_hidden_layers);
		dev_alloc_release_all(&plan);
		return refuse_oom(c, r, err, errsz);
	}
	if (host_plan_for_run(&r->host, c, &x->mc, &plan, r->be->name, &tier, err, errsz) < 0)
		return dev_alloc_release_all(&plan), RUN_BAD_INPUT;
	r->host_rss_at_plan_mb = (double)host_rss_now() / MIB;
	if (host_plan_check(&r->host, err, errsz) < 0) {
		dev_alloc_release_all(&plan);
		return refuse_oom(c, r, err, errsz);
	}
	dev_alloc_release_all(&plan);
	if (open_checkpoint_file(x, &tier, err, errsz) < 0)
		return RUN_BAD_INPUT;
	/* a resume of another model or configuration stops before the weights load */
	if (identify_model(x, err, errsz) < 0 || identify_data(x, err, errsz) < 0 ||
	    (c->resume && checkpoint_check_config(c, err, errsz) < 0))
		return RUN_BAD_INPUT;
	if ((rc = load_base(x, err, errsz)) == RUN_BAD_INPUT)
		return RUN_BAD_INPUT;
	if (rc < 0)
		goto failed;
	if (!c->quiet) {
		char sz[32];

		warnmsg("host weights (%s, %s): %.1f s to allocate, %.1f s to %s",
		        format_bytes(sz, sizeof sz, r->host_weights_mb * MIB), x->hw.real ? "read" : "synthetic",
		        x->hw.alloc_s, x->hw.fill_s, x->hw.real ? "read" : "generate");
	}
	r->weights_known = 1;
	r->weights_real = x->hw.real;
	if ((rc = prepare_run_dir(c, r, err, errsz)) == -2)
		return RUN_BAD_INPUT;
	if (rc < 0 || (c->rank == 0 && write_run_config(c, err, errsz) < 0)) /* the run directory is rank 0's */
		goto failed;
	rc = engine_create(&x->e, c, &x->mc, &x->hw, &x->data, r->be, err, errsz);
	r->vram_peak_mb = (double)engine_vram_peak(x->e) / MIB;
	if (engine_vram_breakdown_json(x->e, r->vram_breakdown, sizeof r->vram_breakdown) < 0)
		r->vram_breakdown[0] = '\0';
	if (rc < 0) {
		r->status = engine_oom(x->e) ? "oom" : "error";
		goto failed;
	}
	if (engine_vram_peak(x->e) != x->plan_bytes) { /* the plan is exact, or it is a bug */
		snprintf(err, errsz, "internal error: %zu bytes of device memory allocated, %zu planned",
		         engine_vram_peak(x->e), x->plan_bytes);
		goto failed;
	}
	if (c->init_adapter && load_init_adapter(x->e, c, err, errsz) < 0)
		return RUN_BAD_INPUT;
	if (c->resume) {
		if (checkpoint_resume(x->e, &x->data, c, c->rank == 0 ? r->events_path : NULL, &r->resumed_at, &r->loss_first, err, errsz) < 0)
			return RUN_BAD_INPUT;
		r->steps_done = r->resumed_at;
		r->events_written = 1;
	}
	/* once every input is taken and the run is set to train, said even
	 * with --quiet: it decides where the adapter can be served */
	if (!vllm_rank_ok(c->cell.lora.rank) && c->rank == 0)
		warnmsg("warning: rank %d is not one vLLM serves (%s): vLLM will refuse this adapter", c->cell.lora.rank,
		        vllm_rank_list());
	say_accounting(x);
	catch_stop_signals();
	rc = train_loop(x->e, c, &x->data, r, &x->eval, err, errsz);
	r->vram_peak_mb = (double)engine_vram_peak(x->e) / MIB;
	if (rc < 0)
		goto failed;
	r->status = "ok";
	return RUN_OK;
failed:
	snprintf(r->error, sizeof r->error, "%s", err);
	return RUN_FAILED;
}

/* --eval-only: backend, plan, host weights, engine (the LoRA parameters
 * alone: no gradients, no AdamW state), the adapter, one pass over the
 * evaluation set.  The same codes as run_training; nothing is written. */
static int run_evaluation(struct run *x, char *err, size_t errsz)
{
	const struct train_config *c = x->c;
	struct run_result *r = &x->r;
	struct dev_alloc plan;
	struct ckpt_tier tier;
	size_t host;
	double loss;
	long long tokens;
	int rc;

	if ((r->be = select_backend(c, err, errsz)) == NULL)
		goto failed;
	if (choose_schedule(x, r->be->library_device_bytes, r->be->device_mem_mb, err, errsz) < 0 ||
	    make_plan(x, r->be->library_device_bytes, &plan, &tier, err, errsz) < 0)
		return RUN_BAD_INPUT;
	r->vram_plan_mb = (double)plan.peak / MIB;
	x->plan_bytes = plan.peak;
	if (base_size(x, &host, err, errsz) < 0)
		return dev_alloc_release_all(&plan), RUN_BAD_INPUT;
	r->host_weights_mb = (double)host / MIB;
	if (c->vram_budget && plan.peak > (size_t)c->vram_budget) {
		over_budget(err, errsz, c, &plan, x->mc.num_hidden_layers);
		dev_alloc_release_all(&plan);
		r->status = "oom";
		goto failed;
	}
	if (host_plan_for_run(&r->host, c, &x->mc, &plan, r->be->name, &tier, err, errsz) < 0)
		return dev_alloc_release_all(&plan), RUN_BAD_INPUT;
	dev_alloc_release_all(&plan);
	if (host_plan_check(&r->host, err, errsz) < 0) {
		r->status = "oom";
		goto failed;
	}
	if ((rc = load_base(x, err, errsz)) == RUN_BAD_INPUT)
		return RUN_BAD_INPUT;
	if (rc < 0)
		goto failed;
	r->weights_known = 1;
	r->weights_real = x->hw.real;
	/* the engine stages no training batch: the set is its only source */
	rc = engine_create(&x->e, c, &x->mc, &x->hw, &x->eval.src, r->be, err, errsz);
	if (rc < 0) {
		r->status = engine_oom(x->e) ? "oom" : "error";
		goto failed;
	}
	if (engine_vram_peak(x->e) != x->plan_bytes) {
		snprintf(err, errsz, "internal error: %zu bytes of device memory allocated, %zu planned",
		         engine_vram_peak(x->e), x->plan_bytes);
		goto failed;
	}
	if (c->init_adapter && load_init_adapter(x->e, c, err, errsz) < 0)
		return RUN_BAD_INPUT;
	if (!c->quiet)
		warnmsg("evaluating %s%s%s on %s: %ld rows", c->cell.model.model_id, c->init_adapter ? " + " : " (the base)",
		        c->init_adapter ? c->init_adapter : "", x->eval.src.name, x->eval.rows);
	if (token_source_seek(&x->eval.src, &x->eval.start, err, errsz) < 0 ||
	    engine_eval(x->e, &x->eval.src, x->eval.rows, &loss, &tokens, err, errsz) < 0)
		goto failed;
	r->vram_peak_mb = (double)engine_vram_peak(x->e) / MIB;
	r->eval_loss = loss;
	r->eval_tokens = tokens;
	r->status = "ok";
	return RUN_OK;
failed:
	snprintf(r->error, sizeof r->error, "%s", err);
	return RUN_FAILED;
}

/* --eval-only's line: the poros.eval/1 object (man/poros-train.1). */
static int print_eval(FILE *out, const struct run *x)
{
	const struct train_config *c = x->c;
	const struct run_result *r = &x->r;
	cJSON *o = cJSON_CreateObject();
	int ok = strcmp(r->status, "ok") == 0, rc;
	char ppl[40];

	cJSON_AddStringToObject(o, "schema", EVAL_SCHEMA);
	cJSON_AddStringToObject(o, "status", r->status);
	cJSON_AddItemToObject(o, "error", str_or_null(r->error[0] ? r->error : NULL));
	cJSON_AddStringToObject(o, "model", c->cell.model.model_id);
	cJSON_AddItemToObject(o, "adapter", str_or_null(c->init_adapter));
	cJSON_AddStringToObject(o, "mode", train_mode_names[c->mode]);
	cJSON_AddStringToObject(o, "precision", precision_names[c->cell.precision]);
	cJSON_AddItemToObject(o, "backend", str_or_null(r->be ? r->be->name : NULL));
	cJSON_AddStringToObject(o, "eval_dataset", c->cell.training.eval_dataset ? c->cell.training.eval_dataset
	                                                                         : c->cell.training.dataset);
	cJSON_AddItemToObject(o, "eval_fraction", c->cell.training.eval_fraction > 0
	                                              ? cJSON_CreateNumber(c->cell.training.eval_fraction)
	                                              : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "eval_loss", loss_json(ok ? r->eval_loss : NAN));
	/* e to the mean loss, from the mean as computed (not its 9 digits) */
	put_num(ppl, sizeof ppl, "%.9g", ok ? exp(r->eval_loss) : NAN);
	cJSON_AddItemToObject(o, "perplexity", cJSON_CreateRaw(ppl));
	cJSON_AddItemToObject(o, "eval_tokens", ok ? cJSON_CreateNumber((double)r->eval_tokens) : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "eval_rows", ok ? cJSON_CreateNumber((double)x->eval.rows) : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "vram_plan_mb", num_or_null(r->vram_plan_mb));
	cJSON_AddItemToObject(o, "vram_peak_mb", num_or_null(r->vram_peak_mb));
	cJSON_AddItemToObject(o, "host_weights_mb", num_or_null(r->host_weights_mb));
	cJSON_AddItemToObject(o, "weights", str_or_null(r->weights_known ? (r->weights_real ? "real" : "synthetic") : NULL));
	rc = jsonl_write(out, o);
	fflush(out);
	cJSON_Delete(o);
	if (!ok)
		warnmsg("%s", r->error);
	return rc < 0 ? EXIT_RUNTIME : ok ? EXIT_OK : EXIT_RUNTIME;
}

/* --plan: the backend the run would use, for its library's device
 * memory, without initialising a device where the name says which. */
static int plan_library_bytes(const struct train_config *c, size_t *bytes, const char **name, char *err,
                              size_t errsz)
{
	const struct backend *be;

	if (strcmp(c->backend, "cpu") == 0 || strcmp(c->backend, "cuda") == 0) {
		*bytes = strcmp(c->backend, "cuda") == 0 ? POROS_CUDA_LIBRARY_BYTES : 0;
		*name = c->backend;
		return 0;
	}
	/* auto: which one the run would get depends on the device there is */
	if ((be = select_backend(c, err, errsz)) == NULL)
		return -1;
	*bytes = be->library_device_bytes;
	*name = be->name;
	return 0;
}

/* --plan: the disk tier into o, for the host's ranks (a file each):
 * the records on disk, the files' size, what a step writes and reads,
 * and disk_fits against the free space under --checkpoint-dir (or
 * POROS_DISK_AVAILABLE; null without the directory or where neither is
 * known).  Without --checkpoint-dir every figure is 0. */
static void plan_disk(cJSON *o, const struct train_config *c, const struct ckpt_tier *t, size_t ranks)
{
	const char *source;
	size_t free_bytes = c->checkpoint_dir ? ckpt_disk_free(c->checkpoint_dir, (size_t)c->disk_available, &source) : 0;

	cJSON_AddItemToObject(o, "checkpoint_dir", str_or_null(c->checkpoint_dir));
	cJSON_AddNumberToObject(o, "disk_checkpoints", t->n_disk);
	cJSON_AddNumberToObject(o, "disk_checkpoints_mb", (double)(ranks * t->file) / MIB);
	cJSON_AddNumberToObject(o, "disk_write_mb_per_step", (double)(ranks * t->write_step) / MIB);
	cJSON_AddNumberToObject(o, "disk_read_mb_per_step", (double)(ranks * t->read_step) / MIB);
	cJSON_AddItemToObject(o, "disk_fits", free_bytes ? cJSON_CreateBool(ranks * t->file <= free_bytes)
	                                                 : cJSON_CreateNull());
}

/* --plan: the host plan into o, with host_fits against MemAvailable or
 * POROS_MEM_AVAILABLE (null where neither is known; the figure itself is
 * left out, so plans of one run compare equal; the exit status stays the
 * device budget's).  0, or -1 with err for bad input. */
static int plan_host(cJSON *o, struct run *x, const struct dev_alloc *plan, const char *backend,
                     const struct ckpt_tier *tier, char *err, size_t errsz)
{
	struct host_plan hp;
	size_t avail = host_memory_available();

	if (host_plan_for_run(&hp, x->c, &x->mc, plan, backend, tier, err, errsz) < 0)
		return -1;
	host_plan_add_json(o, &hp);
	cJSON_AddNumberToObject(o, "host_ranks", hp.local_ranks);
	cJSON_AddBoolToObject(o, "host_base_shared", hp.base_shared);
	cJSON_AddItemToObject(o, "host_fits", avail ? cJSON_CreateBool(hp.total <= avail) : cJSON_CreateNull());
	plan_disk(o, x->c, tier, (size_t)hp.local_ranks);
	return 0;
}

/* --plan: one JSON line with the plan; exit 1 when it is over the budget
 * or the host. */
static int print_plan(struct run *x, FILE *out)
{
	const struct train_config *c = x->c;
	struct dev_alloc plan;
	const char *backend;
	char err[1024], breakdown[1024];
	struct ckpt_tier tier;
	size_t lib, host;
	int over, rc;
	cJSON *o;

	if (open_model(x, err, sizeof err) < 0 || plan_library_bytes(c, &lib, &backend, err, sizeof err) < 0 ||
	    base_size(x, &host, err, sizeof err) < 0 || choose_schedule(x, lib, 0, err, sizeof err) < 0 ||
	    choose_disk_records(x, lib, backend, err, sizeof err) < 0 ||
	    make_plan(x, lib, &plan, &tier, err, sizeof err) < 0) {
		warnmsg("%s", err);
		return EXIT_USAGE;
	}
	over = c->vram_budget && plan.peak > (size_t)c->vram_budget;
	if (dev_alloc_breakdown_json(&plan, breakdown, sizeof breakdown) < 0)
		breakdown[0] = '\0';
	o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "schema", PLAN_SCHEMA);
	cJSON_AddItemToObject(o, "cell_id", str_or_null(c->cell.cell_id));
	cJSON_AddStringToObject(o, "method", method_names[c->cell.method]);
	cJSON_AddStringToObject(o, "mode", train_mode_names[c->mode]);
	cJSON_AddStringToObject(o, "precision", precision_names[c->cell.precision]);
	cJSON_AddStringToObject(o, "backend", backend);
	cJSON_AddItemToObject(o, "vram_plan_mb", num_or_null((double)plan.peak / MIB));
	cJSON_AddItemToObject(o, "vram_breakdown_mb", breakdown[0] ? cJSON_Parse(breakdown) : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "vram_budget_mb", c->vram_budget ? cJSON_CreateNumber((double)c->vram_budget / MIB)
	                                                          : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "fits", c->vram_budget ? cJSON_CreateBool(!over) : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "host_weights_mb", num_or_null((double)host / MIB));
	cJSON_AddItemToObject(o, "host_checkpoints_mb", num_or_null((double)(tier.host + tier.bounce) / MIB));
	cJSON_AddItemToObject(o, "attention_checkpoints",
	                      c->mode == MODE_BLOCKWISE ? cJSON_CreateBool(c->attn_ckpt != 0) : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "attention_sublayer", c->mode == MODE_BLOCKWISE
	                      ? cJSON_CreateBool(c->attn_ckpt == ATTN_CKPT_SUBLAYER) : cJSON_CreateNull());
	cJSON_AddItemToObject(o, "checkpoints", c->mode != MODE_BLOCKWISE ? cJSON_CreateNull()
	                      : cJSON_CreateString(checkpoints_names[engine_block_ckpt(c, x->mc.num_hidden_layers)]));
	cJSON_AddItemToObject(o, "checkpoint_sets", c->mode == MODE_BLOCKWISE
	                      ? cJSON_CreateNumber(engine_ckpt_sets(c, x->mc.num_hidden_layers)) : cJSON_CreateNull());
	cJSON_AddNumberToObject(o, "lanes", engine_lanes(c, lib != 0));
	cJSON_AddNumberToObject(o, "group", engine_group(c));
	cJSON_AddStringToObject(o, "optimizer_state", c->optimizer_on_host ? "host" : "device");
	if (plan_host(o, x, &plan, backend, &tier, err, sizeof err) < 0) {
		warnmsg("%s", err);
		cJSON_Delete(o);
		dev_alloc_release_all(&plan);
		return EXIT_USAGE;
	}
	rc = jsonl_write(out, o) < 0 ? EXIT_RUNTIME : EXIT_OK;
	fflush(out);
	cJSON_Delete(o);
	if (over) {
		over_budget(err, sizeof err, c, &plan, x->mc.num_hidden_layers);
		warnmsg("%s", err);
		rc = EXIT_RUNTIME;
	}
	dev_alloc_release_all(&plan);
	return rc;
}

int train_run(const struct train_config *c, FILE *summary_out)
{
	struct run x = { .cfg = *c };
	char err[1024];
	int rc;

	x.c = &x.cfg;
	host_memory_set_available((size_t)c->mem_available);
	dataset_set_progress(c->quiet ? -1.0 : c->progress_after);
	x.r = (struct run_result){ .status = "error", .loss_first = NAN, .loss_last = NAN, .vram_peak_mb = NAN,
	                           .vram_plan_mb = NAN, .host_weights_mb = NAN, .host_checkpoints_mb = NAN,
	                           .disk_checkpoints_mb = NAN, .disk_write_mb = NAN, .disk_read_mb = NAN,
	                           .eval_loss = NAN, .lock_fd = -1, .host_rss_at_plan_mb = NAN };
	if (x.c->plan) {
		rc = print_plan(&x, summary_out);
		run_close(&x);
		return rc;
	}
	if (x.c->eval_only) {
		if (open_inputs(&x, err, sizeof err) < 0 || run_evaluation(&x, err, sizeof err) == RUN_BAD_INPUT) {
			warnmsg("%s", err);
			run_close(&x);
			return EXIT_USAGE;
		}
		rc = print_eval(summary_out, &x);
		run_close(&x);
		return rc;
	}
	/* bad input: a message and exit 2, no summary */
	if (open_inputs(&x, err, sizeof err) < 0 || run_training(&x, err, sizeof err) == RUN_BAD_INPUT) {
		warnmsg("%s", err);
		abort_ranks(&x, EXIT_USAGE);
		run_close(&x);
		return EXIT_USAGE;
	}
	/* interrupted: no summary (the run did not end), the signal's status */
	rc = x.r.interrupted ? 128 + x.r.interrupted : finish(x.c, &x.r, summary_out);
	if (rc != EXIT_OK)
		abort_ranks(&x, rc);
	run_close(&x);
	return rc;
}
