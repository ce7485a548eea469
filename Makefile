# f2fuse — top-level build.  `make` builds everything into build/, `make test` runs every
# test, `make run` mounts ./f2fuse.img at ./mnt (creating the image when absent).
#
# Plain GNU make on purpose: the source list is read off the directory tree (one file per
# mechanism), there is no configure step, and every rule is visible here.  SAN=1 builds an
# AddressSanitizer + UndefinedBehaviorSanitizer variant into build-san/, SAN=thread a
# ThreadSanitizer one into build-tsan/.

CC       ?= cc
SAN      ?= 0
ifeq ($(SAN),1)
BUILD    ?= build-san
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT      := -O1 -g
else ifeq ($(SAN),thread)
BUILD    ?= build-tsan
SANFLAGS := -fsanitize=thread -fno-omit-frame-pointer
OPT      := -O1 -g
else ifeq ($(SAN),fuzz)
# libFuzzer harnesses (tests/fuzz/): the library built with clang's coverage hooks + ASan/UBSan.
CC       := clang
BUILD    ?= build-fuzz
SANFLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer \
            -fno-sanitize-recover=undefined
OPT      := -O1 -g
else
BUILD    ?= build
SANFLAGS :=
OPT      := -O2 -g
endif

PKGS     := fuse3 liburing
CFLAGS   += -std=gnu11 $(OPT) -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
            -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -Iinclude -Isrc $(SANFLAGS) \
            $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS   += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lpthread
LDFLAGS  += $(SANFLAGS)

LIB_SRC  := $(wildcard src/util/*.c src/blk/*.c src/cache/*.c src/core/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libf2fuse.a
FUSE_SRC := $(wildcard src/fuse/*.c src/cli/*.c)
FUSE_OBJ := $(FUSE_SRC:%.c=$(BUILD)/%.o)
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
BENCH_SRC:= $(wildcard bench/*/*.c)
BENCH_BIN:= $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

.PHONY: all deps test run clean bench fuzz fuzzers
all: deps $(BUILD)/f2fuse $(UNIT_BIN) $(BENCH_BIN)

# Installs missing Debian packages when run as root, otherwise says what is missing.
deps:
	@./scripts/deps.sh

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(AR) rcs $@ $^

$(BUILD)/f2fuse: $(FUSE_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c tests/unit/check.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -Itests/unit -o $@ $< $(LIB) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS) -lm

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

-include $(LIB_OBJ:.o=.d) $(FUSE_OBJ:.o=.d)

test: deps
	@./tests/run.sh

run: all
	@./scripts/run.sh

bench: all
	@./bench/run.sh

# ---- fuzzing (tests/fuzz/README.md): `make fuzzers` builds every harness into
# build-fuzz/fuzz/; `make fuzz FUZZ_TIME=seconds` runs each one that long (default 1 h).
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/fuzz/%)
FUZZ_TIME ?= 3600

fuzzers:
	@$(MAKE) --no-print-directory SAN=fuzz fuzz-bins

fuzz-bins: $(FUZZ_BIN)

$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/harness.c tests/fuzz/harness.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/fuzz -DF2FUSE_SRC_ROOT='"$(CURDIR)"' -fsanitize=fuzzer -o $@ \
	    $< tests/fuzz/harness.c $(LIB) $(LDLIBS)

fuzz: fuzzers
	@./tests/fuzz/run.sh --time $(FUZZ_TIME)

clean:
	rm -rf build build-san build-tsan build-fuzz
