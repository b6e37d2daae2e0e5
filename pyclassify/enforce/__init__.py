"""Live enforcement: ``pyclassify enforce`` (NFQUEUE), its iptables chains, hot reload,
revocation through ctnetlink, metrics and the flow log. See ``daemon`` for the life cycle and
the fail mode; the command itself is ``pyclassify.cli.enforce``."""
