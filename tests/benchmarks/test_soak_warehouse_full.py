"""The soak's ``warehouse-full`` file system (``benchmarks/soak.warehouse_file_system``): the
warehouse on a tmpfs of its own holding what it held and ``--warehouse-mb`` more, filled
to the last byte by the fault, and left as a plain ``out/warehouse`` at the end; over a
kept history, whose own warehouse is left as it was. Mounts a real tmpfs: needs root."""

from __future__ import annotations

import argparse
import contextlib
import os

import pytest
import soak
import soak_history

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")


def _args() -> argparse.Namespace:
    return argparse.Namespace(fault=["warehouse-full@60"], warehouse_mb=4, outage_s=0)


def _full(warehouse, out) -> dict:
    """The fault, run: its record."""
    fault: dict = {}
    soak.fill_warehouse(soak.Target(None, _args(), [], out, warehouse), fault)
    return fault


def test_a_warehouse_held_is_copied_in_filled_and_left_plain_in_out(tmp_path):
    history = tmp_path / "history" / "warehouse"  # a kept history's, mounted elsewhere
    (history / "energy_facts").mkdir(parents=True)
    (history / "energy_facts" / "part.parquet").write_bytes(b"x" * 3 * 2**20)
    out = tmp_path / "out"
    out.mkdir()
    with soak.warehouse_file_system(_args(), history, out) as file_system:
        assert os.path.ismount(history)
        assert file_system["tmpfs_mb"] == 3 + 4 and file_system["copy_in_s"] >= 0
        assert (history / "energy_facts" / "part.parquet").stat().st_size == 3 * 2**20
        (history / "accounting_daily").mkdir()
        (history / "accounting_daily" / "new.parquet").write_bytes(b"y" * 2**20)
        fault = _full(history, out)
        # 3 MiB held + 4 MiB of room, 1 MiB of it written since: about 3 MiB left to fill
        assert 2 * 2**20 <= fault["filled_bytes"] <= 3 * 2**20, fault
        assert not (history / soak.FILLER).exists()
        assert not (out / ".warehouse-staging").exists()
    assert not os.path.ismount(history)
    assert sorted(p.relative_to(history).as_posix() for p in history.rglob("*")) == [
        "energy_facts", "energy_facts/part.parquet"]
    assert sorted(p.relative_to(out / "warehouse").as_posix()
                  for p in (out / "warehouse").rglob("*")) == [
        "accounting_daily", "accounting_daily/new.parquet", "energy_facts",
        "energy_facts/part.parquet"]
    assert not os.path.ismount(out / "warehouse")


def test_a_fresh_warehouse_in_out_is_a_plain_folder_after(tmp_path):
    warehouse = tmp_path / "warehouse"
    with soak.warehouse_file_system(_args(), warehouse, tmp_path):
        assert os.path.ismount(warehouse)
        (warehouse / "energy_facts").mkdir()
        assert 3 * 2**20 <= _full(warehouse, tmp_path)["filled_bytes"] <= 4 * 2**20
    assert not os.path.ismount(warehouse)
    assert [p.name for p in warehouse.iterdir()] == ["energy_facts"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["warehouse"]


def test_under_a_shared_mount_as_systemd_makes_them(tmp_path):
    """A tmpfs over the warehouse, not one moved there: the kernel refuses to move a mount
    that sits under a shared one, as ``/`` is on a systemd host."""
    shared = tmp_path / "shared"
    shared.mkdir()
    soak_history.run_command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(shared))
    try:
        soak_history.run_command("mount", "--make-shared", str(shared))
        (shared / "warehouse" / "energy_facts").mkdir(parents=True)
        (shared / "warehouse" / "energy_facts" / "part.parquet").write_bytes(b"x" * 2**20)
        (shared / "out").mkdir()
        with soak.warehouse_file_system(_args(), shared / "warehouse", shared / "out"):
            assert os.path.ismount(shared / "warehouse")
            assert (shared / "warehouse" / "energy_facts" / "part.parquet").stat().st_size \
                == 2**20
        assert not os.path.ismount(shared / "warehouse")
        assert [p.name for p in (shared / "out" / "warehouse").iterdir()] == ["energy_facts"]
    finally:
        soak_history.unmount(shared)


def test_a_copy_left_by_an_earlier_run_is_refused_before_mounting(tmp_path):
    (tmp_path / ".warehouse-kept").mkdir()
    with pytest.raises(RuntimeError, match="left from an earlier run"), \
            soak.warehouse_file_system(_args(), tmp_path / "warehouse", tmp_path):
        pass
    assert not os.path.ismount(tmp_path / "warehouse")


def test_the_kept_historys_copy_of_its_warehouse_only_when_asked(tmp_path, monkeypatch):
    """``copy_mounted`` copies the history's warehouse out unless the run leaves its own."""
    folder, out = tmp_path / "kept", tmp_path / "out"
    folder.mkdir()
    out.mkdir()
    (folder / "history.json").write_text("{}")
    monkeypatch.setattr(soak_history, "MOUNT", tmp_path / "mount")
    (tmp_path / "mount" / "warehouse" / "energy_facts").mkdir(parents=True)
    monkeypatch.setattr(soak_history, "run_command",  # the image's copy
                        lambda *command: (out / "history.img").touch())
    monkeypatch.setattr(soak_history, "mounted", lambda image: contextlib.nullcontext())
    with soak_history.copy_mounted(folder, out, copy_warehouse=False):
        (out / "warehouse" / "accounting_daily").mkdir(parents=True)  # the run's own
    assert [p.name for p in (out / "warehouse").iterdir()] == ["accounting_daily"]
    (out / "warehouse" / "accounting_daily").rmdir()
    (out / "warehouse").rmdir()
    with soak_history.copy_mounted(folder, out):
        pass
    assert [p.name for p in (out / "warehouse").iterdir()] == ["energy_facts"]
