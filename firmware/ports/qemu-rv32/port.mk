# qemu-rv32: the ESP32-C3 stand-in (rv32imc, soft float, picolibc) on QEMU virt.
# No rv32imc multilib ships with picolibc here; gcc maps -march=rv32imc to rv32im/ilp32 (its
# MULTILIB_REUSE), so libc/libm are uncompressed rv32im code, which an rv32imc core runs too.
RV_PREFIX ?= riscv64-unknown-elf-
RV_CC := $(RV_PREFIX)gcc
RV_SIZE := $(RV_PREFIX)size
# The port's CSR accesses need Zicsr spelled out (gcc 12), but naming it at link time would miss
# the multilib and fall back to the rv64 default, so the link names the base ISA only.
RV32_ARCH := -march=rv32imc_zicsr -mabi=ilp32
RV32_LINK_ARCH := -march=rv32imc -mabi=ilp32
# The pool (356 KiB): what the 384 KB of RAM (linker.ld) leave after the static buffers and the stack;
# code sits in "flash" on this stand-in, so it gets more than the C3 itself (esp32c3/port.mk). Its kernels
# are the C3's (POET_UNTILED, POET_SMALL_CODE), so what it profiles is what the C3 runs.
RV32_CFLAGS := $(WARN) -O2 -g -ffunction-sections -fdata-sections -fno-math-errno -fno-common -MMD -MP \
               $(RV32_ARCH) --specs=picolibc.specs -DPOOL_BYTES=367616u -DPOET_UNTILED -DPOET_SMALL_CODE
RV32_LDFLAGS := $(RV32_LINK_ARCH) --specs=picolibc.specs -nostartfiles -T ports/qemu-rv32/linker.ld \
                -Wl,--gc-sections -Wl,-Map,$(BUILD)/qemu-rv32/poet.map
RV32_SRC := $(CORE_SRC) ports/qemu-rv32/port.c ports/shared/serve_main.c ports/shared/semihost_pager.c ports/shared/no_marker.c ports/shared/pool.c ports/shared/nv_ram.c
RV32_OBJ := $(patsubst %.c,$(BUILD)/qemu-rv32/%.o,$(RV32_SRC)) $(BUILD)/qemu-rv32/ports/qemu-rv32/startup.o

PORTS += qemu-rv32
DEPS += $(RV32_OBJ:.o=.d)
.PHONY: qemu-rv32

qemu-rv32: $(BUILD)/qemu-rv32/poet.elf
	@$(RV_SIZE) $<

$(BUILD)/qemu-rv32/poet.elf: $(RV32_OBJ) ports/qemu-rv32/linker.ld ports/qemu-rv32/sections.ld
	$(RV_CC) $(RV32_LDFLAGS) -o $@ $(RV32_OBJ) -lm -lc -lgcc

$(BUILD)/qemu-rv32/%.o: %.c Makefile ports/qemu-rv32/port.mk
	@mkdir -p $(dir $@)
	$(RV_CC) $(RV32_CFLAGS) -c -o $@ $<

$(BUILD)/qemu-rv32/%.o: %.S Makefile ports/qemu-rv32/port.mk
	@mkdir -p $(dir $@)
	$(RV_CC) $(RV32_ARCH) -g -MMD -MP -c -o $@ $<
