#!/usr/bin/env bats
# Chat records: the model's own chat template (tools/lib/text/jinja*.c,
# chat_template.c) against what transformers' apply_chat_template gives
# (tests/fixtures/chat/, made by tests/chat/make_expected.py; the shipped
# Qwen2, Qwen2.5 and Llama-3.2/3.3 templates by tests/gpu/chat_fixtures.py, whose
# `check` runs them through transformers, see tests/fixtures/chat/SOURCE), the answer
# masks, document positions in packed rows, and the trainer's loss over
# the answers.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	FIX="$POROS_ROOT/tests/fixtures/chat"
}

# chat_ids SET [ARG...]: the messages of SET's expected.jsonl through --chat
chat_ids() {
	local set=$1
	shift
	jq -c '{messages}' "$FIX/$set/expected.jsonl" | poros-tokenize --tokenizer "$FIX/$set" --chat "$@"
}

# expect_transformers SET [ARG...]: every conversation's ids are transformers'
expect_transformers() {
	chat_ids "$@" >got.jsonl
	[ "$(wc -l <got.jsonl)" -eq 10 ]
	diff <(jq -c .ids "$FIX/$1/expected.jsonl") <(jq -c .ids got.jsonl)
}

# a tokenizer directory holding the fixture's tokenizer and the template given
with_template() {
	mkdir -p tok
	cp "$FIX/qwen3/tokenizer.json" tok/
	echo '{"eos_token": "<|im_end|>"}' >tok/tokenizer_config.json
	printf '%s' "$1" >tok/chat_template.jinja
}

@test "Qwen3's template gives transformers' ids (with and without system, turns, empty and unicode content, <think>)" {
	expect_transformers qwen3
}

@test "Llama-3's template gives transformers' ids" {
	expect_transformers llama3
}

@test "Llama-3.1's template gives transformers' ids" {
	expect_transformers llama3_1
}

@test "Qwen2-Instruct's shipped template gives transformers' ids (Qwen2's tokenizer has no <think> token)" {
	expect_transformers qwen2
	head -1 "$FIX/qwen2/expected.jsonl" | jq -e '.text | startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n")'
	# the same text as the Qwen2-style set; only the <think> of Qwen3's tokenizer differs
	diff <(jq -c .text "$FIX/qwen2/expected.jsonl") <(jq -c .text "$FIX/qwen2_style/expected.jsonl")
	sed -n 8p got.jsonl | jq -e '(.ids | index(151667)) == null'
}

@test "Qwen2.5-Instruct's shipped template gives transformers' ids (its default system prompt; <think> is plain text)" {
	expect_transformers qwen2_5
	jq -e '.chat_template | contains("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")' \
		"$FIX/qwen2_5/tokenizer_config.json"
	# the default system prompt when the record has none, the record's own otherwise
	head -1 "$FIX/qwen2_5/expected.jsonl" | jq -e '.text | startswith("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud.")'
	sed -n 2p "$FIX/qwen2_5/expected.jsonl" | jq -e '.text | startswith("<|im_start|>system\nYou are terse.<|im_end|>")'
	# Qwen2.5 has no <think> token (151667 is Qwen3's): the content's tag is BPE text, and a target
	sed -n 8p got.jsonl | jq -e '(.ids | index(151667)) == null and .labels[32:35] == [13708, 766, 397]'
	sed -n 8p got.jsonl | jq -c '{ids: [.labels[] | select(. != -100)]}' |
		poros-tokenize --tokenizer "$FIX/qwen2_5" --decode >text.jsonl
	run jq -r .text text.jsonl
	assert_output "$(printf '<think>\nLet me see: 3*7=21.\n</think>\n\nThe answer is 21.<|im_end|>')"
}

@test "Llama-3.2-Instruct's template: refused without a fixed date, transformers' ids at --chat-date" {
	# it calls strftime_now when no date_string is given; transformers reads the clock, Poros refuses
	jq -e '.chat_template | contains("strftime_now(\"%d %b %Y\")")' "$FIX/llama3_2/tokenizer_config.json"
	run -2 --separate-stderr poros-tokenize --tokenizer "$FIX/llama3_2" --chat < <(jq -c '{messages}' "$FIX/llama3_2/expected.jsonl")
	[ -z "$output" ]
	[[ "$stderr" == "poros-tokenize: <stdin>:1: $FIX/llama3_2/tokenizer_config.json: chat template 10:43: strftime_now: the template asks for today's date"*"--chat-date YYYY-MM-DD"* ]]
	# the fixtures were rendered at 2024-07-26
	expect_transformers llama3_2 --chat-date 2024-07-26
	head -1 "$FIX/llama3_2/expected.jsonl" | jq -e '.text | contains("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n")'
	# another day is another header; the answers' targets are the same tokens
	chat_ids llama3_2 --chat-date 2025-01-09 >other.jsonl
	head -1 other.jsonl | jq -c '{ids}' | poros-tokenize --tokenizer "$FIX/llama3_2" --decode | jq -e '.text | contains("Today Date: 09 Jan 2025\n")'
	diff <(jq -c '[.labels[] | select(. != -100)]' got.jsonl) <(jq -c '[.labels[] | select(. != -100)]' other.jsonl)
	# a date that is no date is a usage error
	run -2 --separate-stderr poros-tokenize --tokenizer "$FIX/llama3_2" --chat --chat-date 2024-02-30 < <(head -1 "$FIX/llama3_2/expected.jsonl")
	[[ "$stderr" == *'--chat-date: not a date YYYY-MM-DD: "2024-02-30"' ]]
	run -2 --separate-stderr poros-tokenize --tokenizer "$FIX/llama3_2" --chat-date 2024-07-26 </dev/null
	[[ "$stderr" == *"--chat-date only applies to --chat and --pack" ]]
	# refused at once, also when no record asks for the date
	run -2 --separate-stderr poros-tokenize --tokenizer "$FIX/llama3_2" --pack 8 --chat-date 26-07-2024 <<<'{"text":"x"}'
	[ -z "$output" ]
	[[ "$stderr" == *'--chat-date: not a date YYYY-MM-DD: "26-07-2024"' ]]
}

@test "a record's chat_template_kwargs are template variables: Llama-3.2's date_string, as apply_chat_template(**kwargs)" {
	# date_string given: the template does not ask for today, so no --chat-date is needed
	jq -c '{messages, chat_template_kwargs: {date_string: "26 Jul 2024"}}' "$FIX/llama3_2/expected.jsonl" >in.jsonl
	poros-tokenize --tokenizer "$FIX/llama3_2" --chat in.jsonl >got.jsonl
	diff <(jq -c .ids "$FIX/llama3_2/expected.jsonl") <(jq -c .ids got.jsonl)
	# the trainer's reader (--pack) takes them too: the first row starts with the same ids
	run -0 poros-tokenize --tokenizer "$FIX/llama3_2" --pack 16 <(head -1 in.jsonl)
	echo "${lines[0]}" | jq -e --argjson want "$(head -1 "$FIX/llama3_2/expected.jsonl" | jq -c '.ids[0:16]')" '.tokens == $want'
	run -2 poros-tokenize --tokenizer "$FIX/llama3_2" --pack 16 < <(head -1 "$FIX/llama3_2/expected.jsonl" | jq -c '{messages}')
	# what apply_chat_template sets itself is not a record's to set; a non-object is refused
	echo '{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"tools":[]}}' >bad.jsonl
	run -2 --separate-stderr poros-tokenize --tokenizer "$FIX/llama3_2" --chat bad.jsonl
	[[ "$stderr" == *'bad.jsonl:1: chat_template_kwargs: "tools" is not a template variable a record may set' ]]
	echo '{"messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":"26 Jul 2024"}' >bad.jsonl
	run -2 --separate-stderr poros-tokenize --tokenizer "$FIX/llama3_2" --chat bad.jsonl
	[[ "$stderr" == *'bad.jsonl:1: "chat_template_kwargs" is not an object' ]]
}

@test "Llama-3.3-Instruct's template (Llama-3.1-Instruct's, date_string by default) gives transformers' ids" {
	jq -e '.chat_template | contains("strftime_now") | not' "$FIX/llama3_3/tokenizer_config.json"
	expect_transformers llama3_3
	head -1 "$FIX/llama3_3/expected.jsonl" | jq -e '.text | contains("Today Date: 26 Jul 2024\n\n")'
}

@test "the shipped Qwen2, Qwen2.5 and Llama-3.2/3.3 templates' other branches (tool results, a later system message) give transformers' ids" {
	for set in qwen2 qwen2_5 llama3_2 llama3_3; do
		[ "$(wc -l <"$FIX/$set/more.jsonl")" -eq 2 ]
		jq -c '{messages}' "$FIX/$set/more.jsonl" | poros-tokenize --tokenizer "$FIX/$set" --chat --chat-date 2024-07-26 >got.jsonl
		diff <(jq -c .ids "$FIX/$set/more.jsonl") <(jq -c .ids got.jsonl)
	done
	# Llama's ipython turn is the content as JSON (a string is iterable there)
	sed -n 1p "$FIX/llama3_2/more.jsonl" | jq -e '.text | contains("<|start_header_id|>ipython<|end_header_id|>\n\n\"sunny\"<|eot_id|>")'
	sed -n 1p "$FIX/qwen2_5/more.jsonl" | jq -e '.text | contains("<|im_start|>user\n<tool_response>\n{\"t\": 21")'
	# only the assistant's answer and its end of turn are targets, not the tool results
	sed -n 1p got.jsonl | jq -c '{ids: [.labels[] | select(. != -100)]}' | poros-tokenize --tokenizer "$FIX/llama3_3" --decode >text.jsonl
	run jq -r .text text.jsonl
	assert_output "21 °C and sunny.<|eot_id|>"
}

@test "a Qwen2-style template with a default system prompt gives transformers' ids (Qwen3's tokenizer)" {
	expect_transformers qwen2_style
	# the default system prompt is there when the record has none
	[ "$(head -1 "$FIX/qwen2_style/expected.jsonl" | jq -r .text | head -1)" = "<|im_start|>system" ]
}

@test "chat_template.jinja wins over tokenizer_config.json's template, as in transformers" {
	# both are there; only the .jinja (a Llama-3.1-Instruct-style template) writes the date header
	jq -e '.chat_template | type == "string"' "$FIX/llama31_style/tokenizer_config.json"
	expect_transformers llama31_style
	head -1 "$FIX/llama31_style/expected.jsonl" | jq -e '.text | contains("Today Date: 26 Jul 2024")'
}

@test "a template given as a list of named templates uses the default one" {
	mkdir tok
	cp "$FIX/qwen3/tokenizer.json" tok/
	jq -n '{eos_token: "<|im_end|>", chat_template: [{name: "tool_use", template: "TOOLS"},
		{name: "default", template: "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}"}]}' \
		>tok/tokenizer_config.json
	run -0 poros-tokenize --tokenizer tok --chat <<<'{"messages":[{"role":"user","content":"hi"}]}'
	assert_output '{"ids":[151644,6023,151645],"labels":[-100,-100,-100]}'
}

@test "only the answer and its end-of-turn token are targets (Qwen3, checked by hand)" {
	chat_ids qwen3 >got.jsonl
	# conversation 1: "I am a helpful assistant." then <|im_end|> (151645); the
	# <think>\n\n</think>\n\n block the template inserts is not an answer
	sed -n 1p got.jsonl | jq -e '[.labels[] | select(. != -100)] == [40, 1079, 264, 10950, 17847, 13, 151645]
		and (.labels | length) == 26 and .labels[14:18] == [-100, -100, -100, -100] and .ids[14] == 151667'
	# conversation 9: an earlier turn's reasoning is dropped by the template,
	# the last turn's is the model's to write
	sed -n 9p got.jsonl | jq -c '{ids: [.labels[] | select(. != -100)]}' |
		poros-tokenize --tokenizer "$FIX/qwen3" --decode >text.jsonl
	run jq -r .text text.jsonl
	assert_output "a1<|im_end|>r2a2<|im_end|>"
	# a conversation that ends with the user: nothing to learn
	sed -n 10p got.jsonl | jq -e '[.labels[] | select(. != -100)] == []'
}

@test "Qwen3 under train_on assistant: the template's <think> tags are prompt, the content's reasoning and answer are targets" {
	chat_ids qwen3 --train-on assistant >got.jsonl
	# conversation 1: <|im_start|>assistant\n (151644 77091 198, positions 11-13) and
	# the template's <think>\n\n</think>\n\n (151667 271 151668 271, 14-17) are not
	# targets; the answer (18-23) and its <|im_end|> (24) are; the newline after is not
	sed -n 1p got.jsonl | jq -e '.ids[11:18] == [151644, 77091, 198, 151667, 271, 151668, 271]
		and [.labels | to_entries[] | select(.value != -100) | .key] == [18, 19, 20, 21, 22, 23, 24]
		and .ids[24] == 151645 and .labels[25] == -100'
	# conversation 8: the content's own "<think>\n...\n</think>\n\n" is split by the
	# template and written again around the reasoning: those tags (151667 at 11,
	# 151668 at 25, with their newlines 198 and 271) are the template's, the
	# reasoning (13-24) and the answer (27-33) with <|im_end|> (34) are the content's
	sed -n 8p got.jsonl | jq -e '.ids[11] == 151667 and .ids[12] == 198 and .ids[25] == 151668 and .ids[26] == 271
		and [.labels | to_entries[] | select(.value != -100) | .key] == [range(13; 25)] + [range(27; 35)]'
	sed -n 8p got.jsonl | jq -c '{ids: [.labels[] | select(. != -100)]}' |
		poros-tokenize --tokenizer "$FIX/qwen3" --decode >text.jsonl
	run jq -r .text text.jsonl
	# (".\n" is one token: it holds a content byte, so it is a target)
	assert_output "$(printf 'Let me see: 3*7=21.\nThe answer is 21.<|im_end|>')"
}

@test "two answers, and an empty one, keep their end-of-turn tokens (Llama-3, checked by hand)" {
	chat_ids llama3 >got.jsonl
	sed -n 3p got.jsonl | jq -c '{ids: [.labels[] | select(. != -100)]}' |
		poros-tokenize --tokenizer "$FIX/llama3" --decode >text.jsonl
	run jq -r .text text.jsonl
	assert_output "$(printf 'Bonjour !<|eot_id|>Bonne nuit.\nDors bien.<|eot_id|>')"
	# an empty answer: its <|eot_id|> (128009, position 10) alone; the
	# trailing header this template always adds is not an answer
	sed -n 4p got.jsonl | jq -e '.ids == [128000,128006,882,128007,271,128009,128006,78191,128007,271,128009,128006,78191,128007,271]
		and [.labels | to_entries[] | select(.value != -100) | .key] == [10]'
	# trimmed content: the template's trim is followed, the padding is not an answer
	sed -n 7p got.jsonl | jq -c '{ids: [.labels[] | select(. != -100)]}' |
		poros-tokenize --tokenizer "$FIX/llama3" --decode >text.jsonl
	run jq -r .text text.jsonl
	assert_output "padded answer<|eot_id|>"
}

@test "--train-on all makes every token a target; the plain encoding of a record is the same ids" {
	jq -c '{messages}' "$FIX/qwen3/expected.jsonl" | head -2 >in.jsonl
	run -0 poros-tokenize --tokenizer "$FIX/qwen3" --chat --train-on all in.jsonl
	echo "$output" | jq -e -s 'all(.[]; .labels == .ids)'
	diff <(poros-tokenize --tokenizer "$FIX/qwen3" in.jsonl | jq -c .ids) <(echo "$output" | jq -c .ids)
}

@test "a template Poros cannot run is refused by name and place, never rendered another way" {
	with_template "{% for m in messages %}{{ m.content | wordcount }}{% endfor %}"
	run -2 --separate-stderr poros-tokenize --tokenizer tok --chat <<<'{"messages":[{"role":"user","content":"hi"}]}'
	[ -z "$output" ]
	[[ "$stderr" == "poros-tokenize: <stdin>:1: tok/chat_template.jinja: chat template 1:39: unsupported filter \"wordcount\"" ]]
	with_template "{% macro m() %}x{% endmacro %}"
	run -2 --separate-stderr poros-tokenize --tokenizer tok --chat <<<'{"messages":[{"role":"user","content":"hi"}]}'
	[[ "$stderr" == *"chat template 1:4: unsupported tag \"macro\""* ]]
	# the trainer refuses it the same way
	run -2 --separate-stderr poros-tokenize --tokenizer tok --pack 8 <<<'{"messages":[{"role":"user","content":"hi"}]}'
	[[ "$stderr" == *"unsupported tag \"macro\""* ]]
}

# budget_refused TEMPLATE MESSAGE: poros-tokenize --chat exits 2 with the
# template's place and MESSAGE, within a second (tests/unit/test_jinja.c
# runs every budget of tests/fixtures/jinja/budgets.jsonl; this is the tool's side)
budget_refused() {
	local start
	mkdir -p tok
	cp "$FIX/qwen3/tokenizer.json" tok/
	echo '{"eos_token": "<|im_end|>"}' >tok/tokenizer_config.json
	printf '%s' "$1" >tok/chat_template.jinja
	start=$(date +%s%N)
	run -2 --separate-stderr poros-tokenize --tokenizer tok --chat <<<'{"messages":[{"role":"user","content":"hi"}]}'
	[ -z "$output" ]
	[[ "$stderr" == "poros-tokenize: <stdin>:1: tok/chat_template.jinja: chat template $2" ]]
	local limit=2000000000
	[ -z "${ASAN_OPTIONS:-}" ] || limit=20000000000 # make test-asan's build runs ~10x slower
	[ $(($(date +%s%N) - start)) -lt "$limit" ]
}

@test "a template past a budget (nesting, loops, memory, 64-bit integers) is refused by place, exit 2" {
	budget_refused "{{ $(printf 'not %.0s' $(seq 100000))1 }}" \
		"1:1024: the template nests more than 256 deep (brackets, operators, tags)"
	budget_refused "{{ $(printf -- '-%.0s' $(seq 100000))1 }}" \
		"1:259: the template nests more than 256 deep (brackets, operators, tags)"
	budget_refused "{% for i in range(2000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}" \
		"1:30: the template's loops ran more than 1000223 iterations"
	budget_refused "{% set ns = namespace(s='0123456789') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}" \
		"1:86: the render needs more than 96 MiB"
	budget_refused "{{ 3 ** 9223372036854775807 }}" \
		"1:6: integer overflow: 3 ** 9223372036854775807 is beyond 64 bits (big integers are not supported)"
	budget_refused "{{ (-9223372036854775807 - 1) % -1 }}{{ (-9223372036854775807 - 1) // -1 }}" \
		"1:68: integer overflow: -9223372036854775808 // -1 is beyond 64 bits (big integers are not supported)"
}

@test "a template's raise_exception is an error with its message" {
	with_template "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}x"
	run -2 --separate-stderr poros-tokenize --tokenizer tok --chat <<<'{"messages":[{"role":"system","content":"s"}]}'
	[[ "$stderr" == *"template raised: System role not supported" ]]
}

@test "messages for a model without a chat template are an error naming it, not ChatML" {
	tok="$POROS_ROOT/tests/fixtures/tokenizer/tiny"
	run -2 --separate-stderr poros-tokenize --tokenizer "$tok" <<<'{"messages":[{"role":"user","content":"hi"}]}'
	[ -z "$output" ]
	[[ "$stderr" == *"<stdin>:1: a messages record, but the model has no chat template: no chat template beside $tok/tokenizer.json"* ]]
	run -2 --separate-stderr poros-tokenize --tokenizer "$tok" --pack 8 <<<'{"messages":[{"role":"user","content":"hi"}]}'
	[[ "$stderr" == *"the data has messages, but the model has no chat template"* ]]
}

@test "--pack shows the answer mask (-100) and each token's place in its document" {
	jq -c '{messages}' "$FIX/qwen2_style/expected.jsonl" | sed -n 2p >in.jsonl
	echo '{"text":"abc"}' >>in.jsonl
	chat_len=$(poros-tokenize --tokenizer "$FIX/qwen2_style" --chat <(sed -n 1p in.jsonl) | jq '.ids | length')
	run -0 poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 64 in.jsonl
	[ "${#lines[@]}" -eq 1 ]
	# the chat (with its EOS) is positions 0..chat_len, then the text starts at 0
	echo "$output" | jq -e --argjson n "$chat_len" '.pos[0:$n + 1] == [range(0; $n + 1)] and .pos[$n + 1] == 0
		and (.pos | length) == 64'
	# targets: of the chat's tokens, the answer "4" and its <|im_end|>
	# (151645) only, and not the EOS after the chat; that EOS does not
	# predict the text's first token (another document), the text's tokens
	# all are targets
	echo "$output" | jq -e --argjson n "$chat_len" '[.targets[0:$n][] | select(. >= 0)] == [19, 151645]
		and ([.targets[0:$n][] | select(. == -100)] | length) == $n - 2
		and .tokens[$n] == 151645 and .targets[$n:$n + 4] == [-100, 65, 66, 151645]'
	# --train-on all: nothing masked but the document boundary, and the padding at the end
	run -0 poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 64 --train-on all in.jsonl
	echo "$output" | jq -e --argjson n "$chat_len" '[.targets[] | select(. == -100)] == [-100] and .targets[$n] == -100'
	# --train-on assistant refuses the text record by name
	run -2 --separate-stderr poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 64 --train-on assistant in.jsonl
	[[ "$stderr" == *"in.jsonl:2: train_on \"assistant\" needs \"messages\" records, and this one is text" ]]
}

@test "a packed row that starts inside a document counts positions from the row's start" {
	jq -c '{messages}' "$FIX/qwen3/expected.jsonl" | head -1 >in.jsonl
	run -0 poros-tokenize --tokenizer "$FIX/qwen3" --pack 10 in.jsonl
	[ "${#lines[@]}" -eq 3 ]
	# 26 tokens + EOS in rows of 10 (each row's last target is the next
	# row's first token): the third row holds 6 tokens, the EOS, then padding
	echo "${lines[1]}" | jq -e '.pos == [0,1,2,3,4,5,6,7,8,9] and .tokens[0] == 198'
	echo "${lines[2]}" | jq -e '.pos == [0,1,2,3,4,5,6,0,1,2] and .tokens[6] == 151645 and .targets[6:] == [-1,-1,-1,-1]'
}

# a tiny random Qwen2 checkpoint whose vocabulary holds the tiny
# tokenizer's ids, and that tokenizer with a ChatML template
tiny_chat_model() {
	python3 "$POROS_ROOT/tests/fixtures/checkpoint/make_checkpoint.py" m --family qwen2 --vocab 320
	cp "$POROS_ROOT/tests/fixtures/tokenizer/tiny/"* m/
	cp "$FIX/qwen2_style/chat_template.jinja" m/
	for i in 0 1 2 3 4 5; do
		jq -nc --argjson i $i '{messages: [{role: "user", content: ("hello world" * ($i % 3 + 1))},
			{role: "assistant", content: ("hello" + (" world" * $i))}]}'
	done >chat.jsonl
}

@test "the loss is the mean over the answers of the whole step: accumulation does not change it" {
	tiny_chat_model
	for acc in 1 2 4; do
		poros-train --backend cpu --seq-len 32 --batch-size $((4 / acc)) --accum $acc --rank 4 --alpha 8 \
			--dropout 0 --quiet --model ./m --dataset chat.jsonl --steps 3 --out "r$acc" >"r$acc.json"
	done
	jq -e -s 'map(.tokens_supervised) | all(. > 0) and .[0] < 128' r1/events.jsonl
	diff <(jq -c '[.loss, .grad_norm, .tokens_supervised]' r1/events.jsonl) \
		<(jq -c '[.loss, .grad_norm, .tokens_supervised]' r2/events.jsonl)
	diff <(jq -c '[.loss, .grad_norm, .tokens_supervised]' r1/events.jsonl) \
		<(jq -c '[.loss, .grad_norm, .tokens_supervised]' r4/events.jsonl)
	# the supervised count is the packed rows' own: the targets that are ids
	want=$(poros-tokenize --tokenizer m --pack 32 chat.jsonl | head -4 | jq -s '[.[].targets[] | select(. >= 0)] | length')
	[ "$(head -1 r1/events.jsonl | jq .tokens_supervised)" -eq "$want" ]
}

@test "a step without an answer reports loss null and 0 supervised tokens, never NaN" {
	tiny_chat_model
	echo '{"messages":[{"role":"user","content":"hello world hello"}]}' >q.jsonl
	# a long question without an answer fills whole rows: some steps have no target
	jq -nc '{messages: [{role: "user", content: ("hello world " * 40)}]}' >>q.jsonl
	head -1 chat.jsonl >>q.jsonl
	run -0 --separate-stderr poros-train --backend cpu --seq-len 32 --batch-size 1 --rank 4 --alpha 8 --quiet \
		--model ./m --dataset q.jsonl --steps 4 --out rq
	echo "$output" | jq -e '.status == "ok" and .loss_first == null'
	jq -e -s 'length == 4 and any(.[]; .loss == null and .tokens_supervised == 0 and .grad_norm == 0)' rq/events.jsonl
	jq -e -s 'any(.[]; .loss > 0 and .tokens_supervised > 0)' rq/events.jsonl
	! grep -qi nan rq/events.jsonl
	# the same prompts under --train-on all are all targets
	poros-train --backend cpu --seq-len 32 --batch-size 2 --rank 4 --alpha 8 --quiet --model ./m --dataset q.jsonl \
		--steps 1 --train-on all --out ra >ra.json
	jq -e '.loss > 0 and .tokens_supervised > 0' ra/events.jsonl
}

@test "a dataset or eval set with no answer at all is refused, naming the file, its records and the roles seen" {
	tiny_chat_model
	echo '{"messages":[{"role":"user","content":"hello world hello"}]}' >q.jsonl
	echo '{"messages":[{"role":"system","content":"hello"},{"role":"user","content":"world"},{"role":"bot","content":"hello"}]}' >>q.jsonl
	local train=(poros-train --backend cpu --seq-len 32 --batch-size 2 --rank 4 --alpha 8 --quiet --model ./m --steps 1)
	run -2 --separate-stderr "${train[@]}" --dataset q.jsonl --out r
	[ "$stderr" = 'poros-train: dataset "q.jsonl": 2 records, no supervised token: the targets are the assistant turns, and the chats'"'"' roles are "user", "system", "bot"' ]
	[ -z "$output" ] && [ ! -e r ]
	run -2 --separate-stderr "${train[@]}" --dataset q.jsonl --train-on assistant --out r
	[[ "$stderr" == *'2 records, no supervised token: the targets are the assistant turns (train_on "assistant"), and the chats'"'"' roles are "user", "system", "bot"' ]]
	# answers the template leaves out are no answers either
	printf '%s' '{% for m in messages %}{% if m.role != "assistant" %}<|im_start|>{{ m.content }}<|im_end|>{% endif %}{% endfor %}' \
		>m/chat_template.jinja
	run -2 --separate-stderr "${train[@]}" --dataset chat.jsonl --out r
	[[ "$stderr" == *'dataset "chat.jsonl": 6 records, no supervised token: the targets are the assistant turns, and the chats'"'"' roles are "user", "assistant" (the chat template renders none of the assistant turns)' ]]
	cp "$FIX/qwen2_style/chat_template.jinja" m/
	# an evaluation set is refused the same way, before any step
	run -2 --separate-stderr "${train[@]}" --dataset chat.jsonl --eval-dataset q.jsonl --out r
	[[ "$stderr" == 'poros-train: --eval-dataset: dataset "q.jsonl": 2 records, no supervised token: '* ]]
	[ ! -e r ]
	# under --train-on all every token is a target
	"${train[@]}" --dataset q.jsonl --train-on all --eval-dataset q.jsonl --out r | jq -e '.status == "ok" and .eval_tokens > 0'
}

@test "a real checkpoint trains on random tokens only when --dataset names them" {
	tiny_chat_model
	run -2 --separate-stderr poros-train --backend cpu --model ./m --steps 1 --out r
	[ "$stderr" = 'poros-train: --model ./m: a checkpoint with weights, and no --dataset: give the data to train on, or --dataset synthetic (or synthetic:repeat) for random tokens' ]
	[ ! -e r ]
	poros-train --backend cpu --model ./m --dataset synthetic --steps 1 --quiet --out r | jq -e '.status == "ok" and .weights == "real"'
	# a model without weights (configs/models) is synthetic all through, as before
	poros-train --backend cpu --model poros/tiny-qwen2 --steps 1 --quiet --out s | jq -e '.weights == "synthetic"'
}

@test "the trainer refuses messages for a model without a template, and a template it cannot run" {
	tiny_chat_model
	rm m/chat_template.jinja
	run -2 --separate-stderr poros-train --backend cpu --model ./m --dataset chat.jsonl --steps 1 --out r
	[[ "$stderr" == *"chat.jsonl:1: the data has messages, but the model has no chat template"* ]]
	printf '{{ messages | wordcount }}' >m/chat_template.jinja
	run -2 --separate-stderr poros-train --backend cpu --model ./m --dataset chat.jsonl --steps 1 --out r
	[[ "$stderr" == *"chat.jsonl:1: ./m/chat_template.jinja: chat template 1:15: unsupported filter \"wordcount\"" ]]
	[ ! -e r/events.jsonl ]
}

@test "the trainer refuses a template that asks for today's date, and trains when the records give it one" {
	tiny_chat_model
	# a Llama-3.2-style date header: strftime_now unless date_string is given
	printf '%s' "{% if date_string is not defined %}{% set date_string = strftime_now('%d %b %Y') %}{% endif %}" \
		"{{ date_string }}{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}" >m/chat_template.jinja
	run -2 --separate-stderr poros-train --backend cpu --seq-len 32 --batch-size 2 --rank 4 --alpha 8 --quiet \
		--model ./m --dataset chat.jsonl --steps 1 --out r
	[[ "$stderr" == *"chat.jsonl:1: ./m/chat_template.jinja: chat template 1:69: strftime_now: the template asks for today's date"*"chat_template_kwargs"* ]]
	[ ! -e r/events.jsonl ]
	jq -c '. + {chat_template_kwargs: {date_string: "hello"}}' chat.jsonl >dated.jsonl
	run -0 --separate-stderr poros-train --backend cpu --seq-len 32 --batch-size 2 --rank 4 --alpha 8 --quiet \
		--model ./m --dataset dated.jsonl --steps 1 --out r
	jq -e '.tokens_supervised > 0' r/events.jsonl
	# the date is in the rows the trainer packs: the first row starts with "hello"'s ids
	want=$(poros-tokenize --tokenizer m <<<'{"text":"hello"}' | jq -c .ids)
	poros-tokenize --tokenizer m --pack 32 dated.jsonl | head -1 | jq -e --argjson w "$want" '.tokens[0:($w | length)] == $w'
}

@test "poros-train --chat-date gives such a template its day: the same rows as poros-tokenize --chat-date, and a resume keeps it" {
	tiny_chat_model
	printf '%s' "{% if date_string is not defined %}{% set date_string = strftime_now('%d %b %Y') %}{% endif %}" \
		"{{ date_string }}{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}" >m/chat_template.jinja
	train=(poros-train --backend cpu --seq-len 32 --batch-size 2 --rank 4 --alpha 8 --quiet --model ./m --dataset chat.jsonl)
	run -0 --separate-stderr "${train[@]}" --steps 2 --chat-date 2024-07-26 --save-every 1 --out r
	jq -e '.tokens_supervised > 0' r/events.jsonl
	# the rows it trains on begin with the day the template wrote
	want=$(poros-tokenize --tokenizer m <<<'{"text":"26 Jul 2024"}' | jq -c .ids)
	poros-tokenize --tokenizer m --chat-date 2024-07-26 --pack 32 chat.jsonl | head -1 |
		jq -e --argjson w "$want" '.tokens[0:($w | length)] == $w'
	# another day, other data: other losses
	run -0 --separate-stderr "${train[@]}" --steps 2 --chat-date 2025-01-02 --out r2
	[ "$(jq -s -c 'map(.loss)' r/events.jsonl)" != "$(jq -s -c 'map(.loss)' r2/events.jsonl)" ]
	# the day is part of the configuration a resume keeps: another is refused, none given takes the checkpoint's
	run -2 --separate-stderr "${train[@]}" --steps 2 --chat-date 2025-01-02 --resume r/checkpoint-step1 --out r3
	[[ "$stderr" == *'--chat-date (chat_date: checkpoint "2024-07-26", given "2025-01-02")'* ]]
	run -0 --separate-stderr "${train[@]}" --steps 2 --resume r/checkpoint-step1 --out r3
	jq -e '.config.chat_date == "2024-07-26"' <<<"$output"
	diff <(jq -c '[.loss, .grad_norm]' r/events.jsonl) <(jq -c '[.loss, .grad_norm]' r3/events.jsonl)
	# not a calendar day; a token-id dataset; the cell field's length
	run -2 --separate-stderr "${train[@]}" --steps 1 --chat-date 2024-02-30 --out r4
	[[ "$stderr" == *'chat date "2024-02-30": '* ]]
	[ ! -e r4/events.jsonl ]
	run -2 --separate-stderr poros-train --backend cpu --model poros/tiny-qwen2 --dataset synthetic --chat-date 2024-07-26 \
		--steps 1 --out r5
	[[ "$stderr" == *'--chat-date: dataset synthetic is token ids already'* ]]
	run -2 --separate-stderr poros-train --model poros/tiny-qwen2 --chat-date 2024-07-26T00:00
	[[ "$stderr" == *'--chat-date: '*'too long'* ]]
}

@test "--train-on assistant refuses data that has no chats; a bad value is a usage error" {
	run -2 --separate-stderr poros-train --backend cpu --model poros/tiny-qwen2 --dataset synthetic --train-on assistant \
		--steps 1 --out r
	[[ "$stderr" == *"dataset synthetic: train_on \"assistant\" needs chat (messages) records"* ]]
	run -2 --separate-stderr poros-train --model poros/tiny-qwen2 --train-on answers
	[[ "$stderr" == *"--train-on: unknown value \"answers\" (expected one of: assistant, all)"* ]]
}

@test "training.train_on goes from the spec into the cell and the trainer" {
	sed 's/^training:/training:\n  train_on: assistant/' "$POROS_ROOT/configs/bench/tiny.yaml" >spec.yaml
	grep -q 'train_on: assistant' spec.yaml
	poros-expand spec.yaml -o bench --jsonl | grep '"cell_id":"resident_tiny_qwen2_bf16"' >cell.json
	jq -e '.training.train_on == "assistant"' cell.json
	# the cell's training is synthetic: the trainer refuses it under assistant
	run -2 --separate-stderr poros-train --cell cell.json --backend cpu --steps 1 --out r
	[[ "$stderr" == *"train_on \"assistant\" needs chat (messages) records"* ]]
	# without the key the cells carry none, as before
	poros-expand "$POROS_ROOT/configs/bench/tiny.yaml" -o bench2 --jsonl | head -1 | jq -e '.training | has("train_on") | not'
	jq '.training.train_on = "some"' cell.json >bad.json
	run -2 --separate-stderr poros-train --cell bad.json
	[[ "$stderr" == *"training.train_on: unknown train_on \"some\" (expected one of: assistant, all)"* ]]
}

# The record shapes beside messages (man/poros-dataset.5): TRL's prompt and
# completion, standard and conversational, and ShareGPT's conversations.

@test "TRL's prompt/completion: the completion and the EOS after it are the targets, the tokens prompt + completion's" {
	echo '{"prompt":"ab","completion":"cd"}' >pc.jsonl
	echo '{"text":"abcd"}' >t.jsonl
	run -0 poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 8 pc.jsonl
	# a b c d EOS: "b" is the prompt's, so not a target; c, d and the EOS TRL appends are
	[ "$output" = '{"tokens":[64,65,66,67,151645,151645,151645,151645],"targets":[-100,66,67,151645,-1,-1,-1,-1],"pos":[0,1,2,3,4,0,1,2]}' ]
	# the same tokens as the text prompt + completion, which is all targets
	diff <(jq -c .tokens <<<"$output") <(poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 8 t.jsonl | jq -c .tokens)
	# --train-on all: every token, as the text
	diff <(poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 8 --train-on all pc.jsonl) \
		<(poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 8 t.jsonl)
	# --train-on assistant wants chats
	run -2 --separate-stderr poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 8 --train-on assistant pc.jsonl
	[ "$stderr" = 'poros-tokenize: pc.jsonl:1: train_on "assistant" needs chats, and this prompt and completion are text' ]
	# one a string, the other a list: refused
	echo '{"prompt":"ab","completion":[{"role":"assistant","content":"cd"}]}' >mixed.jsonl
	run -2 --separate-stderr poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 8 mixed.jsonl
	[ "$stderr" = 'poros-tokenize: mixed.jsonl:1: "prompt" and "completion" are both strings or both lists of messages' ]
}

@test "TRL's conversational prompt/completion: one chat, the completion's answers are targets, the prompt's are not" {
	jq -nc '{prompt: [{role: "user", content: "1?"}, {role: "assistant", content: "1"}, {role: "user", content: "2+2?"}],
		completion: [{role: "assistant", content: "4"}]}' >cpc.jsonl
	jq -c '{messages: (.prompt + .completion)}' cpc.jsonl >m.jsonl
	run -0 poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 64 cpc.jsonl
	# the rendered chat is the messages record's, token for token
	diff <(jq -c .tokens <<<"$output") <(poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 64 m.jsonl | jq -c .tokens)
	# "4" (19) and its <|im_end|>; the prompt's answer "1" (16) is not a target
	jq -e '[.targets[] | select(. >= 0)] == [19, 151645]' <<<"$output"
	poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 64 m.jsonl | jq -e '[.targets[] | select(. >= 0)] == [16, 151645, 19, 151645]'
	# --train-on assistant: every answer, as the messages record
	diff <(poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 64 --train-on assistant cpc.jsonl) \
		<(poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 64 m.jsonl)
	diff <(poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 64 --train-on all cpc.jsonl) \
		<(poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 64 --train-on all m.jsonl)
}

@test "ShareGPT conversations are the messages Axolotl maps them to: human, gpt, system (user, assistant as they are)" {
	jq -nc '{conversations: [{from: "system", value: "Be brief."}, {from: "human", value: "2+2?"}, {from: "gpt", value: "4"},
		{from: "user", value: "and 3+3?"}, {from: "assistant", value: "6"}]}' >sg.jsonl
	jq -nc '{messages: [{role: "system", content: "Be brief."}, {role: "user", content: "2+2?"}, {role: "assistant", content: "4"},
		{role: "user", content: "and 3+3?"}, {role: "assistant", content: "6"}]}' >m.jsonl
	diff <(poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 96 sg.jsonl) \
		<(poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 96 m.jsonl)
	poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 96 sg.jsonl | jq -e '[.targets[] | select(. >= 0)] | length == 4'
	# an unknown "from" is refused by place and value, and so is a key a turn does not have
	printf '%s\n' '{"text":"fine"}' '{"conversations":[{"from":"human","value":"hi"},{"from":"bot","value":"x"}]}' >bad.jsonl
	run -2 --separate-stderr poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 8 bad.jsonl
	[ "$stderr" = 'poros-tokenize: bad.jsonl:2: conversations[1]: unknown "from" "bot" (expected one of: human, gpt, system, user, assistant)' ]
	echo '{"conversations":[{"from":"gpt","value":"x","weight":0}]}' >weight.jsonl
	run -2 --separate-stderr poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 8 weight.jsonl
	[ "$stderr" = 'poros-tokenize: weight.jsonl:1: conversations[0]: unknown key "weight" (a turn has "from" and "value")' ]
	echo '{"conversations":[{"from":"gpt"}]}' >novalue.jsonl
	run -2 --separate-stderr poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 8 novalue.jsonl
	[ "$stderr" = 'poros-tokenize: novalue.jsonl:1: conversations[0]: not an object with "from" and "value" strings' ]
}

@test "a record of another shape is refused naming its keys and the shapes taken, in the trainer too" {
	local want='a record of keys "question", "answer" is none of the shapes taken: "text" (a string), "messages", "input_ids", "prompt" and "completion" (strings, or lists of messages), "conversations" (ShareGPT)'
	printf '%s\n' '{"text":"fine"}' '{"question":"a","answer":"b"}' >qa.jsonl
	run -2 --separate-stderr poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 8 qa.jsonl
	[ "$stderr" = "poros-tokenize: qa.jsonl:2: $want" ]
	echo '{"prompt":"only a prompt"}' >p.jsonl
	run -2 --separate-stderr poros-tokenize --tokenizer "$FIX/qwen2_style" --pack 8 p.jsonl
	[[ "$stderr" == 'poros-tokenize: p.jsonl:1: a record of keys "prompt" is none of the shapes taken: '* ]]
	tiny_chat_model
	run -2 --separate-stderr poros-train --backend cpu --model ./m --dataset qa.jsonl --seq-len 16 --steps 1 --out r
	[ "$stderr" = "poros-train: dataset: qa.jsonl:2: $want" ] && [ -z "$output" ]
}

@test "the trainer trains on prompt/completion and ShareGPT data, its loss over the completions' targets" {
	tiny_chat_model
	for i in 0 1 2 3 4 5; do
		jq -nc --argjson i $i '{prompt: ("hello world" * ($i % 3 + 1)), completion: (" hello" + (" world" * $i))}'
	done >pc.jsonl
	jq -c '{conversations: [{from: "human", value: .messages[0].content}, {from: "gpt", value: .messages[1].content}]}' \
		chat.jsonl >sg.jsonl
	poros-train --backend cpu --seq-len 32 --batch-size 2 --rank 4 --alpha 8 --quiet --model ./m --dataset pc.jsonl \
		--steps 2 --out pc >pc.json
	want=$(poros-tokenize --tokenizer m --pack 32 pc.jsonl | head -2 | jq -s '[.[].targets[] | select(. >= 0)] | length')
	[ "$(head -1 pc/events.jsonl | jq .tokens_supervised)" -eq "$want" ]
	all=$(poros-tokenize --tokenizer m --pack 32 --train-on all pc.jsonl | head -2 | jq -s '[.[].targets[] | select(. >= 0)] | length')
	[ "$want" -lt "$all" ]
	# ShareGPT trains as the messages it maps to, bit for bit
	poros-train --backend cpu --seq-len 32 --batch-size 2 --rank 4 --alpha 8 --quiet --model ./m --dataset sg.jsonl \
		--steps 2 --out sg >/dev/null
	poros-train --backend cpu --seq-len 32 --batch-size 2 --rank 4 --alpha 8 --quiet --model ./m --dataset chat.jsonl \
		--steps 2 --out msg >/dev/null
	cmp sg/adapter/adapter_model.safetensors msg/adapter/adapter_model.safetensors
}
