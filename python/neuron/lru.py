"""Bounded least-recently-used dicts for what Python keeps per kernel signature: traced and
compiled kernels (neuron.kernel's per-kernel caches, the torch operators' and FlexAttention's
kernels). A long-running process meets new shapes, dtypes and mods without end (a server with
varying sequence lengths, a search over score_mods); each entry holds a kernel's IR and
program, tens of KB to MBs, so none of these may grow forever. An evicted entry is traced and
compiled again when its signature comes back (the compile cache's disk level usually serves
the machine code). The bound is NEURON_CACHE_MEMORY_ENTRIES (default 512, the native memory
levels' too; 0 keeps nothing), read when an entry is added."""
import collections
import threading

from . import _C


def memory_entries():
    """The configured bound (NEURON_CACHE_MEMORY_ENTRIES)."""
    return _C.config().cache_memory_entries


class Lru:
    """A dict of at most `limit` entries (None: memory_entries()), the least recently used
    dropped first. Lookups run lock-free under the GIL (every call of a kernel makes one);
    additions take a lock."""

    def __init__(self, limit=None):
        self._limit = limit
        self._items = collections.OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, default=None):
        value = self._items.get(key, _MISSING)
        if value is _MISSING:
            return default
        try:
            self._items.move_to_end(key)
        except KeyError:  # another thread evicted it meanwhile
            pass
        return value

    def __contains__(self, key):
        return key in self._items

    def __getitem__(self, key):
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key, value):
        limit = memory_entries() if self._limit is None else self._limit
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > limit:
                self._items.popitem(last=False)

    def setdefault(self, key, value):
        """The entry for key, adding `value` when there is none."""
        found = self.get(key, _MISSING)
        if found is not _MISSING:
            return found
        self[key] = value
        return value

    def __len__(self):
        return len(self._items)

    def __iter__(self):
        return iter(list(self._items))

    def __bool__(self):
        return bool(self._items)

    def clear(self):
        with self._lock:
            self._items.clear()


_MISSING = object()
