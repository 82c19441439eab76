"""Offline stand-in for the get-pip.py that ansible-test downloads to bootstrap pip into its virtual environments.

ansible-test fetches get-pip from ci-files.testing.ansible.com, which this machine cannot reach, and uses a file of
the same name from ~/.ansible/test/cache/ instead when there is one. This script is that file: it installs the pip
bundled with Python (ensurepip, no network), then lets that pip install what ansible-test asked get-pip for (its
pinned pip version) from the package index, which is reachable.
"""

from __future__ import annotations

import subprocess
import sys

# get-pip's own options; everything else ansible-test passes is a pip install argument.
GET_PIP_ONLY_OPTIONS = {"--no-setuptools", "--no-wheel"}


def main() -> None:
    # In a child process: ensurepip.bootstrap() would point PIP_CONFIG_FILE at /dev/null in this one, and the pip
    # below would then miss the machine's pip configuration (index, certificates).
    subprocess.run([sys.executable, "-m", "ensurepip", "--upgrade"], check=True)
    pip_args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY_OPTIONS]
    if pip_args:
        subprocess.run([sys.executable, "-m", "pip", "install", *pip_args], check=True)


if __name__ == "__main__":
    main()
