"""A pack's content digest and its author's Ed25519 signature over it (signature.json).

The digest covers every file of the pack but the signature (name, size and SHA-256 of each, in name order), so
the signature vouches for exactly what travels: a file added, dropped or changed breaks it. The signed message
is the digest under a domain tag of its own, so a pack signature can never pass for any other signed thing of
swarmrl (rollout files, checkpoint manifests, coordinator requests), nor one of those for a pack's.

    {"author": "<hex public key>", "digest": "<hex sha256>", "signature": "<hex ed25519>"}
"""

from __future__ import annotations

import hashlib
import json

from swarmrl.identity import Identity, SignatureError, verify
from swarmrl.tasks.packs.errors import PackError
from swarmrl.tasks.packs.files import SIGNATURE, PackFiles

DOMAIN = "swarmrl-task-pack/1"
_FIELDS = ("author", "digest", "signature")


def pack_digest(files: PackFiles) -> str:
    """SHA-256 (hex) of the pack's content listing: every file but the signature."""
    listing = hashlib.sha256()
    for name in sorted(files.files):
        if name == SIGNATURE:
            continue
        data = files.files[name]
        listing.update(f"{name}\0{len(data)}\0{hashlib.sha256(data).hexdigest()}\n".encode())
    return listing.hexdigest()


def signed_message(digest: str) -> bytes:
    return f"{DOMAIN} {digest}".encode()


def signature_file(files: PackFiles, identity: Identity) -> bytes:
    """signature.json for the pack as it is now, signed by `identity`."""
    digest = pack_digest(files)
    document = {
        "author": identity.node_id,
        "digest": digest,
        "signature": identity.sign_hex(signed_message(digest)),
    }
    return (json.dumps(document, indent=2) + "\n").encode()


def check_signature(files: PackFiles, author: str) -> str:
    """The pack's digest, once its signature.json proves `author` signed exactly these files."""
    where = f"{files.origin}/{SIGNATURE}"
    try:
        document = json.loads(files.text(SIGNATURE))
    except json.JSONDecodeError as exc:
        raise PackError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(document, dict) or sorted(document) != sorted(_FIELDS):
        raise PackError(f"{where}: must be an object with exactly {', '.join(_FIELDS)}")
    if not all(isinstance(document[field], str) for field in _FIELDS):
        raise PackError(f"{where}: {', '.join(_FIELDS)} must be strings")
    if document["author"] != author:
        raise PackError(
            f"{where}: signed by {document['author'][:16]}..., but the manifest's author is {author[:16]}..."
        )
    digest = pack_digest(files)
    if document["digest"] != digest:
        raise PackError(f"{where}: the files changed since they were signed (sign the pack again)")
    try:
        verify(author, signed_message(digest), document["signature"])
    except SignatureError as exc:
        raise PackError(f"{where}: the signature is not the author's ({exc})") from None
    return digest
