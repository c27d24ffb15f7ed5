# nrf52840: the nRF52840 itself (its memory map, UARTE0, TIMER1, and a board and pager chosen at build time).
#   make nrf52840         -> build/nrf52840/poet.elf         (DK pins, SD card over SPIM2, drivers/sd_spi.c)
#   make nrf52840-qspi    -> build/nrf52840-qspi/poet.elf    (DK pins, the DK's QSPI flash, drivers/nor_pager.c)
#   make nrf52840-dongle  -> build/nrf52840-dongle/poet.elf  (the Dongle's edge pins and 3.0 V GPIO, SD card)
# Each also gets a poet.hex beside it for the flashers (nrfutil pkg generate --application ... for
# the Dongle's bootloader; nrfjprog --program on a DK). See ports/nrf52840/README.md.
# Built and size-checked here (tests/test_port_nrf52840.py); nothing here emulates an nRF52, so
# the images run only on a board. This file sorts before qemu-m4's port.mk, so every variable
# here is its own (NRF_*), not qemu-m4's.
include drivers/drivers.mk

NRF_PREFIX ?= arm-none-eabi-
NRF_CC := $(NRF_PREFIX)gcc
NRF_SIZE := $(NRF_PREFIX)size
NRF_OBJCOPY := $(NRF_PREFIX)objcopy
NRF_ARCH := -mcpu=cortex-m4 -mthumb -mfpu=fpv4-sp-d16 -mfloat-abi=hard
NRF_CFLAGS := $(WARN) -O2 -g -ffunction-sections -fdata-sections -fno-math-errno -fno-common -MMD -MP \
              $(NRF_ARCH)
NRF_LDFLAGS := $(NRF_ARCH) -nostartfiles --specs=nano.specs -T ports/nrf52840/linker.ld -Wl,--gc-sections
NRF_SRC := $(CORE_SRC) ports/nrf52840/startup.c ports/nrf52840/port.c ports/shared/pool.c drivers/millis.c
NRF_SD_OBJ := $(patsubst %.c,$(BUILD)/nrf52840/%.o,$(NRF_SRC) ports/shared/sd_pager.c drivers/sd_spi.c)
NRF_QSPI_OBJ := $(patsubst %.c,$(BUILD)/nrf52840-qspi/%.o,$(NRF_SRC) drivers/nor_pager.c)
NRF_DONGLE_OBJ := $(patsubst %.c,$(BUILD)/nrf52840-dongle/%.o,$(NRF_SRC) ports/shared/sd_pager.c drivers/sd_spi.c)
NRF_DEPS := Makefile ports/nrf52840/port.mk
# The pool takes what the rest leaves of 256 KB: static buffers of the core (~8 KB; the model blob
# and frozen weights are in flash, linker.ld NV), 8 KB stack, this port's rings and DMA buffers, and
# the pager's buffer (512 B for SD, 4 KB for QSPI). The SD build keeps the qemu-m4 stand-in's pool
# (231 KiB), so a plan made on the stand-in fits it, and so does the Dongle's (the same code but for
# pins); the QSPI build gives the 4 KB sector buffer back. The link fails if it does not fit.
NRF_SD_POOL := -DPOOL_BYTES=236544u
NRF_QSPI_POOL := -DPOOL_BYTES=232448u

PORTS += nrf52840 nrf52840-qspi nrf52840-dongle
DEPS += $(NRF_SD_OBJ:.o=.d) $(NRF_QSPI_OBJ:.o=.d) $(NRF_DONGLE_OBJ:.o=.d)
.PHONY: nrf52840 nrf52840-qspi nrf52840-dongle

nrf52840: $(BUILD)/nrf52840/poet.elf
	@$(NRF_SIZE) $<

nrf52840-qspi: $(BUILD)/nrf52840-qspi/poet.elf
	@$(NRF_SIZE) $<

nrf52840-dongle: $(BUILD)/nrf52840-dongle/poet.elf
	@$(NRF_SIZE) $<

$(BUILD)/nrf52840/poet.elf: $(NRF_SD_OBJ) ports/nrf52840/linker.ld
	$(NRF_CC) $(NRF_LDFLAGS) -Wl,-Map,$(@:.elf=.map) -o $@ $(NRF_SD_OBJ) -lm -lc -lgcc
	$(NRF_OBJCOPY) -O ihex $@ $(@:.elf=.hex)

$(BUILD)/nrf52840-qspi/poet.elf: $(NRF_QSPI_OBJ) ports/nrf52840/linker.ld
	$(NRF_CC) $(NRF_LDFLAGS) -Wl,-Map,$(@:.elf=.map) -o $@ $(NRF_QSPI_OBJ) -lm -lc -lgcc
	$(NRF_OBJCOPY) -O ihex $@ $(@:.elf=.hex)

$(BUILD)/nrf52840-dongle/poet.elf: $(NRF_DONGLE_OBJ) ports/nrf52840/linker.ld
	$(NRF_CC) $(NRF_LDFLAGS) -Wl,-Map,$(@:.elf=.map) -o $@ $(NRF_DONGLE_OBJ) -lm -lc -lgcc
	$(NRF_OBJCOPY) -O ihex $@ $(@:.elf=.hex)

# The ops' checks (run once per model upload) and their runs (a call into a kernel), and what runs around a
# step rather than in it (the protocol, the model and schedule parsers, the port and its drivers), are built
# for size: flash is this port's budget (tests/test_port_nrf52840.py); so are the kernels a fine-tuning step
# spends least in (batch norms, pooling, layout copies: 2 KB of the 64 KiB); the convolutions, dense layers,
# activations and the interpreter stay -O2. The emulated boards' images (qemu-m4), which the profiles measure,
# build them as before.
NRF_FOR_SIZE := core/ops/% core/protocol core/model core/schedule core/pool_layout ports/nrf52840/port drivers/% \
                core/kernels/norm core/kernels/pool core/kernels/layout
$(foreach b,nrf52840 nrf52840-qspi nrf52840-dongle,$(addprefix $(BUILD)/$(b)/,$(addsuffix .o,$(NRF_FOR_SIZE)))): \
	NRF_CFLAGS += -Os

$(BUILD)/nrf52840/%.o: %.c $(NRF_DEPS)
	@mkdir -p $(dir $@)
	$(NRF_CC) $(NRF_CFLAGS) -DPOET_PAGER_SD $(NRF_SD_POOL) -c -o $@ $<

$(BUILD)/nrf52840-qspi/%.o: %.c $(NRF_DEPS)
	@mkdir -p $(dir $@)
	$(NRF_CC) $(NRF_CFLAGS) -DPOET_PAGER_QSPI $(NRF_QSPI_POOL) -c -o $@ $<

$(BUILD)/nrf52840-dongle/%.o: %.c $(NRF_DEPS)
	@mkdir -p $(dir $@)
	$(NRF_CC) $(NRF_CFLAGS) -DPOET_PAGER_SD -DNRF_DONGLE $(NRF_SD_POOL) -c -o $@ $<
