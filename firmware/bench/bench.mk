# Kernel benchmarks on the emulated cores (firmware/bench/): images that time each kernel beside its
# reference and print instructions per call over semihosting. benchmarks/kernels_peer.py runs them.
#   make bench-m4 -> build/bench-m4/kernels_bench.elf (Cortex-M4F, QEMU mps2-an386)
# On the M4F, peer libraries beside poet, each given by its source tree (kernels_peer.py fetches pinned ones):
#   CMSIS_DSP=<sources>                    CMSIS-DSP's fp32 functions, from its PyPI sdist, with its own
#                                          defaults: -O2, loop unrolling on, no CMSIS-Core (__GNUC_PYTHON__:
#                                          its fp32 functions have no Cortex-M4-specific code either way)
#   CMSIS_NN=<sources> CMSIS_CORE=<dir>    CMSIS-NN's s8 and f32 operators, with its default -Ofast, and the
#                                          CMSIS-Core headers it needs (CMSIS_6's CMSIS/Core/Include)
#   AIFES=<sources>                        AIfES for Arduino's src/, its default (fp32) implementations
# The image is then build/bench-m4[-dsp][-nn][-aifes]/kernels_bench.elf. GCC may fuse multiply-adds in the
# peers (GNU C, -Ofast) where poet's -std=c99 does not.
BENCH_M4_SRC := bench/kernels_bench.c $(KERNEL_SRC) $(REF_SRC)
BENCH_M4 := bench-m4$(if $(CMSIS_DSP),-dsp)$(if $(CMSIS_NN),-nn)$(if $(AIFES),-aifes)
BENCH_M4_DEFS :=
PEER_OBJ :=
PEER_WRAP_CFLAGS :=
PEER_LDFLAGS :=
ifdef CMSIS_DSP
DSP_SRC := $(addprefix $(CMSIS_DSP)/Source/,BasicMathFunctions/arm_dot_prod_f32.c \
             MatrixFunctions/arm_mat_mult_f32.c MatrixFunctions/arm_mat_trans_f32.c MatrixFunctions/arm_mat_init_f32.c)
DSP_CFLAGS := -O2 -ffunction-sections -fdata-sections $(M4_ARCH) -D__GNUC_PYTHON__ -DARM_MATH_LOOPUNROLL \
              -I$(CMSIS_DSP)/Include -I$(CMSIS_DSP)/PrivateInclude
PEER_OBJ += $(patsubst $(CMSIS_DSP)/%.c,$(BUILD)/$(BENCH_M4)/cmsis-dsp/%.o,$(DSP_SRC))
BENCH_M4_DEFS += -DPOET_PEER_CMSIS_DSP
BENCH_M4_SRC += bench/peer_cmsis_dsp.c
PEER_WRAP_CFLAGS += $(DSP_CFLAGS)

$(BUILD)/$(BENCH_M4)/cmsis-dsp/%.o: $(CMSIS_DSP)/%.c bench/bench.mk
	@mkdir -p $(dir $@)
	$(ARM_CC) $(DSP_CFLAGS) -c -o $@ $<
endif
ifdef CMSIS_NN
ifndef CMSIS_CORE
$(error CMSIS_NN needs CMSIS_CORE=<dir with cmsis_compiler.h> (CMSIS_6's CMSIS/Core/Include))
endif
# its int8 and fp32 operators and their support functions; the linker keeps what the image calls
NN_SRC := $(filter-out %_f16.c,$(wildcard $(CMSIS_NN)/Source/*/*.c))
NN_CFLAGS := -Ofast -ffunction-sections -fdata-sections $(M4_ARCH) -DARM_NN_ENABLE_F32=1 \
             -I$(CMSIS_NN)/Include -I$(CMSIS_CORE)
PEER_OBJ += $(patsubst $(CMSIS_NN)/%.c,$(BUILD)/$(BENCH_M4)/cmsis-nn/%.o,$(NN_SRC))
BENCH_M4_DEFS += -DPOET_PEER_CMSIS_NN
BENCH_M4_SRC += bench/peer_cmsis_nn.c
PEER_WRAP_CFLAGS += $(NN_CFLAGS)

$(BUILD)/$(BENCH_M4)/cmsis-nn/%.o: $(CMSIS_NN)/%.c bench/bench.mk
	@mkdir -p $(dir $@)
	$(ARM_CC) $(NN_CFLAGS) -c -o $@ $<
endif
ifdef AIFES
AIFES_SRC := $(wildcard $(AIFES)/basic/base/*/*.c $(AIFES)/basic/default/*/*.c $(AIFES)/cnn/base/*/*.c \
                        $(AIFES)/cnn/default/*/*.c)
AIFES_CFLAGS := -O2 -g -ffunction-sections -fdata-sections $(M4_ARCH) -I$(AIFES)
PEER_OBJ += $(patsubst $(AIFES)/%.c,$(BUILD)/$(BENCH_M4)/aifes/%.o,$(AIFES_SRC))
BENCH_M4_DEFS += -DPOET_PEER_AIFES
BENCH_M4_SRC += bench/peer_aifes.c
PEER_WRAP_CFLAGS += $(AIFES_CFLAGS)
PEER_LDFLAGS += --specs=nosys.specs # its printing and rand() reach newlib's system calls; none is called here

$(BUILD)/$(BENCH_M4)/aifes/%.o: $(AIFES)/%.c bench/bench.mk
	@mkdir -p $(dir $@)
	$(ARM_CC) $(AIFES_CFLAGS) -c -o $@ $<
endif
BENCH_M4_OBJ := $(patsubst %.c,$(BUILD)/$(BENCH_M4)/%.o,$(BENCH_M4_SRC))
DEPS += $(BENCH_M4_OBJ:.o=.d)
.PHONY: bench-m4

bench-m4: $(BUILD)/$(BENCH_M4)/kernels_bench.elf

# bench/m4.ld: the qemu-m4 memory map with 1 MiB of the board's 4 MiB SSRAM, room for the peers' buffers
$(BUILD)/$(BENCH_M4)/kernels_bench.elf: $(BENCH_M4_OBJ) $(PEER_OBJ) bench/m4.ld
	$(ARM_CC) $(M4_ARCH) -nostartfiles --specs=nano.specs $(PEER_LDFLAGS) -T bench/m4.ld -Wl,--gc-sections \
	    -Wl,-Map=$(BUILD)/$(BENCH_M4)/kernels_bench.map -o $@ $(BENCH_M4_OBJ) $(PEER_OBJ) -lm -lc -lgcc

# the peers' headers are not -Wall clean under -std=c99: only their own wrappers include them
$(BUILD)/$(BENCH_M4)/bench/peer_%.o: bench/peer_%.c bench/peers.h bench/bench.mk
	@mkdir -p $(dir $@)
	$(ARM_CC) $(PEER_WRAP_CFLAGS) -MMD -MP -c -o $@ $<

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

$(BUILD)/bench-m0/kernels_bench.elf: $(BENCH_M0_OBJ) bench/m4.ld
	$(M0_CC) $(M0_ARCH) -nostartfiles --specs=nano.specs -T bench/m4.ld -Wl,--gc-sections \
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
