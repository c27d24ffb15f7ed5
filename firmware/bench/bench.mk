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
