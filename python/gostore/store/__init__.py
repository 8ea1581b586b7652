"""The store API: :class:`MooncakeDistributedStore` and the classes built on it.

* :mod:`.distributed_store`: ``MooncakeDistributedStore`` (setup, the
  copying and zero-copy calls, tasks, buffers), made of the mixins below;
* :mod:`.segment_api`, :mod:`.session_api`, :mod:`.tensor_api`,
  :mod:`.parallel_api`: the mixins, one family of methods each (extra
  segments; put/get sessions and replicas; tensors; tensor-parallel
  layouts);
* :mod:`.replica`, :mod:`.tasks`: the values those calls return;
* :mod:`.nano` (the plan API), :mod:`.engram`, :mod:`.nof`: the other
  store classes, each over a ``MooncakeDistributedStore``.

The public names are exported by :mod:`gostore`; ``gostore.store`` also
names the class, as it did when the store was one module.
"""

from .distributed_store import MooncakeDistributedStore

__all__ = ["MooncakeDistributedStore"]
