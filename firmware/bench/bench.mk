# Kernel benchmarks on the emulated cores (firmware/bench/): images that time each kernel beside its
# reference and print instructions per call over semihosting. benchmarks/kernels_peer.py runs them.
#   make bench-m4 -> build/bench-m4/kernels_bench.elf (Cortex-M4F, QEMU mps2-an386)
BENCH_M4_SRC := bench/kernels_bench.c $(KERNEL_SRC) $(REF_SRC)
BENCH_M4_OBJ := $(patsubst %.c,$(BUILD)/bench-m4/%.o,$(BENCH_M4_SRC))
DEPS += $(BENCH_M4_OBJ:.o=.d)
.PHONY: bench-m4

bench-m4: $(BUILD)/bench-m4/kernels_bench.elf

$(BUILD)/bench-m4/kernels_bench.elf: $(BENCH_M4_OBJ) ports/qemu-m4/linker.ld
	$(ARM_CC) $(subst qemu-m4/poet.map,bench-m4/kernels_bench.map,$(M4_LDFLAGS)) -o $@ $(BENCH_M4_OBJ) -lm -lc -lgcc

$(BUILD)/bench-m4/%.o: %.c Makefile bench/bench.mk ports/qemu-m4/port.mk
	@mkdir -p $(dir $@)
	$(ARM_CC) $(M4_CFLAGS) -c -o $@ $<
