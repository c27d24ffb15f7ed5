"""An exported folder builds warning-free (-Wall -Wextra -Werror) with every compiler poet's boards use:
the host's gcc and clang, arm-none-eabi-gcc for the M4F and M0+ boards, the RISC-V one for the ESP32-C3;
and a C++ application including poet.h links against it and trains and predicts (an Arduino sketch is
C++)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import run
from test_export import _workspace

STRICT = "-std=c99 -O2 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes"
TOOLCHAINS = {
    "gcc": ("cc", "ar", ""),
    "clang": ("clang", "ar", ""),
    "cortex-m4f": ("arm-none-eabi-gcc", "arm-none-eabi-ar",
                   "-mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16"),
    "cortex-m0plus": ("arm-none-eabi-gcc", "arm-none-eabi-ar", "-mcpu=cortex-m0plus -mthumb"),
    "esp32c3-rv32": ("riscv64-unknown-elf-gcc", "riscv64-unknown-elf-ar",
                     "-march=rv32imc_zicsr -mabi=ilp32 --specs=picolibc.specs"),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("exported")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        _workspace(root / "workspace", mp)
        out = root / "out"
        assert run(["export", "--model", "cnn-digits", "--train", "bias+last:1", "--ram", "200k",
                    "--optimizer", "adam", "-o", str(out)]) == 0
    return out


@pytest.mark.parametrize("name", TOOLCHAINS)
def test_the_export_builds_warning_free(exported: Path, tmp_path: Path, name: str) -> None:
    cc, ar, arch = TOOLCHAINS[name]
    if shutil.which(cc) is None or shutil.which(ar) is None:
        pytest.skip(f"needs {cc}")
    folder = tmp_path / "out"
    shutil.copytree(exported, folder)
    proc = subprocess.run(["make", "-C", str(folder), "-j2", f"CC={cc}", f"AR={ar}", f"CFLAGS={STRICT} {arch}"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warning" not in proc.stderr
    assert (folder / "libpoet.a").stat().st_size > 0


APP = r"""
// What a C++ application (an Arduino sketch) provides and calls: the port functions the runtime uses,
// a pool, then init, a training step and a prediction.
#include <cstdio>
#include <cstring>
#include <vector>

#include "bundle.h"
#include "poet.h"

extern "C" {
uint32_t port_ticks(void) { static uint32_t t; return t += 1000u; }
uint32_t port_tick_hz(void) { return 1000000u; }
int port_pager_open(void) { return 1; }  // no SD card on this board
int port_pager_write(uint32_t, const void *, uint32_t) { return 1; }
int port_pager_read(uint32_t, void *, uint32_t) { return 1; }
void port_mark(int) {}
}

static poet_device_t dev;
static uint64_t pool[(POET_BUNDLE_POOL_BYTES + 7u) / 8u];

int main() {
    int status = poet_init(&dev, poet_bundle, poet_bundle_bytes, pool, sizeof pool);
    if (status != POET_OK) { std::printf("init %d\n", status); return 1; }
    std::vector<float> x(poet_batch(&dev) * poet_input_elems(&dev), 0.5f);
    std::vector<int32_t> y(poet_batch(&dev), 3);
    poet_step_info_t info;
    status = poet_train_step(&dev, x.data(), y.data(), &info);
    std::vector<float> out(poet_output_elems(&dev));
    int p = poet_predict(&dev, x.data(), 1, out.data());
    std::printf("step %d loss %.4f steps %u predict %d outputs %u\n", status, info.loss, poet_steps(&dev), p,
                poet_output_elems(&dev));
    return status != POET_OK || p != POET_OK || poet_steps(&dev) != 1u;
}
"""


@pytest.mark.parametrize("cxx", ["g++", "clang++"])
def test_a_cpp_application_links_and_trains(exported: Path, tmp_path: Path, cxx: str) -> None:
    if shutil.which(cxx) is None:
        pytest.skip(f"needs {cxx}")
    folder = tmp_path / "out"
    shutil.copytree(exported, folder)
    subprocess.run(["make", "-C", str(folder), "-j2"], check=True, capture_output=True)
    (tmp_path / "app.cpp").write_text(APP)
    proc = subprocess.run([cxx, "-std=c++11", "-Wall", "-Wextra", "-Werror", "-I", str(folder), "-I",
                           str(folder / "runtime" / "core"), str(tmp_path / "app.cpp"), str(folder / "libpoet.a"),
                           "-lm", "-o", str(tmp_path / "app")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    done = subprocess.run([str(tmp_path / "app")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "step 0" in done.stdout and "predict 0 outputs 10" in done.stdout


