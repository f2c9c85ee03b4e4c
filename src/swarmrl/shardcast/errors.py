"""The exception family of the checkpoint-broadcast boundary."""


class ShardcastError(Exception):
    """A checkpoint could not be published, mirrored or fetched; the message names what and from where."""


class ManifestError(ShardcastError):
    """A manifest is malformed, forged (bad signature, wrong signer) or replayed (not the version asked)."""


class ShardIntegrityError(ShardcastError):
    """Bytes received for a shard, or a rebuilt file, do not match the hash in the signed manifest."""


class DeltaError(ShardcastError):
    """A delta payload cannot be applied: missing or mismatched parent, or a corrupt payload."""
