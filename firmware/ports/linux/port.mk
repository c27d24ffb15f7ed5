# linux: the native runtime (host, Raspberry Pi 4, Jetson), its sanitizer and big-graph builds,
# the schedule validator harness and the kernels as a shared library for ctypes tests.
CC ?= cc
HOST_CFLAGS := $(WARN) -O2 -g -MMD -MP
ASAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
LINUX_SRC := $(CORE_SRC) ports/linux/main.c ports/shared/pool.c ports/shared/nv_ram.c
# The pool, 4 MiB (shared/pool.c), and 64 MiB of nv storage for the model and its frozen weights
# (shared/nv_ram.c: on Linux boards "flash" is RAM too); linux-big has a 256 MiB pool and 512 MiB
# of nv storage for the zoo's larger graphs (BIG_FLAGS; BERT-base's frozen weights are 418 MiB).
LINUX_POOL := -DPOOL_BYTES=4194304u -DNV_BYTES=67108864u
LINUX_OBJ := $(patsubst %.c,$(BUILD)/linux/%.o,$(LINUX_SRC))
ASAN_OBJ := $(patsubst %.c,$(BUILD)/linux-asan/%.o,$(LINUX_SRC))
BIG_OBJ := $(patsubst %.c,$(BUILD)/linux-big/%.o,$(LINUX_SRC))
BIG_FLAGS := -DPOET_SCHEDULE_BLOB_MAX=32768u -DPOOL_BYTES=268435456u -DNV_BYTES=536870912u
# The model parser checks each node with its op's check, which sits beside the op's run: the
# validator links the ops and their kernels too.
VALIDATE_SRC := core/util.c core/model.c core/schedule.c $(OPS_SRC) $(KERNEL_SRC) tests/validate_main.c
VALIDATE_OBJ := $(patsubst %.c,$(BUILD)/linux/%.o,$(VALIDATE_SRC))
# Position-independent objects of their own: the linux port's objects are not built with -fPIC.
SO_OBJ := $(patsubst %.c,$(BUILD)/so/%.o,$(KERNEL_SRC))
LINUX_DEPS := Makefile ports/linux/port.mk

PORTS += linux linux-asan linux-big validate kernels-so
DEPS += $(LINUX_OBJ:.o=.d) $(ASAN_OBJ:.o=.d) $(BIG_OBJ:.o=.d) $(VALIDATE_OBJ:.o=.d) $(SO_OBJ:.o=.d)
.PHONY: linux linux-asan linux-big validate kernels-so

linux: $(BUILD)/linux/poet
linux-asan: $(BUILD)/linux-asan/poet
linux-big: $(BUILD)/linux-big/poet
validate: $(BUILD)/linux/validate
kernels-so: $(BUILD)/libpoetkernels.so

$(BUILD)/linux/poet: $(LINUX_OBJ)
	$(CC) -o $@ $^ -lm

$(BUILD)/linux/validate: $(VALIDATE_OBJ)
	$(CC) -o $@ $^ -lm

$(BUILD)/linux/%.o: %.c $(LINUX_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) $(LINUX_POOL) -c -o $@ $<

$(BUILD)/linux-asan/poet: $(ASAN_OBJ)
	$(CC) $(ASAN_FLAGS) -o $@ $^ -lm

$(BUILD)/linux-asan/%.o: %.c $(LINUX_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) $(LINUX_POOL) $(ASAN_FLAGS) -c -o $@ $<

$(BUILD)/linux-big/poet: $(BIG_OBJ)
	$(CC) -o $@ $^ -lm

$(BUILD)/linux-big/%.o: %.c $(LINUX_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) $(BIG_FLAGS) -c -o $@ $<

$(BUILD)/libpoetkernels.so: $(SO_OBJ)
	$(CC) -shared -o $@ $^ -lm

$(BUILD)/so/%.o: %.c $(LINUX_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) -fPIC -c -o $@ $<

# linux-aarch64: the same runtime cross-built for the Raspberry Pi 4 / Jetson (AArch64 Linux).
# Static, so qemu-aarch64 (qemu-user) runs it here without a target sysroot, and a board runs it
# without matching its glibc. Its objects are the linux port's, compiled by the cross compiler.
AARCH64_PREFIX ?= aarch64-linux-gnu-
AARCH64_CC := $(AARCH64_PREFIX)gcc
AARCH64_OBJ := $(patsubst %.c,$(BUILD)/linux-aarch64/%.o,$(LINUX_SRC))

PORTS += linux-aarch64
DEPS += $(AARCH64_OBJ:.o=.d)
.PHONY: linux-aarch64

linux-aarch64: $(BUILD)/linux-aarch64/poet

$(BUILD)/linux-aarch64/poet: $(AARCH64_OBJ)
	$(AARCH64_CC) -static -o $@ $^ -lm

$(BUILD)/linux-aarch64/%.o: %.c $(LINUX_DEPS)
	@mkdir -p $(dir $@)
	$(AARCH64_CC) $(HOST_CFLAGS) $(LINUX_POOL) -c -o $@ $<

# validate-asan: the schedule validator harness under ASan + UBSan (same objects as linux-asan), so
# the differential tests' thousands of corrupted schedules also check it for memory errors.
VALIDATE_ASAN_OBJ := $(patsubst %.c,$(BUILD)/linux-asan/%.o,$(VALIDATE_SRC))

PORTS += validate-asan
DEPS += $(VALIDATE_ASAN_OBJ:.o=.d)
.PHONY: validate-asan

validate-asan: $(BUILD)/linux-asan/validate

$(BUILD)/linux-asan/validate: $(VALIDATE_ASAN_OBJ)
	$(CC) $(ASAN_FLAGS) -o $@ $^ -lm
