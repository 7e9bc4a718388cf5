# tests/lint/kernel_grids.awk: for each CUDA kernel in the files given,
# "kernel NAME stride" when its body loops grid-stride (names gridDim, or
# runs a grid-stride helper of common.cuh), else "kernel NAME explicit";
# and for each launch "launch NAME GRID" (the first <<<...>>> argument).
function emit_kernel() {
	print "kernel", name, (body ~ /gridDim|flat_elementwise|rows_elementwise/ ? "stride" : "explicit")
}
# the name: the first identifier followed by "(" on the __global__ line
# or, when that line holds only qualifiers, on the next
/__global__/ || pending {
	line = $0
	sub(/__launch_bounds__\([^)]*\)/, "", line)
	pending = 0
	if (match(line, /[A-Za-z_][A-Za-z_0-9]*[ \t]*\(/)) {
		name = substr(line, RSTART, RLENGTH)
		sub(/[ \t]*\($/, "", name)
		inside = 1; depth = 0; body = ""; opened = 0
	} else if ($0 ~ /__global__/)
		pending = 1
}
inside {
	body = body "\n" $0
	n = split($0, ch, "")
	for (i = 1; i <= n; i++) {
		if (ch[i] == "{") { depth++; opened = 1 }
		else if (ch[i] == "}") depth--
	}
	if (opened && depth == 0) { emit_kernel(); inside = 0 }
	next
}
/<<</ {
	if (match($0, /[A-Za-z_][A-Za-z_0-9]*(<[^<>]*>)?<<</)) {
		k = substr($0, RSTART, RLENGTH)
		sub(/(<[^<>]*>)?<<<$/, "", k)
		rest = substr($0, RSTART + RLENGTH)
		# the grid: up to the first comma outside parentheses
		depth = 0; g = ""
		for (i = 1; i <= length(rest); i++) {
			c = substr(rest, i, 1)
			if (c == "(") depth++
			else if (c == ")") depth--
			else if (c == "," && depth == 0) break
			g = g c
		}
		print "launch", k, g
	}
}
