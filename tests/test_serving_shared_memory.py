"""The client side of shared memory without a server (wtconv_serving.traffic.shared_memory): what a region holds,
where it lives, and that every way out removes it; the CUDA mode's bookkeeping with tritonclient's CUDA module
replaced by one that records its calls (the real one needs a GPU and cuda-python:
tests/test_serving_shared_memory_gpu.py). What a real tritonserver makes of the regions is in
tests/test_serving_server.py.

Oracles: /dev/shm itself (a system region is a file there while it lives), the calls a stand-in client and CUDA
module receive, the pool's rows taken by index arithmetic (check.rows).
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tritonclient.grpc")

from tritonclient.utils import InferenceServerException  # noqa: E402

from wtconv_core.errors import ConfigurationError, ServingError  # noqa: E402
from wtconv_serving.traffic import shared_memory  # noqa: E402
from wtconv_serving.traffic.check import rows  # noqa: E402
from wtconv_serving.traffic.shared_memory import PREFIX, ClientMemory, PoolRegion  # noqa: E402


class Client:
    """A stand-in for a tritonclient InferenceServerClient: records registrations, refuses them when told."""

    def __init__(self, refuse: bool = False, busy: int = 0):
        self.calls: list = []
        self.refuse = refuse
        self.busy = busy  # unregistrations refused as Triton refuses a region a request still uses
        self.registered: set = set()  # the names the server would list (as a server restarted, it may forget them)

    def _record(self, *call):
        self.calls.append(call)
        if self.refuse and call[0].startswith("register"):
            raise InferenceServerException("failed to open the region", status="StatusCode.INVALID_ARGUMENT")
        if self.busy and call[0].startswith("unregister"):
            self.busy -= 1
            raise InferenceServerException(
                f"Cannot unregister shared memory region '{call[1]}', it is currently in use.",
                status="StatusCode.INTERNAL",
            )

    def register_system_shared_memory(self, name, key, byte_size, offset=0):
        self._record("register_system", name, key, byte_size)
        self.registered.add(name)

    def unregister_system_shared_memory(self, name=""):
        self._record("unregister_system", name)
        self.registered.discard(name)

    def get_system_shared_memory_status(self):
        return [{"name": name} for name in sorted(self.registered)]  # HTTP's answer

    def register_cuda_shared_memory(self, name, raw_handle, device_id, byte_size):
        self._record("register_cuda", name, raw_handle, device_id, byte_size)

    def unregister_cuda_shared_memory(self, name=""):
        self._record("unregister_cuda", name)


def ours() -> list[str]:
    """This process's regions in /dev/shm."""
    return sorted(p.name for p in Path("/dev/shm").glob(f"{PREFIX}{os.getpid()}_*"))


@pytest.fixture(autouse=True)
def nothing_left_behind():
    yield
    assert ours() == []


def test_a_system_region_holds_what_is_written_and_goes_on_every_exit():
    client = Client()
    with pytest.raises(RuntimeError, match="a failure meanwhile"):
        with ClientMemory("system", client) as memory:
            region = memory.region(4096, "inputs")
            assert ours() == [region.name] and region.key == "/" + region.name
            assert client.calls == [("register_system", region.name, region.key, 4096)]
            x = np.arange(12, dtype=np.float16).reshape(3, 4)
            region.write(x, offset=64)
            assert np.array_equal(region.read(np.float16, (3, 4), offset=64), x)
            with pytest.raises(ValueError, match="do not fit"):
                region.write(np.zeros(4096, np.uint8), offset=1)
            raise RuntimeError("a failure meanwhile")
    assert client.calls[-1] == ("unregister_system", region.name)
    memory.close()  # again: nothing to do
    assert len(client.calls) == 2


def test_a_region_a_request_still_uses_is_unregistered_once_it_is_done():
    """Triton refuses to unregister a region while a request uses it (a client interrupted mid-request): close asks
    again until the server lets it go."""
    client = Client(busy=3)
    with ClientMemory("system", client) as memory:
        region = memory.region(256)
    assert client.calls[1:] == [("unregister_system", region.name)] * 4 and client.busy == 0


def test_a_region_the_server_cannot_map_is_removed_and_said_in_one_line():
    with ClientMemory("system", Client(refuse=True), url="10.0.0.2:8001") as memory:
        with pytest.raises(ServingError) as caught:
            memory.region(1024)
        assert memory.regions == []
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and caught.value.parameter == "shared_memory"
    assert message.startswith("shared_memory system: 10.0.0.2:8001 cannot map the region (")
    assert "failed to open" in message
    assert "needs the server on this machine" in message and "shared_memory=none" in message


def test_the_pool_is_one_contiguous_slice_for_every_request():
    """Every (start, batch) a load test sends, the wrap round the pool's end included, is the slice of the region at
    offset(start) of nbytes(batch): the rows check.rows takes."""
    pool = np.random.default_rng(0).standard_normal((10, 1, 2, 3)).astype(np.float32)
    with ClientMemory("system", Client()) as memory:
        laid_out = PoolRegion(memory, pool, 4)
        assert laid_out.region.byte_size == 14 * pool[0].nbytes
        for start in range(10):
            for batch in (1, 2, 4):
                got = laid_out.region.read(pool.dtype, (batch, 1, 2, 3), laid_out.offset(start))
                assert np.array_equal(got, rows(pool, start, batch)), (start, batch)
                assert laid_out.nbytes(batch) == got.nbytes


@pytest.fixture
def cuda_module(monkeypatch):
    """tritonclient.utils.cuda_shared_memory replaced by a recorder: allocations live in a dict, as on a GPU."""
    calls, memory = [], {}

    class Region:
        def __init__(self, name, size, device):
            self.name, self.size, self.device = name, size, device

    def create_shared_memory_region(name, byte_size, device_id):
        calls.append(("create", name, byte_size, device_id))
        memory[name] = np.zeros(byte_size, np.uint8)
        return Region(name, byte_size, device_id)

    def set_shared_memory_region(handle, values):
        data = np.concatenate([np.ascontiguousarray(v).view(np.uint8).ravel() for v in values])
        memory[handle.name][: data.size] = data

    def get_contents_as_numpy(handle, dtype, shape):
        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return memory[handle.name][:count].view(dtype).reshape(shape)

    def destroy_shared_memory_region(handle):
        calls.append(("destroy", handle.name))
        del memory[handle.name]

    module = types.SimpleNamespace(
        create_shared_memory_region=create_shared_memory_region,
        get_raw_handle=lambda handle: b"handle-of-" + handle.name.encode(),
        set_shared_memory_region=set_shared_memory_region,
        get_contents_as_numpy=get_contents_as_numpy,
        destroy_shared_memory_region=destroy_shared_memory_region,
    )
    monkeypatch.setitem(sys.modules, "tritonclient.utils.cuda_shared_memory", module)
    return calls, memory


def test_cuda_regions_are_registered_by_handle_and_freed_on_every_exit(cuda_module):
    calls, memory = cuda_module
    client = Client()
    with pytest.raises(KeyboardInterrupt):
        with ClientMemory("cuda", client, device_id=1) as cuda:
            first, second = cuda.region(256, "inputs"), cuda.region(128, "outputs")
            x = np.arange(16, dtype=np.float32).reshape(4, 4)
            first.write(x)
            assert np.array_equal(first.read(np.float32, (4, 4)), x)
            with pytest.raises(ValueError, match="from offset 0"):
                first.write(x, offset=16)
            raise KeyboardInterrupt  # Ctrl-C inside the block
    assert calls == [
        ("create", first.name, 256, 1),
        ("create", second.name, 128, 1),
        ("destroy", second.name),
        ("destroy", first.name),
    ]
    assert [c[0] for c in client.calls] == ["register_cuda", "register_cuda", "unregister_cuda", "unregister_cuda"]
    assert client.calls[0] == ("register_cuda", first.name, b"handle-of-" + first.name.encode(), 1, 256)
    assert memory == {}, "GPU memory left allocated"
    with ClientMemory("cuda", Client(refuse=True)) as refused:
        with pytest.raises(ServingError, match="^shared_memory cuda: .*CUDA IPC to its GPU"):
            refused.region(64)
    assert memory == {}


def test_cuda_without_cuda_python_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "tritonclient.utils.cuda_shared_memory", None)  # import -> ImportError
    with pytest.raises(ConfigurationError) as caught:
        ClientMemory("cuda", Client())
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and "pip install 'tritonclient[cuda]'" in message
    assert message.startswith("shared_memory cuda: ") and caught.value.parameter == "shared_memory"


def test_registered_regions_reads_both_protocols_answers():
    grpc_status = types.SimpleNamespace(regions={"b": 1, "a": 2})
    http_status = [{"name": "b"}, {"name": "a"}]
    for status in (grpc_status, http_status):
        client = types.SimpleNamespace(get_system_shared_memory_status=lambda status=status: status)
        assert shared_memory.registered_regions(client, "system") == ["a", "b"]


def test_regions_a_restarted_server_forgot_are_registered_again():
    """A restarted server has no registration left: register_again registers the regions it no longer lists, the
    same names, keys and sizes, each once however many client threads ask; what it still has is left alone."""
    client = Client()
    with ClientMemory("system", client) as memory:
        kept, forgotten = memory.region(256, "inputs"), memory.region(512, "outputs")
        client.registered.discard(forgotten.name)
        assert memory.register_again() == [forgotten.name]
        assert client.calls[-1] == ("register_system", forgotten.name, forgotten.key, 512)
        assert memory.register_again() == []  # another thread's turn: nothing missing any more
        client.registered.clear()  # the server restarted
        assert sorted(memory.register_again()) == sorted([kept.name, forgotten.name])
        assert client.registered == {kept.name, forgotten.name}
    assert client.registered == set()
