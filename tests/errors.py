"""The one error shape of the three HTTP services (``rstar2.service``), checked from outside."""

from __future__ import annotations

import json

import httpx

from rstar2.service import ERROR_TYPES


def error_message(response: httpx.Response, status: int) -> str:
    """The message of an error answer, once its status and shape are checked:
    ``{"error": {"message": one line, "type": the status's word, "code": the status}}``."""
    assert response.status_code == status, (response.status_code, response.text[:300])
    error = response.json()["error"]
    assert error == {"message": error["message"], "type": ERROR_TYPES[status], "code": status}, error
    assert isinstance(error["message"], str) and "\n" not in error["message"].strip()
    return error["message"]


def post_json(url: str, body: object, timeout: float = 60) -> httpx.Response:
    """POST ``body`` as Python's json module writes it: NaN and infinities as JavaScript
    literals, a lone surrogate as its escape (what httpx's own encoder refuses to send)."""
    return httpx.post(url, content=json.dumps(body).encode(), timeout=timeout,
                      headers={"Content-Type": "application/json"})
