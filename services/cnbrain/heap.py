"""The garbage collector and a long-running brain."""

import gc


def freeze_heap() -> None:
    """Collect once, then leave every object alive now (modules, the app, the map, the
    engine's routing state) out of the collector's scans from now on. A full collection of a
    started brain's heap otherwise stops its event loop for tens to hundreds of milliseconds,
    which under load becomes the latency of the slowest answers. Call it once a brain has
    started."""
    gc.collect()
    gc.freeze()
