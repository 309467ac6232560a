"""Bind info topogang can vouch for: an HMAC over the decision, written beside it at bind time.

A pod's annotations are its owner's to write, and a pod can be created with `spec.nodeName` set,
so bind info read back after a restart (`extender.kube.recovery`) proves nothing by itself: a
tenant could claim any GPUs, quota cells and priority. So every Binding (and every promotion's
write-back) also writes `topogang.io/pod-bind-signature`: an HMAC-SHA256, under a key only the
extender holds (`--bind-signing-key-file`, a Secret the Helm chart creates once and keeps), over
the pod's UID and the exact `topogang.io/pod-bind-info` text. That text is the whole decision:
node, GPU indices, VC, priority, gang, slots and the quota cell type of every GPU of the gang.
The UID ties it to one pod: copied onto another pod, or edited, it no longer matches.

Recovery adopts bind info only when its signature matches (`verdict`); a pod whose does not keeps
its GPUs held, with no quota or priority, and is reported. HiveD writes no signature: its pods
are adopted unsigned only when the admin opts in for the first start after a switch-over.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from extender.gangs.bindinfo import bind_annotations
from topology.decisions import Bind

log = logging.getLogger("topogang.kube")
SIGNATURE_ANNOTATION = "topogang.io/pod-bind-signature"
TOPOGANG_BIND_INFO = "topogang.io/pod-bind-info"
HIVED_BIND_INFO = "hivedscheduler.microsoft.com/pod-bind-info"
VERSION = "v1"
MIN_KEY_BYTES = 32


class SigningKeyError(ValueError):
    """The key file is missing, unreadable or too short; the message names the file."""


def load_key(path: str | Path) -> bytes:
    """The key in `path` (surrounding whitespace stripped): at least 32 bytes."""
    try:
        key = Path(path).read_bytes().strip()
    except OSError as err:
        raise SigningKeyError(f"{path}: cannot read the bind signing key: {err.strerror}") from None
    if len(key) < MIN_KEY_BYTES:
        have = f"{path}: the bind signing key has {len(key)} bytes"
        raise SigningKeyError(f"{have}, at least {MIN_KEY_BYTES} needed")
    return key


class BindSigner:
    """Signs and checks bind info with one key."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def sign(self, pod_uid: str, bind_info: str) -> str:
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in (VERSION, pod_uid, bind_info):
            data = part.encode()
            mac.update(len(data).to_bytes(8, "big") + data)  # length-prefixed: no two splits alike
        return f"{VERSION}:{mac.hexdigest()}"

    def signed(self, annotations: Mapping[str, str], pod_uid: str) -> dict[str, str]:
        """`annotations` (a Binding's or a write-back's) plus the signature of their bind info."""
        out = dict(annotations)
        info = out.get(TOPOGANG_BIND_INFO)
        if info is not None:
            out[SIGNATURE_ANNOTATION] = self.sign(pod_uid, info)
        return out

    def verdict(
        self, pod_uid: str, annotations: Mapping[str, Any], *, adopt_unsigned: bool = False
    ) -> str | None:
        """None when the pod's bind info is topogang's own decision; else why it is not.
        `adopt_unsigned`: bind info that carries no signature at all (HiveD's, or an older
        topogang's) is taken as it is: the admin's opt-in for the first start after a switch-over."""
        sig = annotations.get(SIGNATURE_ANNOTATION)
        info = annotations.get(TOPOGANG_BIND_INFO)
        if not isinstance(sig, str) or not sig:
            if adopt_unsigned:
                return None
            if isinstance(info, str) and info.strip():
                return "its topogang bind info carries no signature"
            if isinstance(annotations.get(HIVED_BIND_INFO), str):
                return "its HiveD bind info is not topogang's decision (adopting it takes an opt-in)"
            return "its GPU isolation annotation is not topogang's decision"
        if not isinstance(info, str):
            return "it carries a bind signature but no topogang bind info"
        if not hmac.compare_digest(sig.encode(), self.sign(pod_uid, info).encode()):
            return "its bind signature does not match its bind info"
        return None


def signed_bind_annotations(signer: BindSigner | None, bind: Bind, slot_key: str | None) -> dict[str, str]:
    """What a Binding (or a promotion's write-back) writes for `bind`, signed when there is a key."""
    out = bind_annotations(bind, slot_key)
    return signer.signed(out, bind.pod_uid) if signer is not None else out


def _uid_and_annotations(pod: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    ann = meta.get("annotations")
    return str(meta.get("uid") or ""), ann if isinstance(ann, Mapping) else {}


def signed_by(signer: BindSigner, pods: Iterable[Mapping[str, Any]]) -> bool:
    """Whether any pod carries bind info this key signed: topogang has run on this cluster."""
    for pod in pods:
        uid, ann = _uid_and_annotations(pod)
        if SIGNATURE_ANNOTATION in ann and signer.verdict(uid, ann) is None:
            return True
    return False


def verifier(
    signer: BindSigner, *, adopt_unsigned: bool = False
) -> Callable[[Mapping[str, Any]], str | None]:
    """A pod -> None when its bind info is topogang's decision, else why not (for recovery)."""

    def verify(pod: Mapping[str, Any]) -> str | None:
        uid, ann = _uid_and_annotations(pod)
        return signer.verdict(uid, ann, adopt_unsigned=adopt_unsigned)

    return verify


def recovery_verifier(
    signer: BindSigner | None, pods: Iterable[Mapping[str, Any]], *, adopt_unsigned: bool
) -> Callable[[Mapping[str, Any]], str | None] | None:
    """How recovery judges bind info (None: taken as it is, with no key). Unsigned bind info
    (HiveD's) is adopted only with the admin's opt-in at the first start (`adopt_unsigned`), and
    only while no pod of `pods` carries bind info this key signed: once topogang has bound
    anything, a switch-over is over."""
    if signer is None:
        return None
    if adopt_unsigned and signed_by(signer, pods):
        log.warning("unsigned bind info not adopted despite the opt-in: topogang has bound pods already")
        adopt_unsigned = False
    return verifier(signer, adopt_unsigned=adopt_unsigned)
