"""neuron.cache: the compile cache shared with the C++ toolkit (docs/cache.md). Keys come from
the Kernel IR text, target and options, never from the Python source."""
from . import _C, runtime


def info():
    """A dict: dir, disk_entries, disk_bytes, memory_hits, disk_hits, misses, stores, waited
    (misses that waited for another thread's compile of the same key), build_id."""
    return dict(_C.cache_info())


def clear():
    """Empties the memory and disk levels and forgets loaded native kernels."""
    _C.cache_clear()
    runtime.clear_loaded()
