"""Operations: telemetry collector, detectors and the diagnosis agent."""
