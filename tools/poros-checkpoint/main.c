/* poros-checkpoint: a small Hugging Face checkpoint with RANDOM weights for
 * a given tokenizer's vocabulary (config.json, model.safetensors and the
 * tokenizer's files), to try the trainer on real text without a download.
 * Everything is written into a scratch directory beside --out, which
 * becomes --out by one rename: a failure leaves no partial directory. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "numerics.h"
#include "model/model.h"
#include "text/text.h"
#include "util/util.h"

static const char synopsis[] =
	"usage: poros-checkpoint --family llama|qwen2|qwen3 --tokenizer PATH --out DIR [--seed N]\n"
	"                        [--hidden C] [--intermediate F] [--layers L] [--heads H] [--kv-heads K]\n"
	"                        [--head-dim D] [--max-position P]\n";

/* The scale of the random weights: uniform in [-a, a] with a = 0.15 * sqrt(3),
 * a standard deviation of 0.15, so attention scores are far from uniform. */
#define INIT_STD 0.15

struct shape {
	const char *family, *tokenizer, *out;
	unsigned long long seed;
	long hidden, intermediate, layers, heads, kv_heads, head_dim, max_position;
};

struct family {
	const char *model_type, *architecture;
	double rope_theta, rms_norm_eps;
	int qkv_bias, qk_norm;
};

static const struct family families[] = {
	{ "llama", "LlamaForCausalLM", 500000.0, 1e-5, 0, 0 },
	{ "qwen2", "Qwen2ForCausalLM", 1000000.0, 1e-6, 1, 0 },
	{ "qwen3", "Qwen3ForCausalLM", 1000000.0, 1e-6, 0, 1 },
};

/* The special tokens the config names, from tokenizer_config.json. */
struct specials { int bos, eos, pad; };

noreturn static void usage(int code)
{
	fputs(synopsis, code == EXIT_OK ? stdout : stderr);
	if (code == EXIT_OK)
		fputs("\n"
		      "  --family NAME       llama, qwen2 or qwen3 (the config class and tensor names)\n"
		      "  --tokenizer PATH    a tokenizer.json or its directory: vocab_size and special tokens\n"
		      "  --out DIR           the checkpoint directory to create (must not exist)\n"
		      "  --seed N            the random weights' seed (default 1)\n"
		      "  --hidden C          hidden_size (default 64)\n"
		      "  --intermediate F    intermediate_size (default 128)\n"
		      "  --layers L          num_hidden_layers (default 2)\n"
		      "  --heads H           num_attention_heads (default 4)\n"
		      "  --kv-heads K        num_key_value_heads (default 2)\n"
		      "  --head-dim D        head_dim (default 16)\n"
		      "  --max-position P    max_position_embeddings (default 4096)\n"
		      "  -h, --help          this help;  --version  the version\n",
		      stdout);
	exit(code);
}

static uint64_t next_random(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* n bf16 values: 1.0 for a norm, else uniform with standard deviation INIT_STD. */
static uint16_t *random_bf16(long long n, int norm, uint64_t *state)
{
	uint16_t *v = xmalloc((size_t)n * sizeof *v);
	const double a = INIT_STD * 1.7320508075688772;
	for (long long i = 0; i < n; i++) {
		double u = (double)(next_random(state) >> 11) / 9007199254740992.0;
		v[i] = bf16_from_f32(norm ? 1.0f : (float)((2.0 * u - 1.0) * a));
	}
	return v;
}

/* --- the tensors, in the order transformers writes them ------------------- */

struct tensor_list { struct st_out *t; char **names; int n, cap; };

static void add_tensor(struct tensor_list *l, const char *name, long long rows, long long cols, int norm, uint64_t *state)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 64;
		l->t = xrealloc(l->t, (size_t)l->cap * sizeof *l->t);
		l->names = xrealloc(l->names, (size_t)l->cap * sizeof *l->names);
	}
	struct st_out *t = &l->t[l->n];
	l->names[l->n] = xstrdup(name);
	t->name = l->names[l->n];
	t->dtype = ST_BF16;
	t->ndim = cols > 0 ? 2 : 1;
	t->shape[0] = rows;
	t->shape[1] = cols;
	t->data = random_bf16(cols > 0 ? rows * cols : rows, norm, state);
	l->n++;
}

static void build_tensors(struct tensor_list *l, const struct shape *s, const struct family *f, int vocab)
{
	uint64_t state = s->seed;
	long long c = s->hidden, q = s->heads * s->head_dim, kv = s->kv_heads * s->head_dim, ff = s->intermediate;
	char name[128];

	add_tensor(l, "model.embed_tokens.weight", vocab, c, 0, &state);
	for (long layer = 0; layer < s->layers; layer++) {
		static const char *const attn[] = { "q_proj", "k_proj", "v_proj", "o_proj" };
		static const char *const mlp[] = { "gate_proj", "up_proj", "down_proj" };
		long long attn_out[] = { q, kv, kv, c }, attn_in[] = { c, c, c, q };
		long long mlp_out[] = { ff, ff, c }, mlp_in[] = { c, c, ff };
#define NAME(...) (snprintf(name, sizeof name, __VA_ARGS__), name)
		add_tensor(l, NAME("model.layers.%ld.input_layernorm.weight", layer), c, 0, 1, &state);
		add_tensor(l, NAME("model.layers.%ld.post_attention_layernorm.weight", layer), c, 0, 1, &state);
		for (int i = 0; i < 4; i++) {
			add_tensor(l, NAME("model.layers.%ld.self_attn.%s.weight", layer, attn[i]), attn_out[i], attn_in[i], 0,
			           &state);
			if (f->qkv_bias && i < 3)
				add_tensor(l, NAME("model.layers.%ld.self_attn.%s.bias", layer, attn[i]), attn_out[i], 0, 0,
				           &state);
		}
		if (f->qk_norm) {
			add_tensor(l, NAME("model.layers.%ld.self_attn.q_norm.weight", layer), s->head_dim, 0, 1, &state);
			add_tensor(l, NAME("model.layers.%ld.self_attn.k_norm.weight", layer), s->head_dim, 0, 1, &state);
		}
		for (int i = 0; i < 3; i++)
			add_tensor(l, NAME("model.layers.%ld.mlp.%s.weight", layer, mlp[i]), mlp_out[i], mlp_in[i], 0, &state);
#undef NAME
	}
	add_tensor(l, "model.norm.weight", c, 0, 1, &state);
	add_tensor(l, "lm_head.weight", vocab, c, 0, &state);
}

/* --- config.json ---------------------------------------------------------- */

static void add_id(cJSON *cfg, const char *key, int id)
{
	if (id >= 0)
		cJSON_AddNumberToObject(cfg, key, id);
	else
		cJSON_AddNullToObject(cfg, key);
}

static char *config_json(const struct shape *s, const struct family *f, int vocab, const struct specials *sp)
{
	cJSON *cfg = cJSON_CreateObject(), *archs = cJSON_AddArrayToObject(cfg, "architectures");
	char note[256];

	snprintf(note, sizeof note, "RANDOM weights (poros-checkpoint, seed %llu, uniform, std %.2f): not a trained model",
	         s->seed, INIT_STD);
	cJSON_AddStringToObject(cfg, "_poros_note", note);
	cJSON_AddItemToArray(archs, cJSON_CreateString(f->architecture));
	cJSON_AddStringToObject(cfg, "model_type", f->model_type);
	cJSON_AddNumberToObject(cfg, "hidden_size", (double)s->hidden);
	cJSON_AddNumberToObject(cfg, "intermediate_size", (double)s->intermediate);
	cJSON_AddNumberToObject(cfg, "num_hidden_layers", (double)s->layers);
	cJSON_AddNumberToObject(cfg, "num_attention_heads", (double)s->heads);
	cJSON_AddNumberToObject(cfg, "num_key_value_heads", (double)s->kv_heads);
	cJSON_AddNumberToObject(cfg, "head_dim", (double)s->head_dim);
	cJSON_AddNumberToObject(cfg, "vocab_size", vocab);
	cJSON_AddNumberToObject(cfg, "max_position_embeddings", (double)s->max_position);
	cJSON_AddStringToObject(cfg, "hidden_act", "silu");
	cJSON_AddNumberToObject(cfg, "rms_norm_eps", f->rms_norm_eps);
	cJSON_AddNumberToObject(cfg, "rope_theta", f->rope_theta);
	cJSON_AddNullToObject(cfg, "rope_scaling");
	cJSON_AddFalseToObject(cfg, "tie_word_embeddings");
	if (!f->qkv_bias)
		cJSON_AddFalseToObject(cfg, "attention_bias");
	if (strcmp(f->model_type, "llama") == 0) {
		cJSON_AddFalseToObject(cfg, "mlp_bias");
		cJSON_AddNumberToObject(cfg, "pretraining_tp", 1);
	} else {
		cJSON_AddFalseToObject(cfg, "use_sliding_window");
		cJSON_AddNumberToObject(cfg, "max_window_layers", (double)s->layers);
	}
	cJSON_AddNumberToObject(cfg, "attention_dropout", 0);
	cJSON_AddNumberToObject(cfg, "initializer_range", INIT_STD);
	add_id(cfg, "bos_token_id", sp->bos);
	add_id(cfg, "eos_token_id", sp->eos);
	add_id(cfg, "pad_token_id", sp->pad);
	cJSON_AddStringToObject(cfg, "torch_dtype", "bfloat16");
	cJSON_AddStringToObject(cfg, "transformers_version", "4.51.3");
	char *json = cJSON_Print(cfg), *text = xasprintf("%s\n", json);
	cJSON_Delete(cfg);
	free(json);
	return text;
}

/* --- the tokenizer's special tokens --------------------------------------- */

/* The id of tokenizer_config.json's key (a string, or an object's
 * "content"), -1 when absent or null; -2 with err when it names a token
 * the vocabulary lacks. */
static int special_id(const struct tokenizer *tok, const cJSON *tc, const char *key, const char *path, char *err,
                      size_t errsz)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(tc, key);
	if (cJSON_IsObject(v))
		v = cJSON_GetObjectItemCaseSensitive(v, "content");
	if (v == NULL || cJSON_IsNull(v))
		return -1;
	if (!cJSON_IsString(v))
		return set_error(err, errsz, "%s: \"%s\": not a string", path, key), -2;
	int id = tokenizer_token_id(tok, v->valuestring);
	if (id < 0)
		return set_error(err, errsz, "%s: \"%s\": \"%s\" is not in the vocabulary", path, key, v->valuestring), -2;
	return id;
}

static int read_specials(struct specials *sp, const struct tokenizer *tok, const char *config_path, char *err,
                         size_t errsz)
{
	char *text = read_whole_file(config_path, NULL);
	sp->bos = sp->pad = -1;
	sp->eos = tokenizer_eos_id(tok);
	if (text == NULL)
		return errno == ENOENT ? 0 : set_error(err, errsz, "%s: %s", config_path, strerror(errno));
	cJSON *tc = cJSON_Parse(text);
	free(text);
	if (!cJSON_IsObject(tc)) {
		cJSON_Delete(tc);
		return set_error(err, errsz, "%s: not a JSON object", config_path);
	}
	sp->bos = special_id(tok, tc, "bos_token", config_path, err, errsz);
	sp->pad = sp->bos == -2 ? -2 : special_id(tok, tc, "pad_token", config_path, err, errsz);
	cJSON_Delete(tc);
	return sp->bos == -2 || sp->pad == -2 ? -1 : 0;
}

/* --- the scratch directory ----------------------------------------------- */

#define MAX_FILES 4
/* each file and the temporary atomic_write makes of it ("<path>.tmp.<pid>") */
static char *scratch_dir, *scratch_files[MAX_FILES], *scratch_tmps[MAX_FILES];
static volatile sig_atomic_t scratch_active;

static void scratch_remove(void)
{
	if (!scratch_active)
		return;
	scratch_active = 0;
	for (int i = 0; i < MAX_FILES; i++)
		if (scratch_files[i] != NULL) {
			unlink(scratch_files[i]);
			unlink(scratch_tmps[i]);
		}
	rmdir(scratch_dir);
}

static void on_signal(int sig)
{
	scratch_remove();
	signal(sig, SIG_DFL);
	raise(sig);
}

static int copy_file(const char *from, const char *to)
{
	size_t len;
	char *data = read_whole_file(from, &len);
	if (data == NULL)
		return -1;
	int rc = atomic_write(to, data, len);
	free(data);
	return rc;
}

static const struct family *find_family(const char *name)
{
	for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
		if (strcmp(families[i].model_type, name) == 0)
			return &families[i];
	die(EXIT_USAGE, "--family: unknown \"%s\" (expected one of: llama, qwen2, qwen3)", name);
}

static void parse_options(struct shape *s, int argc, char **argv)
{
	enum { O_VERSION = 256, O_SEED, O_HIDDEN, O_INTER, O_LAYERS, O_HEADS, O_KV, O_HEAD_DIM, O_MAXPOS };
	static const struct option longopts[] = {
		{ "family", required_argument, NULL, 'f' }, { "tokenizer", required_argument, NULL, 't' },
		{ "out", required_argument, NULL, 'o' }, { "seed", required_argument, NULL, O_SEED },
		{ "hidden", required_argument, NULL, O_HIDDEN }, { "intermediate", required_argument, NULL, O_INTER },
		{ "layers", required_argument, NULL, O_LAYERS }, { "heads", required_argument, NULL, O_HEADS },
		{ "kv-heads", required_argument, NULL, O_KV }, { "head-dim", required_argument, NULL, O_HEAD_DIM },
		{ "max-position", required_argument, NULL, O_MAXPOS }, { "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, O_VERSION }, { NULL, 0, NULL, 0 },
	};
	int c;
	*s = (struct shape){ .seed = 1, .hidden = 64, .intermediate = 128, .layers = 2, .heads = 4, .kv_heads = 2,
	                     .head_dim = 16, .max_position = 4096 };
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'f': s->family = optarg; break;
		case 't': s->tokenizer = optarg; break;
		case 'o': s->out = optarg; break;
		case O_SEED: s->seed = (unsigned long long)opt_long("--seed", optarg, 0, 1L << 62); break;
		case O_HIDDEN: s->hidden = opt_long("--hidden", optarg, 1, 16384); break;
		case O_INTER: s->intermediate = opt_long("--intermediate", optarg, 1, 65536); break;
		case O_LAYERS: s->layers = opt_long("--layers", optarg, 1, 256); break;
		case O_HEADS: s->heads = opt_long("--heads", optarg, 1, 256); break;
		case O_KV: s->kv_heads = opt_long("--kv-heads", optarg, 1, 256); break;
		case O_HEAD_DIM: s->head_dim = opt_long("--head-dim", optarg, 2, 512); break;
		case O_MAXPOS: s->max_position = opt_long("--max-position", optarg, 1, 1L << 30); break;
		case 'h': usage(EXIT_OK);
		case O_VERSION: print_version();
		default: usage(EXIT_USAGE);
		}
	}
	if (optind < argc)
		die(EXIT_USAGE, "unexpected argument \"%s\"", argv[optind]);
	if (s->family == NULL || s->tokenizer == NULL || s->out == NULL)
		die(EXIT_USAGE, "%s is required", s->family == NULL ? "--family" : s->tokenizer == NULL ? "--tokenizer" : "--out");
	if (s->heads % s->kv_heads != 0)
		die(EXIT_USAGE, "--heads %ld is not a multiple of --kv-heads %ld", s->heads, s->kv_heads);
	if (s->head_dim % 2 != 0)
		die(EXIT_USAGE, "--head-dim %ld: RoPE needs an even head_dim", s->head_dim);
}

/* The scratch directory beside --out, made before anything is written. */
static void scratch_create(const char *out)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGPIPE };
	char *copy = xstrdup(out), *copy2 = xstrdup(out);
	const char *parent = dirname(copy), *name = basename(copy2);
	struct stat st;

	if (lstat(out, &st) == 0)
		die(EXIT_USAGE, "--out %s: already exists (poros-checkpoint writes a new directory)", out);
	if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
		die(EXIT_USAGE, "--out %s: the parent directory %s does not exist", out, parent);
	scratch_dir = xasprintf("%s/.%s.poros-checkpoint-XXXXXX", parent, name);
	if (mkdtemp(scratch_dir) == NULL)
		diesys(EXIT_RUNTIME, "%s: creating a temporary directory", parent);
	chmod(scratch_dir, 0755);
	static const char *const files[MAX_FILES] = { "config.json", "model.safetensors", "tokenizer.json",
	                                              "tokenizer_config.json" };
	for (int i = 0; i < MAX_FILES; i++) {
		scratch_files[i] = xasprintf("%s/%s", scratch_dir, files[i]);
		scratch_tmps[i] = xasprintf("%s.tmp.%ld", scratch_files[i], (long)getpid());
	}
	scratch_active = 1;
	atexit(scratch_remove);
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		signal(sigs[i], on_signal);
	signal(SIGXFSZ, SIG_IGN); /* a file-size limit is a failed write (EFBIG) that says so, then the cleanup */
	free(copy);
	free(copy2);
}

int main(int argc, char **argv)
{
	struct shape s;
	struct tokenizer *tok;
	struct specials sp;
	struct tensor_list tensors = { 0 };
	char err[1024];

	set_progname(argv[0]);
	parse_options(&s, argc, argv);
	const struct family *f = find_family(s.family);
	if (tokenizer_load(&tok, s.tokenizer, err, sizeof err) < 0)
		die(EXIT_USAGE, "--tokenizer: %s", err);
	size_t plen = strlen(tokenizer_path(tok));
	if (plen < 5 || strcmp(tokenizer_path(tok) + plen - 5, ".json") != 0)
		die(EXIT_USAGE, "--tokenizer %s: a tokenizer.json is needed (a GGUF tokenizer cannot be copied beside "
		    "the weights)", s.tokenizer);
	char *tok_copy = xstrdup(tokenizer_path(tok));
	char *tok_config = xasprintf("%s/tokenizer_config.json", dirname(tok_copy));
	if (read_specials(&sp, tok, tok_config, err, sizeof err) < 0)
		die(EXIT_USAGE, "--tokenizer: %s", err);
	int vocab = tokenizer_vocab_size(tok);

	scratch_create(s.out);
	build_tensors(&tensors, &s, f, vocab);
	char *cfg = config_json(&s, f, vocab, &sp);
	if (atomic_write(scratch_files[0], cfg, strlen(cfg)) < 0)
		diesys(EXIT_RUNTIME, "%s", scratch_files[0]);
	if (st_write(scratch_files[1], tensors.t, tensors.n, NULL, err, sizeof err) < 0)
		die(EXIT_RUNTIME, "%s", err);
	if (copy_file(tokenizer_path(tok), scratch_files[2]) < 0)
		diesys(EXIT_RUNTIME, "copying %s", tokenizer_path(tok));
	if (access(tok_config, F_OK) == 0 && copy_file(tok_config, scratch_files[3]) < 0)
		diesys(EXIT_RUNTIME, "copying %s", tok_config);
	if (rename(scratch_dir, s.out) < 0)
		diesys(EXIT_RUNTIME, "renaming %s to %s", scratch_dir, s.out);
	scratch_active = 0;
	warnmsg("wrote %s: %s, RANDOM weights (seed %llu, std %.2f), vocab_size %d from %s, hidden %ld, "
	        "intermediate %ld, layers %ld, heads %ld/%ld, head_dim %ld, max_position_embeddings %ld, "
	        "bos/eos/pad %d/%d/%d (-1: none)",
	        s.out, f->model_type, s.seed, INIT_STD, vocab, tokenizer_path(tok), s.hidden, s.intermediate, s.layers,
	        s.heads, s.kv_heads, s.head_dim, s.max_position, sp.bos, sp.eos, sp.pad);
	for (int i = 0; i < tensors.n; i++) {
		free((void *)tensors.t[i].data);
		free(tensors.names[i]);
	}
	free(tensors.t);
	free(tensors.names);
	free(cfg);
	free(tok_config);
	free(tok_copy);
	tokenizer_free(tok);
	return EXIT_OK;
}
