"""The index config: one typed, versioned record, read back exactly as written."""

from __future__ import annotations

import pytest

from vrag_compress.index_config import (
    CONFIG_VERSION,
    DEFAULT_DPI,
    ImageOptions,
    IndexConfig,
    IndexConfigError,
)

# A config as indexes written before the config was versioned store it.
LEGACY = {
    "model_id": "vidore/colqwen2-v1.0",
    "dim": 128,
    "encoder": {"model_id": "vidore/colqwen2-v1.0", "dim": 128, "n_layers": 28},
    "compressor": "sap",
    "compressor_params": {"ratio": 0.1, "layers": [18, 19, 20, 21, 22, 23], "n_layers": None},
    "images": {"store": True, "format": "webp", "max_side": 1280},
    "batch_size": 4,
    "dpi": 150,
    "renderer": "pypdfium2",
    "vrag_version": "0.1.0",
}


def test_a_legacy_config_reads_and_writes_back_with_a_version():
    config = IndexConfig.from_dict(LEGACY)
    assert config.compressor_params["layers"] == [18, 19, 20, 21, 22, 23]
    assert config.images == ImageOptions(store=True, format="webp", max_side=1280)
    assert config.to_dict() == {**LEGACY, "config_version": CONFIG_VERSION}
    assert IndexConfig.from_dict(config.to_dict()) == config


def test_missing_optional_keys_take_the_defaults_and_unknown_keys_survive():
    minimal = {"model_id": "m", "dim": 8, "compressor": "random", "calibration": {"window": [1]}}
    config = IndexConfig.from_dict(minimal)
    assert config.dpi == DEFAULT_DPI == 150
    assert config.images == ImageOptions()
    assert config.to_dict()["calibration"] == {"window": [1]}


def test_a_newer_or_broken_config_is_refused_with_the_reason():
    with pytest.raises(IndexConfigError, match="newer than this vrag_compress"):
        IndexConfig.from_dict({**LEGACY, "config_version": CONFIG_VERSION + 1})
    with pytest.raises(IndexConfigError, match=r"missing \['dim'\]"):
        IndexConfig.from_dict({"model_id": "m", "compressor": "sap"})
    with pytest.raises(IndexConfigError, match="invalid"):
        IndexConfig.from_dict({**LEGACY, "images": {"colour": "red"}})


def test_candidate_index_codes_are_typed_and_checked():
    assert IndexConfig.from_dict(LEGACY).codes == "none"
    config = IndexConfig.from_dict({**LEGACY, "codes": "2bit"})
    assert config.codes == "2bit" and config.to_dict()["codes"] == "2bit"
    assert "codes" not in config.extra
    with pytest.raises(IndexConfigError, match="codes"):
        IndexConfig.from_dict({**LEGACY, "codes": "3bit"})


def test_the_model_fingerprint_is_kept_when_recorded_and_absent_from_older_configs():
    assert IndexConfig.from_dict(LEGACY).model_fingerprint is None
    assert "model_fingerprint" not in IndexConfig.from_dict(LEGACY).to_dict()
    config = IndexConfig.from_dict({**LEGACY, "model_fingerprint": "w1:ab"})
    assert config.model_fingerprint == "w1:ab" and "model_fingerprint" not in config.extra
    assert IndexConfig.from_dict(config.to_dict()) == config
    with pytest.raises(IndexConfigError, match="model_fingerprint"):
        IndexConfig.from_dict({**LEGACY, "model_fingerprint": 5})


class NamedOnly:
    """An encoder as far as `create` needs one (no pages are added)."""

    model_id, dim, n_layers = "some/model", 8, 2


def test_an_index_from_a_newer_version_is_refused_and_left_unlocked(tmp_path):
    from vrag_compress import VisualIndex
    from vrag_compress.store.open import open_store

    path = tmp_path / "i"
    with VisualIndex.create(path, encoder=NamedOnly(), compressor="random") as index:
        assert index.store.config["config_version"] == CONFIG_VERSION
        assert index.config == IndexConfig.from_dict(index.store.config)
        index.store.update_config(config_version=CONFIG_VERSION + 1)
    with pytest.raises(IndexConfigError, match="upgrade vrag_compress"):
        VisualIndex.open(path)
    with open_store(path) as store:  # the refused open released the writer lock
        store.update_config(config_version=CONFIG_VERSION)
    with VisualIndex.open(path) as index:
        assert (index.config.model_id, index.config.compressor) == ("some/model", "random")


def test_index_options_pass_whole_and_equal_create_keyword_arguments(tmp_path):
    from vrag_compress import IndexOptions, VisualIndex
    from vrag_compress.index_config import ImageOptions

    options = IndexOptions(
        batch_size=2, dpi=100, images=ImageOptions(format="png", max_side=512), codes="4bit"
    )
    made = {}
    for name, kwargs in {
        "whole": {"options": options},
        "keywords": {
            "batch_size": 2,
            "dpi": 100,
            "image_format": "png",
            "image_max_side": 512,
            "codes": "4bit",
        },
    }.items():
        with VisualIndex.create(
            tmp_path / name, encoder=NamedOnly(), compressor="random", **kwargs
        ) as index:
            made[name] = index.config
    assert made["whole"] == made["keywords"]
    assert (made["whole"].dpi, made["whole"].images.format, made["whole"].codes) == (
        100,
        "png",
        "4bit",
    )


def test_an_unknown_or_bad_index_option_is_one_clear_error(tmp_path):
    from vrag_compress import IndexOptions, VisualIndex, VisualIndexError

    with pytest.raises(VisualIndexError, match="unknown index option dpii; the options are"):
        VisualIndex.create(tmp_path / "a", encoder=NamedOnly(), dpii=100)
    with pytest.raises(VisualIndexError, match="fp16=False keeps the vectors only as residual"):
        VisualIndex.create(
            tmp_path / "b", encoder=NamedOnly(), options=IndexOptions(fp16=False, codes="none")
        )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
