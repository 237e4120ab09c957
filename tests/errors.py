"""Requests a careless or hostile client sends to the three HTTP services, and their one error
shape (``rstar2.service``) checked from outside."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

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


def announced_only(url: str, path: str, length: int) -> httpx.Response:
    """The answer to a POST that announces a ``length``-byte body and sends none of it."""
    connection = http.client.HTTPConnection("127.0.0.1", urlsplit(url).port, timeout=30)
    connection.putrequest("POST", path)
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(length))
    connection.endheaders()
    return answer_of(connection)


def chunked(url: str, path: str, chunks: list[bytes]) -> httpx.Response:
    """The answer to a POST whose body is sent in chunks, its length announced nowhere."""
    connection = http.client.HTTPConnection("127.0.0.1", urlsplit(url).port, timeout=30)
    connection.request("POST", path, body=iter(chunks), encode_chunked=True,
                       headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    return answer_of(connection)


def answer_of(connection: http.client.HTTPConnection) -> httpx.Response:
    response = connection.getresponse()
    answer = httpx.Response(response.status, headers=response.getheaders(), content=response.read())
    connection.close()
    return answer
