"""The head start's hold below the sample (pytest_autotune/measure/devices/cuda/hold.py, driver.py): the spin kernel's
arguments, flag and status page, its size, the PTX it is built from, the driver calls through ctypes (on a fake
libcuda), and the hold's place in the tamper snapshot. No GPU needed; the kernel itself
runs on the H200 (tests/test_cuda_device.py)."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from types import SimpleNamespace

import pytest
from cuda_fakes import FakeDriver, FakeGPU

from pytest_autotune.measure.devices.cuda import CudaDevice
from pytest_autotune.measure.devices.cuda import head_start as head_start_mod
from pytest_autotune.measure.devices.cuda import hold as hold_mod
from pytest_autotune.measure.devices.cuda.driver import Driver, DriverError
from pytest_autotune.sandbox.tamper import TamperSnapshot


def test_the_spin_hold_is_queued_released_and_read_back_by_its_number():
    gpu = FakeGPU()
    drv = FakeDriver(gpu)
    hold = hold_mod.SpinHold(drv, 0.003, blocks=528)  # type: ignore[arg-type]
    t1 = hold.begin(stream=7)
    t2 = hold.begin(stream=7)
    assert (t1, t2) == (1, 2)
    fn, stream, args, blocks, threads = drv.launches[1]
    assert fn == hold.function and stream == 7 and (blocks, threads) == (528, hold_mod.HOLD_THREADS)
    assert args == [hold.dev, 2, 3_000_000, hold.dev + hold_mod.STATUS_OFFSET, hold.go]
    hold.release(t2)
    assert ctypes.c_uint32.from_address(hold.host).value == 2
    # the status page is read only for the sample whose number the kernel wrote last
    status = hold.host + hold_mod.STATUS_OFFSET
    ctypes.c_uint32.from_address(status + 4).value = 1
    ctypes.c_uint32.from_address(status).value = 1
    assert hold.expired(t2) is None
    ctypes.c_uint32.from_address(status).value = 2
    assert hold.expired(t2) is True


def test_the_hold_fills_every_sm():
    drv = SimpleNamespace(device_attribute=lambda i, attr: {16: 132, 39: 2048}[attr])
    assert hold_mod.hold_blocks(drv, 0) == 528  # H200: 132 SMs x 4 blocks of 512
    drv = SimpleNamespace(device_attribute=lambda i, attr: {16: 84, 39: 1536}[attr])
    assert hold_mod.hold_blocks(drv, 0) == 252  # a GPU of 1536 threads an SM: 3 blocks each
    with pytest.raises(DriverError, match="cannot fill it"):
        hold_mod.hold_blocks(SimpleNamespace(device_attribute=lambda i, attr: None), 0)


def test_the_kernel_takes_the_arguments_the_hold_passes():
    """The PTX's parameters, in order and width, are what SpinHold.begin marshals (u64 flag, u32 number, u64
    deadline, u64 status, u64 device word); it reads through generic volatile loads (mapped host memory and the
    device word, re-read every poll), times itself on %globaltimer, blocks of at most HOLD_THREADS threads, and the
    number goes to the status page last, after a system-wide fence."""
    ptx = hold_mod.HOLD_PTX
    assert f".visible .entry {hold_mod.HOLD_KERNEL}(" in ptx and f".maxntid {hold_mod.HOLD_THREADS}, 1, 1" in ptx
    params = re.findall(r"\.param \.(u\d+) (\w+)", ptx)
    assert [w for w, _ in params] == ["u64", "u32", "u64", "u64", "u64"]
    for _, name in params:
        assert f"[{name}]" in ptx  # each one loaded
    assert "ld.volatile.u32" in ptx and "ld.global" not in ptx and "%globaltimer" in ptx and "bar.sync" in ptx
    done = ptx[ptx.index("$L_done:"):ptx.index("$L_wait:")]
    assert done.index("membar.sys") < done.index("st.volatile.u32 \t[%rd3], %r1")
    # every register used is declared
    decl = {k: int(n) for k, n in re.findall(r"\.reg \.\w+ \t%(\w+)<(\d+)>", ptx)}
    for reg, idx in re.findall(r"%(p|r|rd)(\d+)", ptx):
        assert int(idx) < decl[reg], f"%{reg}{idx} undeclared"


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas (CUDA toolkit) on this machine: the PTX is then "
                    "compiled only by the driver's JIT on the GPU host")
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_the_hold_ptx_compiles(tmp_path, arch):
    """The same JIT step the driver does at setup (cuModuleLoadDataEx), by the toolkit's assembler: the H200 is
    sm_90; the PTX targets sm_70 and later (CUDA 13's ptxas assembles from sm_75 on)."""
    src = tmp_path / "hold.ptx"
    src.write_text(hold_mod.HOLD_PTX)
    out = subprocess.run(["ptxas", "--gpu-name", arch, "-v", str(src), "-o", str(tmp_path / "hold.cubin")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Used" in out.stdout + out.stderr


class _FakeLib:
    """libcuda's entry points the hold needs, recording what ctypes hands them."""

    def __init__(self, jit_error: str = "") -> None:
        self.jit_error = jit_error
        self.calls: list = []
        self.page = ctypes.create_string_buffer(4096)

    def cuModuleLoadDataEx(self, module, image, n, opts, vals):
        self.calls.append(("load", image, n, list(opts[:n])))
        if self.jit_error:
            ctypes.memmove(vals[0], self.jit_error.encode(), len(self.jit_error))
            return 218  # CUDA_ERROR_INVALID_PTX
        module._obj.value = 0x55
        return 0

    def cuModuleGetFunction(self, fn, module, name):
        self.calls.append(("function", module.value, name))
        fn._obj.value = 0x66
        return 0

    def cuMemAlloc_v2(self, ptr, nbytes):
        ptr._obj.value = 0xD000
        return 0

    def cuMemsetD8_v2(self, ptr, value, nbytes):
        self.calls.append(("memset", ptr.value, value, nbytes.value))
        return 0

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        self.calls.append(("launch", f.value, (gx, gy, gz, bx, by, bz, smem), stream.value,
                           [ctypes.c_uint64.from_address(params[0]).value,
                            ctypes.c_uint32.from_address(params[1]).value], extra))
        return 0

    def cuMemHostAlloc(self, host, nbytes, flags):
        self.calls.append(("alloc", nbytes.value, flags))
        host._obj.value = ctypes.addressof(self.page)
        return 0

    def host_dptr(self, dev, host, flags):
        dev._obj.value = host.value + 0x10
        return 0


def _driver(lib: _FakeLib) -> Driver:
    drv = Driver.__new__(Driver)
    drv.lib, drv.error, drv.kernel_error = lib, None, ""
    drv._host_dptr = lib.host_dptr
    return drv


def test_the_driver_marshals_the_hold_through_ctypes():
    lib = _FakeLib()
    drv = _driver(lib)
    assert drv.load_function("ptx text", "autotune_hold") == (0x55, 0x66)
    load = lib.calls[0]
    assert load[1] == b"ptx text\0" and load[3] == [5, 6]  # NUL-terminated image; the error log asked for
    host, dev = drv.host_alloc(4096)
    assert host == ctypes.addressof(lib.page) and dev == host + 0x10 and lib.calls[-1][2] == 0x03
    assert drv.device_alloc(256) == 0xD000 and lib.calls[-1] == ("memset", 0xD000, 0, 256)
    assert drv.launch(0x66, 0xABC, [ctypes.c_uint64(dev), ctypes.c_uint32(9)], 528, 512) == 0
    _, f, dims, stream, args, extra = lib.calls[-1]
    assert (f, dims, stream, args, extra) == (0x66, (528, 1, 1, 512, 1, 1, 0), 0xABC, [dev, 9], None)


def test_a_jit_error_names_what_the_jit_said():
    drv = _driver(_FakeLib(jit_error="ptxas fatal: unsupported .version 7.0"))
    with pytest.raises(DriverError, match="CUresult 218: ptxas fatal: unsupported"):
        drv.load_function("ptx", "autotune_hold")
    missing = Driver.__new__(Driver)
    missing.kernel_error = "libcuda lacks cuLaunchKernel"
    with pytest.raises(DriverError, match="lacks cuLaunchKernel"):
        missing.host_alloc(64)


def test_the_hold_is_in_the_tamper_snapshot():
    gpu = FakeGPU()
    dev = CudaDevice(options={"head_start": "spin"})
    dev._driver = FakeDriver(gpu)  # type: ignore[assignment]
    dev._head_start_setup()
    watched = dev.timer_functions()
    assert watched["cuda.hold"] is dev._hold and watched["cuda.hold.fingerprint"] == dev._hold.fingerprint()
    assert {m.__name__ for m in dev.tamper_modules()} >= {head_start_mod.__name__, hold_mod.__name__}
    before = TamperSnapshot.take(dev.timer_functions(), dev.tamper_modules())
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(hold_mod.SpinHold, "release", lambda self, token: None)  # a hold never released early...
        mp.setattr(head_start_mod, "sample_seconds", lambda e, q, r: (e, "device"))  # ...or the host's time dropped
        dev._hold.limit_ns = 1
        changes = before.changes(TamperSnapshot.take(dev.timer_functions(), dev.tamper_modules()))
    finally:
        mp.undo()
    assert f"{hold_mod.__name__}.SpinHold.release" in changes
    assert f"{head_start_mod.__name__}.sample_seconds" in changes
    assert "timer:cuda.hold.fingerprint" in changes
