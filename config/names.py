"""Kubernetes naming rules, for names that end up in Kubernetes objects, labels or annotations.

VC names become label values and object-name parts (DNS-1123 labels, as HiveD's own design comments
ask); node names must match real `Node` objects (DNS-1123 subdomains). Pinned-cell ids only travel in
pod annotations and labels, so they follow the label-*value* rule, which allows the upper-case ids
HiveD's examples use (`VC1-YQW-DGX2`).
"""

from __future__ import annotations

import re

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(rf"^{_LABEL}$")
_DNS1123_SUBDOMAIN = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def dns1123_label_error(name: str) -> str | None:
    """Why `name` is not a DNS-1123 label, or None if it is one."""
    if len(name) > 63:
        return f"{name!r} is not a valid DNS-1123 label: {len(name)} characters, at most 63"
    if not _DNS1123_LABEL.match(name):
        return (
            f"{name!r} is not a valid DNS-1123 label: use lower-case letters, digits and '-', "
            "starting and ending with a letter or digit"
        )
    return None


def dns1123_subdomain_error(name: str) -> str | None:
    """Why `name` is not a DNS-1123 subdomain (a valid Kubernetes node name), or None."""
    if len(name) > 253:
        return f"{name!r} is not a valid DNS-1123 subdomain: {len(name)} characters, at most 253"
    if not _DNS1123_SUBDOMAIN.match(name):
        return (
            f"{name!r} is not a valid DNS-1123 subdomain: use lower-case letters, digits, '-' and '.', "
            "each dot-separated part starting and ending with a letter or digit"
        )
    return None


def label_value_error(value: str) -> str | None:
    """Why `value` is not a non-empty Kubernetes label value, or None."""
    if len(value) > 63:
        return f"{value!r} is not a valid label value: {len(value)} characters, at most 63"
    if not _LABEL_VALUE.match(value):
        return (
            f"{value!r} is not a valid label value: use letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit"
        )
    return None
