# The standalone example (examples/standalone/main.c) built from a `poet export` folder, for a stand-in:
#   make standalone-qemu-m4 EXPORT=/path/to/folder [STANDALONE_BUILD=dir] [APP_FLAGS=-DPOET_APP_EPOCHS=3u]
#   make standalone-qemu-m0 EXPORT=...   (the MKR1000's M0+; APP_FLAGS=-DPOET_APP_X_FLOATS=256u fits 32 KB)
# -> $(STANDALONE_BUILD)/<port>/app.elf (default build/standalone-<port>/app.elf): the device API (DEVICE_SRC) and the
# board support it needs (ticks, semihosting files for sensor, flash and card), no protocol server.
EXPORT ?=
APP_FLAGS ?=
SA_BOARD_SRC := ports/shared/mps2.c ports/shared/semihost_pager.c ports/shared/semihost_files.c \
                ports/shared/no_marker.c examples/standalone/main.c

# $(call standalone,PORT,CFLAGS): the rules of standalone-PORT, built with ports/PORT/startup.c and
# linked by ports/PORT/standalone.ld
define standalone
SA_$(1)_DIR := $$(if $$(STANDALONE_BUILD),$$(STANDALONE_BUILD)/$(1),$$(BUILD)/standalone-$(1))
SA_$(1)_OBJ := $$(patsubst %.c,$$(SA_$(1)_DIR)/%.o,$$(DEVICE_SRC) ports/$(1)/startup.c $$(SA_BOARD_SRC)) \
               $$(SA_$(1)_DIR)/export/bundle.o
SA_$(1)_CFLAGS := $(2) -Icore -Iports/shared -I$$(EXPORT) $$(APP_FLAGS)
.PHONY: standalone-$(1)
DEPS += $$(SA_$(1)_OBJ:.o=.d)

standalone-$(1): $$(SA_$(1)_DIR)/app.elf
	@$$(ARM_SIZE) $$<

$$(SA_$(1)_DIR)/app.elf: $$(SA_$(1)_OBJ) ports/$(1)/standalone.ld ports/$(1)/sections.ld
	@test -n "$$(EXPORT)" || { echo "standalone-$(1): give EXPORT=<a poet export folder>"; exit 2; }
	$$(ARM_CC) $(filter -m%,$(2)) -nostartfiles --specs=nano.specs -T ports/$(1)/standalone.ld -Wl,--gc-sections \
	    -Wl,-Map,$$(SA_$(1)_DIR)/app.map -o $$@ $$(SA_$(1)_OBJ) -lm -lc -lgcc

$$(SA_$(1)_DIR)/export/bundle.o: $$(EXPORT)/bundle.c $$(EXPORT)/bundle.h
	@mkdir -p $$(dir $$@)
	$$(ARM_CC) $$(SA_$(1)_CFLAGS) -c -o $$@ $$<

$$(SA_$(1)_DIR)/%.o: %.c Makefile examples/examples.mk $$(EXPORT)/bundle.h
	@mkdir -p $$(dir $$@)
	$$(ARM_CC) $$(SA_$(1)_CFLAGS) -c -o $$@ $$<
endef

$(eval $(call standalone,qemu-m4,$(ARM_COMMON) $(M4_ARCH)))
$(eval $(call standalone,qemu-m0,$(ARM_COMMON) $(M0_ARCH) -DPOET_UNTILED))
