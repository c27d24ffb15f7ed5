# esp32c3: the ESP32-C3 itself, bare metal (rv32imc, soft float, picolibc): the link on UART0 or on the
# USB-Serial/JTAG controller, SYSTIMER ticks, SD pager on bit-banged SPI (drivers/sd_spi.c). See
# ports/esp32c3/README.md ("Which image for which board").
#   make esp32c3      -> build/esp32c3/poet.elf and poet.bin: the link on UART0 (GPIO21/20), for boards
#                        whose USB connector is a USB-UART bridge (ESP32-C3-DevKitM-1, DevKitC-02)
#   make esp32c3-usb  -> build/esp32c3-usb/poet.elf and poet.bin: the link on the chip's own USB
#                        (303a:1001), for boards wired to it (XIAO ESP32C3, ESP32-C3-DevKit-RUST-1)
# The .bin (the image the ROM boots, flashed at offset 0) is made when esptool is installed
# (pip install -e '.[dev]').
# Built, imaged and checked statically here (tests/test_port_esp32c3.py); QEMU has no ESP32-C3
# machine, so the image runs only on a board: qemu-rv32 is the executable stand-in.
# This file sorts first among the ports, so every variable here is its own (C3_*): qemu-rv32's
# RV_* are not defined yet when it is read.
include drivers/drivers.mk

C3_PREFIX ?= riscv64-unknown-elf-
C3_CC := $(C3_PREFIX)gcc
C3_SIZE := $(C3_PREFIX)size
# esptool makes the image; the repository's virtualenv has it (pyproject dev extra).
C3_PYTHON ?= $(firstword $(wildcard ../.venv/bin/python) python3)
# Zicsr spelled out for the CSR accesses (gcc 12); the link names the base ISA only, so that gcc
# picks picolibc's rv32im/ilp32 multilib (no rv32imc one ships; qemu-rv32's port.mk explains).
C3_ARCH := -march=rv32imc_zicsr -mabi=ilp32
C3_LINK_ARCH := -march=rv32imc -mabi=ilp32
# The pool (282 KiB) takes what the rest leaves of the 386832 B of SRAM1 this image may use (linker.ld):
# code and constants (~68 KB with the low-precision and static-int8 kernels and streamed weights: unlike on the qemu-rv32 stand-in, whose code
# sits in "flash", code runs from the same SRAM here), the core's static buffers (~8 KB; the model blob and
# frozen weights are in flash, linker.ld NV), this port's receive ring, the SD driver's sector buffer and
# nv's 256 B write buffer, and an 8 KB stack. The link fails if it does not fit;
# tests/test_port_esp32c3.py checks the margin. POET_UNTILED: the fp32 kernels' plain loops (a core without an
# FPU); POET_SMALL_CODE: the int8 convolution without its channel blocks, which would cost the pool 700 B
# (core/kernels/conv_taps.h).
C3_CFLAGS := $(WARN) -O2 -g -ffunction-sections -fdata-sections -fno-math-errno -fno-common -MMD -MP \
             $(C3_ARCH) --specs=picolibc.specs -DPOOL_BYTES=288768u -DPOET_UNTILED -DPOET_SMALL_CODE
# max-page-size=16: the program headers start at the sections themselves; with 4 KB pages the
# DRAM one would start a page early, its file bytes (ELF headers) aliasing the end of the code.
C3_LDFLAGS := $(C3_LINK_ARCH) --specs=picolibc.specs -nostartfiles -T ports/esp32c3/linker.ld \
              -Wl,--gc-sections -Wl,-z,max-page-size=16
C3_SRC := $(CORE_SRC) ports/esp32c3/port.c ports/shared/pool.c ports/shared/sd_pager.c drivers/sd_spi.c drivers/millis.c
C3_OBJ := $(patsubst %.c,$(BUILD)/esp32c3/%.o,$(C3_SRC)) $(BUILD)/esp32c3/ports/esp32c3/startup.o
C3_USB_OBJ := $(patsubst %.c,$(BUILD)/esp32c3-usb/%.o,$(C3_SRC)) $(BUILD)/esp32c3-usb/ports/esp32c3/startup.o
C3_DEPS := Makefile ports/esp32c3/port.mk
# elf2image's flash options in their short spelling, which esptool 4.x and 5.x both accept
# (5.x renamed --flash_mode to --flash-mode etc.): DIO at 80 MHz, 4 MB (the C3FH4 / DevKitM-1
# module's flash). They only fill the header for the ROM; this image does not read flash.
C3_IMAGE_FLAGS := -fm dio -ff 80m -fs 4MB

PORTS += esp32c3 esp32c3-usb
DEPS += $(C3_OBJ:.o=.d) $(C3_USB_OBJ:.o=.d)
.PHONY: esp32c3 esp32c3-usb

esp32c3: $(BUILD)/esp32c3/poet.elf $(BUILD)/esp32c3/poet.bin
	@$(C3_SIZE) $(BUILD)/esp32c3/poet.elf

esp32c3-usb: $(BUILD)/esp32c3-usb/poet.elf $(BUILD)/esp32c3-usb/poet.bin
	@$(C3_SIZE) $(BUILD)/esp32c3-usb/poet.elf

$(BUILD)/esp32c3/poet.elf: $(C3_OBJ) ports/esp32c3/linker.ld
	$(C3_CC) $(C3_LDFLAGS) -Wl,-Map,$(@:.elf=.map) -o $@ $(C3_OBJ) -lm -lc -lgcc

$(BUILD)/esp32c3-usb/poet.elf: $(C3_USB_OBJ) ports/esp32c3/linker.ld
	$(C3_CC) $(C3_LDFLAGS) -Wl,-Map,$(@:.elf=.map) -o $@ $(C3_USB_OBJ) -lm -lc -lgcc

# Without esptool the ELF is still built (make all must not fail on a machine without the dev
# extra); the .bin is then missing, which the test reports.
$(BUILD)/esp32c3/poet.bin $(BUILD)/esp32c3-usb/poet.bin: %/poet.bin: %/poet.elf
	@if $(C3_PYTHON) -c 'import esptool' 2>/dev/null; then \
	    echo "$(C3_PYTHON) -m esptool --chip esp32c3 elf2image $(C3_IMAGE_FLAGS) -o $@ $<"; \
	    $(C3_PYTHON) -m esptool --chip esp32c3 elf2image $(C3_IMAGE_FLAGS) -o $@ $< >/dev/null; \
	else \
	    echo "esp32c3: esptool not installed (pip install -e '.[dev]'): $@ not made"; \
	fi

# The ops' checks and runs, the protocol, parsers, port and drivers built for size, as the nRF52840's
# (ports/nrf52840/port.mk): code runs from the SRAM the pool would have (tests/test_port_esp32c3.py); the kernels
# and the interpreter stay -O2
C3_FOR_SIZE := core/ops/% core/protocol core/model core/schedule core/pool_layout ports/esp32c3/port drivers/%
$(foreach b,esp32c3 esp32c3-usb,$(addprefix $(BUILD)/$(b)/,$(addsuffix .o,$(C3_FOR_SIZE)))): C3_CFLAGS += -Os

$(BUILD)/esp32c3/%.o: %.c $(C3_DEPS)
	@mkdir -p $(dir $@)
	$(C3_CC) $(C3_CFLAGS) -DPOET_C3_USB=0 -c -o $@ $<

$(BUILD)/esp32c3/%.o: %.S $(C3_DEPS)
	@mkdir -p $(dir $@)
	$(C3_CC) $(C3_ARCH) -g -MMD -MP -c -o $@ $<

$(BUILD)/esp32c3-usb/%.o: %.c $(C3_DEPS)
	@mkdir -p $(dir $@)
	$(C3_CC) $(C3_CFLAGS) -DPOET_C3_USB=1 -c -o $@ $<

$(BUILD)/esp32c3-usb/%.o: %.S $(C3_DEPS)
	@mkdir -p $(dir $@)
	$(C3_CC) $(C3_ARCH) -g -MMD -MP -c -o $@ $<
