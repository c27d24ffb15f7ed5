# mkr1000: the Arduino MKR1000 itself (ATSAMD21G18A, Cortex-M0+ 48 MHz, no FPU): its memory map
# behind the SAM-BA bootloader, SERCOM5 UART (Serial1), TC4/TC5 ticks, SD card pager on SERCOM1.
#   make mkr1000  -> build/mkr1000/poet.elf and build/mkr1000/poet.bin (what bossac writes at 0x2000)
# Built and size-checked here (tests/test_port_mkr1000.py); nothing here emulates a SAM D21, so the
# image runs only on a board (qemu-m0 is the executable stand-in). See ports/mkr1000/README.md.
#
# This file sorts first among the ports, so every variable here is its own (MKR_*): qemu-m0's and
# nrf52840's are not defined yet when it is read.
include drivers/drivers.mk

MKR_PREFIX ?= arm-none-eabi-
MKR_CC := $(MKR_PREFIX)gcc
MKR_SIZE := $(MKR_PREFIX)size
MKR_OBJCOPY := $(MKR_PREFIX)objcopy
MKR_ARCH := -mcpu=cortex-m0plus -mthumb -mfloat-abi=soft
# The RAM budget of the qemu-m0 stand-in, value for value (ports/qemu-m0/port.mk explains each;
# tests/test_port_mkr1000.py checks they stay equal), so a plan made on the stand-in fits the board.
# The SD driver's 512 B sector buffer and the card state, and port_nv_write's 256 B row buffer, come
# out of the stack's share: about 2.5 KiB left, above linker.ld's 1.5 KiB MIN_STACK. The model blob and
# frozen weights are in flash (linker.ld NV), as on the stand-in.
MKR_LIMITS := -DPOET_SCHEDULE_BLOB_MAX=2048u -DPOOL_BYTES=23552u
# POET_UNTILED: the fp32 kernels' plain loops (core/kernels/linear.c, conv_taps.h): on a core without an
# FPU a float multiply-add is a library call, and register tiles around it save nothing (docs/benchmarks.md,
# "Kernels", the M0+ table).
MKR_CFLAGS := $(WARN) -O2 -g -ffunction-sections -fdata-sections -fno-math-errno -fno-common -MMD -MP \
              $(MKR_ARCH) $(MKR_LIMITS) -DPOET_UNTILED
MKR_LDFLAGS := $(MKR_ARCH) -nostartfiles --specs=nano.specs -T ports/mkr1000/linker.ld \
               -Wl,--gc-sections -Wl,-Map,$(BUILD)/mkr1000/poet.map
MKR_SRC := $(CORE_SRC) ports/mkr1000/startup.c ports/mkr1000/port.c ports/shared/pool.c ports/shared/sd_pager.c \
           drivers/sd_spi.c drivers/millis.c
MKR_OBJ := $(patsubst %.c,$(BUILD)/mkr1000/%.o,$(MKR_SRC))

PORTS += mkr1000
DEPS += $(MKR_OBJ:.o=.d)
.PHONY: mkr1000

mkr1000: $(BUILD)/mkr1000/poet.bin
	@$(MKR_SIZE) $(BUILD)/mkr1000/poet.elf

$(BUILD)/mkr1000/poet.elf: $(MKR_OBJ) ports/mkr1000/linker.ld
	$(MKR_CC) $(MKR_LDFLAGS) -o $@ $(MKR_OBJ) -lm -lc -lgcc

# Raw image from the first loadable byte (0x2000, the vector table) to the end of .data's load copy.
$(BUILD)/mkr1000/poet.bin: $(BUILD)/mkr1000/poet.elf
	$(MKR_OBJCOPY) -O binary $< $@

$(BUILD)/mkr1000/%.o: %.c Makefile ports/mkr1000/port.mk
	@mkdir -p $(dir $@)
	$(MKR_CC) $(MKR_CFLAGS) -c -o $@ $<
