# linux: the native runtime (host, Raspberry Pi 4, Jetson), its sanitizer build, the schedule
# validator harness and the kernels as a shared library for ctypes tests.
CC ?= cc
HOST_CFLAGS := $(WARN) -O2 -g -MMD -MP
ASAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
LINUX_SRC := $(CORE_SRC) ports/linux/main.c ports/shared/nv_ram.c
# The pool and the nv storage for the model and its frozen weights (shared/nv_ram.c: on Linux boards
# "flash" is RAM too) are mapped at start-up, sized by `--pool` and `--nv` (main.c); these are the
# sizes without them: a 4 MiB pool and 64 MiB of nv storage. The schedule buffer is the largest
# schedule the format can state (65535 instructions, docs/spec.md 5: 524,308 bytes, and 256 KiB of
# their ticks), so no schedule is too long here; untouched, its pages cost no memory.
LINUX_POOL := -DPOOL_BYTES=4194304u -DNV_DEFAULT_BYTES=67108864u -DPOET_SCHEDULE_BLOB_MAX=524308u
LINUX_OBJ := $(patsubst %.c,$(BUILD)/linux/%.o,$(LINUX_SRC))
ASAN_OBJ := $(patsubst %.c,$(BUILD)/linux-asan/%.o,$(LINUX_SRC))
# The model parser checks each node with its op's check, which sits beside the op's run: the
# validator links the ops and their kernels too.
VALIDATE_SRC := core/util.c core/model.c core/schedule.c $(OPS_SRC) $(KERNEL_SRC) tests/validate_main.c
VALIDATE_OBJ := $(patsubst %.c,$(BUILD)/linux/%.o,$(VALIDATE_SRC))
# Position-independent objects of their own: the linux port's objects are not built with -fPIC.
SO_OBJ := $(patsubst %.c,$(BUILD)/so/%.o,$(KERNEL_SRC) $(REF_SRC))
LINUX_DEPS := Makefile ports/linux/port.mk

PORTS += linux linux-asan validate kernels-so
DEPS += $(LINUX_OBJ:.o=.d) $(ASAN_OBJ:.o=.d) $(VALIDATE_OBJ:.o=.d) $(SO_OBJ:.o=.d)
.PHONY: linux linux-asan validate kernels-so

linux: $(BUILD)/linux/poet
linux-asan: $(BUILD)/linux-asan/poet
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

# device-run: the device API (core/poet.h) with a test port of its own, no protocol linked
# (tests/device_main.c), under ASan + UBSan as well, for the tests that hold it to the host-driven runtime.
DEVICE_RUN_SRC := $(DEVICE_SRC) tests/device_main.c
DEVICE_RUN_OBJ := $(patsubst %.c,$(BUILD)/device-run/%.o,$(DEVICE_RUN_SRC))

PORTS += device-run
DEPS += $(DEVICE_RUN_OBJ:.o=.d)
.PHONY: device-run

device-run: $(BUILD)/device-run/device_run

$(BUILD)/device-run/device_run: $(DEVICE_RUN_OBJ)
	$(CC) $(ASAN_FLAGS) -o $@ $^ -lm

$(BUILD)/device-run/%.o: %.c $(LINUX_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(HOST_CFLAGS) $(ASAN_FLAGS) -c -o $@ $<
