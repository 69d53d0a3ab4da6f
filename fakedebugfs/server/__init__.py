"""The host side of one mount: the trio server that owns the FUSE session
and the control socket (:mod:`.server`), the workload driver, the replay
runner (:mod:`.replays`), the process watcher of ``run`` (:mod:`.watch`),
how a server is started and stopped (:mod:`.launcher`), and mount(8)'s helper
(:mod:`.mounthelper`)."""
