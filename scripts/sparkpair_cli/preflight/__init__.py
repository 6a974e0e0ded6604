"""``sparkpair preflight``: host, fabric, memory, toolchain and checkpoint checks per node and
across nodes. Every host read goes through :class:`~.host.Host`, whose root (and recorded
command outputs) can be injected, so the checks are tested against recorded trees."""
