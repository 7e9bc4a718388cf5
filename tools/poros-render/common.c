/* tools/poros-render/common.c: what report.html and report.md say alike,
 * written through a struct markup so that each writer keeps its own
 * escaping and tags while the content is decided once. */
#include "render.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

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
	return 1;
}

const char *const env_field_names[] = {
	"hostname", "os", "kernel", "cpu", "host_mem_gb", "gpu_name", "gpu_mem_mb", "driver", "cuda_runtime",
	"poros_version", "git_sha", "python", "torch", "transformers", "peft", "weights", NULL,
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

	item(b, mk, "Spec");
	spec_ids(b, r, mk->text);
	sb_puts(b, mk->item_close);
	item(b, mk, "Hardware");
	mk->text(b, c->hardware.gpu_name);
	hardware_numbers(b, c->hardware.vram_gb, c->hardware.pcie_gen);
	sb_puts(b, mk->item_close);
	item(b, mk, "Models");
	for (int m = 0; m < r->n_models; m++) {
		const struct cell *mc = r->models[m].cell;
		sb_puts(b, m ? "; " : "");
		mk->text(b, mc->model.display_name);
		sb_printf(b, " (%s", mk->code_open);
		mk->text(b, mc->model.model_id);
		sb_printf(b, "%s, %g B parameters)", mk->code_close, mc->model.param_count_b);
	}
	sb_puts(b, mk->item_close);
	item(b, mk, "Methods");
	present_names(b, r, 1, mk->text);
	sb_puts(b, mk->item_close);
	item(b, mk, "Precisions");
	present_names(b, r, 0, mk->text);
	sb_puts(b, mk->item_close);
	item(b, mk, "Training");
	sb_printf(b, "%d steps (the first %d excluded from timing); %d tokens %s batch %d %s "
	             "accumulation %d = %lld tokens per step; dataset ",
	          c->training.steps, c->training.warmup_steps, c->training.seq_len, mk->times, c->training.batch_size,
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
	sb_puts(b, mk->item_close);
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
