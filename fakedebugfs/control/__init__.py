"""The mount's control socket: the protocol (:mod:`.protocol`), the server's
side of it (:mod:`.service`), a blocking client (:mod:`.client`) and the
typed errors both sides share (:mod:`.errors`)."""
