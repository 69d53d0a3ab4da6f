"""``fakedebugfs run``: a command in a private mount namespace where the
fake is ``/sys/kernel/tracing`` and ``/sys/kernel/debug`` (:mod:`.run`),
rootless through a user namespace (:mod:`.userns`), sealed from the host's
tracing (:mod:`.seal`)."""
