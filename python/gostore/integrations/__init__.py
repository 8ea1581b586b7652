"""Native gostore connectors for serving engines (see docs/engines.md).

Each module imports its engine and is meant to be loaded by that engine's
own plugin mechanism:

* :mod:`gostore.integrations.sglang`: an SGLang ``HiCacheStorage``
  (``--hicache-storage-backend dynamic``);
* :mod:`gostore.integrations.lmcache`: an LMCache remote connector
  (the ``gostore`` remote storage plugin, ``gostore://host:port``);
* :mod:`gostore.integrations.vllm`: a vLLM V1 KV connector
  (``kv_connector_module_path``).

They read Mooncake's configuration names (:mod:`._config`), so a
deployment switches from Mooncake's integration by naming the class.
"""
