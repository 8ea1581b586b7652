"""Tensors: their stored form and their parallel layouts (no native calls).

* :mod:`.codec`: the header and bytes of a stored tensor (Mooncake's form,
  and gostore's own for what Mooncake's cannot say), the device spans;
* :mod:`.parallel`: ``TensorParallelism``, ``ParallelAxis``,
  ``ReadTarget``, the layout a tensor-parallel write names;
* :mod:`.parallel_plan`: which shard objects a parallel write makes and a
  read gathers;
* :mod:`.safetensors`: the safetensors files of
  ``save_tensor_to_safetensor`` / ``load_tensor_from_safetensor``.

The store's tensor calls (:mod:`gostore.store.tensor_api`,
:mod:`gostore.store.parallel_api`) use these; the public names are exported
by :mod:`gostore`.
"""
