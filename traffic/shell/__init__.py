"""The wire: what puts the traffic models' flows on a running fabric as packets and
measures what arrives (the sender and receiver agents, the replay that runs them in every
host, iperf3 orchestration). Needs a fabric (root). The traffic models themselves (workload,
token routing, kernels, RoCEv2 frames) are pure, one folder up.
"""
