"""The lab's models, pure (no root, no Mininet).

Flow model (``astral-lab model``), front door ``flowmodel`` (``run``, ``format_report`` and
the public API): ``solver`` (event-driven max-min; its compiled loop in ``maxmin``),
``results`` (what a result says), ``inputs`` (flows and policy names), ``perflow`` (any
topology, on its wiring plan), ``bounds``, ``jobs`` (EP groups and their flows), ``whatif``
(the aggregate two-tier what-if, to 64K GPUs).

Nothing is imported here, so a user of one model does not load the others. The
command-line glue is in ``astral_lab`` (``model_cli``).
"""
