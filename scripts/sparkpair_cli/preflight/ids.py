"""Preflight check ids: the stable names a result carries and SPARKPAIR_PREFLIGHT_WAIVE lists.

Imports nothing, so the node environment (which validates the waive list) can read it without
importing the checks."""

CHECK_IDS = {
    "rdma-devices": "RDMA devices of NCCL_IB_HCA exist",
    "rdma-link": "their ports are ACTIVE/LinkUp over Ethernet",
    "rdma-both-halves": "both halves of the QSFP port listed (B05)",
    "fabric-netdev": "the fabric netdev exists and is up",
    "fabric-mtu": "fabric MTU 9000 (B05)",
    "fabric-ip": "VLLM_HOST_IP is on the fabric netdev (B06)",
    "gid-index": "NCCL_IB_GID_INDEX is the RoCEv2 IPv4 entry",
    "gid-index-twin": "the twin HCA has a RoCEv2 IPv4 entry at the same index",
    "memory": "MemAvailable covers the planned budget (B14)",
    "memory-weights": "this node's checkpoint share (a DSpark draft included) fits the vLLM budget",
    "kernel-cma": "kernel CMA/KHO state (B04)",
    "shm": "/dev/shm room for NCCL and vLLM's shared-memory queues (B17)",
    "logind-removeipc": "logind RemoveIPC/linger (B18)",
    "driver": "NVIDIA driver present, branch not known bad",
    "ptxas": "ptxas accepts sm_121a (B01)",
    "flashinfer-dsv4": "FlashInfer DSv4 decode table answers (heads, top_k) in table as vLLM asks",
    "deepgemm": "the DeepGEMM vLLM uses is found, imports, and has the vendored version",
    "checkpoint": "checkpoint complete, gate dtype as assumed (sparkpair inspect)",
    "nccl-library": "the NCCL library vLLM will load and its version, not known bad (docs/reference/nccl.md)",
    "same-nccl": "the NCCL version vLLM loads equal on every node",
    "same-kernel": "kernel release equal on every node",
    "same-driver": "driver version equal on every node",
    "same-mtu": "fabric MTU equal on every node",
    "same-gid-index": "NCCL_IB_GID_INDEX (as resolved) equal on every node (preflight --compare)",
    "same-gid-type": "the GID entry NCCL uses has the same type (RoCE v2) on every node",
    "reports-pass": "no check failed inside any report given to preflight --compare",
    "probe": "sparkpair probe: on-device kernel self-test before the server starts (node run)",
    "nccl-allreduce": "two-rank NCCL all-reduce over NET/IB with busbw above the floor (B05)",
}
