/* tools/lib/model/model.h: the model's files, the public face of
 * tools/lib/model/: config.json (model_config.h) and the architecture
 * table (arch.h), the Hugging Face cache (hf_cache.h), safetensors
 * (safetensors.h), GGUF (gguf.h), NF4 (nf4.h) and the PEFT adapter
 * (adapter.h). */
#ifndef POROS_MODEL_H
#define POROS_MODEL_H

#include "arch.h"
#include "model_config.h"
#include "hf_cache.h"
#include "safetensors.h"
#include "gguf.h"
#include "nf4.h"
#include "adapter.h"

#endif
