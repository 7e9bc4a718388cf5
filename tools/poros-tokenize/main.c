/* poros-tokenize: text or JSONL in, token ids out, with the model's own
 * tokenizer.json; --decode goes back, --pack shows how the trainer packs
 * documents into rows. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/text.h"
#include "util/util.h"

static const char synopsis[] =
	"usage: poros-tokenize {--tokenizer PATH | --model ID} [--add-special] [--text] [--stats] [FILE ...]\n"
	"       poros-tokenize {--tokenizer PATH | --model ID} --decode [--skip-special] [FILE ...]\n"
	"       poros-tokenize {--tokenizer PATH | --model ID} --chat [--train-on assistant|all]\n"
	"                      [--chat-date YYYY-MM-DD] [FILE ...]\n"
	"       poros-tokenize {--tokenizer PATH | --model ID} --pack SEQ_LEN [--eos ID] [--seed N]\n"
	"                      [--train-on assistant|all] [--chat-date YYYY-MM-DD] [--text] [--stats] [FILE ...]\n";

struct opts {
	const char *tokenizer_path, *model_id, *eos, *chat_date;
	int decode, chat, pack_len, add_special, skip_special, raw_text, stats, seeded;
	enum train_on train_on;
	unsigned long long seed;
};

struct run {
	const struct opts *o;
	struct tokenizer *tok;
	struct tok_workspace *ws;
	struct dataset *pack;
	struct chat_template *chat; /* at the first messages record */
	struct token_ids ids;
	long long bytes, tokens;
	double seconds; /* spent in the tokenizer, for --stats */
};

static void usage_exit(int code)
{
	fputs(synopsis, code == 0 ? stdout : stderr);
	exit(code);
}

/* A JSON string: bytes as they are (valid UTF-8 already), controls escaped,
 * NUL included (a decoded id can be byte 0). */
static void put_json_string(FILE *f, const char *s, size_t n)
{
	putc('"', f);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c == '\r')
			fputs("\\r", f);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			putc(c, f);
	}
	putc('"', f);
}

/* "key":[ids] without printf: output is a large part of the tool's time. */
static void put_ids(FILE *f, const char *key, const int32_t *v, size_t n)
{
	char buf[16];

	fprintf(f, "\"%s\":[", key);
	for (size_t i = 0; i < n; i++) {
		int32_t x = v[i];
		int k = (int)sizeof buf;
		uint32_t u = x < 0 ? (uint32_t)0 - (uint32_t)x : (uint32_t)x;
		do
			buf[--k] = (char)('0' + u % 10);
		while ((u /= 10) != 0);
		if (x < 0)
			buf[--k] = '-';
		if (i)
			putc(',', f);
		fwrite(buf + k, 1, sizeof buf - (size_t)k, f);
	}
	putc(']', f);
}

/* A line is a JSON record when it starts with '{' (unless --text); then it
 * must parse.  Returns the record or NULL for plain text. */
static cJSON *line_record(const struct opts *o, const char *where, const char *line, size_t len)
{
	size_t k = 0;
	cJSON *rec;

	while (k < len && (line[k] == ' ' || line[k] == '\t'))
		k++;
	if (o->raw_text || k == len || (line[k] != '{' && !(o->decode && line[k] == '[')))
		return NULL;
	rec = cJSON_ParseWithLength(line, len);
	if (rec == NULL)
		die(EXIT_USAGE, "%s: not valid JSON (use --text for plain text lines that start with '{')", where);
	return rec;
}

static const struct chat_template *chat_of(struct run *r, const char *where)
{
	char why[1024];
	int rc;

	if (r->chat)
		return r->chat;
	rc = chat_template_load(&r->chat, tokenizer_path(r->tok), why, sizeof why);
	if (rc == 0)
		die(EXIT_USAGE, "%s: a messages record, but the model has no chat template: %s", where, why);
	if (rc < 0)
		die(EXIT_USAGE, "%s: %s", where, why);
	if (r->o->chat_date && chat_template_set_date(r->chat, r->o->chat_date, why, sizeof why) < 0)
		die(EXIT_USAGE, "--chat-date: %s", why);
	return r->chat;
}

/* A messages record: the ids apply_chat_template gives; with --chat, the
 * labels too (the id where it is a target, else -100). */
static void encode_chat(struct run *r, const char *where, const cJSON *messages, const cJSON *kwargs)
{
	struct chat_render cr;
	char why[1024];
	uint8_t *sup;
	int32_t *labels;
	double t0 = now_seconds();

	if (chat_template_render(&cr, chat_of(r, where), messages, kwargs, why, sizeof why) < 0)
		die(EXIT_USAGE, "%s: %s", where, why);
	r->ids.n = 0;
	if (tokenizer_encode(r->tok, r->ws, cr.text, cr.len, 0, &r->ids, why, sizeof why) < 0)
		die(EXIT_USAGE, "%s: %s", where, why);
	r->seconds += now_seconds() - t0;
	r->bytes += (long long)cr.len;
	r->tokens += (long long)r->ids.n;
	putchar('{');
	put_ids(stdout, "ids", r->ids.v, r->ids.n);
	if (r->o->chat) {
		sup = xmalloc(r->ids.n ? r->ids.n : 1);
		labels = xmalloc((r->ids.n ? r->ids.n : 1) * sizeof *labels);
		memset(sup, 1, r->ids.n);
		if (r->o->train_on != TRAIN_ON_ALL &&
		    chat_supervised(sup, r->tok, r->ids.v, r->ids.n, &cr, why, sizeof why) < 0)
			die(EXIT_RUNTIME, "%s: %s", where, why);
		for (size_t i = 0; i < r->ids.n; i++)
			labels[i] = sup[i] ? r->ids.v[i] : -100;
		putchar(',');
		put_ids(stdout, "labels", labels, r->ids.n);
		free(sup);
		free(labels);
	}
	fputs("}\n", stdout);
	chat_render_free(&cr);
}

static void encode_line(struct run *r, const char *where, const char *line, size_t len)
{
	cJSON *rec = line_record(r->o, where, line, len);
	const char *text = line;
	char why[512];
	double t0;

	if (r->o->chat && !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(rec, "messages")))
		die(EXIT_USAGE, "%s: --chat reads records with a \"messages\" array", where);
	if (rec) {
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(rec, "text");
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(rec, "messages");
		if (m) {
			if (r->o->add_special)
				die(EXIT_USAGE, "%s: --add-special does not apply to messages (the template writes them)", where);
			encode_chat(r, where, m, cJSON_GetObjectItemCaseSensitive(rec, "chat_template_kwargs"));
			cJSON_Delete(rec);
			return;
		}
		if (cJSON_IsString(t))
			text = t->valuestring;
		else
			die(EXIT_USAGE, "%s: no \"text\" (string) or \"messages\" field", where);
		len = strlen(text);
	}
	r->ids.n = 0;
	t0 = now_seconds();
	if (tokenizer_encode(r->tok, r->ws, text, len, r->o->add_special ? TOK_ADD_SPECIAL : 0, &r->ids, why,
			     sizeof why) < 0)
		die(EXIT_USAGE, "%s: %s", where, why);
	r->seconds += now_seconds() - t0;
	r->bytes += (long long)len;
	r->tokens += (long long)r->ids.n;
	putchar('{');
	put_ids(stdout, "ids", r->ids.v, r->ids.n);
	fputs("}\n", stdout);
	cJSON_Delete(rec);
}

static void decode_line(struct run *r, const char *where, const char *line, size_t len)
{
	cJSON *rec = line_record(r->o, where, line, len);
	const cJSON *arr = cJSON_IsArray(rec) ? rec : cJSON_GetObjectItemCaseSensitive(rec, "ids"), *v;
	char why[256], *text;
	size_t n = 0, tlen;

	if (!cJSON_IsArray(arr))
		die(EXIT_USAGE, "%s: expected {\"ids\": [...]} or [...]", where);
	r->ids.n = 0;
	cJSON_ArrayForEach(v, arr) {
		if (!cJSON_IsNumber(v) || v->valuedouble < INT32_MIN || v->valuedouble > INT32_MAX ||
		    v->valuedouble != (double)(int32_t)v->valuedouble)
			die(EXIT_USAGE, "%s: ids[%zu] is not an integer", where, n);
		token_ids_push(&r->ids, (int32_t)v->valuedouble);
		n++;
	}
	text = tokenizer_decode(r->tok, r->ids.v, r->ids.n, r->o->skip_special ? TOK_SKIP_SPECIAL : 0, &tlen, why,
				sizeof why);
	if (text == NULL)
		die(EXIT_USAGE, "%s: %s", where, why);
	fputs("{\"text\":", stdout);
	put_json_string(stdout, text, tlen);
	fputs("}\n", stdout);
	free(text);
	cJSON_Delete(rec);
}

static void pack_line(struct run *r, const char *where, const char *line, size_t len)
{
	cJSON *rec = line_record(r->o, where, line, len);
	char why[512];
	int rc = rec ? dataset_add_record(r->pack, rec, where, why, sizeof why)
		     : dataset_add_text(r->pack, line, len, where, why, sizeof why);

	if (rc < 0)
		die(EXIT_USAGE, "%s", why);
	r->bytes += (long long)len;
	cJSON_Delete(rec);
}

static void process_line(struct run *r, const char *where, const char *line, size_t len)
{
	if (r->o->decode)
		decode_line(r, where, line, len);
	else if (r->o->pack_len)
		pack_line(r, where, line, len);
	else
		encode_line(r, where, line, len);
}

static void process_file(struct run *r, const char *path)
{
	int is_stdin = strcmp(path, "-") == 0;
	const char *name = is_stdin ? "<stdin>" : path;
	FILE *f = is_stdin ? stdin : fopen(path, "r");
	char *line = NULL, where[4096];
	size_t cap = 0;
	ssize_t n;
	long lineno = 0;

	if (f == NULL)
		diesys(EXIT_USAGE, "%s", path);
	while ((n = getline(&line, &cap, f)) >= 0) {
		lineno++;
		if (n > 0 && line[n - 1] == '\n')
			n--;
		snprintf(where, sizeof where, "%s:%ld", name, lineno);
		process_line(r, where, line, (size_t)n);
	}
	if (ferror(f))
		diesys(EXIT_RUNTIME, "%s: read error", name);
	free(line);
	if (!is_stdin)
		fclose(f);
}

/* --pack: every document read, one epoch of rows out. */
static void emit_rows(struct run *r)
{
	char why[512];
	long long rows;
	int32_t *tokens = xmalloc((size_t)r->o->pack_len * sizeof *tokens);
	int32_t *targets = xmalloc((size_t)r->o->pack_len * sizeof *targets);
	int32_t *pos = xmalloc((size_t)r->o->pack_len * sizeof *pos);
	double t0 = now_seconds();

	if (dataset_prepare(r->pack, why, sizeof why) < 0)
		die(EXIT_USAGE, "%s", why);
	r->seconds += now_seconds() - t0;
	r->tokens = dataset_tokens(r->pack);
	rows = dataset_rows_per_epoch(r->pack);
	for (long long i = 0; i < rows; i++) {
		if (dataset_next(r->pack, tokens, targets, pos, 1, why, sizeof why) < 0)
			die(EXIT_RUNTIME, "%s", why);
		putchar('{');
		put_ids(stdout, "tokens", tokens, (size_t)r->o->pack_len);
		putchar(',');
		put_ids(stdout, "targets", targets, (size_t)r->o->pack_len);
		putchar(',');
		put_ids(stdout, "pos", pos, (size_t)r->o->pack_len);
		fputs("}\n", stdout);
	}
	free(tokens);
	free(targets);
	free(pos);
}

static int eos_id(const struct opts *o, const struct tokenizer *tok)
{
	const char *why;
	long v;

	if (o->eos == NULL) {
		if (tokenizer_eos_id(tok) < 0)
			die(EXIT_USAGE, "%s: no eos_token in a tokenizer_config.json beside it: give --eos",
			    tokenizer_path(tok));
		return tokenizer_eos_id(tok);
	}
	if (parse_long(o->eos, 0, tokenizer_vocab_size(tok) - 1, &v, &why) == 0)
		return (int)v;
	v = tokenizer_token_id(tok, o->eos);
	if (v < 0)
		die(EXIT_USAGE, "--eos: \"%s\" is neither an id below %d nor a token", o->eos, tokenizer_vocab_size(tok));
	return (int)v;
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "tokenizer", required_argument, NULL, 't' }, { "model", required_argument, NULL, 'm' },
		{ "decode", no_argument, NULL, 'd' },          { "pack", required_argument, NULL, 'p' },
		{ "eos", required_argument, NULL, 'e' },       { "seed", required_argument, NULL, 's' },
		{ "add-special", no_argument, NULL, 'a' },     { "skip-special", no_argument, NULL, 'k' },
		{ "text", no_argument, NULL, 'x' },            { "stats", no_argument, NULL, 'S' },
		{ "chat", no_argument, NULL, 'c' },            { "train-on", required_argument, NULL, 'T' },
		{ "chat-date", required_argument, NULL, 'D' }, { "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "t:m:dp:e:s:h", longopts, NULL)) != -1) {
		switch (c) {
		case 't': o->tokenizer_path = optarg; break;
		case 'm': o->model_id = optarg; break;
		case 'd': o->decode = 1; break;
		case 'c': o->chat = 1; break;
		case 'D': o->chat_date = optarg; break;
		case 'T':
			if (strcmp(optarg, "assistant") == 0)
				o->train_on = TRAIN_ON_ASSISTANT;
			else if (strcmp(optarg, "all") == 0)
				o->train_on = TRAIN_ON_ALL;
			else
				die(EXIT_USAGE, "--train-on: \"%s\" is not assistant or all", optarg);
			break;
		case 'p': o->pack_len = (int)opt_long("--pack", optarg, 1, 1 << 24); break;
		case 'e': o->eos = optarg; break;
		case 's': o->seed = (unsigned long long)opt_long("--seed", optarg, 0, LONG_MAX); o->seeded = 1; break;
		case 'a': o->add_special = 1; break;
		case 'k': o->skip_special = 1; break;
		case 'x': o->raw_text = 1; break;
		case 'S': o->stats = 1; break;
		case 'h': usage_exit(EXIT_OK); break;
		case 'V': print_version(); break;
		default: usage_exit(EXIT_USAGE);
		}
	}
	if (!o->tokenizer_path == !o->model_id)
		die(EXIT_USAGE, "give one of --tokenizer PATH or --model ID");
	if (o->decode + o->chat + !!o->pack_len > 1)
		die(EXIT_USAGE, "--decode, --chat and --pack do not go together");
	if (o->train_on != TRAIN_ON_DEFAULT && !o->chat && !o->pack_len)
		die(EXIT_USAGE, "--train-on only applies to --chat and --pack");
	if (o->chat_date && !o->chat && !o->pack_len)
		die(EXIT_USAGE, "--chat-date only applies to --chat and --pack");
	if (o->chat_date) { /* refused at once, not at the first messages record */
		struct tm day;
		char why[128];
		if (jinja_parse_date(&day, o->chat_date, why, sizeof why) < 0)
			die(EXIT_USAGE, "--chat-date: %s", why);
	}
	if ((o->eos || o->seeded) && !o->pack_len)
		die(EXIT_USAGE, "--eos and --seed only apply to --pack");
	if (o->skip_special && !o->decode)
		die(EXIT_USAGE, "--skip-special only applies to --decode");
	if (o->add_special && (o->decode || o->pack_len))
		die(EXIT_USAGE, "--add-special only applies to encoding (--pack adds what the trainer adds)");
	if ((o->stats || o->raw_text) && o->decode)
		die(EXIT_USAGE, "--stats and --text do not apply to --decode");
	if ((o->raw_text || o->add_special) && o->chat)
		die(EXIT_USAGE, "--text and --add-special do not apply to --chat");
}

int main(int argc, char **argv)
{
	struct opts o = { 0 };
	struct run r = { 0 };
	char why[1024];
	int rc;

	set_progname(argv[0]);
	stdout_check_at_exit();
	parse_opts(argc, argv, &o);
	r.o = &o;
	rc = o.tokenizer_path ? tokenizer_load(&r.tok, o.tokenizer_path, why, sizeof why)
			      : tokenizer_resolve(&r.tok, o.model_id, why, sizeof why);
	if (rc < 0)
		die(EXIT_USAGE, "%s", why);
	r.ws = tok_workspace_new(r.tok);
	if (o.pack_len) {
		r.pack = dataset_new(r.tok, o.pack_len, o.seed, eos_id(&o, r.tok), o.seeded);
		dataset_set_train_on(r.pack, o.train_on);
		if (o.chat_date && dataset_set_chat_date(r.pack, o.chat_date, why, sizeof why) < 0)
			die(EXIT_USAGE, "--chat-date: %s", why);
	}
	if (optind == argc)
		process_file(&r, "-");
	for (int i = optind; i < argc; i++)
		process_file(&r, argv[i]);
	if (r.pack)
		emit_rows(&r);
	if (o.stats)
		fprintf(stderr, "%s: %lld bytes, %lld tokens in %.3f s: %.1f MB/s, %.2f M tokens/s\n", progname, r.bytes,
			r.tokens, r.seconds, r.seconds > 0 ? r.bytes / r.seconds / 1e6 : 0.0,
			r.seconds > 0 ? r.tokens / r.seconds / 1e6 : 0.0);
	dataset_close(r.pack);
	chat_template_free(r.chat);
	token_ids_free(&r.ids);
	tok_workspace_free(r.ws);
	tokenizer_free(r.tok);
	return EXIT_OK;
}
