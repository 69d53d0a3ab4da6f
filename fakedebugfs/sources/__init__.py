"""What feeds the engine: synthetic workloads (:mod:`.workloads`),
recordings replayed (:mod:`.replay`), events injected by tests
(:mod:`.inject`) and the real process events of ``run``'s command
(:mod:`.procevents`)."""
