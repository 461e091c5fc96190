"""The defaults a new index is created with, defined once for Python, the CLI and the server.

Import-free on purpose: the CLI reads them when it starts. `vrag_compress.index_config` records
the values an index was actually created with.
"""

from __future__ import annotations

DEFAULT_MODEL = "vidore/colqwen2-v1.0"
COMMAND_MODEL = "auto"
"""What `vrag index`, `vrag serve` and `make demo` create a new index with: the best Col* checkpoint
that loads here, else the offline MiniLM page-text encoder (so the commands work offline)."""
DEFAULT_METHOD = "sap"
DEFAULT_RATIO = 0.1
DEFAULT_BATCH_SIZE = 4
DEFAULT_DPI = 150
RENDERERS = ("pypdfium2", "pdf2image")
DEFAULT_RENDERER = RENDERERS[0]
DEFAULT_IMAGE_FORMAT = "webp"
DEFAULT_IMAGE_MAX_SIDE = 1280
WEBP_METHOD = 2
"""libwebp's effort setting (0-6) for stored page images and served thumbnails. Pillow's
default, 4, took 2.0-2.2x the CPU of 2 per page (105 vs 49 ms on gov PDF pages, 73 vs 34 ms on
ICDAR table pages, 65 vs 32 ms on ArxivQA figures, each at 150 dpi cut to 1280 px, quality 80) for
files only 2-3% smaller and 0.2-0.4 dB more PSNR (above 40 dB either way)."""
