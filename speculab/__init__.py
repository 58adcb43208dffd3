"""speculab: speculative decoding, measured."""

from importlib import metadata

try:
    __version__ = metadata.version("speculab")
except metadata.PackageNotFoundError:  # a source tree that was not installed
    __version__ = "0.0.0+unknown"
