# Records where this source tree's CMake build puts libnsajit.so, so an installed package finds the
# library without NSAJIT_LIBRARY (nothing is compiled here).
import os

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithPaths(build_py):
    def run(self):
        super().run()
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        target = os.path.join(self.build_lib, "nsajit", "_build_info.py")
        with open(target, "w") as f:
            f.write("# Written by setup.py at install time.\n")
            f.write(f"SOURCE_BUILD_DIRS = [{os.path.join(repo, 'build')!r}]\n")


setup(cmdclass={"build_py": BuildPyWithPaths})
