"""The CUDA runtime on NVIDIA's official Python bindings, `cuda-python`: NVRTC (`cuda.bindings.nvrtc`) compiles
kernels and the driver API (`cuda.bindings.driver`) allocates, copies and launches them.

Why not pycuda: pycuda is built from source against `cuda.h` and linked with `-lcuda`, the driver library that
only an NVIDIA driver installs, so it cannot even be installed on a machine without a GPU; tgc must compile CUDA
kernels everywhere (artifacts are built on CPU-only machines). `cuda-python` (`pip install cuda-python
nvidia-cuda-nvrtc nvidia-cuda-runtime`, the `cuda` extra) installs everywhere: NVRTC ships as a wheel and the
driver library is loaded lazily, on the first driver call. So `compile_only` works on any machine, while
`CUDARuntime()` raises RuntimeUnavailable where `cuInit` fails (no driver or no GPU).

Launch convention (as OpenCL): `global_size` is the total number of threads per dimension (already multiplied by
the block size) and `local_size` is the block size; the grid is their quotient.
"""
from __future__ import annotations
import glob
import hashlib
import importlib.util
import os
import tempfile
from typing import Any

import numpy as np

from tgc.runtimes.base import Buffer, CompileError, LaunchError, Program, Runtime, RuntimeUnavailable

try:
  from cuda.bindings import nvrtc
except ImportError:  # compile_only / the runtime report it when used
  nvrtc = None
try:
  from cuda.bindings import driver
except ImportError:
  driver = None

NVRTC_MISSING = "cuda: NVRTC is not installed (pip install cuda-python nvidia-cuda-nvrtc nvidia-cuda-runtime)"
DEFAULT_ARCH = "sm_80"


def _one_line(error: Any) -> str:
  text = " ".join(str(error).split())
  return text[:300] + ("..." if len(text) > 300 else "")


# ---- NVRTC: compiling works on any machine ----

def _nvrtc_check(result, what: str):
  err, *values = result if isinstance(result, tuple) else (result,)
  if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
    _, msg = nvrtc.nvrtcGetErrorString(err)
    raise RuntimeError(f"cuda: {what} failed: {msg.decode(errors='replace') if isinstance(msg, bytes) else msg}")
  return values[0] if len(values) == 1 else tuple(values) if values else None


def nvrtc_version() -> tuple[int, int]:
  if nvrtc is None: raise RuntimeUnavailable(NVRTC_MISSING)
  return tuple(_nvrtc_check(nvrtc.nvrtcVersion(), "nvrtcVersion"))  # type: ignore[return-value]


def supported_archs() -> list[int]:
  """Compute capabilities this NVRTC can target, e.g. [75, 80, 86, ..., 90, ...]."""
  if nvrtc is None: raise RuntimeUnavailable(NVRTC_MISSING)
  return sorted(_nvrtc_check(nvrtc.nvrtcGetSupportedArchs(), "nvrtcGetSupportedArchs"))


def include_dirs() -> list[str]:
  """Folders holding cuda_fp16.h: the wheels' site-packages/nvidia/cu13/include (cu12-era wheels:
  nvidia/cuda_runtime/include, nvidia/cuda_nvrtc/include), else a CUDA toolkit ($CUDA_HOME, /usr/local/cuda)."""
  roots = []
  spec = importlib.util.find_spec("nvidia")
  if spec is not None and spec.submodule_search_locations:
    for base in spec.submodule_search_locations:
      roots += sorted(glob.glob(os.path.join(base, "cu[0-9]*", "include")), reverse=True)
      roots += [os.path.join(base, "cuda_runtime", "include"), os.path.join(base, "cuda_nvrtc", "include")]
  for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
    if home: roots.append(os.path.join(home, "include"))
  out = []
  for root in roots:
    if os.path.isfile(os.path.join(root, "cuda_fp16.h")) and root not in out: out.append(root)
  return out


def compile_options(arch: str) -> list[str]:
  """NVRTC options: the architecture and one include folder (the first found: mixing headers of two CUDA
  versions is not safe)."""
  return [f"--gpu-architecture={arch}"] + [f"-I{d}" for d in include_dirs()[:1]]


def compile_only(src: str, name: str, arch: str = DEFAULT_ARCH, cache_dir: str | None = None) -> bytes:
  """Compile CUDA C++ `src` with NVRTC. `arch` "sm_XX" gives a cubin, "compute_XX" gives PTX (NUL-terminated, as
  the driver wants it). Needs no driver or GPU. Raises CompileError (with NVRTC's log) on bad source.
  With `cache_dir`, results are cached on disk by source, options and NVRTC version."""
  if nvrtc is None: raise RuntimeUnavailable(NVRTC_MISSING)
  if not (arch.startswith("sm_") or arch.startswith("compute_")):
    raise ValueError(f"cuda: arch must be sm_XX (cubin) or compute_XX (PTX), got {arch!r}")
  options = compile_options(arch)
  path = None
  if cache_dir:
    key = hashlib.sha256("\0".join([src, name, *options, str(nvrtc_version())]).encode()).hexdigest()
    path = os.path.join(cache_dir, f"{key}.{'cubin' if arch.startswith('sm_') else 'ptx'}")
    if os.path.isfile(path):
      with open(path, "rb") as f: return f.read()
  prog = _nvrtc_check(nvrtc.nvrtcCreateProgram(src.encode(), f"{name}.cu".encode(), 0, [], []), "nvrtcCreateProgram")
  try:
    result = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
    err = result[0] if isinstance(result, tuple) else result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
      size = _nvrtc_check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
      log = b" " * size
      _nvrtc_check(nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
      raise CompileError("cuda", name, log.rstrip(b"\0 ").decode(errors="replace") or f"NVRTC error {err}")
    kind = "CUBIN" if arch.startswith("sm_") else "PTX"
    size = _nvrtc_check(getattr(nvrtc, f"nvrtcGet{kind}Size")(prog), f"nvrtcGet{kind}Size")
    image = b" " * size
    _nvrtc_check(getattr(nvrtc, f"nvrtcGet{kind}")(prog, image), f"nvrtcGet{kind}")
  finally:
    nvrtc.nvrtcDestroyProgram(prog)
  if path:
    os.makedirs(cache_dir, exist_ok=True)   # type: ignore[arg-type]
    fd, tmp = tempfile.mkstemp(dir=cache_dir, suffix=".tmp")
    with os.fdopen(fd, "wb") as f: f.write(image)
    os.replace(tmp, path)   # atomic: parallel test workers never see half a file
  return image


def target_arch(major: int, minor: int) -> str:
  """What to compile for a device of compute capability major.minor: its own cubin when NVRTC knows it, else PTX
  for the newest architecture NVRTC knows (the driver compiles PTX forward for newer GPUs)."""
  cc, archs = major * 10 + minor, supported_archs()
  if cc in archs: return f"sm_{cc}"
  if cc > archs[-1]: return f"compute_{archs[-1]}"
  raise RuntimeUnavailable(f"cuda: this NVRTC ({'.'.join(map(str, nvrtc_version()))}) cannot target sm_{cc} "
                           f"(oldest it supports: sm_{archs[0]}); install an older nvidia-cuda-nvrtc")


# ---- the driver API: running needs an NVIDIA driver and GPU ----

def _error_name(err) -> str:
  try:
    _, name = driver.cuGetErrorName(err)
    return name.decode() if isinstance(name, bytes) else str(name)
  except Exception:  # noqa: BLE001 - the name is only decoration for the message
    return str(err)


def _check(result, what: str, error=RuntimeError):
  err, *values = result if isinstance(result, tuple) else (result,)
  if err != driver.CUresult.CUDA_SUCCESS: raise error(f"cuda: {what} failed: {_error_name(err)}")
  return values[0] if len(values) == 1 else tuple(values) if values else None


def _param_count(function) -> int | None:
  """Number of kernel parameters (cuFuncGetParamInfo, CUDA 12.4+); None where the driver cannot tell."""
  if not hasattr(driver, "cuFuncGetParamInfo"): return None
  for i in range(4096):
    err = driver.cuFuncGetParamInfo(function, i)[0]
    if err == driver.CUresult.CUDA_ERROR_INVALID_VALUE: return i
    if err != driver.CUresult.CUDA_SUCCESS: return None
  return None


class CUDABuffer(Buffer):
  """Device memory from cuMemAlloc of max(nbytes, 1) bytes; freed when the Buffer is collected."""

  def __init__(self, runtime: "CUDARuntime", nbytes: int):
    super().__init__(runtime, nbytes)
    runtime.activate()
    self.ptr = _check(driver.cuMemAlloc(max(self.nbytes, 1)), f"cuMemAlloc({self.nbytes})")

  def __del__(self):
    try:
      driver.cuMemFree(self.ptr)
    except Exception:  # noqa: BLE001 - interpreter shutdown or a lost context: nothing left to free
      pass


class CUDAProgram(Program):
  """One kernel of a loaded module."""

  def __init__(self, runtime: "CUDARuntime", name: str, image: bytes):
    super().__init__(runtime, name)
    runtime.activate()
    self.image = image
    self.module = _check(driver.cuModuleLoadData(image), f"loading the module of kernel '{name}'")
    result = driver.cuModuleGetFunction(self.module, name.encode())
    if result[0] != driver.CUresult.CUDA_SUCCESS:
      raise CompileError(runtime.name, name, f"the source does not define a kernel named '{name}'")
    self.function = result[1]
    self.num_args = _param_count(self.function)

  def __call__(self, *bufs: Buffer, global_size: tuple[int, ...] = (1, 1, 1), local_size: tuple[int, ...] = (1, 1, 1),
               wait: bool = False) -> float | None:
    self.check_buffers(bufs)
    if self.num_args is not None and len(bufs) != self.num_args:
      raise LaunchError(f"cuda: kernel '{self.name}' takes {self.num_args} arguments, got {len(bufs)} buffers")
    gsz = tuple(int(s) for s in global_size) + (1,) * (3 - len(global_size))
    lsz = tuple(int(s) for s in (local_size or (1, 1, 1))) + (1,) * (3 - len(local_size or (1, 1, 1)))
    if any(l < 1 or g % l for g, l in zip(gsz, lsz)):
      raise LaunchError(f"cuda: kernel '{self.name}': global size {gsz} is not a multiple of block size {lsz}")
    grid = tuple(g // l for g, l in zip(gsz, lsz))
    runtime: CUDARuntime = self.runtime  # type: ignore[assignment]
    runtime.activate()
    # kernelParams is an array of pointers, each to one argument's value (here: each buffer's device address)
    values = np.array([int(buf.ptr) for buf in bufs], dtype=np.uint64)  # type: ignore[attr-defined]
    params = np.array([values.ctypes.data + 8 * i for i in range(len(bufs))], dtype=np.uint64)
    if wait: _check(driver.cuEventRecord(runtime.start_event, runtime.stream), "cuEventRecord")
    _check(driver.cuLaunchKernel(self.function, *grid, *lsz, 0, runtime.stream, params.ctypes.data if bufs else None,
                                 0), f"launching kernel '{self.name}' with grid {grid} block {lsz}", LaunchError)
    if not wait: return None
    _check(driver.cuEventRecord(runtime.end_event, runtime.stream), "cuEventRecord")
    _check(driver.cuEventSynchronize(runtime.end_event), f"running kernel '{self.name}'", LaunchError)
    return _check(driver.cuEventElapsedTime(runtime.start_event, runtime.end_event), "cuEventElapsedTime") * 1e-3


class CUDARuntime(Runtime):
  """Runs CUDA kernels on device `device_id` in its primary context, on the legacy default stream. `cache_dir`
  holds compiled cubins (default ~/.cache/tgc/cuda)."""
  name = "cuda"

  def __init__(self, cache_dir: str | None = None, device_id: int = 0):
    if driver is None or nvrtc is None: raise RuntimeUnavailable(NVRTC_MISSING)
    try:
      err = driver.cuInit(0)[0]
    except Exception as error:  # noqa: BLE001 - cuda-python raises when libcuda itself cannot be loaded
      raise RuntimeUnavailable(f"cuda: no NVIDIA driver/GPU (cuInit failed: {_one_line(error)})") from None
    if err != driver.CUresult.CUDA_SUCCESS:
      raise RuntimeUnavailable(f"cuda: no NVIDIA driver/GPU (cuInit failed: {_error_name(err)})")
    count = _check(driver.cuDeviceGetCount(), "cuDeviceGetCount", RuntimeUnavailable)
    if device_id >= count:
      raise RuntimeUnavailable(f"cuda: no NVIDIA driver/GPU (device {device_id} requested, {count} present)")
    self.device = _check(driver.cuDeviceGet(device_id), "cuDeviceGet", RuntimeUnavailable)
    self.device_name = _check(driver.cuDeviceGetName(256, self.device), "cuDeviceGetName").split(b"\0")[0].decode()
    self.context = _check(driver.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain", RuntimeUnavailable)
    self.activate()
    attr = driver.CUdevice_attribute
    self.compute_capability = (self.attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                               self.attribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
    self.arch = target_arch(*self.compute_capability)
    self.stream = driver.CUstream(0)
    self.start_event = _check(driver.cuEventCreate(0), "cuEventCreate")
    self.end_event = _check(driver.cuEventCreate(0), "cuEventCreate")
    self.cache_dir = cache_dir
    self.programs: dict[tuple[str, str], CUDAProgram] = {}

  def activate(self) -> None:
    """Make this runtime's context current on the calling thread (contexts are per thread)."""
    _check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

  def attribute(self, attribute) -> int:
    return int(_check(driver.cuDeviceGetAttribute(attribute, self.device), f"cuDeviceGetAttribute({attribute})"))

  def device_info(self) -> dict[str, Any]:
    """Device limits and features for launch heuristics."""
    attr = driver.CUdevice_attribute
    return {
      "name": self.device_name, "arch": self.arch, "compute_capability": self.compute_capability,
      "max_threads_per_block": self.attribute(attr.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
      "max_shared_memory_per_block": self.attribute(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
      "multiprocessors": self.attribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
      "has_fp16": True, "has_fp64": True,
    }

  def alloc(self, nbytes: int) -> CUDABuffer:
    return CUDABuffer(self, nbytes)

  def copyin(self, buf: Buffer, src: Any) -> None:
    data = self.check_copyin(buf, src)
    if buf.nbytes:
      self.activate()
      _check(driver.cuMemcpyHtoD(buf.ptr, data.ctypes.data, buf.nbytes), "cuMemcpyHtoD")  # type: ignore[attr-defined]

  def copyout(self, buf: Buffer) -> np.ndarray:
    self.check_buffer(buf)
    out = np.empty(buf.nbytes, dtype=np.uint8)
    if buf.nbytes:
      self.activate()
      _check(driver.cuMemcpyDtoH(out.ctypes.data, buf.ptr, buf.nbytes), "cuMemcpyDtoH")  # type: ignore[attr-defined]
    return out

  def synchronize(self) -> None:
    self.activate()
    _check(driver.cuCtxSynchronize(), "running kernels (cuCtxSynchronize)", LaunchError)

  def compile(self, src: str, name: str) -> CUDAProgram:
    key = hashlib.sha256(src.encode()).hexdigest()
    if (key, name) not in self.programs:
      image = compile_only(src, name, self.arch, self.cache_dir)
      self.programs[(key, name)] = CUDAProgram(self, name, image)
    return self.programs[(key, name)]
