"""Memory the store hands to the native library, and the buffers it hands back.

* :mod:`.buffer`: ``BufferHandle``/``GostoreBuffer``, the copies
  ``get_buffer`` returns;
* :mod:`.pool`: ``BufferPool`` and ``RegisteredBufferPool`` and their leases;
* :mod:`.hostmem`: host memory mapped and bound (``MooncakeHostMemAllocator``,
  ``bind_to_numa_node``);
* :mod:`.pins`: zero-copy access to Python buffers for the native calls
  (pins, ``bytes`` written in place, the per-thread scratch);
* :mod:`.heap`: freed result memory kept warm by glibc's malloc for the
  next copying read.

The public names are exported by :mod:`gostore`.
"""
