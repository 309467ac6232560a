"""Kubernetes naming rules, for names that end up in Kubernetes objects, labels or annotations.

Node names must match real `Node` objects (DNS-1123 subdomains). Pinned-cell ids only travel in pod
annotations and labels, so they follow the label-*value* rule, which allows the upper-case ids HiveD's
examples use (`VC1-YQW-DGX2`). VC names are free, as in HiveD (OpenPAI users pick them: `VC1`,
`team a!`): they travel in annotations, object bodies and metric label values, which take any text.
The one place a VC name must be a Kubernetes label value is the `topogang.io/virtual-cluster` pod
label; `vc_label_value` maps any name to one, deterministically and reversibly:

- a name that is already a valid label value is its own label value (`VC1` -> `VC1`);
- any other name is `b32.` + the RFC 4648 base32 of its UTF-8 bytes, without padding
  (`team a!` -> `b32.ORSWC3JAMEQQ`), which fits a label value for names of up to 36 bytes;
- a longer one has no label form: the pod names it in the annotation of the same key instead.

`vc_from_label_value` undoes it. The two forms never meet: a label value is decoded only when its
decoding is not itself a label value, and `validate` rejects a VC whose own name reads as the
encoding of another name.
"""

from __future__ import annotations

import base64
import binascii
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


VC_LABEL_PREFIX = "b32."


def vc_label_value(name: str) -> str | None:
    """The label value that stands for VC `name`; None when no label value can (use the annotation)."""
    if label_value_error(name) is None:
        return name
    encoded = VC_LABEL_PREFIX + base64.b32encode(name.encode()).decode().rstrip("=")
    return encoded if len(encoded) <= 63 else None


def vc_from_label_value(value: str) -> str:
    """The VC name a `topogang.io/virtual-cluster` label value stands for (`vc_label_value` undone)."""
    decoded = _decode_vc_label(value)
    return value if decoded is None else decoded


def _decode_vc_label(value: str) -> str | None:
    if not value.startswith(VC_LABEL_PREFIX):
        return None
    body = value[len(VC_LABEL_PREFIX) :]
    try:
        name = base64.b32decode(body + "=" * (-len(body) % 8)).decode()
    except (binascii.Error, ValueError):
        return None
    if label_value_error(name) is None or vc_label_value(name) != value:
        return None  # only names that need the encoding are ever encoded, and only one way
    return name


def vc_name_error(name: str) -> str | None:
    """Why `name` cannot be a VC name, or None. Any text HiveD takes is fine, except an empty name
    (no pod could name it) and a name that reads as the label encoding of another name."""
    if not name:
        return "a VC name must not be empty"
    other = _decode_vc_label(name)
    if other is not None:
        return (
            f"{name!r} reads as the label encoding of the VC name {other!r} "
            f"(see {VC_LABEL_PREFIX}… in the docs); choose another name"
        )
    return None
