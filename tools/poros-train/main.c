/* poros-train: fine-tunes a LoRA adapter with the frozen base streamed to
 * the device a block of layers at a time (or resident, for comparison).
 * Reads a cell (or flags), writes events.jsonl and the adapter into the
 * run directory, and prints one summary line on stdout. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"
#include "train.h"

static noreturn void usage(int code)
{
	fputs(TRAIN_SYNOPSIS, code == EXIT_OK ? stdout : stderr);
	exit(code);
}

/* --help: the synopsis, then each option with its line, then the aliases. */
static noreturn void help(void)
{
	static const char *const alias_of[][2] = {
#define ALIAS_PAIR(id, name) { name, #id },
		TRAIN_ALIASES(ALIAS_PAIR)
#undef ALIAS_PAIR
	};
	static const int alias_id[] = {
#define ALIAS_ID(id, name) OPT_##id,
		TRAIN_ALIASES(ALIAS_ID)
#undef ALIAS_ID
	};

	fputs(TRAIN_SYNOPSIS, stdout);
	fputs("\noptions:\n", stdout);
	for (int i = 0; i < OPT_COUNT; i++) {
		const struct train_opt_help *h = &train_opt_help[i];
		char left[64];

		snprintf(left, sizeof left, "--%s%s%s", train_opt_names[i], h->arg ? " " : "", h->arg ? h->arg : "");
		printf("  %-32s  %s\n", left, h->line ? h->line : "");
	}
	printf("  %-32s  %s\n", "-h, --help", "print this and exit");
	printf("  %-32s  %s\n", "--version", "print the name and version and exit");
	fputs("\nthe names HF's Trainer, TRL and PEFT use, as aliases:\n", stdout);
	for (size_t i = 0; i < sizeof alias_id / sizeof *alias_id; i++)
		printf("  --%s = --%s\n", alias_of[i][0], train_opt_names[alias_id[i]]);
	exit(EXIT_OK);
}

/* Options that are gone: the name, and what to give instead. */
static const char *const removed[][2] = {
	{ "warmup", "--warmup is no longer an option: --timing-warmup N leaves the first N steps out of the timing; "
	            "--lr-warmup N (HF's --warmup-steps) ramps the learning rate up over N steps" },
};

/* Every long name an option answers to, for a did-you-mean hint. */
static const char *const all_names[] = {
#define TRAIN_NAME(id, name, has_arg) name,
	TRAIN_OPTIONS(TRAIN_NAME)
#undef TRAIN_NAME
#define ALIAS_NAME(id, name) name,
	TRAIN_ALIASES(ALIAS_NAME)
#undef ALIAS_NAME
	"help", "version",
};

static noreturn void refuse_removed(const char *name)
{
	for (size_t i = 0; i < sizeof removed / sizeof *removed; i++)
		if (strcmp(name, removed[i][0]) == 0)
			die(EXIT_USAGE, "%s", removed[i][1]);
	die(EXIT_RUNTIME, "internal error: --%s is in no list", name);
}

/* word ("--steps" or "--steps=5") spells name whole: getopt_long would
 * take "--ste" for --steps, which a later option could make ambiguous. */
static int exact_name(const char *word, const char *name)
{
	size_t n = strcspn(word + 2, "=");

	return strncmp(word, "--", 2) == 0 && strlen(name) == n && strncmp(word + 2, name, n) == 0;
}

/* How many names start with prefix and are longer, listed in list. */
static int prefix_of(const char *prefix, char *list, size_t n)
{
	int count = 0;

	list[0] = '\0';
	for (size_t i = 0; i < sizeof all_names / sizeof *all_names; i++)
		if (strncmp(all_names[i], prefix, strlen(prefix)) == 0 && strcmp(all_names[i], prefix) != 0 && ++count)
			snprintf(list + strlen(list), n - strlen(list), "%s--%s", count > 1 ? ", " : "", all_names[i]);
	return count;
}

/* arg, which getopt did not take: unknown, ambiguous or without its
 * value (short: the option's letter); one line, then the synopsis. */
static noreturn void bad_option(int ch, int short_opt, const char *arg)
{
	char name[128], list[512];
	const char *hint;

	if (strncmp(arg, "--", 2) != 0) {
		warnmsg("unknown option \"-%c\"", short_opt > 0 && short_opt < 256 ? short_opt : '?');
		usage(EXIT_USAGE);
	}
	snprintf(name, sizeof name, "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
	for (char *p = name; *p; p++) /* HF's --learning_rate is --learning-rate here */
		if (*p == '_')
			*p = '-';
	if (ch == ':')
		warnmsg("option --%s needs a value", name);
	else if (prefix_of(name, list, sizeof list) > 0) /* getopt_long would take a unique prefix: not here */
		warnmsg("unknown option \"%s\" (options are whole names: did you mean %s?)", arg, list);
	else if ((hint = closest_name(name, all_names, (int)(sizeof all_names / sizeof *all_names))) != NULL)
		warnmsg("unknown option \"%s\" (did you mean --%s?)", arg, hint);
	else
		warnmsg("unknown option \"%s\"", arg);
	usage(EXIT_USAGE);
}

int main(int argc, char **argv)
{
	/* long options only: values above any character getopt returns */
#define LONG_ONLY(id) (256 + (id))
	enum { OPT_HELP = OPT_COUNT, OPT_VERSION, OPT_REMOVED };
	static const struct option longopts[] = {
#define TRAIN_LONGOPT(id, name, has_arg) { name, has_arg ? required_argument : no_argument, NULL, LONG_ONLY(OPT_##id) },
		TRAIN_OPTIONS(TRAIN_LONGOPT)
#undef TRAIN_LONGOPT
#define TRAIN_ALIAS(id, name) { name, required_argument, NULL, LONG_ONLY(OPT_##id) },
		TRAIN_ALIASES(TRAIN_ALIAS)
#undef TRAIN_ALIAS
		{ "help", no_argument, NULL, LONG_ONLY(OPT_HELP) },
		{ "version", no_argument, NULL, LONG_ONLY(OPT_VERSION) },
		{ "warmup", optional_argument, NULL, LONG_ONLY(OPT_REMOVED) },
		{ NULL, 0, NULL, 0 },
	};
	char *value[OPT_COUNT] = { NULL };
	struct train_config cfg;
	int ch, rc, li;

	set_progname(argv[0]);
	stdout_check_at_exit();
	opterr = 0; /* bad_option says what was wrong, with a hint */
	while ((li = -1, ch = getopt_long(argc, argv, ":h", longopts, &li)) != -1) {
		/* the option as written: the value, when separate, is the last word */
		const char *word = argv[optind - 1 - (optarg && optarg == argv[optind - 1] && optind >= 2)];

		if (li >= 0 && !exact_name(word, longopts[li].name))
			bad_option('?', 0, word);
		if (ch == 'h' || ch == LONG_ONLY(OPT_HELP))
			help();
		if (ch == LONG_ONLY(OPT_VERSION))
			print_version();
		if (ch == LONG_ONLY(OPT_REMOVED))
			refuse_removed(longopts[li].name);
		if (ch < LONG_ONLY(0) || ch >= LONG_ONLY(OPT_COUNT))
			bad_option(ch, optopt, argv[optind - 1]);
		value[ch - LONG_ONLY(0)] = optarg ? optarg : "1";
	}
	if (optind != argc) {
		warnmsg("unexpected argument \"%s\" (a cell is given with --cell)", argv[optind]);
		usage(EXIT_USAGE);
	}
	train_config_from_options(&cfg, value);
	rc = cfg.nproc != 0 ? spawn_ranks(&cfg, argc, argv) : train_run(&cfg, stdout);
	train_config_free(&cfg);
	return rc;
}
