"""pyclassify: packet classification and enforcement for Kubernetes/Calico network policy."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__: str = version("pyclassify")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

del PackageNotFoundError, version
