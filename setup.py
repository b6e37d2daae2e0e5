"""Build both extensions of pyclassify in one `pip install`.

- pyclassify._engine: the Rust crate rust/py (pyo3), via setuptools-rust.
- pyclassify._native: native/_native.pyx (Cython), via cythonize.

Metadata lives in pyproject.toml. Extensions are optimized unless PYCLASSIFY_DEBUG=1.
"""

import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools_rust import Binding, RustExtension

DEBUG = os.environ.get("PYCLASSIFY_DEBUG", "") not in ("", "0")

native = Extension(
    "pyclassify._native",
    ["native/_native.pyx"],
    include_dirs=["native", numpy.get_include()],
    depends=["native/header_batch.h", "native/header_batch.pxd", "native/decode.pxi", "native/pcap.pxi",
             "native/engine_api.h", "native/engine_api.pxd", "native/engine_client.pxi", "native/afpacket.pxi",
             "native/nfqueue.pxi", "native/inotify.pxi", "native/ctnetlink.pxi"],
    extra_compile_args=["-O0", "-g"] if DEBUG else ["-O3"],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")],
)

setup(
    rust_extensions=[
        RustExtension(
            "pyclassify._engine",
            path="rust/py/Cargo.toml",
            binding=Binding.PyO3,
            debug=DEBUG,
        )
    ],
    ext_modules=cythonize(
        [native],
        include_path=["native"],
        compiler_directives={
            "language_level": 3,
            "boundscheck": False,
            "wraparound": False,
            "initializedcheck": False,
            "cdivision": True,
            "embedsignature": True,
        },
    ),
    zip_safe=False,
)
