"""The surface pool and VideoFrame, in one process (and a forked child): no runtime."""

from __future__ import annotations

import os
import uuid

import msgspec
import pytest

np = pytest.importorskip("numpy")

from tatolab._links import ring, shm  # noqa: E402
from tatolab._surfaces import pool as surfaces  # noqa: E402
from tatolab._surfaces.frame import VideoFrame  # noqa: E402


@pytest.fixture
def pool_base():
    folder = shm.private_folder()
    base = f"{folder}/tatolab-test-{os.getpid()}-{uuid.uuid4().hex[:8]}+surfaces"
    surfaces.create(base, slots=4, budget_bytes=64 << 20)
    surfaces.configure(base)
    yield base
    surfaces.configure(None)
    for name in os.listdir(folder):
        if f"{folder}/{name}".startswith(base):
            os.unlink(f"{folder}/{name}")


def _frame(value: int, width: int = 64, height: int = 32) -> VideoFrame:
    return VideoFrame.from_numpy(np.full((height, width, 4), value, dtype=np.uint8))


def test_a_frame_read_back_by_its_id_has_the_pixels_written(pool_base):
    written = _frame(7)
    bag = written._tatolab_bag()
    assert bag["width"] == 64 and bag["height"] == 32 and bag["format"] == "rgba8" and "pixels" not in bag
    read = VideoFrame.open(bag)
    pixels = read.cpu()
    assert pixels.shape == (32, 64, 4) and pixels.dtype == np.uint8 and (pixels == 7).all()
    assert not pixels.flags.writeable
    assert pixels.ctypes.data == written.cpu().ctypes.data  # the same memory: nothing was copied


def test_from_dlpack_shares_the_frames_memory(pool_base):
    frame = VideoFrame.open(_frame(9)._tatolab_bag())
    shared = np.from_dlpack(frame)
    assert shared.ctypes.data == frame.cpu().ctypes.data
    assert shared.shape == (32, 64, 4) and (shared == 9).all()
    assert frame.__dlpack_device__() == (1, 0)


def test_torch_from_dlpack_shares_the_frames_memory(pool_base):
    torch = pytest.importorskip("torch")
    frame = VideoFrame.open(_frame(5)._tatolab_bag())
    tensor = torch.from_dlpack(frame)
    assert tensor.data_ptr() == frame.cpu().ctypes.data


def test_a_held_frame_is_not_reused_and_a_released_one_is(pool_base):
    held = VideoFrame.open(_frame(1)._tatolab_bag())
    for value in range(2, 20):  # many frames through the other three slots
        _frame(value)._tatolab_bag()
    assert (held.cpu() == 1).all()
    view = held.cpu()
    held_id = held.surface_id
    del held  # the view keeps the lease
    for value in range(20, 30):
        _frame(value)
    assert (view == 1).all()
    del view  # the last reference: the slot is free again and is reused
    ids = {_frame(v).surface_id.split("#")[0] for v in range(30, 40)}
    assert held_id.split("#")[0] in ids


def test_a_stale_or_unknown_id_is_refused_by_name(pool_base):
    old = _frame(1)._tatolab_bag()["surface_id"]
    for value in range(8):
        _frame(value)
    with pytest.raises(surfaces.SurfaceError, match=f"surface {old} is stale"):
        VideoFrame.open(old)
    with pytest.raises(surfaces.SurfaceError, match="surface 99#1 is unknown"):
        VideoFrame.open("99#1")
    with pytest.raises(surfaces.SurfaceError, match="'nonsense' is not a surface id"):
        VideoFrame.open("nonsense")


def test_a_full_pool_drops_the_frame_counted_and_never_waits(pool_base):
    held = [_frame(v) for v in range(4)]
    with pytest.raises(surfaces.PoolExhausted, match="this frame was dropped"):
        _frame(9)
    assert surfaces.current().stats()["exhausted"] == 1
    assert surfaces.current().stats()["in_use"] == 4
    del held


def test_a_dead_processes_leases_come_back(pool_base):
    ids = [_frame(v)._tatolab_bag()["surface_id"] for v in range(4)]
    read, write = os.pipe()
    wait_here, _never_written = os.pipe()
    child = os.fork()
    if child == 0:  # a reader that holds every frame, then dies without letting go
        try:
            surfaces.configure(pool_base)
            kept = [VideoFrame.open(i) for i in ids]
            os.write(write, b"held")
            os.read(wait_here, 1)  # until killed
            del kept
        except BaseException as exc:
            os.write(write, repr(exc).encode())
        finally:
            os._exit(0)
    assert os.read(read, 400) == b"held"
    with pytest.raises(surfaces.PoolExhausted):
        _frame(9)
    os.kill(child, 9)
    os.waitpid(child, 0)
    assert (_frame(9).cpu() == 9).all()


def test_writing_a_frame_someone_else_made_is_refused(pool_base):
    frame = VideoFrame.open(_frame(3)._tatolab_bag())
    with pytest.raises(ValueError, match="not yours to change"):
        frame.cpu(writable=True)


def test_a_bag_whose_frame_is_gone_is_skipped_and_counted_as_dropped(pool_base):
    from tatolab._host.ports import InputPort
    from tatolab._sdk.context import Inputs

    base = pool_base.replace("+surfaces", "+ring")
    ring.create_ring(base)
    try:
        writer = ring.RingWriter(base)
        reader = ring.RingReader(base, 0, "ordered", start="now")
        port = InputPort("video", "ordered")
        port.add_link("a->b", reader)
        inputs = Inputs("checker", {"video": port})
        writer.write(msgspec.msgpack.encode(_frame(1)._tatolab_bag()))  # its surface is reused below
        for value in range(2, 10):
            last = _frame(value)._tatolab_bag()
        writer.write(msgspec.msgpack.encode(last))
        frame = inputs.read("video", into=VideoFrame)
        assert frame.surface_id == last["surface_id"] and (frame.cpu() == 9).all()
        assert inputs.read("video", into=VideoFrame) is None
        counters = ring.read_counters(base)["readers"][0]
        assert (counters["read"], counters["dropped"], counters["bad"]) == (1, 1, 0)
        reader.close()
        writer.close()
    finally:
        ring.reap(base)


def test_frames_beyond_the_byte_budget_are_dropped(pool_base):
    small = pool_base.replace("+surfaces", "+small")
    surfaces.create(small, slots=4, budget_bytes=3 * 64 * 32 * 4)  # three 64x32 frames
    surfaces.configure(small)
    try:
        held = [_frame(v) for v in range(3)]
        with pytest.raises(surfaces.PoolExhausted, match="budget"):
            _frame(3)
        del held
        assert (_frame(4).cpu() == 4).all()  # a slot of the right size is reused
    finally:
        surfaces.configure(pool_base)
        ring.reap(small)


def test_threads_of_one_process_allocating_at_once_never_share_a_slot(pool_base):
    import threading

    surfaces.configure(None)
    big = pool_base.replace("+surfaces", "+threads")
    surfaces.create(big, slots=64, budget_bytes=64 << 20)
    surfaces.configure(big)
    try:
        held: list[VideoFrame] = []
        lock = threading.Lock()

        def grab() -> None:
            for _ in range(8):
                frame = VideoFrame.allocate(16, 16)
                with lock:
                    held.append(frame)

        threads = [threading.Thread(target=grab) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len({frame.surface_id.split("#")[0] for frame in held}) == 64
        assert surfaces.current().stats()["in_use"] == 64
        held.clear()  # (the threads' closure shares the list: `del held` would only unbind the name here)
        assert surfaces.current().stats()["in_use"] == 0
    finally:
        surfaces.configure(pool_base)
        ring.reap(big)


def test_reading_a_bag_that_names_no_frame_into_videoframe_says_so(pool_base):
    from tatolab._host.ports import InputPort
    from tatolab._sdk.context import Inputs
    from tatolab._errors import BagError

    base = pool_base.replace("+surfaces", "+ring2")
    ring.create_ring(base)
    try:
        writer = ring.RingWriter(base)
        reader = ring.RingReader(base, 0, "ordered", start="now")
        port = InputPort("video", "ordered")
        port.add_link("a->b", reader)
        writer.write(msgspec.msgpack.encode({"temperature": 21.5}))
        with pytest.raises(BagError, match="node checker port video: not a video bag"):
            Inputs("checker", {"video": port}).read("video", into=VideoFrame)
        reader.close()
        writer.close()
    finally:
        ring.reap(base)


def test_a_process_past_the_pools_holders_is_refused_naming_the_setting_and_counted(pool_base):
    small = pool_base + "-holders"
    surfaces.create(small, slots=2, budget_bytes=1 << 20, holders=16)
    handles = [surfaces.Pool(small) for _ in range(17)]  # each handle claims a place, as a process would
    try:
        for handle in handles[:16]:
            handle.allocate(8, 8)
            handle.release(0)
        with pytest.raises(surfaces.PoolExhausted, match=r"all 16 places in the surface pool are held .*"
                                                         r"set TATOLAB_SURFACE_HOLDERS higher"):
            handles[16].allocate(8, 8)
        assert handles[0].stats()["holders"] == 16 and handles[0].stats()["holders_refused"] == 1
        assert handles[0].refused_pids() == {os.getpid()}
        handles[3].close()  # a place given back is taken by the next
        handles[16].allocate(8, 8)
    finally:
        for handle in handles:
            handle.dispose()
        for suffix in ("", "-0", "-1"):
            if os.path.exists(small + suffix):
                os.unlink(small + suffix)
