# qemu-m0: the MKR1000 stand-in (SAMD21, Cortex-M0+, no FPU): ARMv6-M soft-float code, newlib nano,
# linked into the SAMD21's 256 KB flash / 32 KB RAM, run on QEMU mps2-an385. QEMU 7.2's MPS2
# machines accept only their own core (`-cpu cortex-m0` is refused: "This board can only be used
# with CPU cortex-m3"), and its one Cortex-M0 machine (microbit) has 16 KB of RAM, so the image runs
# on the emulated M3; tests/test_port_m0.py checks the disassembly holds only ARMv6-M instructions.
#
# This file sorts before ports/qemu-m4/port.mk, so it defines every variable it uses itself
# (M0_ prefixed; ARM_PREFIX with ?= so both ports agree on the toolchain).
ARM_PREFIX ?= arm-none-eabi-
M0_CC := $(ARM_PREFIX)gcc
M0_SIZE := $(ARM_PREFIX)size
M0_ARCH := -mcpu=cortex-m0plus -mthumb -mfloat-abi=soft
# RAM budget (32768 B, source: datasheet), split at compile time because the protocol's buffers are
# static. Besides the pool, RAM holds (sizes in build/qemu-m0/poet.map, about 5.7 KiB at these limits):
# the schedule blob, the per-instruction trace, the two 1 KiB frame buffers, the 512 B UART ring;
# and the stack, which linker.ld gives all RAM left over. The model blob and frozen weights are in
# flash (linker.ld NV, 160 KiB), the model's per-node tables in the pool.
#  - schedule blob 1 KiB: 125 instructions (8 B each); the trace grows with it (16 B per
#    instruction), so each extra instruction costs 24 B of RAM.
#  - stack at least 1.5 KiB (linker.ld MIN_STACK, the link fails below it). Measured: at most 680 B
#    used (startup.c paints the stack; read back with QEMU's monitor `xp` after uploads and
#    keep-all steps of an MLP and a conv net, source: emulated); -fstack-usage agrees: about 600 B
#    of our frames (poet_run -> frame handler -> interpreter -> conv2d backward) plus libm and the
#    UART interrupt.
#  - pool: what is left, rounded down to 1 KiB -> 23 KiB for the model's tables, the trained
#    parameters, gradients, the batch and the arena (HELLO reports it; the planner plans within
#    it). The stack gets the remainder (3.3 KiB).
#  - NV_ERASE_BYTES: the SAMD21's flash row (256 B), which shared/nv_ram.c erases as the board does.
M0_LIMITS := -DPOET_SCHEDULE_BLOB_MAX=2048u -DNV_ERASE_BYTES=256u \
             -DPOOL_BYTES=23552u
# POET_UNTILED: the fp32 kernels' plain loops (core/kernels/linear.c, conv_taps.h): on a core without an
# FPU a float multiply-add is a library call, and register tiles around it save nothing (docs/benchmarks.md,
# "Kernels", the M0+ table).
M0_CFLAGS := $(WARN) -O2 -g -ffunction-sections -fdata-sections -fno-math-errno -fno-common -MMD -MP \
             $(M0_ARCH) $(M0_LIMITS) -DPOET_UNTILED
M0_LDFLAGS := $(M0_ARCH) -nostartfiles --specs=nano.specs -T ports/qemu-m0/linker.ld \
              -Wl,--gc-sections -Wl,-Map,$(BUILD)/qemu-m0/poet.map
M0_SRC := $(CORE_SRC) ports/qemu-m0/startup.c ports/qemu-m0/port.c ports/shared/mps2.c ports/shared/serve_main.c ports/shared/semihost_pager.c \
          ports/shared/no_marker.c ports/shared/pool.c ports/shared/nv_ram.c
M0_OBJ := $(patsubst %.c,$(BUILD)/qemu-m0/%.o,$(M0_SRC))

PORTS += qemu-m0
DEPS += $(M0_OBJ:.o=.d)
.PHONY: qemu-m0

qemu-m0: $(BUILD)/qemu-m0/poet.elf
	@$(M0_SIZE) $<

$(BUILD)/qemu-m0/poet.elf: $(M0_OBJ) ports/qemu-m0/linker.ld ports/qemu-m0/sections.ld
	$(M0_CC) $(M0_LDFLAGS) -o $@ $(M0_OBJ) -lm -lc -lgcc

$(BUILD)/qemu-m0/%.o: %.c Makefile ports/qemu-m0/port.mk
	@mkdir -p $(dir $@)
	$(M0_CC) $(M0_CFLAGS) -c -o $@ $<
