"""Memory free now and the refusal of an allocation that would not fit, with its numbers."""

import pytest

from speculab import free_memory
from speculab.free_memory import MemoryShortfall, available_bytes, require, usable_bytes


def test_what_is_free_is_the_smaller_of_the_kernels_and_the_cgroups(tmp_path, monkeypatch):
    assert available_bytes() > 0
    monkeypatch.setattr(free_memory, "_mem_available", lambda: 8 << 30)
    monkeypatch.setattr(free_memory, "CGROUP", tmp_path)
    assert available_bytes() == 8 << 30  # no cgroup files: the kernel's figure
    (tmp_path / "memory.max").write_text(f"{4 << 30}\n")
    (tmp_path / "memory.current").write_text(f"{1 << 30}\n")
    assert available_bytes() == 3 << 30  # a container's limit less what it uses
    (tmp_path / "memory.max").write_text("max\n")
    assert available_bytes() == 8 << 30  # no limit


def test_an_allocation_past_the_margin_is_refused_with_its_numbers():
    require(usable_bytes(10 << 30), "this", available=10 << 30)
    with pytest.raises(MemoryShortfall, match=r"the thing needs 9\.50 GiB and 10\.00 GiB is free \(10% of it kept"):
        require(int(9.5 * (1 << 30)), "the thing", available=10 << 30)
