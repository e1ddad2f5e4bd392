"""pinfer's OpenAI-compatible server (``pinfer serve``; needs ``pip install 'pinfer[server]'``).

``engine``: parallel slots decoded together (continuous batching over one KV cache);
``app``: the HTTP API; ``schemas``: request bodies; ``metrics``: Prometheus counters;
``cli``: options and start-up. Importing this package needs none of the extras."""
