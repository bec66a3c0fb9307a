"""MoE traffic for the lab: who sends how many bytes to whom, and how the wire carries them.

``traffic.workload`` models one MoE layer step (model presets, gating, token routing,
expert placement and the EPLB-like balancer) and yields per-(src GPU, dst GPU) token
copies and bytes; the routing's sampling lives in ``traffic.token_routing``. ``traffic.kernels``
turns that into network flows and NVLink legs the way DeepEP's high-bandwidth and
low-latency kernels (and a flat NCCL all-to-all) would. All three are pure: no root, no
sockets, numpy only.
"""
