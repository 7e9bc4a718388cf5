/* poros-parity: compares two poros-train runs (events.jsonl losses and
 * adapter weights) and prints one poros.parity/1 line. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/records.h"
#include "compare.h"
#include "util/util.h"

static const char synopsis[] =
	"usage: poros-parity [--arch NAME] [--precision NAME] [--artifacts DIR] RUN_A RUN_B\n";

static noreturn void usage(void)
{
	fputs(synopsis, stderr);
	exit(EXIT_USAGE);
}

static void help(void)
{
	fputs(synopsis, stdout);
	fputs("Compares two training runs (RUN/events.jsonl and RUN/adapter/): per-step loss and\n"
	      "adapter weight max |delta|, where it occurs, and whether every bit is the same.\n"
	      "  --arch NAME       label the record with the model (the driver passes the arch slug)\n"
	      "  --precision NAME  label the record with the base precision\n"
	      "  --artifacts DIR   also set the parity field of DIR's poros and resident artifacts\n"
	      "                    of that arch and precision\n"
	      "  --help, --version\n"
	      "Exit status: 0 compared (whatever the result), 1 runtime failure, 2 usage or\n"
	      "mismatched/malformed runs.\n", stdout);
	exit(EXIT_OK);
}

static char *label(const char *opt, const char *s)
{
	if (*s == '\0')
		die(EXIT_USAGE, "%s: must not be empty", opt);
	return xstrdup(s);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "arch", required_argument, NULL, 'a' },
		{ "precision", required_argument, NULL, 'p' },
		{ "artifacts", required_argument, NULL, 'A' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct parity p;
	char err[1024];
	cJSON *out;
	char *artifacts = NULL;
	int c, rc, updated;

	set_progname(argv[0]);
	stdout_check_at_exit();
	parity_init(&p);
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'a': free(p.arch); p.arch = label("--arch", optarg); break;
		case 'p': free(p.precision); p.precision = label("--precision", optarg); break;
		case 'A': artifacts = label("--artifacts", optarg); break;
		case 'h': help(); break;
		case 'V': print_version();
		default: usage();
		}
	}
	if (argc - optind != 2)
		usage();
	if (artifacts && (p.arch == NULL || precision_from_name(p.precision) < 0))
		die(EXIT_USAGE, "--artifacts: needs --arch and --precision (nf4 or bf16)");

	rc = compare_runs(&p, argv[optind], argv[optind + 1], err, sizeof err);
	if (rc != 0)
		die(rc, "%s", err);
	out = parity_to_json(&p);
	if (jsonl_write(stdout, out) < 0)
		diesys(EXIT_RUNTIME, "writing output failed");
	cJSON_Delete(out);
	if (artifacts && parity_update_artifacts(artifacts, &p, &updated, err, sizeof err) < 0)
		die(EXIT_RUNTIME, "%s", err);
	if (artifacts && updated == 0)
		warnmsg("--artifacts %s: no poros or resident artifact of %s %s to update", artifacts, p.arch, p.precision);
	parity_free(&p);
	free(artifacts);
	return EXIT_OK;
}
