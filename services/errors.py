"""Service errors, one per gRPC status the API documents (proto/mot/v1/mot.proto).

Raised anywhere in the service (engines run inside Ray replicas; Ray re-raises them in the
caller as subclasses of the same type), translated to a status code once, at the ingress.
"""

from mot_core.errors import MotError


class NotFoundError(MotError):
    """Unknown context id (never stored, deleted, or expired)."""


class InvalidArgumentError(MotError):
    """Unknown model, empty or oversize input, bad options."""


class FailedPreconditionError(MotError):
    """The request cannot be served as asked (e.g. TRANSLATE without a translator)."""


class UnauthenticatedError(MotError):
    """A token is configured and the request did not carry it."""


class DeadlineExceededError(MotError):
    """The caller's budget ran out; the work was stopped rather than finished for nobody."""
