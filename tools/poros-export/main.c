/* poros-export: merges a LoRA adapter (PEFT format, as poros-train writes
 * it) into its base checkpoint and writes a bf16 Hugging Face checkpoint
 * directory that transformers and vLLM load: the model to serve. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "export.h"
#include "jsonl.h"
#include "util.h"

static noreturn void usage(int code)
{
	fputs(EXPORT_SYNOPSIS, code == EXIT_OK ? stdout : stderr);
	if (code == EXIT_OK)
		fputs("Merges W' = W + scale * B @ A (fp32, stored bf16) into a copy of the base.\n"
		      "  --base DIR             the base checkpoint (config.json + safetensors)\n"
		      "  --adapter DIR          the PEFT adapter (adapter_config.json + adapter_model.safetensors)\n"
		      "  --out DIR              the checkpoint to write (absent or empty, or --force)\n"
		      "  --max-shard-size SIZE  tensor bytes per shard, e.g. 5GB, 500MB, 2GiB (default 5GB)\n"
		      "  --force                replace a non-empty --out\n"
		      "  --help, --version\n"
		      "Exit status: 0 written, 1 runtime failure, 2 usage or bad input.\n", stdout);
	exit(code);
}

int main(int argc, char **argv)
{
	enum { OPT_BASE = 256, OPT_ADAPTER, OPT_OUT, OPT_SHARD, OPT_FORCE, OPT_HELP, OPT_VERSION };
	static const struct option longopts[] = {
		{ "base", required_argument, NULL, OPT_BASE },
		{ "adapter", required_argument, NULL, OPT_ADAPTER },
		{ "out", required_argument, NULL, OPT_OUT },
		{ "max-shard-size", required_argument, NULL, OPT_SHARD },
		{ "force", no_argument, NULL, OPT_FORCE },
		{ "help", no_argument, NULL, OPT_HELP },
		{ "version", no_argument, NULL, OPT_VERSION },
		{ NULL, 0, NULL, 0 },
	};
	struct export_opts o = { .max_shard_size = 5000000000LL };
	char err[1024], *configs;
	const char *why;
	int ch, rc;

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
			break;
		case OPT_FORCE: o.force = 1; break;
		case 'h':
		case OPT_HELP: usage(EXIT_OK);
		case OPT_VERSION: print_version();
		default: usage(EXIT_USAGE);
		}
	}
	if (optind != argc) {
		warnmsg("unexpected argument \"%s\"", argv[optind]);
		usage(EXIT_USAGE);
	}
	if (o.base == NULL || o.adapter == NULL || o.out == NULL) {
		warnmsg("--base, --adapter and --out are required");
		usage(EXIT_USAGE);
	}
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
