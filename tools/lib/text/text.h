/* tools/lib/text/text.h: the text stack, the public face of
 * tools/lib/text/: the tokenizer (tokenizer.h), the Jinja subset
 * (jinja.h), chat templates over it (chat_template.h) and datasets into
 * documents, targets and packed rows (dataset.h).  tokenizer_int.h,
 * jinja_int.h and dataset_int.h are private to the folder. */
#ifndef POROS_TEXT_H
#define POROS_TEXT_H

#include "tokenizer.h"
#include "jinja.h"
#include "chat_template.h"
#include "dataset.h"

#endif
