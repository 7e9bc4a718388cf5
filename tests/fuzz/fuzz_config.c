/* tests/fuzz/fuzz_config.c: the model config reader (a HF config.json)
 * and the PEFT adapter reader (adapter_config.json + safetensors).
 *
 * Input layout: the first byte picks how many of the following bytes are
 * adapter_config.json (byte * 8, capped at the size); those bytes, and the
 * rest is adapter_model.safetensors.  The whole input is also fed to
 * model_config_parse as a config.json. */
#include "fuzz_common.h"

#include "model/model.h"
#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_config(const uint8_t *data, size_t size)
{
	char err[512];
	char *text = malloc(size + 1);
	memcpy(text, data, size);
	text[size] = '\0';
	struct model_config m;
	memset(&m, 0, sizeof m);
	err[0] = '\0';
	if (model_config_parse(&m, text, "config.json", err, sizeof err) == 0) {
		/* What poros-train and poros-expand do next with a config. */
		(void)model_config_param_count(&m);
		(void)model_config_linear_param_count(&m);
		for (int k = 0; k < 7; k++) {
			int out_f, in_f;
			model_config_module_shape(&m, k, &out_f, &in_f);
		}
	} else if (err[0] == '\0') {
		abort();
	}
	model_config_free(&m);
	free(text);
}

static void check_adapter(const uint8_t *data, size_t size)
{
	char err[512];
	if (size == 0)
		return;
	size_t cfg = (size_t)data[0] * 8;
	data++, size--;
	if (cfg > size)
		cfg = size;
	char dir[512];
	snprintf(dir, sizeof dir, "%s/adapter", fuzz_scratch_dir());
	if (mkdir_p(dir, 0700) < 0)
		abort();
	fuzz_write_file("adapter/adapter_config.json", data, cfg);
	fuzz_write_file("adapter/adapter_model.safetensors", data + cfg, size - cfg);
	struct adapter a;
	memset(&a, 0, sizeof a);
	err[0] = '\0';
	if (adapter_load(dir, &a, err, sizeof err) == 0) {
		for (int i = 0; i < a.n; i++) {
			int layer, module, is_b;
			if (a.t[i].rows < 0 || a.t[i].cols < 0)
				abort();
			if (adapter_key_parse(a.t[i].name, &layer, &module, &is_b) == 0) {
				char *key = adapter_key(layer, module, is_b);
				free(key);
			}
			if (adapter_find(&a, a.t[i].name) == NULL)
				abort();
		}
		adapter_free(&a);
	} else if (err[0] == '\0') {
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_config(data, size);
	check_adapter(data, size);
	return 0;
}
