/* tools/poros-export/model_card.c: README.md of a merged checkpoint, the
 * model card: the base, the adapter, and the training as the run's own
 * files record it (RUN/train_config.json, RUN/events.jsonl, RUN being the
 * adapter's parent directory).  Only what those files and the export
 * know is written; what no file records is said to be missing. */
#include "export.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* What events.jsonl says: the last step, its loss, the last evaluation. */
struct run_events {
	int present, steps;
	double loss, eval_loss;
	int eval_step, eval_tokens;
};

char *adapter_run_dir(const char *adapter)
{
	size_t n = strlen(adapter);
	const char *last;
	char *dir;

	while (n > 1 && adapter[n - 1] == '/')
		n--;
	dir = xasprintf("%.*s", (int)n, adapter);
	last = strrchr(dir, '/');
	last = last != NULL ? last + 1 : dir;
	if (strcmp(last, ".") == 0 || strcmp(last, "..") == 0 || strcmp(dir, "/") == 0) {
		char *up = xasprintf("%s/..", dir);

		free(dir);
		return up;
	}
	if (last == dir) {
		free(dir);
		return xstrdup(".");
	}
	dir[last - dir - 1 > 0 ? last - dir - 1 : 1] = '\0';
	return dir;
}

static int read_events(struct job *j, const char *path, struct run_events *ev)
{
	struct jsonl_reader r;
	FILE *f = fopen(path, "r");
	cJSON *o;
	int got, rc = 0;

	memset(ev, 0, sizeof *ev);
	ev->eval_step = -1;
	if (f == NULL)
		return errno == ENOENT ? 0 : fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	ev->present = 1;
	jsonl_init(&r, f, path);
	while ((got = jsonl_next(&r, &o)) == 1) {
		const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step");
		const cJSON *loss = cJSON_GetObjectItemCaseSensitive(o, "loss");
		const cJSON *el = cJSON_GetObjectItemCaseSensitive(o, "eval_loss");
		const cJSON *et = cJSON_GetObjectItemCaseSensitive(o, "eval_tokens");

		if (!cJSON_IsNumber(step) || !cJSON_IsNumber(loss)) {
			rc = fail(j, EXIT_USAGE, "%s:%ld: an event without a numeric step and loss", path, r.line);
			cJSON_Delete(o);
			break;
		}
		ev->steps = step->valueint;
		ev->loss = loss->valuedouble;
		if (cJSON_IsNumber(el)) {
			ev->eval_loss = el->valuedouble;
			ev->eval_step = step->valueint;
			ev->eval_tokens = cJSON_IsNumber(et) ? et->valueint : -1;
		}
		cJSON_Delete(o);
	}
	if (got < 0 && rc == 0)
		rc = fail(j, EXIT_USAGE, "%s:%ld: %s", path, r.line, r.err);
	jsonl_free(&r);
	fclose(f);
	return rc;
}

static void card_adapter(const struct job *j, FILE *m)
{
	const char *sep = "";

	fprintf(m, "## Adapter\n\n- path: `%s`\n", j->o->adapter);
	if (j->adapter_base != NULL)
		fprintf(m, "- trained on (its `base_model_name_or_path`): `%s`\n", j->adapter_base);
	fprintf(m, "- r: %d, lora_alpha: %g, scale: %g (%s)\n", j->rank, j->alpha, (double)j->scale,
	        j->rslora ? "alpha / sqrt(r), use_rslora" : "alpha / r");
	fputs("- target_modules: ", m);
	for (int i = 0; i < N_MODULES; i++)
		if (j->mask & (1u << i)) {
			fprintf(m, "%s%s", sep, lora_module_names[i]);
			sep = ", ";
		}
	fputs("\n- layers: ", m);
	if (j->layer_on == NULL) {
		fputs("all", m);
	} else {
		sep = "";
		for (int l = 0; l < j->mc.num_hidden_layers; l++)
			if (j->layer_on[l]) {
				fprintf(m, "%s%d", sep, l);
				sep = ", ";
			}
	}
	fprintf(m, "\n- merged into: %s\n\n", j->merge_into == MERGE_DEQUANTIZED
	                                         ? "dequant(NF4(W)), what NF4 training computed with (`--merge-into dequantized`)"
	                                         : "the checkpoint's weights W (`--merge-into original`)");
}

static int card_training(struct job *j, FILE *m)
{
	char *run = adapter_run_dir(j->o->adapter), *tc_path = xasprintf("%s/train_config.json", run);
	char *ev_path = xasprintf("%s/events.jsonl", run), lerr[768];
	struct run_events ev;
	cJSON *tc = NULL;
	const cJSON *v;
	int rc = 0;

	fputs("## Training\n\n", m);
	if (!is_file(tc_path)) {
		fprintf(m, "The run directory `%s` has no train_config.json: the training configuration is not "
		        "recorded here.\n\n", run);
	} else if ((tc = json_read_file(tc_path, lerr, sizeof lerr)) == NULL || !cJSON_IsObject(tc)) {
		rc = fail(j, EXIT_USAGE, "%s", tc == NULL ? lerr : "train_config.json: not a JSON object");
	} else {
		fprintf(m, "From `%s`:\n\n| key | value |\n|---|---|\n", tc_path);
		cJSON_ArrayForEach(v, tc) {
			char *text = cJSON_PrintUnformatted(v);

			fprintf(m, "| %s | `%s` |\n", v->string, text != NULL ? text : "");
			free(text);
		}
		fputc('\n', m);
	}
	if (rc == 0 && (rc = read_events(j, ev_path, &ev)) == 0) {
		if (!ev.present)
			fprintf(m, "The run directory has no events.jsonl: no loss is recorded here.\n\n");
		else if (ev.steps == 0)
			fprintf(m, "`%s` records no step.\n\n", ev_path);
		else
			fprintf(m, "From `%s`: %d steps, the last training loss %.9g.\n\n", ev_path, ev.steps, ev.loss);
		if (ev.present && ev.eval_step >= 0)
			fprintf(m, "Eval loss: %.9g after step %d (%d supervised tokens).\n\n", ev.eval_loss, ev.eval_step,
			        ev.eval_tokens);
		else if (ev.present)
			fputs("No evaluation is recorded (the run had no --eval-dataset).\n\n", m);
	}
	cJSON_Delete(tc);
	free(run);
	free(tc_path);
	free(ev_path);
	return rc;
}

int write_model_card(struct job *j, int tokenizer_files)
{
	const struct model_config *mc = &j->mc;
	char *text = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);
	int rc;

	if (m == NULL)
		die(EXIT_RUNTIME, "out of memory");
	fprintf(m, "# %s\n\n", j->name);
	fprintf(m, "Written by poros-export %s: a LoRA adapter merged into its base's weights, stored as bf16.\n"
	        "transformers and vLLM load it as an ordinary %s model, with no PEFT.\n\n", POROS_VERSION, mc->model_type);
	fprintf(m, "## Base\n\n- checkpoint: `%s`\n- %s: %d layers, hidden size %d, %d attention heads (%d key/value), "
	        "vocabulary %d\n\n", mc->checkpoint_dir, mc->model_type, mc->num_hidden_layers, mc->hidden_size,
	        mc->num_attention_heads, mc->num_key_value_heads, mc->vocab_size);
	card_adapter(j, m);
	rc = card_training(j, m);
	fprintf(m, "## Files\n\n%d weight file%s (%d tensors, %d merged, %d dequantized), config.json, and %d "
	        "tokenizer and generation file%s copied from the base as it had them.\n", j->nshards,
	        j->nshards == 1 ? "" : "s plus the index", j->n, j->npairs, j->ndequantized, tokenizer_files,
	        tokenizer_files == 1 ? "" : "s");
	if (fclose(m) != 0)
		die(EXIT_RUNTIME, "out of memory");
	if (rc == 0)
		rc = scratch_write(j, "README.md", text, len);
	free(text);
	return rc;
}
