"""pyclassify: packet classification and enforcement for Kubernetes/Calico network policy."""


def __getattr__(name: str) -> str:
    # The version is read from the installed metadata only when asked: importlib.metadata costs
    # a tenth of a second at every command's start.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("pyclassify")
        except PackageNotFoundError:  # a source tree that was never installed
            return "0.0.0+unknown"
    raise AttributeError(f"module 'pyclassify' has no attribute {name!r}")
