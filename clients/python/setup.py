"""pip install ./clients/python: the zlane package, with zlane/zlane_pb2.py generated
by protoc (Debian: protobuf-compiler) from proto/zlane.proto at build time, the
schema's one source. Needs Debian's python3-zmq and python3-protobuf; asks PyPI
for nothing (no pyproject.toml, so pip builds without an isolated environment)."""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _proto() -> str:
    for path in (os.environ.get("ZLANE_PROTO"),
                 os.path.join(HERE, "..", "..", "proto", "zlane.proto")):
        if path and os.path.isfile(path):
            return os.path.abspath(path)
    raise SystemExit("zlane: proto/zlane.proto not found: build from the zlane source tree "
                     "(pip install ./clients/python) or set ZLANE_PROTO to its path")


class BuildPyWithProto(build_py):
    """build_py, then protoc --python_out into the built package."""

    def run(self):
        super().run()
        protoc = shutil.which("protoc")
        if not protoc:
            raise SystemExit("zlane: protoc is needed to build the package "
                             "(Debian: apt-get install protobuf-compiler)")
        proto = _proto()
        out = os.path.join(self.build_lib, "zlane")
        os.makedirs(out, exist_ok=True)
        subprocess.check_call([protoc, f"--proto_path={os.path.dirname(proto)}",
                               f"--python_out={out}", proto])


setup(
    name="zlane",
    version="0.1.0",
    description="Python client of the zlane job broker: producer, worker, admin",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read()
    if os.path.exists(os.path.join(HERE, "README.md")) else "",
    long_description_content_type="text/markdown",
    packages=["zlane"],
    python_requires=">=3.11",
    # pyzmq and protobuf come from Debian (python3-zmq, python3-protobuf); they are
    # not declared, so that pip never goes to an index for them
    install_requires=[],
    entry_points={"console_scripts": ["zlane-py-worker = zlane.worker:main"]},
    cmdclass={"build_py": BuildPyWithProto},
)
