# Storage drivers shared by ports (SD card over SPI, NOR flash pager) and their native tests
# against C models of the devices:
#   make sd-spi-test     -> build/drivers-test/sd_spi_test     (driver + pager vs. the SD card model)
#   make nor-pager-test  -> build/drivers-test/nor_pager_test  (QSPI pager logic vs. a NOR flash model)
# The tests run under ASan + UBSan. Included from ports/nrf52840/port.mk (the first port to use
# them); the guard lets another port include it too.
ifndef POET_DRIVERS_MK
POET_DRIVERS_MK := 1

DRV_TEST_CC ?= cc
DRV_TEST_FLAGS := $(WARN) -O1 -g -MMD -MP -fsanitize=address,undefined -fno-omit-frame-pointer \
                  -fno-sanitize-recover=all
SD_TEST_SRC := drivers/sd_spi.c tests/sd_card_model.c tests/sd_spi_test.c
NOR_TEST_SRC := drivers/nor_pager.c tests/nor_pager_test.c
SD_TEST_OBJ := $(patsubst %.c,$(BUILD)/drivers-test/%.o,$(SD_TEST_SRC))
NOR_TEST_OBJ := $(patsubst %.c,$(BUILD)/drivers-test/%.o,$(NOR_TEST_SRC))

PORTS += sd-spi-test nor-pager-test
DEPS += $(SD_TEST_OBJ:.o=.d) $(NOR_TEST_OBJ:.o=.d)
.PHONY: sd-spi-test nor-pager-test

sd-spi-test: $(BUILD)/drivers-test/sd_spi_test
nor-pager-test: $(BUILD)/drivers-test/nor_pager_test

$(BUILD)/drivers-test/sd_spi_test: $(SD_TEST_OBJ)
	$(DRV_TEST_CC) $(DRV_TEST_FLAGS) -o $@ $^

$(BUILD)/drivers-test/nor_pager_test: $(NOR_TEST_OBJ)
	$(DRV_TEST_CC) $(DRV_TEST_FLAGS) -o $@ $^

$(BUILD)/drivers-test/%.o: %.c Makefile drivers/drivers.mk
	@mkdir -p $(dir $@)
	$(DRV_TEST_CC) $(DRV_TEST_FLAGS) -c -o $@ $<

endif
