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

.PHONY: setup apt demo test test-loaded test-all lint firmware clean lock

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
	else echo "Debian packages present: $(APT_PKGS)"; fi; \
	dpkg-query -W -f='$${Package}=$${Version}\n' $(APT_PKGS) | sort | diff -q - debian-versions.txt >/dev/null \
	  || echo "note: Debian package versions differ from debian-versions.txt (what CI last tested; make lock records them)"

# The virtualenv is rebuilt only when pyproject.toml or constraints.txt changes. constraints.txt
# pins every Python package to the version CI tested, so a fresh machine gets the same ones.
$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	@touch $@

# Re-pin: the newest releases pyproject.toml allows, resolved in a scratch virtualenv, written to
# constraints.txt (and the Debian packages' versions to debian-versions.txt); then run make test.
# highspy 1.16.0 is left out: it returns a MIP start as optimal when it is not (poet/milp.py).
LOCK_VENV := /tmp/poet-lock-venv
lock: apt
	rm -rf $(LOCK_VENV) && python3 -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install -q -e '.[dev]' 'highspy!=1.16.0'
	{ echo "# pip freeze of a fresh 'pip install -e .[dev]': written by 'make lock', read by 'make setup'"; \
	  $(LOCK_VENV)/bin/pip freeze --exclude-editable | sed 's/+cpu$$//'; } > constraints.txt
	dpkg-query -W -f='$${Package}=$${Version}\n' $(APT_PKGS) | sort > debian-versions.txt
	rm -rf $(LOCK_VENV)

firmware: setup
	$(MAKE) -C firmware qemu-m4

demo: setup
	$(VENV)/bin/poet demo

test: setup
	$(VENV)/bin/pytest -q -n auto

# The same suite with every core kept busy (tools/busy-cores): no verdict may depend on the machine's
# speed or load, and this is where one that does shows.
test-loaded: setup
	tools/busy-cores $(VENV)/bin/pytest -q -n auto

test-all: setup
	$(VENV)/bin/pytest -q -n auto -m "not hw"

lint: setup
	$(VENV)/bin/ruff check host tests benchmarks

clean:
	rm -rf firmware/build
