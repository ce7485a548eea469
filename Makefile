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

PKGS     := fuse3 liburing blkid liblz4 lzo2 libzstd libcrypto icu-uc
# Debian's android-libsparse(-dev) ships no pkg-config file and keeps the library in a
# private directory (the one its own simg2img finds through RUNPATH).
SPARSE_DIR    := /usr/lib/$(shell $(CC) -print-multiarch 2>/dev/null)/android
SPARSE_CFLAGS := -I/usr/include/android
SPARSE_LIBS   := -L$(SPARSE_DIR) -Wl,-rpath,$(SPARSE_DIR) -lsparse
# Network block devices, optional at build time (src/blk/blk_nbd.c, blk_rbd.c): with Debian's
# libnbd-dev f2fuse opens nbd:// URIs, with librbd-dev rbd:POOL/IMAGE; without them those
# say which package to install.  NBD=0 / RBD=0 build without them even where installed.
NBD      ?= $(shell pkg-config --exists libnbd 2>/dev/null && echo 1 || echo 0)
RBD      ?= $(shell printf '\043include <rbd/librbd.h>\n' | $(CC) -E -x c - >/dev/null 2>&1 \
                && echo 1 || echo 0)
NET_CFLAGS := $(if $(filter 1,$(NBD)),-DF2FUSE_HAVE_LIBNBD $(shell pkg-config --cflags libnbd)) \
              $(if $(filter 1,$(RBD)),-DF2FUSE_HAVE_LIBRBD)
NET_LIBS   := $(if $(filter 1,$(NBD)),$(shell pkg-config --libs libnbd)) \
              $(if $(filter 1,$(RBD)),-lrbd -lrados)
CFLAGS   += -std=gnu11 $(OPT) -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter \
            -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -Iinclude -Isrc $(SANFLAGS) \
            $(shell pkg-config --cflags $(PKGS) 2>/dev/null) $(SPARSE_CFLAGS)
LDLIBS   += $(shell pkg-config --libs $(PKGS) 2>/dev/null) $(SPARSE_LIBS) $(NET_LIBS) -lpthread
LDFLAGS  += $(SANFLAGS)

LIB_SRC  := $(wildcard src/util/*.c src/blk/*.c src/cache/*.c src/core/*.c src/api/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libf2fuse.a
FUSE_SRC := $(wildcard src/fuse/*.c src/cli/*.c)
FUSE_OBJ := $(FUSE_SRC:%.c=$(BUILD)/%.o)
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
BENCH_SRC:= $(wildcard bench/*/*.c)
BENCH_BIN:= $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

.PHONY: all binaries deps test run clean bench install uninstall fuzz fuzzers man check FORCE
# The build runs in a second make once deps is done: pkg-config's flags are read when make
# parses this file, so a first build on a fresh machine (packages installed by deps) would
# otherwise compile in parallel with the install and without the new headers.
all: deps
	@$(MAKE) --no-print-directory binaries
binaries: $(BUILD)/f2fuse $(UNIT_BIN) $(BENCH_BIN)

# Installs missing Debian packages when run as root, otherwise says what is missing.  Each
# target asks only for its own group: a plain `make` needs the build packages alone.
deps:
	@./scripts/deps.sh build

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/f2fuse: $(FUSE_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(filter-out $(NETCFG),$^) $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c tests/unit/check.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -Itests/unit -o $@ $< $(LIB) $(LDLIBS)

# memfs (the FUSE ceiling) shares f2fuse's channel: its io_uring transport and I/O hooks.
MEMFS_FUSE_OBJ := $(BUILD)/src/fuse/fuse_ring.o $(BUILD)/src/fuse/killpriv.o
$(BUILD)/bench/fio/memfs: bench/fio/memfs.c $(MEMFS_FUSE_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(MEMFS_FUSE_OBJ) $(LIB) $(LDLIBS) -lm

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS) -lm

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

# The network backends are rebuilt when what was found changes (a library installed since).
NETCFG := $(BUILD)/netcfg
$(NETCFG): FORCE
	@mkdir -p $(dir $@)
	@echo 'nbd=$(NBD) rbd=$(RBD)' | cmp -s - $@ || echo 'nbd=$(NBD) rbd=$(RBD)' >$@
$(BUILD)/src/blk/blk_nbd.o $(BUILD)/src/blk/blk_rbd.o: $(NETCFG)
$(BUILD)/src/blk/blk_nbd.o $(BUILD)/src/blk/blk_rbd.o: CFLAGS += $(NET_CFLAGS)
$(BUILD)/f2fuse $(UNIT_BIN) $(BENCH_BIN): $(NETCFG)
$(BUILD)/bench/nbd/nbd_forward: CFLAGS += $(NET_CFLAGS)
FORCE:

# f2fuse without the network libraries (NBD=0 RBD=0) from the same objects: test_nbd checks
# that it builds and names the package an nbd:// or rbd: IMAGE needs.
NONET_OBJ := $(BUILD)/nonet/blk_nbd.o $(BUILD)/nonet/blk_rbd.o
$(BUILD)/nonet/%.o: src/blk/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<
$(BUILD)/f2fuse-nonet: $(FUSE_OBJ) $(filter-out %/blk_nbd.o %/blk_rbd.o,$(LIB_OBJ)) $(NONET_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(filter-out $(NET_LIBS),$(LDLIBS))

-include $(LIB_OBJ:.o=.d) $(FUSE_OBJ:.o=.d)

test: deps
	@./scripts/deps.sh test
	@./tests/run.sh

run: all
	@./scripts/deps.sh run
	@./scripts/run.sh

bench: all
	@./scripts/deps.sh bench
	@./bench/run.sh

# The manual's option summary comes from the option tables (f2fuse options --troff).
man: $(BUILD)/f2fuse
	@./scripts/man-options.sh $(BUILD)/f2fuse man/f2fuse.8

# ---- install (issue #10): the command, its manual, and libf2fuse for other programs ----
# `make install PREFIX=/usr/local DESTDIR=` puts f2fuse in $(BINDIR) (where mount.fuse3 finds
# it for `mount -t fuse.f2fuse` and fstab lines: /bin/sh's default PATH), f2fuse(8) in
# $(MANDIR)/man8, and libf2fuse.a, f2fuse.h and f2fuse.pc for `pkg-config --cflags --libs
# f2fuse`.  The library is static: liburing, libblkid and libcrypto come in through Requires, libsparse
# (no .pc file on Debian) through Libs.
PREFIX   ?= /usr/local
BINDIR   ?= $(PREFIX)/bin
LIBDIR   ?= $(PREFIX)/lib
INCDIR   ?= $(PREFIX)/include
MANDIR   ?= $(PREFIX)/share/man
PCDIR    ?= $(LIBDIR)/pkgconfig
VERSION  := 0.1.0

install: $(BUILD)/f2fuse $(LIB)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR) \
	    $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(PCDIR)
	install -m 755 $(BUILD)/f2fuse $(DESTDIR)$(BINDIR)/f2fuse
	install -m 644 $(LIB) $(DESTDIR)$(LIBDIR)/libf2fuse.a
	install -m 644 include/f2fuse.h $(DESTDIR)$(INCDIR)/f2fuse.h
	install -m 644 man/f2fuse.8 $(DESTDIR)$(MANDIR)/man8/f2fuse.8
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCDIR)' '' \
	    'Name: libf2fuse' 'Description: f2fs images in user space (read and write)' \
	    'Version: $(VERSION)' 'Requires: liburing blkid liblz4 lzo2 libzstd libcrypto icu-uc' \
	    'Libs: -L$${libdir} -lf2fuse $(SPARSE_LIBS) $(strip $(NET_LIBS)) -lpthread' 'Cflags: -I$${includedir}' \
	    >$(DESTDIR)$(PCDIR)/f2fuse.pc
	chmod 644 $(DESTDIR)$(PCDIR)/f2fuse.pc

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/f2fuse $(DESTDIR)$(LIBDIR)/libf2fuse.a \
	    $(DESTDIR)$(INCDIR)/f2fuse.h $(DESTDIR)$(MANDIR)/man8/f2fuse.8 $(DESTDIR)$(PCDIR)/f2fuse.pc

# ---- fuzzing (tests/fuzz/README.md): `make fuzzers` builds every harness into
# build-fuzz/fuzz/; `make fuzz FUZZ_TIME=seconds` runs each one that long (default 1 h).
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/fuzz/%)
FUZZ_TIME ?= 3600

fuzzers: deps
	@./scripts/deps.sh fuzz
	@$(MAKE) --no-print-directory SAN=fuzz fuzz-bins

fuzz-bins: $(FUZZ_BIN)

$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/harness.c tests/fuzz/harness.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/fuzz -DF2FUSE_SRC_ROOT='"$(CURDIR)"' -fsanitize=fuzzer -o $@ \
	    $< tests/fuzz/harness.c $(LIB) $(LDLIBS)

fuzz: fuzzers
	@./tests/fuzz/run.sh --time $(FUZZ_TIME)

# ---- static analysis: `make check` runs cppcheck on src/ with the build's defines and include
# paths (system headers left out, as cppcheck advises).  The classes that find bugs, not style;
# a false positive gets an inline `cppcheck-suppress` with the reason.  util/crc.c is left out:
# its table macros expand to millions of terms, which took cppcheck 20 minutes; the rest takes ~5 s.
# It also checks that the C sources are formatted as .clang-format says (clang-format -i on a
# file you changed fixes that).
CPPCHECK_SRC := $(filter-out src/util/crc.c,$(LIB_SRC) $(FUSE_SRC))
FORMAT_SRC   := $(shell git ls-files 'src/*.[ch]' 'include/*.h' 'tests/unit/*.[ch]' \
                    'tests/fuzz/*.[ch]' 'bench/*.c' 2>/dev/null)
check:
	@./scripts/deps.sh check
	cppcheck -q -j2 --std=c11 --enable=warning,performance,portability --inline-suppr \
	    --error-exitcode=1 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -Iinclude -Isrc $(CPPCHECK_SRC)
	clang-format --dry-run --Werror $(FORMAT_SRC)

clean:
	rm -rf build build-san build-tsan build-fuzz
