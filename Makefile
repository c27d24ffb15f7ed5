# The two commands a newcomer needs: `make demo` and `make test`.
# Each sets up what it needs first (Debian toolchain + QEMU, a virtualenv with
# the package); a second run finds everything in place and installs nothing.

VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
APT_PKGS := gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm \
            gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user \
            gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf qemu-system-misc \
            clang libclang-rt-14-dev

.PHONY: setup apt demo test test-all lint firmware clean

setup: apt $(STAMP)

# Debian packages: installed only if one of them is missing (python3-venv only where
# this python3 cannot make a virtualenv, as on a bare Debian).
apt:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	python3 -c 'import ensurepip, venv' 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	else echo "Debian packages present: $(APT_PKGS)"; fi

# The virtualenv is rebuilt only when pyproject.toml changes.
$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

firmware: setup
	$(MAKE) -C firmware qemu-m4

demo: setup
	$(VENV)/bin/poet demo

test: setup
	$(VENV)/bin/pytest -q

test-all: setup
	$(VENV)/bin/pytest -q -m 'not hw'

lint: setup
	$(VENV)/bin/ruff check host tests benchmarks

clean:
	rm -rf firmware/build
