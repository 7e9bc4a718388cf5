/* tools/poros-render/common.c: what report.html and report.md say alike,
 * written through a struct markup so that each writer keeps its own
 * escaping and tags while the content is decided once. */
#include "render.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

const char *status_name(const struct result_entry *e)
{
	return artifact_status_names[e->art.status];
}

static void status_counts(const struct report *r, int counts[STATUS_COUNT])
{
	memset(counts, 0, STATUS_COUNT * sizeof counts[0]);
	for (int i = 0; i < r->results.n; i++)
		counts[r->results.e[i].art.status]++;
}

int all_cells_ok(const struct report *r)
{
	for (int i = 0; i < r->results.n; i++)
		if (r->results.e[i].art.status != STATUS_OK)
			return 0;
	return r->n_missing == 0;
}

const char *const env_field_names[] = {
	"hostname", "os", "kernel", "cpu", "host_mem_gb", "gpu_name", "gpu_mem_mb", "driver", "cuda_runtime",
	"poros_version", "git_sha", "python", "torch", "transformers", "peft", "weights", "backend", "device", NULL,
};

/* One env field of one artifact as text, or NULL when not known. */
static const char *env_value(const struct artifact_env *env, const char *field, char *buf, size_t n)
{
	double num = NAN;

	if (strcmp(field, "host_mem_gb") == 0)
		num = env->host_mem_gb;
	else if (strcmp(field, "gpu_mem_mb") == 0)
		num = env->gpu_mem_mb;
	else if (strcmp(field, "hostname") == 0) return env->hostname;
	else if (strcmp(field, "os") == 0) return env->os;
	else if (strcmp(field, "kernel") == 0) return env->kernel;
	else if (strcmp(field, "cpu") == 0) return env->cpu;
	else if (strcmp(field, "gpu_name") == 0) return env->gpu_name;
	else if (strcmp(field, "driver") == 0) return env->driver;
	else if (strcmp(field, "cuda_runtime") == 0) return env->cuda_runtime;
	else if (strcmp(field, "poros_version") == 0) return env->poros_version;
	else if (strcmp(field, "git_sha") == 0) return env->git_sha;
	else if (strcmp(field, "python") == 0) return env->python;
	else if (strcmp(field, "torch") == 0) return env->torch;
	else if (strcmp(field, "transformers") == 0) return env->transformers;
	else if (strcmp(field, "peft") == 0) return env->peft;
	else if (strcmp(field, "weights") == 0) return env->weights;
	else if (strcmp(field, "backend") == 0) return env->backend;
	else if (strcmp(field, "device") == 0) return env->device;
	if (isnan(num))
		return NULL;
	snprintf(buf, n, "%g", num);
	return buf;
}

int env_values(struct sbuf *out, const struct report *r, const char *field, escape_fn text)
{
	struct strmap seen;
	int n;

	strmap_init(&seen);
	for (int i = 0; i < r->results.n; i++) {
		char buf[64];
		const char *v = env_value(&r->results.e[i].art.env, field, buf, sizeof buf);

		if (v == NULL || strmap_get(&seen, v) >= 0)
			continue;
		if (seen.n > 0)
			sb_puts(out, ", ");
		text(out, v);
		strmap_put(&seen, v, 1);
	}
	n = seen.n;
	strmap_free(&seen);
	return n;
}

void spec_ids(struct sbuf *b, const struct report *r, escape_fn text)
{
	struct strmap seen;

	strmap_init(&seen);
	for (int i = 0; i < r->results.n; i++) {
		const char *id = r->results.e[i].art.cell.spec_id;

		if (strmap_get(&seen, id) >= 0)
			continue;
		if (seen.n > 0)
			sb_puts(b, ", ");
		text(b, id);
		strmap_put(&seen, id, 1);
	}
	strmap_free(&seen);
}

const char *cpu_banner(const struct report *r)
{
	int cpu = 0, synthetic = 1;

	for (int i = 0; i < r->results.n; i++) {
		const struct artifact *a = &r->results.e[i].art;

		if (!is_cpu_run(a))
			continue;
		cpu = 1;
		synthetic &= a->env.weights != NULL && strcmp(a->env.weights, "synthetic") == 0;
	}
	if (!cpu)
		return "";
	return synthetic ? "CPU backend, tiny synthetic models: this shows the pipeline, not Poros' speed."
	                 : "CPU backend: this shows the pipeline, not Poros' speed on a GPU.";
}

/* --- the spec summary --------------------------------------------------------- */

/* ", 24 GB, PCIe gen 4", leaving out what the spec did not set (0). */
static void hardware_numbers(struct sbuf *b, double vram_gb, int pcie_gen)
{
	if (vram_gb > 0)
		sb_printf(b, ", %g GB", vram_gb);
	if (pcie_gen > 0)
		sb_printf(b, ", PCIe gen %d", pcie_gen);
}

/* The methods or precisions present, in their canonical order. */
static void present_names(struct sbuf *b, const struct report *r, int methods, escape_fn text)
{
	int count = methods ? METHOD_COUNT : PRECISION_COUNT, first = 1;

	for (int k = 0; k < count; k++) {
		int present = 0;
		for (int i = 0; i < r->results.n; i++)
			present |= (methods ? (int)r->results.e[i].art.cell.method : (int)r->results.e[i].art.cell.precision) == k;
		if (!present)
			continue;
		sb_puts(b, first ? "" : ", ");
		text(b, methods ? method_names[k] : precision_names[k]);
		first = 0;
	}
}

/* The spec named no hardware: what the artifacts say ran them, the GPUs
 * of CUDA runs and the CPU and host memory of CPU runs. */
static void measured_hardware(struct sbuf *b, const struct report *r, const struct markup *mk)
{
	struct strmap seen;
	int n = 0;

	strmap_init(&seen);
	for (int i = 0; i < r->results.n; i++) {
		const struct artifact *a = &r->results.e[i].art;
		struct sbuf one;

		if (a->env.backend == NULL || a->status == STATUS_SKIPPED)
			continue;
		sb_init(&one);
		if (is_cpu_run(a)) {
			sb_puts(&one, "CPU: ");
			mk->text(&one, a->env.cpu ? a->env.cpu : "unknown model");
			if (a->env.host_mem_gb > 0)
				sb_printf(&one, ", %g GiB host memory", a->env.host_mem_gb);
		} else {
			mk->text(&one, a->env.gpu_name ? a->env.gpu_name : "unknown GPU");
			if (a->env.gpu_mem_mb > 0)
				sb_printf(&one, ", %.0f MiB", a->env.gpu_mem_mb);
		}
		if (strmap_get(&seen, one.s) < 0) {
			sb_printf(b, "%s%s", n++ ? "; " : "", one.s);
			strmap_put(&seen, one.s, 1);
		}
		sb_free(&one);
	}
	strmap_free(&seen);
	if (n == 0)
		sb_puts(b, "unspecified (the spec names none, and no artifact says what ran it)");
	else
		mk_muted(b, mk, " (from the artifacts: the spec names no hardware)");
}

static void item(struct sbuf *b, const struct markup *mk, const char *term)
{
	sb_puts(b, mk->item_open);
	sb_puts(b, term);
	sb_puts(b, mk->item_mid);
}

void spec_items(struct sbuf *b, const struct report *r, const struct markup *mk)
{
	const struct cell *c = &r->results.e[0].art.cell;
	int counts[STATUS_COUNT];
	char num[32];

	item(b, mk, "Spec");
	spec_ids(b, r, mk->text);
	sb_puts(b, mk->item_close);
	item(b, mk, "Hardware");
	/* not named in the spec: null, or "unspecified" in artifacts written before null */
	if ((c->hardware.gpu_name == NULL || strcmp(c->hardware.gpu_name, "unspecified") == 0) &&
	    !(c->hardware.vram_gb > 0))
		measured_hardware(b, r, mk);
	else {
		mk->text(b, c->hardware.gpu_name ? c->hardware.gpu_name : "not named in the spec");
		hardware_numbers(b, c->hardware.vram_gb, c->hardware.pcie_gen);
	}
	sb_puts(b, mk->item_close);
	item(b, mk, "Models");
	for (int m = 0; m < r->n_models; m++) {
		const struct cell *mc = r->models[m].cell;
		sb_puts(b, m ? "; " : "");
		mk->text(b, mc->model.display_name);
		sb_printf(b, " (%s", mk->code_open);
		mk->text(b, mc->model.model_id);
		sb_printf(b, "%s, %s parameters)", mk->code_close, fmt_params(num, sizeof num, mc->model.param_count_b));
	}
	sb_puts(b, mk->item_close);
	item(b, mk, "Methods");
	present_names(b, r, 1, mk->text);
	sb_puts(b, mk->item_close);
	item(b, mk, "Precisions");
	present_names(b, r, 0, mk->text);
	sb_puts(b, mk->item_close);
	item(b, mk, "Training");
	sb_printf(b, "%d steps (the first %d excluded from timing; LR warmup %d; %d pass%s timed); "
	             "%d tokens %s batch %d %s "
	             "accumulation %d = %lld tokens per step; dataset ",
	          c->training.steps, c->training.warmup_steps, c->training.lr_warmup_steps, c->training.passes,
	          c->training.passes == 1 ? "" : "es", c->training.seq_len, mk->times, c->training.batch_size,
	          mk->times, c->training.gradient_accumulation_steps, c->tokens_per_step);
	mk->text(b, c->training.dataset);
	sb_printf(b, "; seed %llu; learning rate %g (%s); weight decay %g; max grad norm %g; gradient checkpointing %s",
	          c->training.seed, c->training.learning_rate, lr_schedule_names[c->training.lr_schedule],
	          c->training.weight_decay, c->training.max_grad_norm, c->training.gradient_checkpointing ? "on" : "off");
	sb_puts(b, mk->item_close);
	item(b, mk, "LoRA");
	sb_printf(b, "rank %d, alpha %g, dropout %g; targets", c->lora.rank, c->lora.alpha, c->lora.dropout);
	for (int t = 0; t < CELL_MAX_TARGETS; t++)
		if (c->lora.target_mask & (1u << t)) {
			sb_puts(b, " ");
			mk->text(b, lora_module_names[t]);
		}
	sb_puts(b, mk->item_close);
	item(b, mk, "Poros");
	sb_printf(b, "block size %d, prefetch %s", c->poros.block_size, c->poros.enable_prefetch ? "on" : "off");
	sb_puts(b, mk->item_close);
	status_counts(r, counts);
	item(b, mk, "Cells");
	sb_printf(b, "%d: %d ok, %d oom, %d error, %d skipped", r->results.n, counts[STATUS_OK], counts[STATUS_OOM],
	          counts[STATUS_ERROR], counts[STATUS_SKIPPED]);
	if (r->n_missing > 0)
		sb_printf(b, "; %s%d of the spec's %d cells not measured%s", mk->warn_open, r->n_missing, r->spec_cells,
		          mk->warn_close);
	sb_puts(b, mk->item_close);
}

void artifact_items(struct sbuf *b, const struct report *r, const struct markup *mk, int ignored)
{
	int n = ignored ? r->n_ignored : r->results.n;

	for (int i = 0; i < n; i++) {
		const char *id = ignored ? r->ignored[i].cell_id : r->results.e[i].art.cell_id;

		sb_puts(b, mk->item_open);
		mk->text(b, id);
		sb_puts(b, mk->item_mid);
		sb_puts(b, mk->code_open);
		if (ignored) {
			mk->text(b, r->ignored[i].source);
			sb_puts(b, mk->code_close);
			sb_puts(b, ": ");
			mk->text(b, r->ignored[i].why);
		} else {
			const struct result_entry *e = &r->results.e[i];

			mk->text(b, e->source);
			if (e->line > 0)
				sb_printf(b, ":%ld", e->line);
			sb_puts(b, mk->code_close);
			sb_puts(b, ", finished ");
			mk->text(b, e->art.finished_at);
			if (r->spec != NULL && (e->art.config_hash[0] == '\0' || !report_spec_hashes(r)))
				mk_muted(b, mk, e->art.config_hash[0] == '\0'
				                    ? " (it records no config_hash: not checked against the spec's)"
				                    : " (the spec has no config_hashes: not checked)");
		}
		sb_puts(b, mk->item_close);
	}
}

/* --- the parity table ----------------------------------------------------------- */

void parity_label(struct sbuf *b, const struct parity_row *row, escape_fn text)
{
	if (row->display_name)
		text(b, row->display_name);
	else if (row->arch)
		text(b, row->arch);
	else {
		text(b, row->record->run_a);
		sb_puts(b, " vs ");
		text(b, row->record->run_b);
	}
}

void parity_where(struct sbuf *b, const struct parity *p, const struct markup *mk)
{
	if (p->loss_max_step >= 0)
		sb_printf(b, "loss: step %ld%s", p->loss_max_step, p->adapter_max_tensor ? mk->line_break : "");
	if (p->adapter_max_tensor) {
		sb_printf(b, "adapter: %s", mk->code_open);
		mk->text(b, p->adapter_max_tensor);
		sb_puts(b, mk->code_close);
		if (p->adapter_max_index >= 0) {
			/* Brackets start a link in Markdown: the index is text like the name. */
			char index[32];
			snprintf(index, sizeof index, " [%lld]", p->adapter_max_index);
			mk->text(b, index);
		}
	}
	if (p->loss_max_step < 0 && p->adapter_max_tensor == NULL)
		sb_puts(b, "--");
}

/* --- the headline, the stamp ---------------------------------------------------- */

/* "1.27x" (the ratio a / b), or NULL when either is not measured. */
static const char *ratio(char *buf, size_t n, double a, double b, const char *times)
{
	if (!(a > 0) || !(b > 0) || !isfinite(a) || !isfinite(b))
		return NULL;
	snprintf(buf, n, "%.2f%s", a / b, times);
	return buf;
}

void model_headline(struct sbuf *b, const struct report_model *m, const struct markup *mk)
{
	for (int p = 0; p < PRECISION_COUNT; p++) {
		const struct result_entry *poros = NULL;
		char t[32], v[32], num[32];
		int others = 0;

		for (int i = 0; i < m->n; i++)
			if ((int)m->rows[i]->art.cell.precision == p && m->rows[i]->art.cell.method == METHOD_POROS)
				poros = m->rows[i];
		if (poros == NULL || poros->art.status != STATUS_OK)
			continue;
		sb_puts(b, mk->item_open);
		sb_printf(b, "poros %s:", precision_names[p]);
		sb_puts(b, mk->item_mid);
		sb_printf(b, "%s s/step, ", fmt_num(num, sizeof num, poros->art.metrics.s_per_step));
		sb_printf(b, "%s %s", fmt_mib(num, sizeof num, poros->art.metrics.vram_peak_mb),
		          is_cpu_run(&poros->art) ? "host allocator peak" : "peak");
		for (int i = 0; i < m->n; i++) {
			const struct artifact *o = &m->rows[i]->art;
			const char *rt, *rv;

			if ((int)o->cell.precision != p || o->cell.method == METHOD_POROS)
				continue;
			sb_puts(b, "; vs ");
			others++;
			mk->text(b, method_names[o->cell.method]);
			if (o->status != STATUS_OK) {
				sb_printf(b, ": %s", artifact_status_names[o->status]);
				continue;
			}
			rt = ratio(t, sizeof t, poros->art.metrics.s_per_step, o->metrics.s_per_step, mk->times);
			rv = ratio(v, sizeof v, poros->art.metrics.vram_peak_mb, o->metrics.vram_peak_mb, mk->times);
			sb_printf(b, ": %s the time, %s the memory", rt ? rt : "--", rv ? rv : "--");
		}
		if (others == 0)
			sb_puts(b, " (no other method of this precision to compare with)");
		sb_puts(b, mk->item_close);
	}
}

/* What ran a model's cells: its GPUs, or "CPU (model)", distinct, in row order. */
static void model_hardware(struct sbuf *b, const struct report_model *m, const struct markup *mk)
{
	struct strmap seen;

	strmap_init(&seen);
	for (int i = 0; i < m->n; i++) {
		const struct artifact *a = &m->rows[i]->art;
		struct sbuf one;

		if (a->env.backend == NULL || a->status == STATUS_SKIPPED)
			continue;
		sb_init(&one);
		if (is_cpu_run(a)) {
			sb_puts(&one, "the CPU backend (");
			mk->text(&one, a->env.cpu ? a->env.cpu : "unknown model");
			sb_puts(&one, ")");
		} else {
			mk->text(&one, a->env.gpu_name ? a->env.gpu_name : "an unnamed GPU");
		}
		if (strmap_get(&seen, one.s) < 0) {
			sb_printf(b, "%s%s", seen.n ? " and " : "", one.s);
			strmap_put(&seen, one.s, 1);
		}
		sb_free(&one);
	}
	if (seen.n == 0)
		sb_puts(b, "hardware its artifacts do not name");
	strmap_free(&seen);
}

void model_sentence(struct sbuf *b, const struct report_model *m, const struct markup *mk)
{
	struct markup clause = *mk; /* the headline's lines as the clauses of one sentence */
	struct sbuf h;

	clause.item_open = "";
	clause.item_mid = " ";
	clause.item_close = "; ";
	sb_init(&h);
	model_headline(&h, m, &clause);
	mk->text(b, m->cell->model.display_name);
	sb_puts(b, " on ");
	model_hardware(b, m, mk);
	if (h.len == 0) {
		sb_puts(b, ": no poros cell finished, so there is no ratio to give.");
	} else {
		h.s[h.len -= 2] = '\0'; /* the last clause's "; " */
		sb_printf(b, ", %s.", h.s);
	}
	sb_free(&h);
}

void config_hash(char out[17], const struct cell *c)
{
	cJSON *j = cell_to_json(c), *shared = cJSON_CreateObject();
	static const char *const keys[] = { "spec_id", "hardware", "training", "lora", "poros" };
	unsigned long long h = REPORT_HASH_INIT;
	char *text;

	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		cJSON_AddItemToObject(shared, keys[i], cJSON_DetachItemFromObjectCaseSensitive(j, keys[i]));
	text = cJSON_PrintUnformatted(shared);
	h = report_hash(text ? text : "", h);
	snprintf(out, 17, "%016llx", h);
	cJSON_free(text);
	cJSON_Delete(shared);
	cJSON_Delete(j);
}

void report_stamp(struct sbuf *b, const struct report *r, const struct markup *mk)
{
	const char *first = NULL, *last = NULL;
	char hash[17];
	struct sbuf sha;

	for (int i = 0; i < r->results.n; i++) {
		const struct artifact *a = &r->results.e[i].art;
		const char *start = a->started_at[0] ? a->started_at : a->finished_at;

		if (first == NULL || strcmp(start, first) < 0)
			first = start;
		if (last == NULL || strcmp(a->finished_at, last) > 0)
			last = a->finished_at;
	}
	sb_init(&sha);
	if (env_values(&sha, r, "git_sha", mk->text) == 0)
		sb_puts(&sha, "--");
	config_hash(hash, &r->results.e[0].art.cell);
	sb_puts(b, "Run ");
	mk->text(b, first);
	sb_puts(b, " to ");
	mk->text(b, last);
	sb_printf(b, "; commit %s%s%s; config %s%s%s", mk->code_open, sha.s, mk->code_close, mk->code_open, hash,
	          mk->code_close);
	if (r->n_ignored > 0)
		sb_printf(b, "; %s%d artifact%s of the input ignored%s (see Artifacts)", mk->warn_open, r->n_ignored,
		          r->n_ignored == 1 ? "" : "s", mk->warn_close);
	sb_free(&sha);
}
