# The standalone example (examples/standalone/main.c) built from a `poet export` folder:
#   make standalone-qemu-m4 EXPORT=/path/to/folder [STANDALONE_BUILD=dir] [APP_FLAGS=-DPOET_APP_EPOCHS=3]
# -> $(STANDALONE_BUILD)/app.elf, the nRF52840 stand-in's image: the device API (DEVICE_SRC), the
# board support it needs (ticks, semihosting files for sensor, flash and card), no protocol server.
EXPORT ?=
STANDALONE_BUILD ?= $(BUILD)/standalone-qemu-m4
APP_FLAGS ?=
SA_M4_SRC := $(DEVICE_SRC) ports/qemu-m4/startup.c ports/shared/mps2.c ports/shared/semihost_pager.c \
             ports/shared/semihost_files.c ports/shared/no_marker.c examples/standalone/main.c
SA_M4_OBJ := $(patsubst %.c,$(STANDALONE_BUILD)/%.o,$(SA_M4_SRC)) $(STANDALONE_BUILD)/export/bundle.o
SA_M4_CFLAGS := $(ARM_COMMON) $(M4_ARCH) -Icore -Iports/shared -I$(EXPORT) $(APP_FLAGS)

.PHONY: standalone-qemu-m4
DEPS += $(SA_M4_OBJ:.o=.d)

standalone-qemu-m4: $(STANDALONE_BUILD)/app.elf
	@$(ARM_SIZE) $<

$(STANDALONE_BUILD)/app.elf: $(SA_M4_OBJ) ports/qemu-m4/standalone.ld ports/qemu-m4/sections.ld
	@test -n "$(EXPORT)" || { echo "standalone-qemu-m4: give EXPORT=<a poet export folder>"; exit 2; }
	$(ARM_CC) $(M4_ARCH) -nostartfiles --specs=nano.specs -T ports/qemu-m4/standalone.ld -Wl,--gc-sections \
	    -Wl,-Map,$(STANDALONE_BUILD)/app.map -o $@ $(SA_M4_OBJ) -lm -lc -lgcc

$(STANDALONE_BUILD)/export/bundle.o: $(EXPORT)/bundle.c $(EXPORT)/bundle.h
	@mkdir -p $(dir $@)
	$(ARM_CC) $(SA_M4_CFLAGS) -c -o $@ $<

$(STANDALONE_BUILD)/%.o: %.c Makefile examples/examples.mk $(EXPORT)/bundle.h
	@mkdir -p $(dir $@)
	$(ARM_CC) $(SA_M4_CFLAGS) -c -o $@ $<
