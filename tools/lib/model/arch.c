/* tools/lib/model/arch.c: the supported decoder families (see arch.h). */
#include "arch.h"

#include <string.h>

static const struct arch arches[] = {
	/* LlamaConfig: attention_bias and mlp_bias default false, head_dim hidden/heads */
	{ "llama", "LlamaForCausalLM", 0, -1, 1, 0, 0, 1, 0, 1, "silu" },
	/* Qwen2Attention builds q/k/v with bias=True whatever the config says, o_proj without */
	{ "qwen2", "Qwen2ForCausalLM", 0, 1, 0, 0, 0, 0, 1, 0, "silu" },
	/* Qwen3Config: head_dim 128 when absent, attention_bias false, q/k norms always */
	{ "qwen3", "Qwen3ForCausalLM", 128, -1, 1, 1, 0, 0, 1, 0, "silu" },
};

const char *const arch_proj_name[7] = {
	"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
	"mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj",
};

const char *const arch_norm_name[4] = {
	"input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm",
};

const struct arch *arch_find(const char *model_type)
{
	for (size_t i = 0; i < sizeof arches / sizeof *arches; i++)
		if (strcmp(model_type, arches[i].model_type) == 0)
			return &arches[i];
	return NULL;
}

const char *arch_type_list(void)
{
	static char list[128];

	if (list[0] == '\0')
		for (size_t i = 0; i < sizeof arches / sizeof *arches; i++) {
			if (i)
				strcat(list, ", ");
			strcat(list, arches[i].model_type);
		}
	return list;
}
