"""The lab's models, pure (no root, no Mininet): the flow model and the cost model.

Flow model (``astral-lab model``), front door ``flowmodel`` (``run``, ``format_report`` and
the public API): ``solver`` (event-driven max-min; its compiled loop in ``maxmin``),
``results`` (what a result says), ``inputs`` (flows and policy names), ``perflow`` (any
topology, on its wiring plan), ``bounds``, ``jobs`` (EP groups and their flows), ``whatif``
(the aggregate two-tier what-if, to 64K GPUs).

Cost model (``astral-lab cost``): ``cost`` (prices, tables, charts; each design's counts
and sizing live in its ``testbed.topologies`` module).

Nothing is imported here, so the cost model does not load Numba. The command-line glue of
both is in ``astral_lab`` (``model_cli``, ``cost_cli``).
"""
