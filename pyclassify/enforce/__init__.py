"""Live enforcement: ``pyclassify enforce`` (NFQUEUE), its iptables chains, hot reload,
revocation through ctnetlink, metrics and the flow log. See ``daemon`` for the life cycle and
the fail mode."""

from pyclassify.enforce.commands import enforce_command, run_enforce

__all__ = ["enforce_command", "run_enforce"]
