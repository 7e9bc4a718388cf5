/* tools/lib/text/chat_template.h: a model's own chat template, applied to a
 * `messages` record as transformers' tokenizer.apply_chat_template(
 * messages, tokenize=True) applies it (add_generation_prompt false, the
 * rendered text tokenized without added special tokens), with the
 * positions of the assistant's answers for the loss.
 *
 * The template is read beside the tokenizer.json: chat_template.jinja if
 * present (it wins, as in transformers), else tokenizer_config.json's
 * "chat_template" (a string, or a list of {"name", "template"} of which
 * "default" is used).  The context holds messages, tools and documents
 * (none), add_generation_prompt (false), the config's special tokens
 * (bos_token, eos_token, unk_token, pad_token, ...) and a record's own
 * "chat_template_kwargs" (transformers' apply_chat_template(messages,
 * **kwargs), TRL's column of that name: e.g. {"date_string": "26 Jul
 * 2024"} for Llama-3.2's template).  strftime_now formats the date given
 * to chat_template_set_date; without one it is an error (transformers
 * reads the clock, which would make a rerun give other ids).
 *
 * Supervised tokens: those holding a byte of an assistant message's
 * content (the interpreter follows each content byte through the
 * template's string operations, tools/lib/text/jinja.h), and the special token
 * right after each assistant content (its end of turn: <|im_end|>,
 * <|eot_id|>), also after an empty one.  Template text (role headers, an
 * inserted <think></think> block) is never supervised: Qwen3's template
 * puts "<think>\n\n</think>\n\n" before the last answer, the very text
 * its generation prompt supplies with enable_thinking=False, so it is the
 * prompt, not something to learn (training on it would teach the model
 * to skip reasoning); a <think>...</think> written in the content itself
 * is the answer's and is supervised.  (Unsloth's train_on_responses_only
 * and {% generation %}-tagged templates differ: they supervise the
 * inserted block, and the newline after <|im_end|>.) */
#ifndef POROS_CHAT_TEMPLATE_H
#define POROS_CHAT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "tokenizer.h"

struct chat_template;

/* 1 with *out, 0 when the model has no chat template (*out NULL, err says
 * where it looked), -1 with err (an unreadable file, a template the
 * interpreter cannot run: "PATH:LINE:COL: what"). */
int chat_template_load(struct chat_template **out, const char *tokenizer_json, char *err, size_t errsz);
void chat_template_free(struct chat_template *ct);
const char *chat_template_path(const struct chat_template *ct); /* where it was read */

/* The date strftime_now formats, "YYYY-MM-DD" (at 00:00:00).  0, or -1
 * with err. */
int chat_template_set_date(struct chat_template *ct, const char *ymd, char *err, size_t errsz);

struct chat_render {
	char *text;
	size_t len;
	int *assistant;         /* (len) k+1 for a byte of assistant message k's content, else 0 */
	size_t n_anchor;
	size_t *anchor_pos;     /* where an empty assistant content stands */
	int *anchor_msg;        /* its message, k+1 */
};

/* messages: [{"role": string, "content": string}...]; kwargs: NULL or
 * an object of extra template variables (not messages, tools, documents,
 * add_generation_prompt, continue_final_message).  0, or -1 with err
 * ("messages[2]: ...", "PATH:LINE:COL: ..."). */
int chat_template_render(struct chat_render *out, const struct chat_template *ct, const cJSON *messages,
			 const cJSON *kwargs, char *err, size_t errsz);
void chat_render_free(struct chat_render *r);

/* sup (n) = 1 where ids[i] (the encoding of r->text) is supervised.  -1
 * with err when the tokens do not spell the text byte for byte. */
int chat_supervised(uint8_t *sup, const struct tokenizer *tok, const int32_t *ids, size_t n,
		    const struct chat_render *r, char *err, size_t errsz);

#endif
