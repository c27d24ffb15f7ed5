# libFuzzer harnesses for the decoders and validators that face untrusted bytes (firmware/fuzz/):
#   make fuzz-schedule -> build/fuzz/fuzz-schedule  (schedule validator, then the interpreter on what it accepts)
#   make fuzz-model    -> build/fuzz/fuzz-model     (model blob parser, then a keep-all step of what it accepts)
#   make fuzz-protocol -> build/fuzz/fuzz-protocol  (poet_run: framing, every request, STEP on a 64 KiB pool)
#   make fuzz-device   -> build/fuzz/fuzz-device    (the device API's init and restore, then a step, a
#                                                    prediction and a save of what they accept)
# Run one:  build/fuzz/fuzz-schedule fuzz/corpus/schedule   (libFuzzer options after it, e.g. -max_total_time=60)
# Replay:   build/fuzz/fuzz-schedule fuzz/crashes/schedule/*  (files as arguments run once each)
# Needs clang with its runtime (Debian: clang, libclang-rt-14-dev). The core is compiled with the
# fuzzer's coverage instrumentation and ASan + UBSan, aborting on the first report.
FUZZ_CC ?= clang
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS := $(WARN) -O1 -g -MMD -MP $(FUZZ_SAN) -DNV_BYTES=16384u
FUZZ_CORE_OBJ := $(patsubst %.c,$(BUILD)/fuzz/%.o,$(CORE_SRC) $(filter-out $(RUNTIME_SRC),$(DEVICE_SRC)) \
                   fuzz/fuzz_port.c fuzz/fuzz_common.c ports/shared/nv_ram.c)
FUZZ_NAMES := schedule model protocol device
FUZZ_DEPS := Makefile fuzz/fuzz.mk

FUZZ_MAIN_OBJ := $(patsubst %,$(BUILD)/fuzz/fuzz/fuzz_%.o,$(FUZZ_NAMES))
.PHONY: fuzz $(addprefix fuzz-,$(FUZZ_NAMES))
DEPS += $(FUZZ_CORE_OBJ:.o=.d) $(FUZZ_MAIN_OBJ:.o=.d)
# made through a pattern rule, so make would delete them as intermediates and rebuild every time
.SECONDARY: $(FUZZ_CORE_OBJ) $(FUZZ_MAIN_OBJ)

fuzz: $(addprefix fuzz-,$(FUZZ_NAMES))
$(addprefix fuzz-,$(FUZZ_NAMES)): fuzz-%: $(BUILD)/fuzz/fuzz-%

$(BUILD)/fuzz/fuzz-%: $(BUILD)/fuzz/fuzz/fuzz_%.o $(FUZZ_CORE_OBJ)
	$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ -lm

$(BUILD)/fuzz/%.o: %.c $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<
