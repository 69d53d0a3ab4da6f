"""The mount's control socket: the protocol (:mod:`.protocol`), the server's
side of it (:mod:`.service`), a blocking client (:mod:`.client`), and the
state files that say where each running fake's socket and log are
(:mod:`.runstate`).  The typed errors both sides share are
:mod:`fakedebugfs.errors`."""
