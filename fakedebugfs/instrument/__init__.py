"""The test instrument: injected events, defined events and scripted faults, applied to a running Kernel (plain synchronous Python)."""
