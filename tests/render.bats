#!/usr/bin/env bats
# poros-render: results (and parity) JSONL -> report.html / report.md.

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
	. "$POROS_ROOT/tests/fixtures/merge/artifact.bash"
	XSS='<script>alert(1)</script>'
	XSS_HTML='&lt;script&gt;alert(1)&lt;&#47;script&gt;'
}

# Five cells of one model: three measured, an oom (whose error has a URL,
# markup and a pipe) and a skipped one; the model's name is an attack.
make_results() {
	local name='.cell.model.display_name = "<script>alert(1)</script>" | .cell.hardware.vram_gb = 24'
	{
		art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z "$name"' | .metrics.vram_peak_mb = 20000
			| .metrics.s_per_step = 1.52 | .metrics.s_per_step_min = 1.4 | .metrics.s_per_step_max = 1.9
			| .metrics.tokens_per_s = 2694.7'
		art resident tiny_qwen2 nf4 ok 2026-11-29T10:00:01Z "$name"' | .metrics.vram_peak_mb = 30000
			| .metrics.s_per_step = 1.2 | .metrics.s_per_step_min = 1.1 | .metrics.s_per_step_max = 1.3'
		art peft tiny_qwen2 nf4 oom 2026-11-29T10:00:02Z "$name"' | .error = "CUDA out of memory | tried <b>2 GiB</b>, see https://example.org//oom"'
		art poros tiny_qwen2 bf16 ok 2026-11-29T10:00:03Z "$name"' | .metrics.vram_peak_mb = 8192
			| .metrics.s_per_step = 1.62 | .metrics.s_per_step_min = 1.6 | .metrics.s_per_step_max = 1.7
			| .env.gpu_name = "NVIDIA H200"'
		art accelerate_offload tiny_qwen2 bf16 skipped 2026-11-29T10:00:04Z "$name"
	} > results.jsonl
}

parity_record() { # arch precision bump-loss-step (0: identical)
	local mr="$POROS_ROOT/tests/fixtures/parity/make-run"
	rm -rf pa pb
	"$mr" pa
	if [ "$3" = 0 ]; then "$mr" pb; else "$mr" pb --bump-loss "$3"; fi
	poros-parity --arch "$1" --precision "$2" pa pb
}

# The text of one <section id="..."> of report.html.
section() {
	sed -n "/<section[^>]*id=\"$1\"/,/<\/section>/p" report.html
}

@test "poros-render --version and --help" {
	assert_version poros-render
	assert_help poros-render "usage: poros-render --html|--md [-o FILE] [--spec SPEC.json] [--runs-from DIR] [FILE|DIR|- ...]"
}

@test "a format is required, and only one" {
	run -2 --separate-stderr poros-render results.jsonl
	[[ "$stderr" == "usage: poros-render"* ]]
	run -2 --separate-stderr poros-render --html --md
	[ "$stderr" = "poros-render: --html and --md: choose one" ]
}

@test "report.html has no external URL, script, src= or url( anywhere" {
	make_results
	poros-render --html results.jsonl > report.html
	run -1 grep -n -E 'http://|https://|src=|url\(|//' report.html
	run -1 grep -n -i -E '<script|<link|<img|<iframe|@import|javascript:' report.html
	# the error's URL is still there for a reader, with its slashes escaped
	grep -q 'see https:&#47;&#47;example.org&#47;&#47;oom' report.html
}

@test "a display_name of <script>alert(1)</script> appears escaped, in SVG text and attributes too" {
	make_results
	poros-render --html results.jsonl > report.html
	run -1 grep -F "$XSS" report.html
	grep -F "<h2>$XSS_HTML <small>" report.html
	grep -F "aria-label=\"VRAM peak by method (GiB), $XSS_HTML\"" report.html
	grep -F "<title>Seconds per optimizer step by method (median, min to max), $XSS_HTML</title>" report.html
	# and the error text: markup and all
	grep -F 'CUDA out of memory | tried &lt;b&gt;2 GiB&lt;&#47;b&gt;' report.html
}

@test "the model table has status badges, VRAM peak, derived fits-on, s/step median and range, tokens/s" {
	make_results
	poros-render --html results.jsonl > report.html
	grep -F '<tr id="cell-poros_tiny_qwen2_nf4"><td>poros</td><td>nf4</td><td><span class="badge ok">ok</span></td><td>--</td><td class="num">19.5 GiB</td><td class="num derived">24 GB<span class="muted"> derived</span></td><td class="num">--</td><td class="num">1.52</td><td class="num">--</td><td class="num">--</td><td class="num">1.40 - 1.90</td><td class="num">2695</td>' report.html
	grep -F '<tr id="cell-resident_tiny_qwen2_nf4"><td>resident</td><td>nf4</td><td><span class="badge ok">ok</span></td><td>--</td><td class="num">29.3 GiB</td><td class="num derived">40 GB<span class="muted"> derived</span></td>' report.html
	# 8192 MiB does not fit in 8 GB: fits-on is the next card up; the device is named
	grep -F '<td>NVIDIA H200</td><td class="num">8.00 GiB</td><td class="num derived">12 GB<span class="muted"> derived</span></td>' report.html
	grep -F '<tr id="cell-peft_tiny_qwen2_nf4"><td>peft</td><td>nf4</td><td><span class="badge oom" title="CUDA out of memory | tried &lt;b&gt;2 GiB&lt;&#47;b&gt;, see https:&#47;&#47;example.org&#47;&#47;oom">oom</span></td><td>--</td><td class="num">--</td><td class="num derived">--</td>' report.html
	grep -F '<span class="badge skipped" title="skipped: fixture reason">skipped</span>' report.html
	# rows in method order, then precision order
	[ "$(grep -o 'tr id="cell-[a-z0-9_]*"' report.html | paste -sd ' ')" = 'tr id="cell-poros_tiny_qwen2_nf4" tr id="cell-poros_tiny_qwen2_bf16" tr id="cell-resident_tiny_qwen2_nf4" tr id="cell-peft_tiny_qwen2_nf4" tr id="cell-accelerate_offload_tiny_qwen2_bf16"' ]
}

@test "fits-on is the smallest card above the peak, and nothing for cells that did not finish" {
	{
		art poros m8 nf4 ok 2026-11-29T10:00:00Z '.cell.model.arch = "m8" | .metrics.vram_peak_mb = 8191'
		art poros m24 nf4 ok 2026-11-29T10:00:00Z '.metrics.vram_peak_mb = 24575'
		art poros m141 nf4 ok 2026-11-29T10:00:00Z '.metrics.vram_peak_mb = 144383'
		art poros big nf4 ok 2026-11-29T10:00:00Z '.metrics.vram_peak_mb = 144384'
		art poros oom nf4 oom 2026-11-29T10:00:00Z '.metrics.vram_peak_mb = 100'
	} > r.jsonl
	poros-render --html r.jsonl > report.html
	[ "$(grep -o '<td class="num derived">.*</td>' report.html | sed 's/<\/td>.*//; s/<[^>]*>//g' | paste -sd ,)" = "8 GB derived,24 GB derived,141 GB derived,&gt; 141 GB derived,--" ]
	grep -F '<tr id="cell-poros_oom_nf4"><td>poros</td><td>nf4</td><td><span class="badge oom" title="oom: fixture reason">oom</span></td><td>--</td><td class="num">100 MiB</td><td class="num derived">--</td>' report.html
}

@test "fits-on comes from the trainer's plan when the artifact has one, for any status" {
	{
		# the plan (8191 MiB) fits 8 GB although the peak (9000) would not
		art poros m8 nf4 ok 2026-11-29T10:00:00Z '.metrics.vram_plan_mb = 8191 | .metrics.vram_peak_mb = 9000'
		# an oom refused before it started still has its plan
		art poros m24 nf4 oom 2026-11-29T10:00:00Z '.metrics.vram_plan_mb = 24575'
		art poros cpu nf4 ok 2026-11-29T10:00:00Z '.metrics.vram_plan_mb = 10 | .env.backend = "cpu"'
	} > r.jsonl
	poros-render --html r.jsonl > report.html
	[ "$(grep -o '<td class="num derived">.*</td>' report.html | sed 's/<\/td>.*//; s/<[^>]*>//g' | paste -sd ,)" = "8 GB planned,24 GB planned,CPU run" ]
	poros-render --md r.jsonl | grep -F '| poros | nf4 | **oom** | -- | -- | 24 GB planned |'
}

@test "host memory is the base's host copy plus blockwise's layer checkpoints, the base's alone in an older artifact" {
	{
		art poros sum nf4 ok 2026-11-29T10:00:00Z '.metrics.host_weights_mb = 512 | .metrics.host_checkpoints_mb = 1536'
		art resident none nf4 ok 2026-11-29T10:00:00Z '.metrics.host_weights_mb = 512 | .metrics.host_checkpoints_mb = 0'
		# written before the checkpoints were recorded
		art poros old nf4 ok 2026-11-29T10:00:00Z '.metrics.host_weights_mb = 512 | del(.metrics.host_checkpoints_mb)'
		# a Python arm reports neither
		art peft arm nf4 ok 2026-11-29T10:00:00Z
	} > r.jsonl
	poros-render --md r.jsonl > report.md
	# the column after Fits on: sum, none, old, arm
	host=$(grep ' | nf4 | \*\*ok\*\* | ' report.md | awk -F'|' '{ print $8 }' | paste -sd ,)
	[ "$host" = " 2.00 GiB , 512 MiB , 512 MiB , -- " ]
	poros-render --html r.jsonl > report.html
	grep -F '<td class="num derived">8 GB<span class="muted"> derived</span></td><td class="num">2.00 GiB</td>' report.html
}

@test "the spec summary comes from the cells" {
	make_results
	poros-render --html results.jsonl > report.html
	section spec | grep -F '<dt>Hardware</dt><dd>RTX 3090, 24 GB, PCIe gen 4</dd>'
	section spec | grep -F '<dt>Methods</dt><dd>poros, resident, peft, accelerate_offload</dd>'
	section spec | grep -F '<dt>Training</dt><dd>6 steps (the first 1 excluded from timing; LR warmup 0; 1 pass timed); 64 tokens &times; batch 1 &times; accumulation 2 = 128 tokens per step;'
	section spec | grep -F '<dt>Cells</dt><dd>5: 3 ok, 1 oom, 0 error, 1 skipped</dd>'
	# the fixture's cells predate the setting: read as off
	section spec | grep -F '; max grad norm 1; gradient checkpointing off</dd>'
}

@test "the charts draw one bar per measured cell and say why the others have none" {
	make_results
	poros-render --html results.jsonl > report.html
	[ "$(grep -c '<svg class="chart"' report.html)" -eq 2 ]
	[ "$(grep -c '^<rect ' report.html)" -eq 6 ]
	[ "$(grep -c '>oom: not measured</text>' report.html)" -eq 2 ]
	[ "$(grep -c '>skipped: not measured</text>' report.html)" -eq 2 ]
	# the card's memory as a dashed line on the VRAM chart
	grep -F '>RTX 3090: 24 GB</text>' report.html
	grep -F '<title>poros nf4: 19.5 GiB</title>' report.html
	grep -F '<title>range 1.40 to 1.90</title>' report.html
}

@test "the parity table shows -- where nothing was measured, never 0" {
	make_results
	poros-render --html results.jsonl > report.html
	section parity | grep -F "<tr><td>$XSS_HTML</td><td>nf4</td><td>--</td><td class=\"num\">--</td><td class=\"num\">--</td><td class=\"num\">--</td><td>--</td></tr>"
	section parity | grep -F "<tr><td>$XSS_HTML</td><td>bf16</td><td>--</td><td class=\"num\">--</td>"
	run -1 grep -E '>0<' <(section parity)
}

@test "the parity table shows a record's deltas, where they are and the verdict" {
	make_results
	parity_record tiny_qwen2 nf4 2 > parity.jsonl
	parity_record tiny_qwen2 bf16 0 >> parity.jsonl
	poros-render --html results.jsonl parity.jsonl > report.html
	section parity | grep -F '<td>nf4</td><td><span class="badge differs">differs</span></td><td class="num">4</td><td class="num">0.125</td><td class="num">0</td><td>loss: step 2</td>'
	section parity | grep -F '<td>bf16</td><td><span class="badge exact">exact</span></td><td class="num">4</td><td class="num">0</td><td class="num">0</td><td>--</td>'
}

@test "the last parity record of a pair wins, and one for another model gets its own row" {
	make_results
	parity_record tiny_qwen2 nf4 2 > parity.jsonl
	parity_record tiny_qwen2 nf4 0 >> parity.jsonl
	parity_record other_model bf16 0 >> parity.jsonl
	poros-render --html results.jsonl parity.jsonl > report.html
	section parity | grep -F '<td>nf4</td><td><span class="badge exact">exact</span></td><td class="num">4</td><td class="num">0</td>'
	section parity | grep -F '<tr><td>other_model</td><td>bf16</td><td><span class="badge exact">exact</span></td><td class="num">4</td>'
	[ "$(section parity | grep -c '<tr><td>')" -eq 3 ]
}

@test "the environment lists each field's values and the notes say why cells ended" {
	make_results
	poros-render --html results.jsonl > report.html
	section env | grep -F '<tr><th>gpu_name</th><td>NVIDIA H200</td></tr>'
	section env | grep -F '<tr><th>torch</th><td><span class="muted">--</span></td></tr>'
	section notes | grep -F '<li><code>peft_tiny_qwen2_nf4</code> <span class="badge oom"'
	section notes | grep -F '(log: <code>logs&#47;peft_tiny_qwen2_nf4.log</code>)'
	section notes | grep -F '<code>accelerate_offload_tiny_qwen2_bf16</code>'
	run -1 grep -F 'cell-poros_tiny_qwen2_nf4' <(section notes)
}

@test "report.md has the same tables, with | and markup escaped" {
	make_results
	parity_record tiny_qwen2 nf4 2 > parity.jsonl
	run -0 --separate-stderr poros-render --md results.jsonl parity.jsonl
	[ -z "$stderr" ]
	assert_line --index 0 "# Poros Bench report: tiny"
	assert_line "## &lt;script&gt;alert(1)&lt;/script&gt; (poros/tiny-qwen2, 100 K parameters)"
	assert_line "| poros | nf4 | **ok** | -- | 19.5 GiB | 24 GB derived | -- | 1.52 | -- | -- | 1.40 - 1.90 | 2695 | 5.60 -&gt; 5.40 |"
	assert_line "| peft | nf4 | **oom** | -- | -- | -- | -- | -- | -- | -- | -- | -- | -- -&gt; -- |"
	assert_line "| &lt;script&gt;alert(1)&lt;/script&gt; | nf4 | **differs** | 4 | 0.125 | 0 | loss: step 2 |"
	assert_line "| &lt;script&gt;alert(1)&lt;/script&gt; | bf16 | -- | -- | -- | -- | -- |"
	assert_line "- peft\\_tiny\\_qwen2\\_nf4 **oom**: CUDA out of memory \\| tried &lt;b&gt;2 GiB&lt;/b&gt;, see https://example.org//oom (log: logs/peft\\_tiny\\_qwen2\\_nf4.log)"
	# every table row has as many cells as its header
	echo "$output" | awk '
		/^\|/ { line = $0; gsub(/\\\|/, "", line); n = gsub(/\|/, "", line)
		        if (!inside) { want = n; inside = 1 } else if (n != want) { print "bad row: " $0; bad = 1 } next }
		{ inside = 0 }
		END { exit bad }'
}

@test "-o writes the report atomically; an unreadable input leaves no file (exit 1)" {
	make_results
	run -0 --separate-stderr poros-render --html -o report.html results.jsonl
	[ -z "$output" ]
	grep -q '</html>' report.html
	run -1 --separate-stderr poros-render --md -o report.md results.jsonl missing.jsonl
	[ "$stderr" = "poros-render: missing.jsonl: No such file or directory" ]
	[ ! -e report.md ]
	# nor a temporary of it
	[ -z "$(ls -A . | grep -F report.md)" ]
}

@test "a malformed line is reported and skipped; the report is still written (exit 2)" {
	make_results
	sed -i '2s/.*/{"schema":"poros.artifact\/1",/' results.jsonl
	echo '{"schema":"poros.summary/1"}' >> results.jsonl
	run -2 --separate-stderr poros-render --html -o report.html results.jsonl
	[[ "$stderr" == *"poros-render: results.jsonl:2: skipped: not valid JSON at column "* ]]
	[[ "$stderr" == *'poros-render: results.jsonl:6: skipped: neither a run artifact nor a parity record (schema "poros.summary/1")'* ]]
	grep -q 'cell-poros_tiny_qwen2_nf4' report.html
	run -1 grep -q 'cell-resident_tiny_qwen2_nf4' report.html
}

@test "no artifacts at all still make a valid page and document" {
	run -0 bash -c 'poros-render --html < /dev/null'
	assert_output --partial "<p>No run artifacts in the input.</p>"
	assert_output --partial "</html>"
	run -0 bash -c 'poros-render --md < /dev/null'
	assert_line --index 0 "# Poros Bench report"
}

@test "report.html renders in headless Chromium with the table values in its DOM" {
	[ -x /usr/bin/chromium ] || skip "/usr/bin/chromium is not installed (apt-get install chromium)"
	make_results
	parity_record tiny_qwen2 nf4 2 > parity.jsonl
	poros-render --html -o report.html results.jsonl parity.jsonl
	local flags=(--headless --no-sandbox --disable-gpu --no-first-run --disable-extensions
	             "--user-data-dir=$BATS_TEST_TMPDIR/chromium-profile")
	timeout 120 /usr/bin/chromium "${flags[@]}" --window-size=1200,2400 \
		--screenshot="$BATS_TEST_TMPDIR/report.png" "file://$BATS_TEST_TMPDIR/report.html" 2>/dev/null
	[ -s report.png ]
	# a PNG: 0x89 'P' 'N' 'G'
	[ "$(head -c 4 report.png | od -An -tx1 | tr -d ' ')" = "89504e47" ]
	timeout 120 /usr/bin/chromium "${flags[@]}" --dump-dom "file://$BATS_TEST_TMPDIR/report.html" > dom.html 2>/dev/null
	# the parsed document: the attack is text, the table holds the values
	grep -F '<h2>&lt;script&gt;alert(1)&lt;/script&gt; <small>' dom.html
	run -1 grep -F "$XSS" dom.html
	grep -F '<td class="num">19.5 GiB</td><td class="num derived">24 GB<span class="muted"> derived</span></td><td class="num">--</td><td class="num">1.52</td>' dom.html
	grep -F '<td class="num">0.125</td>' dom.html
	grep -F '<rect x="170"' dom.html
}

@test "html and md write one table: the same columns in the same order" {
	make_results
	poros-render --html results.jsonl > report.html
	poros-render --md results.jsonl > report.md
	html=$(sed -n '/<table class="results">/,/<\/thead>/p' report.html | head -3 | grep -o '<th[^>]*>[^<]*</th>' | sed 's/<[^>]*>//g; s/&gt;/>/g; s/&#47;/\//g' | paste -sd '|')
	md=$(grep -m1 '^| Method |' report.md | sed 's/^| //; s/ |$//; s/ | /|/g; s/[\\]//g; s/&gt;/>/g')
	[ -n "$html" ]
	[ "$html" = "$md" ]
	[ "$html" = "Method|Precision|Status|Device|Memory peak|Fits on*|Host memory|s/step (median)|Passes|Noise (MAD)|Step range|tokens/s|Loss first -> last" ]
}

@test "each model has a headline of ratios against resident and each baseline, speed and memory" {
	make_results
	poros-render --html results.jsonl > report.html
	grep -F '<li><strong>poros nf4:</strong> 1.52 s/step, 19.5 GiB peak; vs resident: 1.27&times; the time, 0.67&times; the memory; vs peft: oom</li>' report.html
	# bf16 has no resident: the skipped baseline is named
	grep -F '<li><strong>poros bf16:</strong> 1.62 s/step, 8.00 GiB peak; vs accelerate_offload: skipped</li>' report.html
	poros-render --md results.jsonl > report.md
	grep -Fx -- '- **poros nf4:** 1.52 s/step, 19.5 GiB peak; vs resident: 1.27x the time, 0.67x the memory; vs peft: oom' report.md
}

@test "the report opens with one sentence per model: its hardware and the ratios against each arm that ran" {
	{
		art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z '.metrics.vram_peak_mb = 20000 | .metrics.s_per_step = 1.52
			| .env.backend = "cuda" | .env.gpu_name = "NVIDIA H200"'
		art resident tiny_qwen2 nf4 ok 2026-11-29T10:00:01Z '.metrics.vram_peak_mb = 30000 | .metrics.s_per_step = 1.2
			| .env.backend = "cuda" | .env.gpu_name = "NVIDIA H200"'
		art peft tiny_qwen2 nf4 oom 2026-11-29T10:00:02Z '.env.backend = "cuda" | .env.gpu_name = "NVIDIA H200"'
		art poros other nf4 error 2026-11-29T10:00:03Z '.cell.model.arch = "other" | .cell.model.display_name = "<b>Other</b>"
			| .env.backend = "cpu" | .env.cpu = "Test CPU 9000"'
	} > r.jsonl
	poros-render --html r.jsonl > report.html
	[ "$(section summary | grep -c '^<p>')" -eq 2 ]
	section summary | grep -Fx '<p>Tiny Qwen2 on NVIDIA H200, poros nf4: 1.52 s/step, 19.5 GiB peak; vs resident: 1.27&times; the time, 0.67&times; the memory; vs peft: oom.</p>'
	section summary | grep -Fx '<p>&lt;b&gt;Other&lt;&#47;b&gt; on the CPU backend (Test CPU 9000): no poros cell finished, so there is no ratio to give.</p>'
	# before any table, and before the spec
	[ "$(grep -n 'id="summary"' report.html | cut -d: -f1)" -lt "$(grep -n -m1 '<table\|id="spec"' report.html | cut -d: -f1)" ]
	poros-render --md r.jsonl > report.md
	[ "$(grep -n -m1 '^Tiny Qwen2 on NVIDIA H200, poros nf4: 1.52 s/step, 19.5 GiB peak; vs resident: 1.27x the time, 0.67x the memory; vs peft: oom.$' report.md | cut -d: -f1)" -lt "$(grep -n -m1 '^## Spec' report.md | cut -d: -f1)" ]
}

@test "the report names its date, commit and config hash" {
	make_results
	poros-render --html results.jsonl > report.html
	sha=$(jq -r .env.git_sha "$POROS_ROOT/tests/fixtures/merge/artifact.json")
	grep -E "<p class=\"muted\" id=\"stamp\">Run [0-9T:-]+Z to 2026-11-29T10:00:04Z; commit <code>$sha</code>; config <code>[0-9a-f]{16}</code></p>" report.html
	poros-render --md results.jsonl > report.md
	h1=$(grep -o 'config [0-9a-f]\{16\}' report.md)
	# the hash follows the shared config: another learning rate, another hash
	jq -c '.cell.training.learning_rate = 0.001' results.jsonl > lr.jsonl
	h2=$(poros-render --md lr.jsonl | grep -o 'config [0-9a-f]\{16\}')
	[ -n "$h1" ] && [ -n "$h2" ] && [ "$h1" != "$h2" ]
}

@test "a CPU run says CPU and host memory, not VRAM, and the hardware comes from the environment" {
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z '.cell.hardware = {"gpu_name":"unspecified","vram_gb":0,"pcie_gen":0}
		| .metrics.vram_peak_mb = 1.7 | .env.backend = "cpu" | .env.cpu = "Test CPU 9000" | .env.host_mem_gb = 31.2
		| .env.device = "Test CPU 9000" | .env.gpu_name = null' > cpu.jsonl
	poros-render --html cpu.jsonl > report.html
	section spec | grep -F '<dt>Hardware</dt><dd>CPU: Test CPU 9000, 31.2 GiB host memory<span class="muted"> (from the artifacts: the spec names no hardware)</span></dd>'
	grep -F '<td>CPU</td><td class="num">1.70 MiB<span class="muted"> host allocator</span></td><td class="num derived"><span class="muted">CPU run</span></td>' report.html
	grep -F '<figcaption>Allocator peak (host memory for CPU runs) by method' report.html
	run -1 grep -F '8 GB' report.html
	section env | grep -F '<tr><th>backend</th><td>cpu</td></tr>'
	poros-render --md cpu.jsonl | grep -F '| poros | nf4 | **ok** | CPU | 1.70 MiB host allocator | CPU run |'
}

@test "parameters carry a fitting unit: K, M or B" {
	for b in 0.0001813 0.0125 0.494 7.615 72.7; do
		art poros "m${b/./_}" nf4 ok 2026-11-29T10:00:00Z ".cell.model.arch = \"m${b/./_}\" | .cell.model.param_count_b = $b"
	done > r.jsonl
	poros-render --html r.jsonl > report.html
	[ "$(grep -o '<small>[^<]*</small>' report.html | sed 's/.*, //; s/<.*//' | paste -sd ,)" = \
		"181 K parameters,12.5 M parameters,494 M parameters,7.62 B parameters,72.7 B parameters" ]
	section spec | grep -F '<code>poros&#47;tiny-qwen2</code>, 181 K parameters)'
	run -1 grep -F 'e-0' report.html
	poros-render --md r.jsonl | grep -Fx '## Tiny Qwen2 (poros/tiny-qwen2, 181 K parameters)'
}

@test "a CPU run: a banner says what it shows, memory is the allocator's, passes disagreeing is a note" {
	make_cpu_results
	poros-render --html results.jsonl > report.html
	grep -Fx "<p class=\"banner\">CPU backend, tiny synthetic models: this shows the pipeline, not Poros&#39; speed.</p>" report.html
	# the banner comes before any table
	[ "$(grep -n 'class="banner"' report.html | cut -d: -f1)" -lt "$(grep -n -m1 '<table' report.html | cut -d: -f1)" ]
	grep -F '<td class="num">1.56 MiB<span class="muted"> host allocator</span></td>' report.html
	grep -F '<li><strong>poros nf4:</strong> 0.0133 s/step, 1.56 MiB host allocator peak; vs resident:' report.html
	grep -F '<br><span class="muted">passes disagree (CPU)</span></td>' report.html
	run -1 grep -F '<span class="flag">passes disagree' report.html
	poros-render --md results.jsonl > report.md
	grep -Fx "> CPU backend, tiny synthetic models: this shows the pipeline, not Poros' speed." report.md
	grep -F '| 3 spread 0.0028; passes disagree (CPU) |' report.md
	# the process's maximum RSS, when the artifact has it, first; the allocator's beside it
	make_cpu_results '.metrics.process_peak_rss_mb = 216.4'
	poros-render --html results.jsonl > report.html
	grep -F '<td>CPU</td><td class="num">216 MiB<span class="muted"> process RSS</span><br><span class="muted">allocator 1.56 MiB</span></td>' report.html
	poros-render --md results.jsonl | grep -F '| CPU | 216 MiB process RSS; allocator 1.56 MiB | CPU run |'
	# real weights on the CPU: no claim of synthetic models
	make_cpu_results '.env.weights = "real"'
	poros-render --html results.jsonl > report.html
	grep -Fx "<p class=\"banner\">CPU backend: this shows the pipeline, not Poros&#39; speed on a GPU.</p>" report.html
	# a GPU run has no banner, and its disagreeing passes are flagged
	make_results
	poros-render --html results.jsonl > report.html
	run -1 grep -F 'class="banner"' report.html
}

@test "passes: their count and spread, and a flag when they disagree beyond the noise" {
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z '.metrics.passes = [{"step_s":[1,1.001],"median_s":1.0005},
		{"step_s":[1.2,1.201],"median_s":1.2005},{"step_s":[1.1,1.101],"median_s":1.1005}]
		| .metrics.s_per_step = 1.1005 | .metrics.s_per_step_spread = 0.2 | .metrics.s_per_step_mad = 0.0005
		| .metrics.passes_agree = false' > p.jsonl
	poros-render --html p.jsonl > report.html
	grep -F '<td class="num">1.10</td><td class="num">3<span class="muted"> spread 0.2</span><br><span class="flag">passes disagree</span></td><td class="num">0.0005</td>' report.html
	poros-render --md p.jsonl | grep -F '| 1.10 | 3 spread 0.2; **passes disagree** | 0.0005 |'
	grep -F 'more than 3 &times; 1.4826 &times; MAD from s/step' report.html
}

@test "loss curves come from each cell's events.jsonl beside its artifact" {
	mkdir -p res/runs/poros_tiny_qwen2_nf4 res/runs/resident_tiny_qwen2_nf4
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z > res/poros_tiny_qwen2_nf4.json
	art resident tiny_qwen2 nf4 ok 2026-11-29T10:00:01Z > res/resident_tiny_qwen2_nf4.json
	for s in 1 2 3 4; do
		echo "{\"step\":$s,\"loss\":$(awk -v s=$s 'BEGIN{print 6 - s / 2}')}" >> res/runs/poros_tiny_qwen2_nf4/events.jsonl
	done
	poros-render --html res > report.html
	[ "$(grep -c '<polyline ' report.html)" -eq 1 ]
	grep -F '<svg class="chart" width="560" height="260"' report.html
	grep -F 'aria-label="Training loss by optimizer step, Tiny Qwen2 (solid nf4, dashed bf16)"' report.html
	# four points, the first at the top left (loss 5.5 of an axis 3.5 to 5.5), the last at the bottom right
	points=$(grep -o '<polyline [^>]*points="[^"]*"' report.html | sed 's/.*points="//; s/"$//')
	[ "$(wc -w <<< "$points")" -eq 4 ]
	[ "$(awk '{print $1}' <<< "$points")" = "56.0,12.0" ]
	[ "$(awk '{print $4}' <<< "$points")" = "548.0,220.0" ]
	# a results file with no run directories beside it says so instead
	cat res/*.json > flat.jsonl
	mkdir elsewhere && mv flat.jsonl elsewhere/
	poros-render --html elsewhere/flat.jsonl > r2.html
	grep -F 'No events.jsonl found beside the artifacts' r2.html
}

@test "eval_loss in events.jsonl is drawn as dots beside the training loss, with a legend entry" {
	mkdir -p res/runs/poros_tiny_qwen2_nf4
	art poros tiny_qwen2 nf4 ok 2026-11-29T10:00:00Z > res/poros_tiny_qwen2_nf4.json
	cat > res/runs/poros_tiny_qwen2_nf4/events.jsonl <<-'EOF'
		{"step":1,"loss":5.5}
		{"step":2,"loss":5,"eval_loss":4.75,"eval_tokens":96}
		{"step":3,"loss":4.5,"eval_loss":null,"eval_tokens":0}
		{"step":4,"loss":4,"eval_loss":4.25,"eval_tokens":96}
	EOF
	poros-render --html res > report.html
	[ "$(grep -c '<polyline ' report.html)" -eq 1 ]
	grep -F 'aria-label="Training loss by optimizer step, Tiny Qwen2 (solid nf4, dashed bf16; dots: eval_loss)"' report.html
	# the legend: the line, then the dots, in poros' colour
	grep -F 'border-top:3px solid #0969da"></span>poros nf4<span class="swatch" style="width:.5em;height:.5em;border-radius:50%;background:#0969da"></span>poros nf4 eval_loss</figcaption>' report.html
	# two dots (step 3's null is no point), on the training loss's axes (x 1 to 4, loss 4 to 5.5)
	grep -F '<g class="dots" fill="#0969da"><title>poros nf4 eval_loss</title>' report.html
	[ "$(grep -c '<circle ' report.html)" -eq 2 ]
	grep -o '<circle [^>]*>' report.html > dots
	[ "$(sed -n 1p dots)" = '<circle cx="220.0" cy="116.0" r="3"/>' ]
	[ "$(sed -n 2p dots)" = '<circle cx="548.0" cy="185.3" r="3"/>' ]
	points=$(grep -o '<polyline [^>]*points="[^"]*"' report.html | sed 's/.*points="//; s/"$//')
	[ "$(wc -w <<< "$points")" -eq 4 ]
	[ "$(awk '{print $4}' <<< "$points")" = "548.0,220.0" ]
	# no eval_loss anywhere: no dots, no legend entry, the caption as before
	jq -c 'del(.eval_loss, .eval_tokens)' res/runs/poros_tiny_qwen2_nf4/events.jsonl > e && mv e res/runs/poros_tiny_qwen2_nf4/events.jsonl
	poros-render --html res > r2.html
	! grep -q '<circle \|eval_loss' r2.html
	grep -F 'aria-label="Training loss by optimizer step, Tiny Qwen2 (solid nf4, dashed bf16)"' r2.html
}

@test "chart axes label every tick with the same decimals" {
	make_results
	poros-render --html results.jsonl > report.html
	# s/step axis: 0 to 2 by 0.5
	ticks=$(grep -o '<text [^>]*class="tick">[0-9.]*</text>' report.html | sed 's/<[^>]*>//g' | paste -sd ' ')
	[[ "$ticks" == *"0.0 0.5 1.0 1.5 2.0"* ]]
	run -1 grep -E 'class="tick">[0-9]+\.[0-9]*e' report.html
}

@test "with no parity measured the table says how to get it" {
	make_results
	poros-render --html results.jsonl > report.html
	section parity | grep -F '<code>poros parity SPEC</code> trains each model and precision blockwise and resident'
	parity_record tiny_qwen2 nf4 0 > parity.jsonl
	poros-render --html results.jsonl parity.jsonl > report.html
	run -1 grep -F 'No parity was measured' report.html
}

# A CPU bench's cells as poros-train writes them: long device names, three
# passes that disagree, host memory: the widest rows a report has.
make_cpu_results() {
	local cpu='.env.backend = "cpu" | .env.cpu = "AMD EPYC 7B13 64-Core Processor" | .env.gpu_name = null
		| .env.device = "AMD EPYC 7B13 64-Core Processor" | .metrics.vram_peak_mb = 1.56
		| .metrics.host_weights_mb = 0.7 | .metrics.host_checkpoints_mb = 0.4
		| .metrics.passes = [{"step_s":[1],"median_s":0.0123},{"step_s":[1],"median_s":0.0151},{"step_s":[1],"median_s":0.0133}]
		| .metrics.s_per_step = 0.0133 | .metrics.s_per_step_spread = 0.0028 | .metrics.s_per_step_mad = 0.00041
		| .metrics.passes_agree = false | .metrics.s_per_step_min = 0.0101 | .metrics.s_per_step_max = 0.0212
		| .metrics.tokens_per_s = 9624.1 | .metrics.loss_first = 5.5451 | .metrics.loss_last = 5.4012'
	for m in poros resident peft; do
		for p in nf4 bf16; do
			art $m tiny_qwen2 $p ok 2026-11-29T10:00:00Z "$cpu${1:+ | $1}"
		done
	done > results.jsonl
}

# Chromium lays out a copy of report.html with a probe script added (the
# report itself has none) and writes into its DOM: the page's scroll width
# and its viewport's, how far the widest box scrolls, the right edge of the
# charts and of the parity verdicts and headline ratios, and the chart text's
# height.  A headless window is at least 500 px wide: the 420 px viewport is
# an iframe of that width.
chromium_flags=(--headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update
	--disable-sync --no-first-run --hide-scrollbars --allow-file-access-from-files)
layout_probe() { # width
	sed '/<\/body>/r /dev/stdin' report.html > probe.html <<-'JS'
	<script>
	var d = document.documentElement, box = 0, svg = 0, seen = 0, px = 0;
	document.querySelectorAll('.scroll').forEach(function (e) { box = Math.max(box, e.scrollWidth - e.clientWidth); });
	document.querySelectorAll('svg.chart').forEach(function (e) { svg = Math.max(svg, Math.ceil(e.getBoundingClientRect().right)); });
	document.querySelectorAll('table.parity .badge, ul.headline li').forEach(function (e) {
		seen = Math.max(seen, Math.ceil(e.getBoundingClientRect().right)); });
	var t = document.querySelector('svg.chart text');
	if (t) px = Math.round(t.getBoundingClientRect().height);
	d.setAttribute('data-probe', [d.scrollWidth, d.clientWidth, box, svg, seen, px,
		document.querySelectorAll('table').length, document.querySelectorAll('.scroll > table').length].join(' '));
	</script>
	JS
	cat > frame.html <<-HTML
	<html><body style="margin:0"><iframe src="probe.html" width="$1" height="900" style="border:0;display:block"
	onload="document.body.setAttribute('data-probe', this.contentDocument.documentElement.getAttribute('data-probe'))"></iframe></body></html>
	HTML
	local page=probe.html
	[ "$1" -ge 500 ] || page=frame.html
	timeout 120 /usr/bin/chromium "${chromium_flags[@]}" "--user-data-dir=$BATS_TEST_TMPDIR/chromium-$1" \
		"--window-size=$1,900" --screenshot="$BATS_TEST_TMPDIR/report-$1.png" "file://$BATS_TEST_TMPDIR/$page" 2>/dev/null
	timeout 120 /usr/bin/chromium "${chromium_flags[@]}" "--user-data-dir=$BATS_TEST_TMPDIR/chromium-$1" \
		"--window-size=$1,900" --dump-dom "file://$BATS_TEST_TMPDIR/$page" 2>/dev/null |
		grep -o 'data-probe="[^"]*"' | sed 's/.*="//; s/"//'
}

# The width of a PNG (its IHDR's first field).
png_width() {
	od -An -tu1 -j16 -N4 "$1" | awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 }'
}

@test "in Chromium at 1400 px nothing scrolls sideways; at 420 px charts scale, verdicts and ratios stay in view" {
	[ -x /usr/bin/chromium ] || skip "/usr/bin/chromium is not installed (apt-get install chromium)"
	make_cpu_results
	parity_record tiny_qwen2 nf4 2 > parity.jsonl
	poros-render --html -o report.html results.jsonl parity.jsonl
	read -r page view box svg seen px tables scrolled <<< "$(layout_probe 1400)"
	echo "1400: page $page of $view, a box scrolls $box px, charts to $svg, verdicts and ratios to $seen"
	[ "$(png_width report-1400.png)" -eq 1400 ]
	[ "$view" -eq 1400 ] && [ "$page" -eq "$view" ]
	# the whole results table, "Loss first -> last" too, without a scrollbar
	[ "$box" -eq 0 ]
	[ "$px" -ge 11 ]
	read -r page view box svg seen px tables scrolled <<< "$(layout_probe 420)"
	echo "420: page $page of $view, a box scrolls $box px, charts to $svg, verdicts and ratios to $seen, text $px px"
	[ "$(head -c 4 report-420.png | od -An -tx1 | tr -d ' ')" = "89504e47" ]
	[ "$view" -eq 420 ] && [ "$page" -eq "$view" ]
	[ "$svg" -gt 0 ] && [ "$svg" -le "$view" ]
	[ "$seen" -gt 0 ] && [ "$seen" -le "$view" ]
	# scaled down, still legible
	[ "$px" -ge 8 ]
	# the wide tables scroll in their own boxes
	[ "$box" -gt 0 ]
	[ "$tables" -ge 3 ] && [ "$scrolled" -eq "$tables" ]
	# the report itself still has no script
	run -1 grep -i '<script' report.html
}

@test "thousands of cells: one row each, and a later rerun of every cell replaces its row in place" {
	jq -c 'range(0; 1500) as $i | .cell.model.arch = "m\($i % 300)" | .cell.method = (["poros","resident","peft","unsloth","accelerate_offload"][$i / 300 | floor])
		| .cell_id = "\(.cell.method)_\(.cell.model.arch)_nf4" | .cell.cell_id = .cell_id | .metrics.s_per_step = $i' \
		"$POROS_ROOT/tests/fixtures/merge/artifact.json" > many.jsonl
	jq -c '.finished_at = "2026-11-30T00:00:00Z" | .metrics.s_per_step += 100000' many.jsonl > rerun.jsonl
	poros-render --md many.jsonl rerun.jsonl > report.md
	[ "$(grep -c ' | nf4 | \*\*ok\*\* | ' report.md)" -eq 1500 ]
	# 300 models, and the Spec, Parity, Environment and Artifacts sections
	[ "$(grep -c '^## ' report.md)" -eq 304 ]
	# each first run is named as superseded by its rerun
	grep -qx 'Ignored: 1500.' report.md
	grep -qF -- '- **poros\_m0\_nf4:** many.jsonl:1: superseded by a newer run of its cell (rerun.jsonl:1, finished 2026-11-30T00:00:00Z)' report.md
	# every row is the rerun's (s/step 100000 and up), none the first run's
	[ "$(grep ' | nf4 | \*\*ok\*\* | ' report.md | awk -F'|' '$9 + 0 < 100000' | wc -l)" -eq 0 ]
}

@test "--spec names the spec's cells with no artifact as not measured, in both formats" {
	make_results
	ids=$(jq -r .cell_id results.jsonl | jq -R . | jq -s -c '. + ["resident_tiny_qwen2_bf16", "peft_tiny_qwen2_bf16"]')
	jq -n --argjson c "$ids" '{schema: "poros.spec/1", spec_id: "tiny", cells: $c}' > spec.json
	run -0 poros-render --md --spec spec.json results.jsonl
	[[ "$output" == *'**2 of the spec'"'"'s 7 cells not measured**'* ]]
	[[ "$output" == *'- resident\_tiny\_qwen2\_bf16 **not measured**: a cell of the spec with no current artifact'* ]]
	[[ "$output" == *'- peft\_tiny\_qwen2\_bf16 **not measured**'* ]]
	poros-render --html --spec spec.json results.jsonl > report.html
	section notes | grep -F '<li><code>resident_tiny_qwen2_bf16</code> <strong>not measured</strong>'
	# every cell measured: no such line
	jq --argjson c "$(jq -c '.cells[:5]' spec.json)" '.cells = $c' spec.json > all.json
	run -0 poros-render --md --spec all.json results.jsonl
	[[ "$output" != *'**not measured**'* && "$output" != *'cells not measured'* ]]
	# an unreadable spec exits 1, one with no cells list 2; nothing is written
	run -1 --separate-stderr poros-render --md -o r.md --spec nope.json results.jsonl
	[[ "$stderr" == 'poros-render: --spec: nope.json: No such file or directory' ]]
	echo '{"spec_id": "t"}' > nocells.json
	run -2 --separate-stderr poros-render --md -o r.md --spec nocells.json results.jsonl
	[[ "$stderr" == *'nocells.json: not a spec.json of poros-expand (no "cells" list)' ]]
	[ ! -e r.md ]
}

@test "the report names the artifacts it used and those it ignored, and why (both formats)" {
	# the README pipeline twice into one directory: the second run, of a
	# changed spec, measures one cell only; a third spec's cell lands there too
	sed 's/^  steps: 4$/  steps: 3/' "$POROS_ROOT/tests/fixtures/driver/two_models.yaml" > s.yaml
	poros-expand s.yaml | grep -E '/poros_tiny_qwen2_(nf4|bf16)\.json$' | xargs poros-arm > /dev/null
	sed -i 's/^  steps: 3$/  steps: 2/' s.yaml
	poros-expand s.yaml | grep '/poros_tiny_qwen2_nf4\.json$' | xargs poros-arm > /dev/null
	dir=out/driver_test
	jq -c '.cell.spec_id = "other" | .cell_id = "peft_tiny_qwen2_nf4" | .cell.cell_id = .cell_id
		| .cell.method = "peft" | .method = "peft"' $dir/poros_tiny_qwen2_nf4.json > $dir/peft_tiny_qwen2_nf4.json
	run -0 --separate-stderr poros-render --md $dir
	[[ "$output" == *'**2 artifacts of the input ignored** (see Artifacts)'* ]]
	[[ "$output" == *$'## Artifacts\n\nUsed: 1, held against out/driver\\_test/spec.json.\n\n- **poros\\_tiny\\_qwen2\\_nf4:** out/driver\\_test/poros\\_tiny\\_qwen2\\_nf4.json, finished '* ]]
	[[ "$output" == *$'\nIgnored: 2.\n'* ]]
	[[ "$output" == *'- **peft\_tiny\_qwen2\_nf4:** out/driver\_test/peft\_tiny\_qwen2\_nf4.json: other spec (spec\_id "other", not "driver\_test")'* ]]
	[[ "$output" =~ '- **poros\_tiny\_qwen2\_bf16:** out/driver\_test/poros\_tiny\_qwen2\_bf16.json: stale config\_hash (sha256:'[0-9a-f]{12}'..., the spec'"'"'s is sha256:'[0-9a-f]{12}'...): its cell'"'"'s configuration changed' ]]
	# the stale cell is not in the tables; the spec's cells without a current artifact are not measured
	[[ "$output" != *'| bf16 | **ok**'* ]]
	[[ "$output" == *'- poros\_tiny\_qwen2\_bf16 **not measured**'* ]]
	poros-render --html -o report.html $dir
	section artifacts | grep -F '<dt>poros_tiny_qwen2_nf4</dt><dd><code>out&#47;driver_test&#47;poros_tiny_qwen2_nf4.json</code>, finished '
	section artifacts | grep -F '<p class="flag">Ignored: 2.</p>'
	section artifacts | grep -F '<dt>poros_tiny_qwen2_bf16</dt><dd><code>out&#47;driver_test&#47;poros_tiny_qwen2_bf16.json</code>: stale config_hash'
	grep -F '2 artifacts of the input ignored' report.html
	# files given one by one are not held against a spec, and say nothing of one
	run -0 poros-render --md $dir/poros_tiny_qwen2_nf4.json $dir/poros_tiny_qwen2_bf16.json
	[[ "$output" == *$'Used: 2.\n'* && "$output" != *'Ignored'* && "$output" != *'held against'* ]]
	# an artifact that records no config_hash is used, and the list says it was not checked
	jq -c 'del(.config_hash)' $dir/poros_tiny_qwen2_nf4.json > legacy.jsonl
	run -0 poros-render --md --spec $dir/spec.json legacy.jsonl
	[[ "$output" == *"legacy.jsonl:1, finished "*" (it records no config_hash: not checked against the spec's)"* ]]
}
