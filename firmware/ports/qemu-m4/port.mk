# qemu-m4: the nRF52840 stand-in (Cortex-M4F, hard float) on QEMU mps2-an386.
ARM_PREFIX ?= arm-none-eabi-
ARM_CC := $(ARM_PREFIX)gcc
ARM_SIZE := $(ARM_PREFIX)size
M4_ARCH := -mcpu=cortex-m4 -mthumb -mfpu=fpv4-sp-d16 -mfloat-abi=hard
# Shared by every Cortex-M port: the arch flags are the port's own.
ARM_COMMON := $(WARN) -O2 -g -ffunction-sections -fdata-sections -fno-math-errno -fno-common -MMD -MP
# The pool: what the nRF52840's 256 KB leave after the firmware's static buffers (~20 KB) and stack.
M4_CFLAGS := $(ARM_COMMON) $(M4_ARCH) -DPOOL_BYTES=236544u
M4_LDFLAGS := $(M4_ARCH) -nostartfiles --specs=nano.specs -T ports/qemu-m4/linker.ld \
              -Wl,--gc-sections -Wl,-Map,$(BUILD)/qemu-m4/poet.map
M4_SRC := $(CORE_SRC) ports/qemu-m4/startup.c ports/qemu-m4/port.c ports/shared/mps2.c ports/shared/serve_main.c ports/shared/semihost_pager.c \
          ports/shared/no_marker.c ports/shared/pool.c ports/shared/nv_ram.c
M4_OBJ := $(patsubst %.c,$(BUILD)/qemu-m4/%.o,$(M4_SRC))

PORTS += qemu-m4
DEPS += $(M4_OBJ:.o=.d)
.PHONY: qemu-m4

qemu-m4: $(BUILD)/qemu-m4/poet.elf
	@$(ARM_SIZE) $<

$(BUILD)/qemu-m4/poet.elf: $(M4_OBJ) ports/qemu-m4/linker.ld ports/qemu-m4/sections.ld
	$(ARM_CC) $(M4_LDFLAGS) -o $@ $(M4_OBJ) -lm -lc -lgcc

$(BUILD)/qemu-m4/%.o: %.c Makefile ports/qemu-m4/port.mk
	@mkdir -p $(dir $@)
	$(ARM_CC) $(M4_CFLAGS) -c -o $@ $<

# qemu-m4-notrace: the same image recording no trace (POET_TRACE=0), so the overhead benchmark
# can measure what tracing costs per step.
NT_OBJ := $(patsubst %.c,$(BUILD)/qemu-m4-notrace/%.o,$(M4_SRC))
PORTS += qemu-m4-notrace
DEPS += $(NT_OBJ:.o=.d)
.PHONY: qemu-m4-notrace

qemu-m4-notrace: $(BUILD)/qemu-m4-notrace/poet.elf

$(BUILD)/qemu-m4-notrace/poet.elf: $(NT_OBJ) ports/qemu-m4/linker.ld ports/qemu-m4/sections.ld
	$(ARM_CC) $(subst qemu-m4/poet.map,qemu-m4-notrace/poet.map,$(M4_LDFLAGS)) -o $@ $(NT_OBJ) -lm -lc -lgcc

$(BUILD)/qemu-m4-notrace/%.o: %.c Makefile ports/qemu-m4/port.mk
	@mkdir -p $(dir $@)
	$(ARM_CC) $(M4_CFLAGS) -DPOET_TRACE=0 -c -o $@ $<
