"""Page images are made durable once per folder and batch, before the pages naming them commit."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from vrag_compress import durable
from vrag_compress.ingest import page_assets
from vrag_compress.store.local.store import LocalStore
from vrag_compress.testing import word_page_index


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What happened, in order: ``sync <folder name>`` and ``commit``."""
    log: list[str] = []

    def record_sync(folder: str | Path) -> None:
        log.append(f"sync {Path(folder).name}")

    monkeypatch.setattr(durable, "fsync_folder", record_sync)
    monkeypatch.setattr(page_assets, "fsync_folder", record_sync)
    for name in ("add", "upsert"):
        original = getattr(LocalStore, name)

        def commit(self, *args, _original=original, **kwargs):
            log.append("commit")
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(LocalStore, name, commit)
    return log


def test_a_batch_of_pages_syncs_its_image_folder_once_before_its_commit(tmp_path, events):
    index, _ = word_page_index(tmp_path, [f"page {n} words" for n in range(1, 7)])
    try:
        assert index.store.count() == 6
        images = sorted((tmp_path / "w.vrag" / "images").rglob("*.*"))
        assert len(images) == 6
    finally:
        index.close()
    # before each commit, one sync of the images' folder for its whole batch (each file is
    # still fsynced itself), never one per image
    batches = " ".join(e for e in events if e in ("sync doc", "commit")).split("commit")[:-1]
    assert batches and all(b.split() == ["sync", "doc"] for b in batches)
    assert len(batches) < 6


def test_sync_covers_every_folder_written_since_the_last_one(tmp_path, events):
    assets = page_assets.PageAssets(tmp_path, store=True)
    image = assets.prepare(Image.new("RGB", (20, 10), "white"))
    assets.save("a", 1, image)
    assets.save("a", 2, image)
    assets.save("b", 1, image)
    assert events == []  # nothing synced per file
    assets.sync()
    assert sorted(events) == ["sync a", "sync b"]
    assets.sync()
    assert len(events) == 2  # nothing new to sync
