"""``POST /api/webhook``: a Git host tells the reconciler about a push, so that the next cycle
fetches at once instead of at the next ``--interval`` (what Argo CD's ``/api/webhook`` and
Flux's notification-controller ``Receiver`` do). See docs/operations.md, "Git webhooks".

One endpoint, three senders, told apart by their headers:

- GitHub (``X-GitHub-Event``): the body signed with the shared secret, HMAC-SHA256 in
  ``X-Hub-Signature-256: sha256=<hex>``; ``push`` events are read, ``ping`` is answered;
- GitLab (``X-Gitlab-Event``): the secret itself in ``X-Gitlab-Token``; ``Push Hook`` (and
  a system hook's ``push``) are read;
- generic (``X-Signature``, Flux's ``generic-hmac``): HMAC of the body, ``sha256=<hex>`` or
  ``sha512=<hex>``; a JSON body with a ``ref`` (``refs/heads/main``) or ``branch`` is
  checked against the branch followed, any other body (or none) just asks for a fetch.

The secret comes from a file or the environment, never from the config repo. Every
comparison is constant-time (``hmac.compare_digest``). A request that fails authentication
gets 401 and a malformed one 400, with one line saying why; neither triggers anything. A
push to another branch (or a tag) is acknowledged (200) and ignored. A push to the branch
followed makes the config source read afresh (``PacedSource.expire``) and asks the loop for
a cycle now (``Trigger.WEBHOOK``, through the same ``Wakeup`` as a watch event): 202.

The payload is never trusted beyond the ref: the cycle fetches the branch itself, so a
forged or replayed (but signed) request costs one fetch, as a poll would.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.core.types import printable_text

log = logging.getLogger("reconciler.webhook")

PATH = "/api/webhook"
# The largest body read (bytes). GitHub caps a delivery at 25 MB, but a push's payload lists
# at most 20 commits (a few hundred KB at worst); refused before reading with 413.
MAX_BODY = 5 * 1024 * 1024
SECRET_ENV = "RECONCILER_WEBHOOK_SECRET"
FORM = "application/x-www-form-urlencoded"

_DIGESTS: Mapping[str, Callable[[], Any]] = {
    "sha256": hashlib.sha256,
    "sha512": hashlib.sha512,
}


class WebhookConfigError(ValueError):
    """The secret cannot be read (a missing or empty file)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """What the receiver answers: the status and a one-line message (text/plain)."""

    status: int
    message: str
    triggered: bool = False  # a fetch and a cycle were asked for
    provider: str = "unknown"  # github, gitlab, generic (for metrics)

    @property
    def body(self) -> bytes:
        return (self.message + "\n").encode()

    @property
    def result(self) -> str:
        """The metric's label: triggered, ignored, unauthorized, invalid."""
        if self.triggered:
            return "triggered"
        if self.status == 401:
            return "unauthorized"
        if self.status >= 400:
            return "invalid"
        return "ignored"


def load_secret(path: Path | None, env: Mapping[str, str] = os.environ) -> bytes | None:
    """The shared secret: the file's content (one trailing newline dropped: ``echo`` adds
    one), or ``RECONCILER_WEBHOOK_SECRET``; None when neither is given (no receiver)."""
    if path is not None:
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise WebhookConfigError(
                f"--webhook-secret-file {path}: cannot read: {exc.strerror or exc}"
            ) from None
        secret = text.removesuffix(b"\n").removesuffix(b"\r")
        if not secret:
            raise WebhookConfigError(f"--webhook-secret-file {path}: the file is empty")
        return secret
    value = env.get(SECRET_ENV, "")
    return value.encode() if value else None


def sign(secret: bytes, body: bytes, algorithm: str = "sha256") -> str:
    """``<algorithm>=<hex>``: the signature a sender puts in its header (tests, bench)."""
    return f"{algorithm}=" + hmac.new(secret, body, _DIGESTS[algorithm]).hexdigest()


def _signature_ok(secret: bytes, body: bytes, header: str) -> str | None:
    """None when ``header`` (``sha256=<hex>``) signs ``body`` with ``secret``; else why not."""
    algorithm, sep, given = header.strip().partition("=")
    digest = _DIGESTS.get(algorithm.lower())
    if not sep or digest is None:
        return f"signature {header[:20]!r}: expected sha256=<hex> or sha512=<hex>"
    expected = hmac.new(secret, body, digest).hexdigest().encode()
    # bytes, constant-time in the length of the expected value (compare_digest refuses a
    # str that is not ASCII, and a header value is any byte)
    if not hmac.compare_digest(expected, _bytes(given.strip().lower())):
        return "signature does not match the body (wrong secret?)"
    return None


def _shown(value: object, *, quote: bool = True, limit: int = 100) -> str:
    """A value of the request in an answer or a log line: quoted (``repr``) or, a string,
    as is; on one line, nothing hidden (``printable_text``), at most ``limit`` characters."""
    text = repr(value) if quote or not isinstance(value, str) else value
    text = printable_text(text[:limit])
    return text if len(str(value)) <= limit else text + "..."


def _digest(value: bytes) -> bytes:
    """What a token is compared by: ``compare_digest`` of inputs of different lengths
    returns at once, so comparing the token itself would tell the secret's length."""
    return hashlib.sha256(value).digest()


def _bytes(value: str) -> bytes:
    """A header's value as bytes, whatever it holds (a lone surrogate included)."""
    return value.encode("utf-8", "surrogatepass")


def _json(body: bytes) -> dict[str, Any] | str:
    """The body as a JSON object, or why it is not one."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        return f"body is not JSON: {exc}"
    except RecursionError:  # json's scanner on thousands of nested arrays or objects
        return "body is not JSON we read: nested too deeply"
    if not isinstance(data, dict):
        return "body is not a JSON object"
    return data


class Receiver:
    """Checks and reads one webhook request; ``on_push`` is called for a push to ``branch``.

    ``handle`` is pure but for ``on_push``: headers (any case) and the body in, a ``Reply``
    out. The HTTP server bounds the body by ``max_body`` before reading it."""

    def __init__(
        self,
        secret: bytes,
        branch: str,
        on_push: Callable[[str], None],
        *,
        max_body: int = MAX_BODY,
        on_reply: Callable[[Reply], None] = lambda _r: None,
    ) -> None:
        if not secret:
            raise ValueError("the webhook secret must not be empty")
        self._secret = secret
        self.branch = branch
        self.ref = branch if branch.startswith("refs/") else f"refs/heads/{branch}"
        self.on_push = on_push
        self.max_body = max_body
        self.on_reply = on_reply

    def handle(self, headers: Mapping[str, str], body: bytes) -> Reply:
        lower = {k.lower(): v for k, v in headers.items()}
        reply = self._handle(lower, body)
        if reply.status >= 400:
            log.warning("webhook refused (%s): %s", reply.status, reply.message)
        else:
            log.info("webhook: %s", reply.message, extra={"provider": reply.provider})
        if reply.triggered:
            self.on_push(reply.provider)
        self.on_reply(reply)
        return reply

    def _handle(self, headers: Mapping[str, str], body: bytes) -> Reply:
        if "x-github-event" in headers:
            return self._github(headers, body)
        if "x-gitlab-event" in headers:
            return self._gitlab(headers, body)
        if "x-signature" in headers:
            return self._generic(headers, body)
        return Reply(
            400,
            "unknown sender: expected a GitHub (X-GitHub-Event), GitLab (X-Gitlab-Event) or "
            "generic (X-Signature) webhook",
        )

    def _github(self, headers: Mapping[str, str], body: bytes) -> Reply:
        signature = headers.get("x-hub-signature-256")
        if not signature:
            return Reply(
                401, "GitHub webhook without X-Hub-Signature-256: set its secret", False, "github"
            )
        wrong = _signature_ok(self._secret, body, signature)
        if wrong is not None:
            return Reply(401, f"GitHub webhook: {wrong}", False, "github")
        event = headers["x-github-event"].strip()
        if event == "ping":
            return Reply(200, "pong", False, "github")
        if event != "push":
            return Reply(
                200, f"GitHub event {_shown(event)} ignored: only push is read", False, "github"
            )
        return self._push(body, "github", headers.get("content-type", ""))

    def _gitlab(self, headers: Mapping[str, str], body: bytes) -> Reply:
        token = headers.get("x-gitlab-token")
        if not token:
            return Reply(
                401, "GitLab webhook without X-Gitlab-Token: set its secret token", False, "gitlab"
            )
        if not hmac.compare_digest(_digest(_bytes(token)), _digest(self._secret)):
            return Reply(
                401, "GitLab webhook: X-Gitlab-Token does not match the secret", False, "gitlab"
            )
        event = headers["x-gitlab-event"].strip()
        if event not in ("Push Hook", "System Hook"):
            return Reply(
                200,
                f"GitLab event {_shown(event)} ignored: only Push Hook is read",
                False,
                "gitlab",
            )
        return self._push(body, "gitlab", headers.get("content-type", ""))

    def _generic(self, headers: Mapping[str, str], body: bytes) -> Reply:
        wrong = _signature_ok(self._secret, body, headers["x-signature"])
        if wrong is not None:
            return Reply(401, f"generic webhook: {wrong}", False, "generic")
        if not body.strip():
            return self._trigger("generic webhook", "generic")
        data = _json(body)
        if isinstance(data, str):  # signed, but not JSON: a plain "something changed"
            return self._trigger("generic webhook", "generic")
        ref = data.get("ref")
        branch = data.get("branch")
        if ref is None and branch is None:
            return self._trigger("generic webhook", "generic")
        if ref is None:
            if not isinstance(branch, str):
                return Reply(400, "generic webhook: branch must be a string", False, "generic")
            ref = f"refs/heads/{branch}"
        return self._ref(ref, "generic")

    def _push(self, body: bytes, provider: str, content_type: str) -> Reply:
        data = _json(body)
        if isinstance(data, str):
            if content_type.split(";")[0].strip().lower() == FORM:  # GitHub's other choice
                data = f"sent as {FORM}: set the webhook's content type to application/json"
            return Reply(400, f"{provider} push: {data}", False, provider)
        if provider == "gitlab" and data.get("object_kind", "push") != "push":
            kind = data.get("object_kind")
            return Reply(
                200, f"GitLab {_shown(kind)} hook ignored: only push is read", False, provider
            )
        return self._ref(data.get("ref"), provider)

    def _ref(self, ref: object, provider: str) -> Reply:
        if not isinstance(ref, str) or not ref:
            return Reply(400, f"{provider} push: no ref in the payload", False, provider)
        if ref != self.ref:
            return Reply(
                200,
                f"push to {_shown(ref, quote=False)} ignored: following {self.ref}",
                False,
                provider,
            )
        return self._trigger(f"push to {ref}", provider)

    def _trigger(self, what: str, provider: str) -> Reply:
        return Reply(202, f"{what}: fetching {self.ref} now", True, provider)
