"""Shared memory between a client and a Triton server on the same machine (docs/serving.md, "Shared memory").

Without it a request carries its tensors: the client serializes every byte into the request (protobuf over gRPC, the
body over HTTP), the server copies them into its own memory, and the Python backend copies them once more into its
stub's memory; a 64-image fp16 request of WTConvNeXt-T is 19 MB. With it the client writes a tensor into a region the
server has mapped, and the request names the region, an offset and a byte size (Triton's shared-memory extension):

- ``system``: POSIX shared memory (a file in /dev/shm, which the server opens by its key);
- ``cuda``: GPU memory the client allocates and the server opens through a CUDA IPC handle, so an input reaches a GPU
  instance of the Python backend on the GPU (the repository lets such inputs through: FORCE_CPU_ONLY_INPUT_TENSORS);
  it needs NVIDIA's cuda-python (tritonclient's ``cuda_shared_memory`` calls the CUDA runtime through it).

``ClientMemory`` owns the regions one client program registers with one server. Each is created, registered,
reused for as many requests as wanted, and on close (the end of a ``with`` block, an error, Ctrl-C) unregistered and
removed, from /dev/shm or from the GPU. A system region of a process killed outright is removed by Python's
resource tracker (multiprocessing.shared_memory registers it there) once the process is gone.

A server that restarts forgets every registration (docs/serving.md, "The soak": the watch's recovery from a backend
that died); a request naming a region then gets NOT_REGISTERED, and ``register_again`` registers what the server no
longer knows, the regions themselves being unchanged.

``PoolRegion`` lays a load test's pool of distinct inputs out in one region, followed by a copy of its first rows, so
that every request (``batch`` consecutive rows from ``start``, wrapping round the pool: check.rows) is one contiguous
slice of it: the region is written once, read-only afterwards, and shared by every client thread and process.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wtconv_core.errors import ConfigurationError, ServingError
from wtconv_core.options import SHARED_MEMORY_MODES

log = logging.getLogger(__name__)

__all__ = ["NOT_REGISTERED", "PREFIX", "ClientMemory", "PoolRegion", "Region", "registered_regions"]

# Every region a client of this package makes is named PREFIX<pid>_<role>_<n>: in /dev/shm (system) and in the
# server's list alike, so what a process leaves behind can be found by its pid.
PREFIX = "wtconv_client_"
# Triton 2.51's answer to unregistering a region a request still reads or writes; asked again meanwhile, this long.
IN_USE = "currently in use"
UNREGISTER_WAIT_S = 30.0
# Triton 2.51's answer to a request naming a region it does not have registered (gRPC NOT_FOUND, HTTP 404), as after a
# restart of the server: "Unable to find shared memory region: 'NAME'".
NOT_REGISTERED = "Unable to find shared memory region"
_numbers = itertools.count()


@dataclass
class Region:
    """One registered region: its name on the server (also its file's name in /dev/shm for ``system``), its size,
    and the handle its memory is reached through (a multiprocessing SharedMemory, or tritonclient's
    CudaSharedMemoryRegion)."""

    name: str
    byte_size: int
    mode: str
    device_id: int = 0
    handle: Any = field(default=None, repr=False)

    @property
    def key(self) -> str:
        """The key the server opens a system region by (shm_open's name)."""
        return "/" + self.name

    def write(self, array: np.ndarray, offset: int = 0) -> None:
        """Copy ``array`` (C-contiguous) into the region at byte ``offset``."""
        array = np.ascontiguousarray(array)
        if offset < 0 or offset + array.nbytes > self.byte_size:
            raise ValueError(f"{array.nbytes} bytes at {offset} do not fit region {self.name} of {self.byte_size}")
        if self.mode == "system":
            view = np.ndarray(array.shape, array.dtype, buffer=self.handle.buf, offset=offset)
            view[...] = array
            del view  # no view may outlive the mapping (close refuses to unmap a buffer still exported)
            return
        if offset:
            raise ValueError("a cuda region is written whole, from offset 0 (tritonclient's cuda_shared_memory)")
        _cuda_shared_memory().set_shared_memory_region(self.handle, [array])

    def read(self, dtype, shape, offset: int = 0) -> np.ndarray:
        """A copy of the array of ``dtype`` and ``shape`` at byte ``offset``."""
        dtype, shape = np.dtype(dtype), tuple(int(d) for d in shape)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        if offset < 0 or offset + nbytes > self.byte_size:
            raise ValueError(f"{nbytes} bytes at offset {offset} are beyond region {self.name} of {self.byte_size}")
        if self.mode == "system":
            view = np.ndarray(shape, dtype, buffer=self.handle.buf, offset=offset)
            copy = view.copy()
            del view
            return copy
        if offset:
            raise ValueError("a cuda region is read from offset 0 (tritonclient's cuda_shared_memory)")
        return np.array(_cuda_shared_memory().get_contents_as_numpy(self.handle, dtype, shape))


def _cuda_shared_memory():
    """tritonclient's CUDA shared-memory module; ConfigurationError in one line when cuda-python is missing."""
    try:
        import tritonclient.utils.cuda_shared_memory as cudashm
    except ImportError as error:  # it imports cuda.bindings (NVIDIA's cuda-python) at module level
        raise ConfigurationError(
            f"shared_memory cuda: tritonclient's CUDA shared memory needs NVIDIA's cuda-python ({error}); install "
            "it (pip install 'tritonclient[cuda]'), or use shared_memory=system",
            parameter="shared_memory",
        ) from None
    return cudashm


def _is_server_error(error: BaseException) -> bool:
    from tritonclient.utils import InferenceServerException

    return isinstance(error, InferenceServerException)


class ClientMemory:
    """The regions one client program registers with one server, through ``client`` (a tritonclient gRPC or HTTP
    InferenceServerClient: a registration is the server's, whichever protocol later uses it). ``mode``: "system" or
    "cuda" (on GPU ``device_id``). A context manager: leaving it (normally, by an error or by Ctrl-C) unregisters and
    removes every region; ``close`` does too, and may be called again."""

    def __init__(self, mode: str, client, *, device_id: int = 0, url: str = "the server"):
        if mode not in SHARED_MEMORY_MODES or mode == "none":
            raise ValueError(f"mode {mode!r}: expected system or cuda")
        self.mode, self.client, self.device_id, self.url = mode, client, int(device_id), url
        self.regions: list[Region] = []
        self._lock = threading.Lock()  # register_again from several client threads (an HTTP client is not shared)
        if mode == "cuda":
            _cuda_shared_memory()  # the missing package said before anything is made

    def region(self, byte_size: int, role: str = "data") -> Region:
        """A new region of ``byte_size`` bytes, created and registered (ServingError in one line when the memory
        cannot be had or the server cannot map it; nothing is left behind then)."""
        name = f"{PREFIX}{os.getpid()}_{role}_{next(_numbers)}"
        region = Region(name, int(byte_size), self.mode, self.device_id)
        size = f"{byte_size / 2**20:.1f} MiB"
        try:
            if self.mode == "system":
                from multiprocessing import shared_memory

                region.handle = shared_memory.SharedMemory(name=name, create=True, size=int(byte_size))
            else:
                cudashm = _cuda_shared_memory()
                region.handle = cudashm.create_shared_memory_region(name, int(byte_size), self.device_id)
        except (OSError, ValueError) as error:
            raise ServingError(
                f"shared_memory system: cannot make a region of {size} in /dev/shm ({error}); free space there, or "
                "use shared_memory=none",
                parameter="shared_memory",
            ) from None
        except Exception as error:  # tritonclient's CudaSharedMemoryException (no GPU, out of memory)
            if self.mode == "system":
                raise
            raise ServingError(
                f"shared_memory cuda: cannot allocate {size} on GPU {self.device_id} ({error}); use "
                "shared_memory=system or none",
                parameter="shared_memory",
            ) from None
        self.regions.append(region)  # removed by close from here on, registered or not
        try:
            self._register(region)
        except Exception as error:
            if not _is_server_error(error):
                raise
            self._remove(region)
            self.regions.remove(region)
            where = "CUDA IPC to its GPU" if self.mode == "cuda" else "its /dev/shm"
            raise ServingError(
                f"shared_memory {self.mode}: {self.url} cannot map the region ({' '.join(str(error).split())}); "
                f"shared memory needs the server on this machine ({where}): use shared_memory=none for another",
                parameter="shared_memory",
            ) from None
        return region

    def _register(self, region: Region) -> None:
        if self.mode == "system":
            self.client.register_system_shared_memory(region.name, region.key, region.byte_size)
        else:
            raw = _cuda_shared_memory().get_raw_handle(region.handle)
            self.client.register_cuda_shared_memory(region.name, raw, self.device_id, region.byte_size)

    def register_again(self) -> list[str]:
        """Register again each region the server no longer has registered (a restarted server forgets them all; its
        answer to a request naming one contains NOT_REGISTERED); returns their names. Several client threads may
        ask at once: each region is registered once. tritonclient's InferenceServerException when the server does
        not answer (still restarting: the caller retries)."""
        with self._lock:
            known = set(registered_regions(self.client, self.mode))
            missing = [region for region in self.regions if region.name not in known]
            for region in missing:
                self._register(region)
        if missing:
            log.info("shared memory: registered %d regions again with %s", len(missing), self.url)
        return [region.name for region in missing]

    def close(self) -> None:
        """Unregister every region (a server already gone is no error) and remove it, latest first; Ctrl-C pressed
        meanwhile is taken once all are gone. Triton refuses to unregister a region a request still uses ("it is
        currently in use": the request of a client interrupted mid-call is still being answered), so that is
        asked again until the request is done, for up to UNREGISTER_WAIT_S."""
        from wtconv_core.interrupt import deferred_interrupt

        with deferred_interrupt():
            deadline = time.monotonic() + UNREGISTER_WAIT_S
            while self.regions:
                region = self.regions.pop()
                self._unregister(region, deadline)
                self._remove(region)

    def _unregister(self, region: Region, deadline: float) -> None:
        while True:
            try:
                if self.mode == "system":
                    self.client.unregister_system_shared_memory(region.name)
                else:
                    self.client.unregister_cuda_shared_memory(region.name)
                return
            except Exception as error:  # noqa: BLE001 - a server stopped took its registrations with it
                if _is_server_error(error) and IN_USE in str(error) and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                gone = not _is_server_error(error) or "UNAVAILABLE" in str(error.status())
                (log.debug if gone else log.warning)(
                    "shared memory: %s could not be unregistered from %s: %s", region.name, self.url, error
                )
                return

    def _remove(self, region: Region) -> None:
        if region.handle is None:
            return
        if self.mode == "system":
            try:
                region.handle.close()
            except BufferError:  # a view of another thread still open: the mapping goes with the process
                pass
            try:
                region.handle.unlink()
            except FileNotFoundError:
                pass
        else:
            _cuda_shared_memory().destroy_shared_memory_region(region.handle)
        region.handle = None

    def __enter__(self) -> ClientMemory:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class PoolRegion:
    """A pool of inputs (N, ...) in one region of ``memory``, followed by a copy of its first ``tail`` rows (the
    largest request), so that ``rows(pool, start, batch)`` is the contiguous slice at ``offset(start)`` of
    ``nbytes(batch)`` bytes for every start in the pool and batch up to ``tail``."""

    def __init__(self, memory: ClientMemory, pool: np.ndarray, tail: int):
        self.row_bytes = int(np.prod(pool.shape[1:])) * pool.dtype.itemsize
        self.rows = len(pool)
        tail = min(int(tail), len(pool))
        laid_out = np.ascontiguousarray(np.concatenate([pool, pool[:tail]]))
        self.region = memory.region(laid_out.nbytes, "inputs")
        self.region.write(laid_out)
        self.name = self.region.name

    def offset(self, start: int) -> int:
        return (int(start) % self.rows) * self.row_bytes

    def nbytes(self, batch: int) -> int:
        return int(batch) * self.row_bytes


def registered_regions(client, mode: str) -> list[str]:
    """The names of the regions of ``mode`` the server behind ``client`` (gRPC or HTTP) has registered."""
    if mode == "system":
        status = client.get_system_shared_memory_status()
    else:
        status = client.get_cuda_shared_memory_status()
    if isinstance(status, list):  # HTTP: a list of {"name": ...}
        return sorted(entry["name"] for entry in status)
    return sorted(status.regions)  # gRPC: a map name -> status
