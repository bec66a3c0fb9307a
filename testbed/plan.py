"""The wiring plan moved to ``controllers.plan`` (the contract the controller loads, at the
bottom of the import order); this name is kept for one release so existing imports work."""

from controllers.plan import (  # noqa: F401
    MAX_INTF_NAME,
    SCHEMA,
    TIER_CODES,
    VERSION,
    Link,
    Node,
    WiringPlan,
    dpid_for,
    intf_name,
    mac_for,
    write_json_atomic,
)
