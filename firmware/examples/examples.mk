# The standalone example (examples/standalone/main.c) built from a `poet export` folder, for a stand-in:
#   make standalone-qemu-m4 EXPORT=/path/to/folder [STANDALONE_BUILD=dir] [APP_FLAGS=-DPOET_APP_EPOCHS=3u]
#   make standalone-qemu-m0 EXPORT=...   (the MKR1000's M0+; APP_FLAGS=-DPOET_APP_X_FLOATS=256u fits 32 KB)
#   make standalone-qemu-rv32 EXPORT=... (the ESP32-C3's RISC-V)
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

# The ESP32-C3 stand-in (qemu-rv32): the same application, its startup in assembly and picolibc.
SA_RV_DIR := $(if $(STANDALONE_BUILD),$(STANDALONE_BUILD)/qemu-rv32,$(BUILD)/standalone-qemu-rv32)
SA_RV_SRC := $(DEVICE_SRC) ports/qemu-rv32/port.c $(filter-out ports/shared/mps2.c,$(SA_BOARD_SRC))
SA_RV_OBJ := $(patsubst %.c,$(SA_RV_DIR)/%.o,$(SA_RV_SRC)) $(SA_RV_DIR)/ports/qemu-rv32/startup.o \
             $(SA_RV_DIR)/export/bundle.o
SA_RV_CFLAGS := $(RV32_CFLAGS) -Icore -Iports/shared -I$(EXPORT) $(APP_FLAGS)
.PHONY: standalone-qemu-rv32
DEPS += $(SA_RV_OBJ:.o=.d)

standalone-qemu-rv32: $(SA_RV_DIR)/app.elf
	@$(RV_SIZE) $<

$(SA_RV_DIR)/app.elf: $(SA_RV_OBJ) ports/qemu-rv32/standalone.ld ports/qemu-rv32/sections.ld
	@test -n "$(EXPORT)" || { echo "standalone-qemu-rv32: give EXPORT=<a poet export folder>"; exit 2; }
	$(RV_CC) $(RV32_LINK_ARCH) --specs=picolibc.specs -nostartfiles -T ports/qemu-rv32/standalone.ld \
	    -Wl,--gc-sections -Wl,-Map,$(SA_RV_DIR)/app.map -o $@ $(SA_RV_OBJ) -lm -lc -lgcc

$(SA_RV_DIR)/export/bundle.o: $(EXPORT)/bundle.c $(EXPORT)/bundle.h
	@mkdir -p $(dir $@)
	$(RV_CC) $(SA_RV_CFLAGS) -c -o $@ $<

$(SA_RV_DIR)/%.o: %.c Makefile examples/examples.mk $(EXPORT)/bundle.h
	@mkdir -p $(dir $@)
	$(RV_CC) $(SA_RV_CFLAGS) -c -o $@ $<

$(SA_RV_DIR)/%.o: %.S Makefile examples/examples.mk
	@mkdir -p $(dir $@)
	$(RV_CC) $(RV32_ARCH) -g -MMD -MP -c -o $@ $<
