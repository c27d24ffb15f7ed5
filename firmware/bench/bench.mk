# Kernel benchmarks on the emulated cores (firmware/bench/): images that time each kernel beside its
# reference and print instructions per call over semihosting. benchmarks/kernels_peer.py runs them.
#   make bench-m4                      -> build/bench-m4/kernels_bench.elf (Cortex-M4F, QEMU mps2-an386)
#   make bench-m4 CMSIS_DSP=<sources>  -> build/bench-m4-cmsis-dsp/kernels_bench.elf, CMSIS-DSP beside poet
# CMSIS-DSP is built from the sources of its PyPI sdist (kernels_peer.py fetches a pinned one) with its
# own defaults: GNU C (so GCC may fuse multiply-adds), loop unrolling on, no CMSIS-Core
# (__GNUC_PYTHON__: its fp32 functions have no Cortex-M4-specific code either way).
BENCH_M4_SRC := bench/kernels_bench.c $(KERNEL_SRC) $(REF_SRC)
ifdef CMSIS_DSP
BENCH_M4 := bench-m4-cmsis-dsp
PEER_SRC := $(addprefix $(CMSIS_DSP)/Source/,BasicMathFunctions/arm_dot_prod_f32.c \
              MatrixFunctions/arm_mat_mult_f32.c MatrixFunctions/arm_mat_trans_f32.c MatrixFunctions/arm_mat_init_f32.c)
PEER_OBJ := $(patsubst $(CMSIS_DSP)/%.c,$(BUILD)/$(BENCH_M4)/cmsis-dsp/%.o,$(PEER_SRC))
PEER_CFLAGS := -O2 -ffunction-sections -fdata-sections $(M4_ARCH) -D__GNUC_PYTHON__ -DARM_MATH_LOOPUNROLL \
               -I$(CMSIS_DSP)/Include -I$(CMSIS_DSP)/PrivateInclude
BENCH_M4_DEFS := -DPOET_BENCH_PEER=cmsis_dsp
BENCH_M4_SRC += bench/peer_cmsis_dsp.c
else
BENCH_M4 := bench-m4
PEER_OBJ :=
BENCH_M4_DEFS :=
endif
BENCH_M4_OBJ := $(patsubst %.c,$(BUILD)/$(BENCH_M4)/%.o,$(BENCH_M4_SRC))
DEPS += $(BENCH_M4_OBJ:.o=.d)
.PHONY: bench-m4

bench-m4: $(BUILD)/$(BENCH_M4)/kernels_bench.elf

$(BUILD)/$(BENCH_M4)/kernels_bench.elf: $(BENCH_M4_OBJ) $(PEER_OBJ) ports/qemu-m4/linker.ld
	$(ARM_CC) $(subst qemu-m4/poet.map,$(BENCH_M4)/kernels_bench.map,$(M4_LDFLAGS)) -o $@ $(BENCH_M4_OBJ) $(PEER_OBJ) \
	    -lm -lc -lgcc

$(BUILD)/$(BENCH_M4)/cmsis-dsp/%.o: $(CMSIS_DSP)/%.c bench/bench.mk
	@mkdir -p $(dir $@)
	$(ARM_CC) $(PEER_CFLAGS) -c -o $@ $<

# the peer's headers are not -Wall clean under -std=c99: only its own wrapper includes them
$(BUILD)/$(BENCH_M4)/bench/peer_%.o: bench/peer_%.c bench/bench.mk
	@mkdir -p $(dir $@)
	$(ARM_CC) $(PEER_CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/$(BENCH_M4)/%.o: %.c Makefile bench/bench.mk ports/qemu-m4/port.mk
	@mkdir -p $(dir $@)
	$(ARM_CC) $(M4_CFLAGS) $(BENCH_M4_DEFS) -c -o $@ $<

# The same image for the Cortex-M0+ build (soft float, POET_UNTILED as the MKR1000's; on mps2-an385, whose
# memory map is the an386's, so the qemu-m4 linker script serves) and for RV32IMC (the qemu-rv32 stand-in's reset and linker script,
# and its kernels, as the ESP32-C3 builds them).
#   make bench-m0   -> build/bench-m0/kernels_bench.elf
#   make bench-rv32 -> build/bench-rv32/kernels_bench.elf
BENCH_SRC := bench/kernels_bench.c $(KERNEL_SRC) $(REF_SRC)
BENCH_M0_OBJ := $(patsubst %.c,$(BUILD)/bench-m0/%.o,$(BENCH_SRC))
BENCH_RV_OBJ := $(patsubst %.c,$(BUILD)/bench-rv32/%.o,$(BENCH_SRC)) $(BUILD)/bench-rv32/ports/qemu-rv32/startup.o
DEPS += $(BENCH_M0_OBJ:.o=.d) $(BENCH_RV_OBJ:.o=.d)
.PHONY: bench-m0 bench-rv32

bench-m0: $(BUILD)/bench-m0/kernels_bench.elf
bench-rv32: $(BUILD)/bench-rv32/kernels_bench.elf

$(BUILD)/bench-m0/kernels_bench.elf: $(BENCH_M0_OBJ) ports/qemu-m4/linker.ld
	$(M0_CC) $(M0_ARCH) -nostartfiles --specs=nano.specs -T ports/qemu-m4/linker.ld -Wl,--gc-sections \
	    -o $@ $(BENCH_M0_OBJ) -lm -lc -lgcc

$(BUILD)/bench-m0/%.o: %.c Makefile bench/bench.mk ports/qemu-m0/port.mk
	@mkdir -p $(dir $@)
	$(M0_CC) $(WARN) -O2 -g -ffunction-sections -fdata-sections -fno-math-errno -fno-common -MMD -MP $(M0_ARCH) \
	    -DPOET_UNTILED -c -o $@ $<

$(BUILD)/bench-rv32/kernels_bench.elf: $(BENCH_RV_OBJ) ports/qemu-rv32/linker.ld
	$(RV_CC) $(RV32_LDFLAGS:$(BUILD)/qemu-rv32/poet.map=$(BUILD)/bench-rv32/kernels_bench.map) -o $@ $(BENCH_RV_OBJ) \
	    -lm -lc -lgcc

$(BUILD)/bench-rv32/%.o: %.c Makefile bench/bench.mk ports/qemu-rv32/port.mk
	@mkdir -p $(dir $@)
	$(RV_CC) $(RV32_CFLAGS) -c -o $@ $<

$(BUILD)/bench-rv32/%.o: %.S Makefile bench/bench.mk ports/qemu-rv32/port.mk
	@mkdir -p $(dir $@)
	$(RV_CC) $(RV32_ARCH) -g -MMD -MP -c -o $@ $<
