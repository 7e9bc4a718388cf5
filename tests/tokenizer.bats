#!/usr/bin/env bats
# poros-tokenize and the tokenizer library: see man/poros-tokenize.1.
# tiny/ and tiny_llama3/ are hand-made (tests/fixtures/tokenizer/make_tiny.py;
# ids listed in tests/unit/test_tokenizer.c); qwen_like/ and llama3_like/ hold
# ids computed by HF `tokenizers` (tests/tokenizer/make_expected.py).

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	FIX="$POROS_ROOT/tests/fixtures/tokenizer"
	TINY="$FIX/tiny"
}

# The HF-made fixture DIR, or skip saying how to make it.
need_hf_fixture() {
	[ -f "$FIX/$1/tokenizer.json" ] && [ -f "$FIX/$1/expected.jsonl" ] ||
		skip "no $1 fixture: run tests/tokenizer/make_expected.py OUTDIR where HF tokenizers is installed, then copy OUTDIR/$1 to tests/fixtures/tokenizer/"
}

@test "poros-tokenize --version and --help" {
	assert_version poros-tokenize
	run -0 --separate-stderr poros-tokenize --help
	assert_line --index 0 --partial "usage: poros-tokenize {--tokenizer PATH | --model ID}"
	[ -z "$stderr" ]
}

@test "text lines become one ids line each, on stdout only" {
	run -0 --separate-stderr poros-tokenize --tokenizer "$TINY" <<-'EOF'
		hello world
		lll
		<|im_start|>user
	EOF
	assert_equal "${lines[0]}" '{"ids":[259,263,100]}'
	assert_equal "${lines[1]}" '{"ids":[257,108]}'
	assert_equal "${lines[2]}" '{"ids":[301,117,115,101,114]}'
	assert_equal "${#lines[@]}" 3
	[ -z "$stderr" ]
}

@test "JSONL records are encoded from text or from chat messages" {
	printf '%s\n' '{"text":"hello\nworld"}' '{"messages":[{"role":"user","content":"hi"}]}' > in.jsonl
	# messages go through the model's chat template (tests/chat.bats has the real ones)
	mkdir tiny && cp "$TINY"/* tiny/
	printf '{%% for m in messages %%}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%% endfor %%}' \
		>tiny/chat_template.jinja
	run -0 --separate-stderr poros-tokenize --tokenizer tiny/tokenizer.json in.jsonl
	assert_equal "${lines[0]}" '{"ids":[259,10,119,261,108,100]}'
	assert_equal "${lines[1]}" '{"ids":[301,117,115,101,114,10,104,105,302,10]}'
}

@test "--text encodes a line that starts with a brace as text" {
	run -0 --separate-stderr poros-tokenize --text --tokenizer "$TINY" <<< '{"a"'
	assert_output '{"ids":[123,34,97,34]}'
}

@test "--add-special puts the post-processor's BOS in front (Llama-3)" {
	run -0 poros-tokenize --add-special --tokenizer "$FIX/tiny_llama3" <<< 'hello world'
	assert_output '{"ids":[310,259,266]}'
	run -0 poros-tokenize --tokenizer "$FIX/tiny_llama3" <<< 'hello world'
	assert_output '{"ids":[259,266]}'
}

@test "--decode turns ids back into text, --skip-special drops special tokens" {
	printf '%s\n' '{"ids":[259,263,100]}' '[301,104,105,302]' '{"ids":[226,130,65]}' > ids.jsonl
	run -0 --separate-stderr poros-tokenize --decode --tokenizer "$TINY" ids.jsonl
	assert_equal "${lines[0]}" '{"text":"hello world"}'
	assert_equal "${lines[1]}" '{"text":"<|im_start|>hi<|im_end|>"}'
	assert_equal "${lines[2]}" '{"text":"�A"}'
	run -0 poros-tokenize --decode --skip-special --tokenizer "$TINY" <<< '[301,104,105,302]'
	assert_output '{"text":"hi"}'
}

@test "encoding then decoding gives the text back" {
	printf '%s\n' 'Café, 你好, 😀 and <|endoftext|> tabs	and  spaces' 'e'"$(printf '\xcc\x81')"' is NFC-composed' > in.txt
	run -0 sh -c "poros-tokenize --text --tokenizer '$TINY' in.txt | poros-tokenize --decode --tokenizer '$TINY' | jq -r .text"
	assert_line --index 0 'Café, 你好, 😀 and <|endoftext|> tabs	and  spaces'
	assert_line --index 1 'é is NFC-composed'
}

@test "--pack shows the trainer's rows: documents joined by EOS, the last row padded and masked" {
	printf 'hello world\nlll\n' > docs.txt
	run -0 --separate-stderr poros-tokenize --pack 4 --tokenizer "$TINY" docs.txt
	# no target across documents: the EOS does not predict the next one's first token
	assert_equal "${lines[0]}" '{"tokens":[259,263,100,300],"targets":[263,100,300,-100],"pos":[0,1,2,3]}'
	assert_equal "${lines[1]}" '{"tokens":[257,108,300,300],"targets":[108,300,-1,-1],"pos":[0,1,2,0]}'
	assert_equal "${#lines[@]}" 2
	[ -z "$stderr" ]
}

@test "--pack encodes documents as the trainer does: Llama-3's BOS first" {
	run -0 poros-tokenize --pack 8 --tokenizer "$FIX/tiny_llama3" <<< 'hello world'
	assert_output '{"tokens":[310,259,266,311,311,311,311,311],"targets":[259,266,311,-1,-1,-1,-1,-1],"pos":[0,1,2,3,0,1,2,3]}'
}

@test "--pack --seed shuffles documents the same way every time" {
	for i in $(seq 1 20); do printf '{"input_ids":[%d]}\n' "$i"; done > docs.jsonl
	run -0 poros-tokenize --pack 40 --tokenizer "$TINY" docs.jsonl
	assert_output '{"tokens":[1,300,2,300,3,300,4,300,5,300,6,300,7,300,8,300,9,300,10,300,11,300,12,300,13,300,14,300,15,300,16,300,17,300,18,300,19,300,20,300],"targets":[300,-100,300,-100,300,-100,300,-100,300,-100,300,-100,300,-100,300,-100,300,-100,300,-100,300,-100,300,-100,300,-100,300,-100,300,-100,300,-100,300,-100,300,-100,300,-100,300,-1],"pos":[0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1,0,1]}'
	in_order="$output"
	run -0 poros-tokenize --pack 40 --seed 5 --tokenizer "$TINY" docs.jsonl
	first="$output"
	run -0 poros-tokenize --pack 40 --seed 5 --tokenizer "$TINY" docs.jsonl
	assert_equal "$output" "$first"
	[ "$first" != "$in_order" ]
	# still every document once
	run -0 sh -c "printf '%s\n' '$first' | jq -c '[.tokens[] | select(. != 300)] | sort'"
	assert_output "[$(seq -s, 1 20)]"
}

@test "--eos names the separator by token; without one known, --pack says to give it" {
	mkdir bare && cp "$TINY/tokenizer.json" bare/
	run -2 --separate-stderr poros-tokenize --pack 4 --tokenizer bare <<< 'hi'
	assert_equal "$stderr" "poros-tokenize: bare/tokenizer.json: no eos_token in a tokenizer_config.json beside it: give --eos"
	[ -z "$output" ]
	run -0 poros-tokenize --pack 4 --eos '<|im_end|>' --tokenizer bare <<< 'hi'
	assert_output '{"tokens":[104,105,302,302],"targets":[105,302,-1,-1],"pos":[0,1,2,0]}'
}

@test "--model finds the tokenizer in the local HF cache" {
	snap="$HF_HOME/hub/models--Org--Tiny/snapshots/0a1b2c"
	mkdir -p "$snap" && cp "$TINY"/tokenizer*.json "$snap/"
	run -0 poros-tokenize --model Org/Tiny <<< 'hello'
	assert_output '{"ids":[259]}'
	run -2 --separate-stderr poros-tokenize --model Org/Missing <<< 'hello'
	assert_equal "$stderr" "poros-tokenize: no tokenizer for \"Org/Missing\": not a local path, and not in the HF cache ($HF_HOME/hub/models--Org--Missing/snapshots: No such file or directory)"
}

@test "bad usage exits 2 with one line saying what is wrong" {
	run -2 --separate-stderr poros-tokenize
	assert_equal "$stderr" "poros-tokenize: give one of --tokenizer PATH or --model ID"
	run -2 --separate-stderr poros-tokenize --tokenizer "$TINY" --decode --pack 4
	assert_equal "$stderr" "poros-tokenize: --decode, --chat and --pack do not go together"
	run -2 --separate-stderr poros-tokenize --tokenizer "$TINY" --pack 0
	assert_equal "$stderr" "poros-tokenize: --pack: too small: 0"
	run -2 --separate-stderr poros-tokenize --tokenizer "$TINY" --skip-special
	assert_equal "$stderr" "poros-tokenize: --skip-special only applies to --decode"
	run -2 --separate-stderr poros-tokenize --tokenizer "$TINY" --bogus
	[[ "$stderr" == *"unrecognized option '--bogus'"*"usage: poros-tokenize"* ]]
	[ -z "$output" ]
}

@test "bad input exits 2 naming the file and line" {
	printf 'fine\n{"text": oops}\n' > bad.jsonl
	run -2 --separate-stderr poros-tokenize --tokenizer "$TINY" bad.jsonl
	assert_equal "$stderr" "poros-tokenize: bad.jsonl:2: not valid JSON (use --text for plain text lines that start with '{')"
	assert_output '{"ids":[102,105,110,101]}'
	run -2 --separate-stderr poros-tokenize --tokenizer "$TINY" < <(printf 'ab\377\n')
	assert_equal "$stderr" "poros-tokenize: <stdin>:1: invalid UTF-8 at byte 2"
	run -2 --separate-stderr poros-tokenize --decode --tokenizer "$TINY" <<< '[104,280]'
	assert_equal "$stderr" "poros-tokenize: <stdin>:1: id 280 at position 1 is not in the vocabulary (size 305)"
	run -2 --separate-stderr poros-tokenize --tokenizer "$TINY" missing.txt
	assert_equal "$stderr" "poros-tokenize: missing.txt: No such file or directory"
	run -2 --separate-stderr poros-tokenize --tokenizer "$TINY" <<< '{"txt":"x"}'
	assert_equal "$stderr" "poros-tokenize: <stdin>:1: no \"text\" (string) or \"messages\" field"
}

@test "an unsupported or missing tokenizer is refused by name, not approximated" {
	jq '.model.type = "Unigram"' "$TINY/tokenizer.json" > uni.json
	run -2 --separate-stderr poros-tokenize --tokenizer uni.json <<< 'x'
	assert_equal "$stderr" 'poros-tokenize: uni.json: model "Unigram" is not supported (supported: BPE)'
	jq '.normalizer = {"type": "Lowercase"}' "$TINY/tokenizer.json" > lower.json
	run -2 --separate-stderr poros-tokenize --tokenizer lower.json <<< 'x'
	assert_equal "$stderr" 'poros-tokenize: lower.json: normalizer "Lowercase" is not supported (supported: NFC, NFD, NFKC, NFKD, Sequence)'
	run -2 --separate-stderr poros-tokenize --tokenizer nowhere <<< 'x'
	assert_equal "$stderr" "poros-tokenize: nowhere: No such file or directory"
}

# split_string/ is tiny/'s bytes with the merges "e -" 256, "l -" 257,
# "- f" 258, "- c" 259, "- -" 260, so its ids show where a piece ends.  The
# pieces of "the-final--countdown" split on the String "-" are HF's own
# example of each behavior (SplitDelimiterBehavior's documentation).
@test "a Split on a String pattern splits at the literal string as HF does, for every behavior and invert" {
	local fix="$FIX/split_string" the='116,104,101' final='102,105,110,97,108' countdown='99,111,117,110,116,100,111,119,110'
	split_ids() { # BEHAVIOR INVERT TEXT
		jq --arg b "$1" --argjson inv "$2" '.pre_tokenizer.pretokenizers[0] |= (.behavior = $b | .invert = $inv)' \
			"$fix/tokenizer.json" > split.json
		poros-tokenize --tokenizer split.json <<< "$3" | jq -c .ids
	}
	# isolated: the - final - - countdown
	run -0 split_ids Isolated false the-final--countdown
	assert_output "[$the,45,$final,45,45,$countdown]"
	# removed: the final countdown; inverted, the three "-" alone
	run -0 split_ids Removed false the-final--countdown
	assert_output "[$the,$final,$countdown]"
	run -0 split_ids Removed true the-final--countdown
	assert_output "[45,45,45]"
	# merged_with_previous: the- final- - countdown
	run -0 split_ids MergedWithPrevious false the-final--countdown
	assert_output "[116,104,256,102,105,110,97,257,45,$countdown]"
	# merged_with_next: the -final - -countdown
	run -0 split_ids MergedWithNext false the-final--countdown
	assert_output "[$the,258,105,110,97,108,45,259,111,117,110,116,100,111,119,110]"
	# inverted, the words are the matches: the- final- - countdown, and the -final - -countdown
	run -0 split_ids MergedWithNext true the-final--countdown
	assert_output "[116,104,256,102,105,110,97,257,45,$countdown]"
	run -0 split_ids MergedWithPrevious true the-final--countdown
	assert_output "[$the,258,105,110,97,108,45,259,111,117,110,116,100,111,119,110]"
	# contiguous: the - final -- countdown
	run -0 split_ids Contiguous false the-final--countdown
	assert_output "[$the,45,$final,260,$countdown]"
	# the fixture as it is (Isolated): adjacent matches stay apart, never "--" (260)
	run -0 poros-tokenize --tokenizer "$fix" <<< 'x--y---z'
	assert_output '{"ids":[120,45,45,121,45,45,45,122]}'
	# a String is literal: "." matches a dot only (as a regex it would match every character)
	jq '.pre_tokenizer.pretokenizers[0] |= (.pattern = {"String": "."} | .behavior = "Removed")' \
		"$fix/tokenizer.json" > dot.json
	run -0 poros-tokenize --tokenizer dot.json <<< 'x.y'
	assert_output '{"ids":[120,121]}'
	# a String of two characters matches leftmost, without overlap: a -- - b
	jq '.pre_tokenizer.pretokenizers[0].pattern = {"String": "--"}' "$fix/tokenizer.json" > dash2.json
	run -0 poros-tokenize --tokenizer dash2.json <<< 'a---b'
	assert_output '{"ids":[97,260,45,98]}'
	jq '.pre_tokenizer.pretokenizers[0].pattern = {"String": ""}' "$fix/tokenizer.json" > empty.json
	run -2 --separate-stderr poros-tokenize --tokenizer empty.json <<< 'x'
	assert_equal "$stderr" 'poros-tokenize: empty.json: pre_tokenizer Split: an empty "String" pattern is not supported'
}

@test "a FIFO, a directory or a dangling link as tokenizer.json or a file beside it is refused by name, never waited on" {
	mkfifo fifo
	run -2 --separate-stderr timeout 5 poros-tokenize --tokenizer fifo <<< 'x'
	assert_equal "$stderr" "poros-tokenize: fifo: not a regular file"
	mkdir t1
	mkfifo t1/tokenizer.json
	run -2 --separate-stderr timeout 5 poros-tokenize --tokenizer t1 <<< 'x'
	assert_equal "$stderr" "poros-tokenize: t1/tokenizer.json: not a regular file"
	for f in tokenizer_config.json chat_template.jinja; do
		rm -rf t2 && mkdir t2 && cp "$TINY/tokenizer.json" t2/
		mkfifo "t2/$f"
		run -2 --separate-stderr timeout 5 poros-tokenize --tokenizer t2 <<< 'x'
		assert_equal "$stderr" "poros-tokenize: t2/$f: not a regular file"
		rm "t2/$f" && mkdir "t2/$f"
		run -2 --separate-stderr timeout 5 poros-tokenize --tokenizer t2/tokenizer.json <<< 'x'
		assert_equal "$stderr" "poros-tokenize: t2/$f: not a regular file"
		rmdir "t2/$f" && ln -s ../blobs/gone "t2/$f"
		run -2 --separate-stderr timeout 5 poros-tokenize --tokenizer t2 <<< 'x'
		assert_equal "$stderr" "poros-tokenize: t2/$f: a dangling symbolic link (an interrupted download?)"
	done
	# regular files (and links to them) load as before
	rm t2/chat_template.jinja
	ln -s "$TINY/tokenizer_config.json" t2/tokenizer_config.json
	run -0 --separate-stderr timeout 5 poros-tokenize --tokenizer t2 <<< 'hello world'
	assert_output '{"ids":[259,263,100]}'
}

@test "ids match HF tokenizers on the Qwen2-style fixture (multilingual, emoji, digits, white space, specials)" {
	need_hf_fixture qwen_like
	d="$FIX/qwen_like"
	jq -c '{text}' "$d/expected.jsonl" > in.jsonl
	run -0 --separate-stderr poros-tokenize --tokenizer "$d" in.jsonl
	assert_output "$(jq -c '{ids}' "$d/expected.jsonl")"
	run -0 poros-tokenize --add-special --tokenizer "$d" in.jsonl
	assert_output "$(jq -c '{ids: .ids_special}' "$d/expected.jsonl")"
}

@test "decoding matches HF tokenizers on the Qwen2-style fixture" {
	need_hf_fixture qwen_like
	d="$FIX/qwen_like"
	jq -c '{ids}' "$d/expected.jsonl" > ids.jsonl
	run -0 poros-tokenize --decode --tokenizer "$d" ids.jsonl
	assert_output "$(jq -c '{text: .decoded}' "$d/expected.jsonl")"
	run -0 poros-tokenize --decode --skip-special --tokenizer "$d" ids.jsonl
	assert_output "$(jq -c '{text: .decoded_skip}' "$d/expected.jsonl")"
}

@test "ids match HF tokenizers on the Llama-3-style fixture (no NFC, 3-digit groups, ignore_merges, BOS)" {
	need_hf_fixture llama3_like
	d="$FIX/llama3_like"
	jq -c '{text}' "$d/expected.jsonl" > in.jsonl
	run -0 poros-tokenize --tokenizer "$d" in.jsonl
	assert_output "$(jq -c '{ids}' "$d/expected.jsonl")"
	run -0 poros-tokenize --add-special --tokenizer "$d" in.jsonl
	assert_output "$(jq -c '{ids: .ids_special}' "$d/expected.jsonl")"
	jq -c '{ids}' "$d/expected.jsonl" > ids.jsonl
	run -0 poros-tokenize --decode --tokenizer "$d" ids.jsonl
	assert_output "$(jq -c '{text: .decoded}' "$d/expected.jsonl")"
}

@test "encoding runs at 1 MB/s or more (--stats)" {
	tok="$FIX/qwen_like"
	[ -f "$tok/tokenizer.json" ] || tok="$TINY"
	for i in $(seq 1 400); do
		printf 'Line %d: the quick brown fox jumps over the lazy dog; café déjà vu, 你好世界 😀 x=%d.\n' "$i" "$((i * 7919))"
	done > base.txt
	for i in $(seq 1 40); do cat base.txt; done > big.txt
	run -0 --separate-stderr poros-tokenize --stats --text --tokenizer "$tok" big.txt
	assert_equal "${#lines[@]}" 16000
	[[ "$stderr" =~ ([0-9.]+)\ MB/s ]]
	mbs="${BASH_REMATCH[1]}"
	echo "throughput: $mbs MB/s" >&3
	awk -v m="$mbs" 'BEGIN { exit !(m >= 1.0) }'
}
