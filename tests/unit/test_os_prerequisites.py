"""OS support from /etc/os-release, and which packages the prerequisites step installs."""

import pytest

from sglang_deploy.facts.os_release import OsRelease, missing_packages, parse_os_release, unsupported_os

DEBIAN_12 = """PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
HOME_URL="https://www.debian.org/"
"""
UBUNTU_2204 = """PRETTY_NAME="Ubuntu 22.04.4 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
ID=ubuntu
ID_LIKE=debian
"""
MINT = 'NAME="Linux Mint"\nID=linuxmint\nID_LIKE="ubuntu debian"\nPRETTY_NAME="Linux Mint 21.3"\n'
ROCKY = 'NAME="Rocky Linux"\nID="rocky"\nID_LIKE="rhel centos fedora"\nPRETTY_NAME="Rocky Linux 9.3 (Blue Onyx)"\n'


@pytest.mark.parametrize("text", [DEBIAN_12, UBUNTU_2204, MINT])
def test_debian_ubuntu_and_their_derivatives_are_supported(text):
    assert unsupported_os(parse_os_release(text)) is None


def test_other_os_is_named_as_it_calls_itself():
    assert unsupported_os(parse_os_release(ROCKY)) == "Rocky Linux 9.3 (Blue Onyx)"
    assert unsupported_os(parse_os_release("ID=alpine\n")) == "alpine"


def test_no_os_release_is_unsupported():
    assert unsupported_os({}) == "no /etc/os-release"


def test_fact_parses_quotes_comments_and_empty_output():
    fact = OsRelease()
    assert "/etc/os-release" in fact.command()
    parsed = fact.process(["# comment", "", *DEBIAN_12.splitlines(), 'BROKEN="unbalanced'])
    assert parsed["ID"] == "debian" and parsed["PRETTY_NAME"] == "Debian GNU/Linux 12 (bookworm)"
    assert parsed["BROKEN"] == "unbalanced"
    assert fact.default() == {}


def test_missing_packages_keep_order_and_skip_installed():
    installed = {"python3": ["3.11.2-1+b1"], "rsync": ["3.2.7-1"]}
    assert missing_packages(["python3", "python3-venv", "pciutils", "rsync"], installed) == [
        "python3-venv",
        "pciutils",
    ]
    assert missing_packages(["python3", "rsync"], installed) == []
