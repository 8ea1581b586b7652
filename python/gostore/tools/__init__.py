"""Around the store: the master launcher, introspection and the demo.

* :mod:`.master`: ``EmbeddedMaster`` (a master in this process) and
  ``master_binary_path`` (the packaged ``gostore-master``);
* :mod:`.master_cli`: the ``gostore-master`` console script;
* :mod:`.introspect`: ``gpu_info()`` and ``topology()``;
* :mod:`.demo`: ``python -m gostore.demo`` (``make run``).

The public names are exported by :mod:`gostore`.
"""
