"""Requests the reconciler sends outside its clusters: notification webhooks and commit
statuses (``runtime/notify.py``). One POST, its answer's status, nothing more: redirects
are not followed (a receiver must not send the body, or its token, somewhere else), and
the answer's body is read only up to ``MAX_ANSWER`` bytes."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

MAX_ANSWER = 64 * 1024
USER_AGENT = "dispatch-reconciler"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the 3xx answer is the result


_OPENER = urllib.request.build_opener(_NoRedirect)


def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
    """POST ``body`` to ``url``; the answer's status code. ``timeout`` bounds the connect
    and each read. An ``OSError`` when no answer came (refused, timed out, reset)."""
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"User-Agent": USER_AGENT, **headers},
    )
    try:
        with _OPENER.open(request, timeout=timeout) as answer:
            answer.read(MAX_ANSWER)
            return int(answer.status)
    except urllib.error.HTTPError as exc:  # an answer, 4xx or 5xx (or an unfollowed 3xx)
        with exc:
            exc.read(MAX_ANSWER)
        return int(exc.code)
    except urllib.error.URLError as exc:
        reason = exc.reason
        raise reason if isinstance(reason, OSError) else OSError(str(reason)) from exc
