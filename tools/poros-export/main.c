/* poros-export: merges a LoRA adapter (PEFT format, as poros-train writes
 * it) into its base checkpoint and writes a bf16 Hugging Face checkpoint
 * directory that transformers and vLLM load: the model to serve. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"
#include "util/util.h"

static noreturn void usage(int code)
{
	fputs(EXPORT_SYNOPSIS, code == EXIT_OK ? stdout : stderr);
	if (code == EXIT_OK)
		fputs("Merges W' = W + scale * B @ A (fp32, stored bf16) into a copy of the base.\n"
		      "  --base DIR             the base checkpoint (config.json + safetensors)\n"
		      "  --adapter DIR          the PEFT adapter (adapter_config.json + adapter_model.safetensors)\n"
		      "  --out DIR              the checkpoint to write (absent or empty, or --force)\n"
		      "  --max-shard-size SIZE  tensor bytes per shard, e.g. 5GB, 500MB, 2GiB (default 5GB)\n"
		      "  --merge-into original|dequantized  add the adapter to the checkpoint's weights or to\n"
		      "                         dequant(NF4(W)), what a --precision nf4 run trained on (default: by the\n"
		      "                         run's train_config.json precision; original without one)\n"
		      "  --force                replace a non-empty --out\n"
		      "  --format hf|gguf|gguf-lora  a Hugging Face checkpoint directory (hf, the default), the merged\n"
		      "                         model as one GGUF file, or the adapter alone as llama.cpp's LoRA GGUF\n"
		      "  --outtype TYPE         what a GGUF file stores matrices as (required with a GGUF format):\n"
		      "                         bf16, f16 or q8_0 for gguf; f32, bf16 or f16 for gguf-lora\n"
		      "  --check vllm           check ADAPTER_DIR is an adapter vLLM loads (exit 1 and why when not)\n"
		      "  --help, --version\n"
		      "Exit status: 0 written, 1 runtime failure, 2 usage or bad input.\n", stdout);
	exit(code);
}

static enum export_format parse_format(const char *s)
{
	if (strcmp(s, "hf") == 0)
		return FORMAT_HF;
	if (strcmp(s, "gguf") == 0)
		return FORMAT_GGUF;
	if (strcmp(s, "gguf-lora") == 0)
		return FORMAT_GGUF_LORA;
	die(EXIT_USAGE, "--format: unknown format \"%s\" (expected hf, gguf or gguf-lora)", s);
}

static enum gguf_outtype parse_outtype(const char *s)
{
	static const char *const names[] = { "bf16", "f16", "q8_0", "f32" };

	for (int i = 0; i < 4; i++)
		if (strcmp(s, names[i]) == 0)
			return (enum gguf_outtype)(OUTTYPE_BF16 + i);
	die(EXIT_USAGE, "--outtype: unknown type \"%s\" (expected bf16, f16, q8_0 or f32)", s);
}

/* --outtype changes every weight of a GGUF file: never a default. */
static void check_format_options(const struct export_opts *o, int shard_set)
{
	if (o->format == FORMAT_GGUF && o->outtype == OUTTYPE_NONE)
		die(EXIT_USAGE, "--format gguf needs --outtype bf16, f16 or q8_0");
	if (o->format == FORMAT_GGUF_LORA && o->outtype == OUTTYPE_NONE)
		die(EXIT_USAGE, "--format gguf-lora needs --outtype f32, bf16 or f16");
	if (o->format == FORMAT_HF && o->outtype != OUTTYPE_NONE)
		die(EXIT_USAGE, "--outtype is for --format gguf or gguf-lora");
	/* the merged model is bf16: f32 would only double the file */
	if (o->format == FORMAT_GGUF && o->outtype == OUTTYPE_F32)
		die(EXIT_USAGE, "--outtype f32 is for --format gguf-lora (a merged model's values are bf16)");
	/* llama.cpp's converter keeps LoRA tensors in a float type: lora_b rows
	 * are r values, rarely a whole Q8_0 block */
	if (o->format == FORMAT_GGUF_LORA && o->outtype == OUTTYPE_Q8_0)
		die(EXIT_USAGE, "--outtype q8_0 is for --format gguf (a LoRA GGUF is written as f32, bf16 or f16)");
	if (o->format != FORMAT_HF && shard_set)
		die(EXIT_USAGE, "--max-shard-size is for --format hf (a GGUF export is one file)");
}

/* --check vllm ADAPTER_DIR: nothing else on the line */
static int run_check(const struct export_opts *o, int nargs, char **args)
{
	char err[1024];
	int rc;

	if (nargs != 1 || o->base || o->adapter || o->out || o->format != FORMAT_HF || o->outtype != OUTTYPE_NONE ||
	    o->force || o->merge_into_set) {
		warnmsg("--check vllm takes one ADAPTER_DIR and no other option");
		usage(EXIT_USAGE);
	}
	rc = check_vllm(args[0], stdout, err, sizeof err);
	if (rc == EXIT_USAGE)
		die(rc, "%s", err);
	return rc;
}

int main(int argc, char **argv)
{
	enum {
		OPT_BASE = 256, OPT_ADAPTER, OPT_OUT, OPT_SHARD, OPT_FORCE, OPT_FORMAT, OPT_OUTTYPE, OPT_MERGE_INTO,
		OPT_CHECK, OPT_HELP, OPT_VERSION
	};
	static const struct option longopts[] = {
		{ "base", required_argument, NULL, OPT_BASE },
		{ "adapter", required_argument, NULL, OPT_ADAPTER },
		{ "out", required_argument, NULL, OPT_OUT },
		{ "max-shard-size", required_argument, NULL, OPT_SHARD },
		{ "force", no_argument, NULL, OPT_FORCE },
		{ "format", required_argument, NULL, OPT_FORMAT },
		{ "outtype", required_argument, NULL, OPT_OUTTYPE },
		{ "merge-into", required_argument, NULL, OPT_MERGE_INTO },
		{ "check", required_argument, NULL, OPT_CHECK },
		{ "help", no_argument, NULL, OPT_HELP },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	struct export_opts o = { .max_shard_size = 5000000000LL };
	char err[1024], *configs;
	const char *why;
	int ch, rc, shard_set = 0;
	const char *check = NULL;

	set_progname(argv[0]);
	stdout_check_at_exit();
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case OPT_BASE: o.base = optarg; break;
		case OPT_ADAPTER: o.adapter = optarg; break;
		case OPT_OUT: o.out = optarg; break;
		case OPT_SHARD:
			if (export_parse_size(optarg, &o.max_shard_size, &why) < 0)
				die(EXIT_USAGE, "--max-shard-size: %s: \"%s\"", why, optarg);
			shard_set = 1;
			break;
		case OPT_FORCE: o.force = 1; break;
		case OPT_FORMAT: o.format = parse_format(optarg); break;
		case OPT_OUTTYPE: o.outtype = parse_outtype(optarg); break;
		case OPT_MERGE_INTO:
			if (strcmp(optarg, "original") == 0)
				o.merge_into = MERGE_ORIGINAL;
			else if (strcmp(optarg, "dequantized") == 0)
				o.merge_into = MERGE_DEQUANTIZED;
			else
				die(EXIT_USAGE, "--merge-into: unknown base \"%s\" (expected original or dequantized)", optarg);
			o.merge_into_set = 1;
			break;
		case OPT_CHECK:
			if (strcmp(optarg, "vllm") != 0)
				die(EXIT_USAGE, "--check: unknown check \"%s\" (expected vllm)", optarg);
			check = optarg;
			break;
		case 'h':
		case OPT_HELP: usage(EXIT_OK);
		case OPT_VERSION: print_version();
		default: usage(EXIT_USAGE);
		}
	}
	if (check != NULL)
		return run_check(&o, argc - optind, argv + optind);
	if (optind != argc) {
		warnmsg("unexpected argument \"%s\"", argv[optind]);
		usage(EXIT_USAGE);
	}
	if (o.base == NULL || o.adapter == NULL || o.out == NULL) {
		warnmsg("--base, --adapter and --out are required");
		usage(EXIT_USAGE);
	}
	check_format_options(&o, shard_set);
	if (o.format == FORMAT_GGUF_LORA && o.merge_into_set)
		die(EXIT_USAGE, "--merge-into is for a merged export (--format gguf-lora merges nothing)");
	/* configs/ beside the binary (source tree) or under share/poros */
	configs = poros_resource("configs");
	if (configs != NULL) {
		char *models = xasprintf("%s/models", configs);

		free(configs);
		configs = models;
	}
	o.configs_dir = configs;
	rc = export_run(&o, stdout, err, sizeof err);
	free(configs);
	if (rc != EXIT_OK)
		die(rc, "%s", err);
	return EXIT_OK;
}
